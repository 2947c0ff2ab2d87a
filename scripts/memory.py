"""Estimated peak memory of the final traces, plain Thunder against the transform, in one run.

    .venv/bin/python scripts/memory.py               # gallery and memory set
    .venv/bin/python scripts/memory.py --size 1024   # the memory set's large dimension

For every gallery program (as built) and a memory set of in-place programs on large tensors
(``relu_`` on a matmul output, a residual ``out += x``, an in-place softmax, the in-place loop
over a large buffer; with inputs requiring grad, so a backward exists, and without), a markdown table of Thunder's
static estimate (``thunder.examine.memory_calculation.get_alloc_memory``) of the peak memory
of the final forward and backward traces: ``thunder.jit``, ``fusion_type="dataflow"``,
default executors.  ``ratio`` is transform / plain; ``-`` where a run made no trace (plain
Thunder crashes on some gallery programs) or the estimate fails (a ``None`` cotangent);
``refused`` where the transform refuses the program (its documented error): the trace such
a compilation leaves behind is a partial one, whose estimate would mean nothing.

What is measured, and the one correction made to Thunder's estimate: it counts every output
of a bsym as a new allocation unless the bsym is one of its own alias ops (reshape,
``shallow_copy``, ...).  Three kinds of bsym in final traces return, at run time, the very
same tensor object as one of their arguments, so the estimate counts memory twice that
exists once: ``update_aliases`` (the torch executor runs it as ``lambda x: x``), ``copy_``
(it returns its destination) and the in-place forms that ``thunder_ext.reinplace`` emits
(``inplace=True``, ``out=buf``: they return ``buf``).  Before estimating, each such output is
presented to the estimate as the torch executor's ``shallow_copy`` of that argument, an
identity at run time too, which the estimate already treats as sharing the argument's
memory and reference count (``thunder_ext.reinplace.runtime_aliases`` says which outputs).
The same holds for three torch-executor views the estimate's alias list lacks, although it
lists ``reshape``, ``expand`` and ``unsqueeze``: ``torch_slice_prim_impl`` (it runs
``a[slices]``, basic slicing), ``Tensor.view`` (a view, or it raises) and
``Tensor.__getitem__`` with a key of ints, slices, ``None`` and ``...`` only (a tensor index
copies, and is still counted).  These corrections are applied
to plain Thunder's traces and the transform's alike (plain Thunder's have ``copy_``s, barriers
and slices too); every real allocation is still counted.

``plain vs eager`` says whether plain Thunder's run matches eager (outputs, inputs' final
state, gradients).  The last lines name every program above 1, apart for those where plain
Thunder is wrong: a plain run that overwrites a value its backward reads saves less memory
because it computes a different gradient, so it is no floor for a correct program.
"""

from __future__ import annotations

import argparse
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402


# The memory set's programs live in the gallery, with the tests that reinplace them.
from thunder_ext.testing.gallery import inplace_softmax, relu_on_matmul, residual  # noqa: E402

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


REFUSED = "refused"


def _basic_key(key) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or type(k) in (int, slice) for k in keys)


def basic_view(bsym) -> list:
    """[(output, base)] for a torch-executor slice that is a view at run time, else []."""
    from thunder.core.proxies import TensorProxy
    from thunder.executors.torchex import ex as torchex

    if getattr(bsym.sym, "executor", None) is not torchex or not bsym.args:
        return []
    base, outs = bsym.args[0], bsym.flat_proxy_outs
    if not isinstance(base, TensorProxy) or len(outs) != 1:
        return []
    if bsym.sym.name in ("torch_slice_prim_impl", "view") or (
        bsym.sym.name == "__getitem__" and len(bsym.args) == 2 and _basic_key(bsym.args[1])
    ):
        return [(outs[0], base)]
    return []


def alias_aware(trace):
    """``trace`` with every output that is, at run time, one of its bsym's arguments shown to the
    estimate as an alias of it (see the module docstring); ``trace`` itself is not changed."""
    from thunder.core.trace import from_trace
    from thunder.executors.torchex import shallow_copy

    from thunder_ext.reinplace import runtime_aliases

    bsyms = []
    for bsym in trace.bound_symbols:
        pairs = runtime_aliases(bsym) or basic_view(bsym)
        if not pairs or len(pairs) != len(bsym.flat_proxy_outs):
            bsyms.append(bsym)
            continue
        bsyms.extend(shallow_copy.bind(arg, output=out) for out, arg in pairs)
    view = from_trace(trace)
    view.bound_symbols = bsyms
    return view


def peak_of(trace) -> int | None:
    """Thunder's peak estimate of ``trace``, run-time aliases counted once; None where it fails."""
    from thunder.examine.memory_calculation import get_alloc_memory

    try:
        return get_alloc_memory(alias_aware(trace))[0]
    except AttributeError:  # the estimate fails on a trace with a None argument (a None cotangent)
        return None


def peaks(build, transform: bool) -> tuple[int | str | None, int | str | None, str]:
    """(forward peak, backward peak or None, status against eager) in bytes; (None, None, status)
    when the run made no trace; (REFUSED, REFUSED, 'refused') when the transform refused it.

    The status is :func:`thunder_ext.testing.compare.differential`'s: 'correct', 'wrong' (an
    output, an input's final state or a gradient differs from eager), 'crash' or 'refused'."""
    import thunder

    from thunder_ext.testing.compare import Config, differential

    cfg = Config(transform=transform, fusion_type="dataflow", executors="default", entry="jit", check=False)
    v = differential(build, cfg)
    if v.status == "refused":
        return REFUSED, REFUSED, v.status
    jfn = v.outcome.compiled if v.outcome is not None else None
    fw = thunder.last_traces(jfn) if jfn is not None else []
    if not fw:
        return None, None, v.status
    bw = thunder.last_backward_traces(jfn)
    return peak_of(fw[-1]), (peak_of(bw[-1]) if bw else None), v.status


def _kib(x: int | str | None) -> str:
    if isinstance(x, str):
        return x
    return "-" if x is None else f"{x / 2**10:.1f}"


def _ratio(a: int | str | None, b: int | str | None) -> str:
    if a == REFUSED:
        return REFUSED
    if not isinstance(a, int) or not isinstance(b, int) or b == 0:
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
    print("| program | fwd plain KiB | fwd transform KiB | ratio | bwd plain KiB | bwd transform KiB | ratio | plain vs eager |")
    print("|---|---|---|---|---|---|---|---|")
    worse, worse_than_wrong = [], []
    for name, build in cases:
        try:
            pf, pb, pstatus = peaks(build, False)
        except Exception:  # plain Thunder crashes on some gallery programs: no trace
            pf, pb, pstatus = None, None, "crash"
        tf, tb, _ = peaks(build, True)
        print(
            f"| {name} | {_kib(pf)} | {_kib(tf)} | {_ratio(tf, pf)} | {_kib(pb)} | {_kib(tb)} | {_ratio(tb, pb)} "
            f"| {pstatus} |"
        )
        sys.stdout.flush()
        for p, t in ((pf, tf), (pb, tb)):
            if isinstance(p, int) and isinstance(t, int) and t > p:
                (worse if pstatus == "correct" else worse_than_wrong).append(name)
    print()
    # A plain run that differs from eager is no floor: it saves less because it computes
    # something else (e.g. a gradient from a value it overwrote).
    print(f"higher than plain where plain matches eager: {', '.join(dict.fromkeys(worse)) if worse else 'none'}")
    if worse_than_wrong:
        print(f"higher than plain where plain does not match eager: {', '.join(dict.fromkeys(worse_than_wrong))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
