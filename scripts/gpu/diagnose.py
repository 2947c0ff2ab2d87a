"""Judge a few programs on CUDA, plain Thunder against the transform, and print the traces of
every cell that does not match eager: the device machine's diagnosis, in one call.

    python scripts/gpu/diagnose.py PROGRAMS.txt [--only I] [--gallery NAME ...]
                                   [--executors torch_compile] [--cpu]

PROGRAMS.txt holds fuzzer programs as the soak prints them, separated by blank lines.  Each
program runs under both fusion types, with grad (as written) and without, through thunder.jit
(``thunder_ext.testing.compare.differential``) with the default executors (nvFuser on CUDA) or
``torch_compile_ex``.
"""

from __future__ import annotations

import argparse
import warnings

warnings.filterwarnings("ignore")

import thunder  # noqa: E402
import torch  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.testing.compare import Config, differential  # noqa: E402
from thunder_ext.testing.fuzzing import Program  # noqa: E402
from thunder_ext.testing.gallery import by_name  # noqa: E402


def _indented(trace) -> str:
    return "    " + str(trace).replace("\n", "\n    ")


def dump(compiled, transform: bool) -> None:
    try:
        if transform:
            for t in thunder_ext.fusion_stage_traces(compiled)[-2:]:
                print("  -- fusion stage (transform's input to fusion):\n" + _indented(t))
            for fw, bw in thunder_ext.final_traces(compiled, with_barriers=True)[-1:]:
                print("  -- final forward (with barriers):\n" + _indented(fw))
                if bw is not None:
                    print("  -- final backward:\n" + _indented(bw))
        else:
            print("  -- final forward:\n" + _indented(thunder.last_traces(compiled)[-1]))
            bw = thunder.last_backward_traces(compiled)
            if bw:
                print("  -- final backward:\n" + _indented(bw[-1]))
    except Exception as e:  # a crash before any trace was kept
        print(f"  (no traces: {type(e).__name__}: {e})")


def judge(name: str, builders: dict, executors: str) -> None:
    print(f"\n######## {name}")
    for grad, build in builders.items():
        for ft in ("consecutive", "dataflow"):
            verdicts = {
                transform: differential(
                    build, Config(transform=transform, fusion_type=ft, executors=executors, entry="jit", check=transform)
                )
                for transform in (False, True)
            }
            line = {t: f"{v.status}: {v.detail}" if v.detail else v.status for t, v in verdicts.items()}
            print(f"[{'grad' if grad else 'no-grad'} {ft}] plain: {line[False][:200]} | transform: {line[True][:300]}")
            mine = verdicts[True]
            # A class 9 refusal is the documented answer; every other difference gets its traces.
            if mine.status != "correct" and mine.outcome is not None and "the function writes in place" not in mine.detail:
                dump(mine.outcome.compiled, True)
                if verdicts[False].outcome is not None:
                    dump(verdicts[False].outcome.compiled, False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("programs", nargs="?")
    p.add_argument("--gallery", action="append", default=[])
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--executors", choices=("default", "torch_compile"), default="default")
    p.add_argument("--only", type=int, default=None, help="only the program with this index")
    a = p.parse_args()
    device = "cpu" if a.cpu else "cuda"
    for name in a.gallery:
        prog = by_name(name)

        def build(prog=prog):
            fn, args, state = prog.build()
            moved = tuple(
                x.detach().to(device).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in args
            )
            return fn, moved, state

        judge(name, {True: build}, a.executors)
    if a.programs:
        for i, src in enumerate(open(a.programs).read().strip().split("\n\n")):
            if a.only is not None and i != a.only:
                continue
            prog = Program.from_source(src)
            modes = (True, False) if prog.has_grad_inputs else (False,)
            print("\n" + src)
            judge(f"program {i} ({a.executors})", {g: prog.builder(g, device) for g in modes}, a.executors)


if __name__ == "__main__":
    main()
