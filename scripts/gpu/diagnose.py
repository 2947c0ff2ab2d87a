"""Judge a few programs on CUDA, plain Thunder against the transform, and print the traces of
every cell that does not match eager: the device machine's diagnosis, in one call.

    python scripts/gpu/diagnose.py PROGRAMS.txt [--only I] [--gallery NAME ...] [--no-nvfuser]
                                   [--executors torch_compile] [--cpu]

PROGRAMS.txt holds fuzzer programs as the soak prints them, separated by blank lines.  Each
program runs under both fusion types, with grad (as written) and without, through thunder.jit
with the default executors (nvFuser on CUDA, or the CUDA torch executors with --no-nvfuser).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("THUNDER_EXT_FUZZ_DEVICE", "cuda" if "--cpu" not in sys.argv else "cpu")
warnings.filterwarnings("ignore")

import thunder  # noqa: E402
import torch  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.testing import compare  # noqa: E402
from thunder_ext.testing.fuzzing import Program  # noqa: E402
from thunder_ext.testing.gallery import by_name  # noqa: E402
from thunder_ext.transforms import InplaceBarrierTransform  # noqa: E402


EXECUTORS = "default"


def executors(no_nvfuser: bool):
    if EXECUTORS == "torch_compile":
        from thunder.executors.torch_compile import torch_compile_ex

        return [torch_compile_ex]
    ex = list(thunder.get_default_executors())
    return [e for e in ex if e.name != "nvfuser"] if no_nvfuser else ex


def run(build, transform: bool, fusion_type: str, no_nvfuser: bool):
    torch.manual_seed(0)
    fn, args, state = build()
    eager = compare.execute(fn, compare.clone_args(args), state)
    torch.manual_seed(0)
    fn, args, state = build()
    jfn = thunder.jit(fn, fusion_type=fusion_type, executors=executors(no_nvfuser),
                      transforms=[InplaceBarrierTransform(check=True)] if transform else [])
    got = compare.execute(jfn, compare.clone_args(args), state)
    if got.error is not None:
        return "crash/refused: " + compare._one_line(got.error), jfn
    if eager.error is not None:
        return "wrong: eager raised " + compare._one_line(eager.error), jfn
    try:
        compare._assert_same(got, eager)
    except AssertionError as e:
        return "wrong: " + " ".join(str(e).split())[:240], jfn
    return "correct", jfn


def dump(jfn, transform: bool) -> None:
    try:
        if transform:
            for t in thunder_ext.fusion_stage_traces(jfn)[-2:]:
                print("  -- fusion stage (transform's input to fusion):")
                print("    " + str(t).replace("\n", "\n    "))
            for fw, bw in thunder_ext.final_traces(jfn, with_barriers=True)[-1:]:
                print("  -- final forward (with barriers):\n    " + str(fw).replace("\n", "\n    "))
                if bw is not None:
                    print("  -- final backward:\n    " + str(bw).replace("\n", "\n    "))
        else:
            print("  -- final forward:\n    " + str(thunder.last_traces(jfn)[-1]).replace("\n", "\n    "))
            bw = thunder.last_backward_traces(jfn)
            if bw:
                print("  -- final backward:\n    " + str(bw[-1]).replace("\n", "\n    "))
    except Exception as e:  # a crash before any trace was kept
        print("  (no traces:", compare._one_line(e), ")")


def judge(name: str, builders: dict, no_nvfuser: bool) -> None:
    print(f"\n######## {name}")
    for grad, build in builders.items():
        for ft in ("consecutive", "dataflow"):
            verdicts = {}
            for transform in (False, True):
                try:
                    v, jfn = run(build, transform, ft, no_nvfuser)
                except Exception as e:
                    v, jfn = "crash (compile): " + compare._one_line(e), None
                verdicts[transform] = (v, jfn)
            print(f"[{'grad' if grad else 'no-grad'} {ft}] plain: {verdicts[False][0][:200]} | transform: {verdicts[True][0][:300]}")
            tv = verdicts[True][0]
            if tv != "correct" and verdicts[True][1] is not None and "Error: the function writes in place" not in tv:
                dump(verdicts[True][1], True)
                if verdicts[False][1] is not None:
                    dump(verdicts[False][1], False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("programs", nargs="?")
    p.add_argument("--gallery", action="append", default=[])
    p.add_argument("--no-nvfuser", action="store_true")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--executors", choices=("default", "torch_compile"), default="default")
    p.add_argument("--only", type=int, default=None, help="only the program with this index")
    a = p.parse_args()
    global EXECUTORS
    EXECUTORS = a.executors
    print("executors:", [e.name for e in executors(a.no_nvfuser)])
    for name in a.gallery:
        prog = by_name(name)
        dev = "cpu" if a.cpu else "cuda"

        def build(prog=prog):
            fn, args, state = prog.build()
            return fn, tuple(x.detach().to(dev).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                             for x in args), state

        judge(name, {True: build}, a.no_nvfuser)
    if a.programs:
        for i, src in enumerate(open(a.programs).read().strip().split("\n\n")):
            if a.only is not None and i != a.only:
                continue
            prog = Program.from_source(src)
            modes = (True, False) if prog.has_grad_inputs else (False,)
            print("\n" + src)
            judge(f"program {i} ({a.executors})", {g: prog.builder(g) for g in modes}, a.no_nvfuser)


if __name__ == "__main__":
    main()
