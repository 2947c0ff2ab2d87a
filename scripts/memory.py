"""Estimated peak memory of the final traces, plain Thunder against the transform, in one run.

    .venv/bin/python scripts/memory.py               # gallery and memory set
    .venv/bin/python scripts/memory.py --size 1024   # the memory set's large dimension

For every gallery program (as built) and a memory set of in-place programs on large tensors
(``relu_`` on a matmul output, a residual ``out += x``, an in-place softmax, the in-place loop
over a large buffer; with inputs requiring grad, so a backward exists, and without), a markdown table of Thunder's
static estimate (``thunder.examine.memory_calculation.get_alloc_memory``) of the peak memory
of the final forward and backward traces: ``thunder.jit``, ``fusion_type="dataflow"``,
default executors.  ``ratio`` is transform / plain; ``-`` where a run made no trace (plain
Thunder crashes on some gallery programs) or the estimate fails (a ``None`` cotangent).
The estimate counts every ``copy_`` and ``update_aliases`` output as a new allocation,
although both alias at run time; refused programs are listed with whatever trace the refused
compilation left.  The last line names every program above 1.
"""

from __future__ import annotations

import argparse
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402


def relu_on_matmul(a, b):
    y = a @ b
    y.relu_()
    return y


def residual(x, w):
    out = x @ w
    out += x
    return out


def inplace_softmax(x):
    y = x * 1
    y.sub_(y.amax(-1, keepdim=True))
    y.exp_()
    y.div_(y.sum(-1, keepdim=True))
    return y


# The gallery's in-place loop (20 writes, each read), here on the memory set's large input.
from thunder_ext.testing.gallery import loop_inplace as loop_large  # noqa: E402


def memory_set(size: int) -> list[tuple[str, object]]:
    out = []
    for grad in (True, False):

        def g(*shape, grad=grad):
            return torch.randn(*shape, requires_grad=grad)

        tag = "" if grad else " (no grad)"
        out += [
            ("relu_ on matmul output" + tag, lambda g=g: (relu_on_matmul, (g(size, 64), g(64, size)), {})),
            ("residual out += x" + tag, lambda g=g: (residual, (g(size, size // 4), g(size // 4, size // 4)), {})),
            ("in-place softmax" + tag, lambda g=g: (inplace_softmax, (g(size, size // 4),), {})),
            ("loop over a large buffer" + tag, lambda g=g: (loop_large, (g(size, size // 4),), {})),
        ]
    return out


def peaks(build, transform: bool) -> tuple[int | None, int | None]:
    """(forward peak, backward peak or None) in bytes; (None, None) when the run made no trace."""
    import thunder
    from thunder.examine.memory_calculation import get_alloc_memory

    from thunder_ext.testing.compare import Config, compile_fn, execute

    torch.manual_seed(0)
    fn, args, state = build()
    cfg = Config(transform=transform, fusion_type="dataflow", executors="default", entry="jit", check=False)
    jfn = compile_fn(fn, cfg)
    execute(jfn, args, state)
    fw = thunder.last_traces(jfn)
    if not fw:
        return None, None
    bw = thunder.last_backward_traces(jfn)

    def peak(trace) -> int | None:
        try:
            return get_alloc_memory(trace)[0]
        except AttributeError:  # the estimate fails on a trace with a None argument (a None cotangent)
            return None

    return peak(fw[-1]), (peak(bw[-1]) if bw else None)


def _kib(x: int | None) -> str:
    return "-" if x is None else f"{x / 2**10:.1f}"


def _ratio(a: int | None, b: int | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096, help="large dimension of the memory set (default 4096)")
    parser.add_argument("--skip-gallery", action="store_true")
    ns = parser.parse_args(argv)

    from thunder_ext.testing.gallery import PROGRAMS

    cases = [] if ns.skip_gallery else [(p.name, p.build) for p in PROGRAMS]
    cases += memory_set(ns.size)
    print("| program | fwd plain KiB | fwd transform KiB | ratio | bwd plain KiB | bwd transform KiB | ratio |")
    print("|---|---|---|---|---|---|---|")
    worse = []
    for name, build in cases:
        try:
            pf, pb = peaks(build, False)
        except Exception:  # plain Thunder crashes on some gallery programs: no trace
            pf, pb = None, None
        tf, tb = peaks(build, True)
        print(f"| {name} | {_kib(pf)} | {_kib(tf)} | {_ratio(tf, pf)} | {_kib(pb)} | {_kib(tb)} | {_ratio(tb, pb)} |")
        sys.stdout.flush()
        for p, t in ((pf, tf), (pb, tb)):
            if p is not None and t is not None and t > p:
                worse.append(name)
    print()
    print(f"higher than plain: {', '.join(dict.fromkeys(worse)) if worse else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
