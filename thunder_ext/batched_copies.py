"""One call for a run of epilogue copies: ``foreach_copy_`` on the final trace.

Where an input's final value cannot be written in place (``torch_compile_ex``: Inductor regions
hold values only where they compute more than values, :func:`thunder_ext.inductor_regions.unfuse_epilogue`), each written input gets
its value back by one ``copy_`` after the region.  Each is a Python call on every step; an EMA of
20 parameters pays 20 of them.  :func:`batch_copies` turns a run of them into one call of
:func:`thunder_ext.eager_ops.foreach_copy` (``torch._foreach_copy_``).

Invariants (each checked per copy; a copy that fails one ends the run):

* a run is copies next to each other on the final trace (``del``s aside), each the torch
  executor's ``copy_`` with a source of the destination's shape, dtype and device, and no leaf
  check to make (``grad_enabled`` off, or a destination that does not require grad); the
  ``foreach_copy_`` keeps their output names, the destinations themselves at run time, as
  ``copy_`` returns its own, so a later reader (the return's tracked arguments) reads the same;
* no destination in a run shares storage with another destination or with any source of the
  run (alias analysis of the final trace, inputs aliased at this call included): on CUDA the
  copies may run as one kernel in no order, so none may see another's write;
* it runs last, on a final trace whose program order is final (the transform's
  post-optimization hook), and never inside a fusion region.

Worked example (an EMA of two parameters with ``torch_compile_ex``)::

    before                                            after
    [t3, t6] = TorchCompile0(e1, p1, e2, p2)          [t3, t6] = TorchCompile0(e1, p1, e2, p2)
    t7 = copy_(t3, e1, grad_enabled=False)            [t7, t8] = foreach_copy_([t3, t6], [e1, e2])
    del t3, e1                                        del t3, e1, t6, e2
    t8 = copy_(t6, e2, grad_enabled=False)
    del t6, e2

The input trace is never mutated.
"""

from __future__ import annotations

import time

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance

from thunder_ext.alias_analysis import input_names, storage_groups
from thunder_ext.eager_ops import foreach_copy
from thunder_ext.op_kinds import is_copy
from thunder_ext.reinplace import _torchex_name


def _plain_copy(c: BoundSymbol) -> tuple[TensorProxy, TensorProxy] | None:
    """(source, destination) of a copy a run may take (see the invariants), or None."""
    if _torchex_name(c) != "copy_" or not is_copy(c) or len(c.args) < 2:
        return None
    src, dst = c.args[0], c.args[1]
    if not isinstance(src, TensorProxy) or not isinstance(dst, TensorProxy):
        return None
    if (src.shape, src.dtype, src.device) != (dst.shape, dst.dtype, dst.device):
        return None
    grad_enabled = c.kwargs.get("grad_enabled", c.args[2] if len(c.args) > 2 else False)
    if grad_enabled and dst.requires_grad:
        return None  # its leaf check raises, as eager does: leave it one copy_
    return src, dst


def batch_copies(trace: TraceCtx, aliased_inputs=()) -> tuple[TraceCtx, int]:
    """``trace`` with each run of two or more independent copies as one ``foreach_copy_``, and how
    many copies those runs hold (the input trace itself when none).  ``dels`` are recomputed with
    Thunder's ``del_last_used``."""
    from thunder_ext.final_barriers import is_del_or_clear, recompute_dels

    start = time.perf_counter_ns()
    live = [b for b in trace.bound_symbols if not is_del_or_clear(b)]
    info = storage_groups(live, input_names(trace), aliased_inputs)

    def group(p: TensorProxy) -> str:
        return info.group_of(p) if p.name in info.groups else p.name

    runs: list[list[int]] = []
    run: list[int] = []
    run_dsts: set[str] = set()
    run_srcs: set[str] = set()
    for k, b in enumerate(live):
        pair = _plain_copy(b)
        if pair is not None:
            s, d = group(pair[0]), group(pair[1])
            if d in run_dsts or d in run_srcs or s in run_dsts or s == d:
                runs.append(run)  # a copy that must see the run's writes, or that they must not see
                run, run_dsts, run_srcs = [], set(), set()
            if s != d:
                run.append(k)
                run_dsts.add(d)
                run_srcs.add(s)
                continue
        runs.append(run)
        run, run_dsts, run_srcs = [], set(), set()
    runs.append(run)
    runs = [r for r in runs if len(r) > 1]
    if not runs:
        return trace, 0

    sym = foreach_copy()
    first = {r[0]: r for r in runs}
    merged = {k for r in runs for k in r}
    out: list[BoundSymbol] = []
    for k, b in enumerate(live):
        if k in first:
            copies = [live[j] for j in first[k]]
            outs = [c.output for c in copies]
            out.append(sym.bind([c.args[0] for c in copies], [c.args[1] for c in copies], output=outs).from_bsym(
                source_filename=b.source_filename, source_positions=b.source_positions
            ))
        elif k not in merged:
            out.append(b)
    new_trace = recompute_dels(trace, out)
    n = len(merged)
    elapsed_ms = (time.perf_counter_ns() - start) / 1e6
    new_trace.set_provenance(
        TraceProvenance(f"thunder_ext batch copies ({n} copy_ in {len(runs)} foreach_copy_, took {elapsed_ms:.2f} ms)")
    )
    return new_trace, n
