"""Barrier removal on the final traces: once fusion has run, program order is final.

A barrier (``update_aliases``) exists to order accesses by data edges while passes may still
reorder the trace (dataflow fusion, rematerialization).  In the final forward and backward
traces, after fusion, the forward/backward split and ``del`` insertion, the trace runs in
program order, and a top-level barrier is the torch executor's identity (``lambda x: x``):
it orders nothing any more and costs a Python call on every step.

:func:`remove_final_barriers` drops every top-level ``update_aliases`` (the transform's and
Thunder's), renames each of its outputs back to its input (through chains of barriers), and
recomputes the ``del`` statements with Thunder's own ``del_last_used``: a ``del`` of the input
right after the barrier would otherwise delete a name that the renamed later uses still read.
Barriers inside a fusion region (``torch_compile_ex`` fuses them) belong to the region's
compiled code; they are left and counted.

Before (a final trace with the transform, ``e`` and ``p`` inputs)::

    t71 = torch.sum(e, None, False, dtype=None)
    t74 = torch.mul(e, 0.9)
    # thunder_ext: WAR: `t71 = sum` (ema.py:9) before `t75 = copy_` (ema.py:10)
    (t72, t73) = update_aliases((e, t71))
    del t73, e
    t75 = copy_(t74, t72, grad_enabled=True)
    del t74, t72
    (t99,) = update_aliases((t75,))
    del t75
    t77 = torch.add(t99, p, alpha=0.1)
    t78 = copy_(t77, t99, grad_enabled=True)
    del t77, t99
    return (t71,)

After::

    t71 = torch.sum(e, None, False, dtype=None)
    t74 = torch.mul(e, 0.9)
    t75 = copy_(t74, e, grad_enabled=True)
    del t74, e
    t77 = torch.add(t75, p, alpha=0.1)
    t78 = copy_(t77, t75, grad_enabled=True)
    del t77, t75
    return (t71,)

Invariants it relies on:

* it runs on a final trace, and only where no later transform of the compilation has a
  post-optimization hook (``InplaceBarrierTransform`` checks): nothing reorders the trace
  afterwards;
* a top-level ``update_aliases`` returns its arguments unchanged at run time, so the output
  and the input are the same tensor object and renaming one to the other changes no value;
* ``del`` statements and ``clear_mutable_collection`` calls come from Thunder's
  ``del_last_used`` (the backward clears its collections), so recomputing them changes only
  where the renamed names die.

What it guarantees: the result equals the input trace less its top-level barriers, with
every barrier output renamed to its input, and its ``del``s recomputed
(:func:`thunder_ext.checker.verify_barrier_removal` checks exactly this).  The input trace is
never mutated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from thunder.core import prims
from thunder.core.proxies import Proxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.op_kinds import is_barrier, is_fusion

_DEL = prims.PrimIDs.DEL


@dataclass
class BarrierRemovalReport:
    """What :func:`remove_final_barriers` did to one final trace (forward or backward)."""

    removed: int = 0  # top-level update_aliases removed
    removed_ours: int = 0  # of those, placed by thunder-ext (they carry its comment)
    in_regions: int = 0  # left inside fusion regions: the region's compiled code owns them
    # Values that only removed barriers read (a witness with no other reader): still computed,
    # since the removal changes nothing but names.
    left_unread: int = 0
    kept: int = 0  # top-level barriers left in place (see ``why_kept``)
    # Then, with no barrier left: op + copy_ pairs folded into op(..., out=dst)
    # (thunder_ext.reinplace.fold_copies; set by the transform).
    copies_folded: int = 0
    # Epilogue copy_s of functional inputs made unnecessary by writing the input in place again
    # (thunder_ext.reinplace.reinplace_inputs; set by the transform).
    epilogues_reinplaced: int = 0
    # Then the copy_s left, in runs of independent ones, as one foreach_copy_ call per run
    # (thunder_ext.batched_copies; set by the transform).
    copies_batched: int = 0
    # Inputs a fusion region writes (nvFuser: behind autograd's back), given eager's version
    # bump before the return (thunder_ext.nvfuser_forms.bump_written_versions; forward only).
    versions_bumped: int = 0
    names_changed: int = 0  # proxies renamed apart from a bare call of their name (thunder_ext.name_clashes)
    why_kept: str = ""
    seconds: float = 0.0  # the removal alone
    # The transform's whole final-trace hook: reinplace, this removal, reinplace_inputs, fold_copies,
    # batch_copies.
    hook_seconds: float = 0.0
    trace_with_barriers: TraceCtx | None = None  # the trace before the removal

    def __repr__(self) -> str:
        from thunder_ext.summaries import removal_report_headline

        return f"<BarrierRemovalReport {removal_report_headline(self)}>"


def _top_level_barrier(bsym: BoundSymbol) -> bool:
    return not is_fusion(bsym) and is_barrier(bsym)


def _barriers_in_regions(bsyms) -> int:
    n = 0
    for b in bsyms:
        if is_fusion(b):
            n += sum(1 for s in b.subsymbols if is_barrier(s)) + _barriers_in_regions(
                [s for s in b.subsymbols if is_fusion(s)]
            )
    return n


def is_del_or_clear(bsym: BoundSymbol) -> bool:
    """A ``del`` or a ``clear_mutable_collection``: what Thunder's ``del_last_used`` inserts."""
    return bsym.sym.id == _DEL or bsym.sym.name == "clear_mutable_collection"


def count_barriers(trace: TraceCtx) -> tuple[int, int]:
    """(top-level barriers, barriers inside fusion regions) of a trace."""
    top = sum(1 for b in trace.bound_symbols if _top_level_barrier(b))
    return top, _barriers_in_regions(trace.bound_symbols)


def remove_final_barriers(trace: TraceCtx) -> tuple[TraceCtx, BarrierRemovalReport]:
    """Drop every top-level barrier of a final trace, renaming its outputs back to its inputs.

    Returns the new trace (the input itself when it has no top-level barrier) and the report.
    """
    start = time.perf_counter_ns()
    report = BarrierRemovalReport(trace_with_barriers=trace, in_regions=_barriers_in_regions(trace.bound_symbols))
    rename: dict[str, Proxy] = {}  # barrier output name -> the proxy it is at run time
    outputs: dict[str, Proxy] = {}  # barrier output name -> that output proxy
    kept: list[BoundSymbol] = []
    barrier_reads: set[str] = set()
    for b in trace.bound_symbols:
        if not _top_level_barrier(b):
            kept.append(b)
            continue
        outs = [o for o in b.flat_proxy_outs if isinstance(o, Proxy)]
        args = [a for a in b.flat_proxy_args if isinstance(a, Proxy)]
        if len(outs) != len(args):  # not the identity we know: leave it
            kept.append(b)
            report.kept += 1
            report.why_kept = "an update_aliases whose outputs do not match its arguments"
            continue
        for o, a in zip(outs, args):
            if o.name != a.name:
                # Chains: an argument that is itself a removed barrier's output is its root.
                rename[o.name] = rename.get(a.name, a)
                outputs[o.name] = o
        report.removed += 1
        barrier_reads.update(a.name for a in args)
        report.removed_ours += bool(b.header and "thunder_ext" in str(b.header))
    if report.removed == 0:
        report.seconds = (time.perf_counter_ns() - start) / 1e9
        return trace, report

    swap_map = {variableify(outputs[name]): p for name, p in rename.items()}
    new_bsyms: list[BoundSymbol] = []
    had_clears = False
    for b in kept:
        if is_del_or_clear(b):
            # Recomputed below: a del of a barrier's input may precede its renamed uses.
            had_clears |= b.sym.id != _DEL
            continue
        if _reads_any(b, rename):
            b = b.from_bsym_swap_proxies(swap_map, skip_output=True)
        new_bsyms.append(b)

    read_after = {p.name for b in new_bsyms for p in b.flat_proxy_args if isinstance(p, Proxy)}
    computed = {p.name for b in new_bsyms if not is_del_or_clear(b) for p in b.flat_proxy_outs if isinstance(p, Proxy)}
    report.left_unread = len((barrier_reads & computed) - read_after)

    new = recompute_dels(trace, new_bsyms, clear_mutable_collections=had_clears)
    report.seconds = (time.perf_counter_ns() - start) / 1e9
    new.set_provenance(
        TraceProvenance(
            f"thunder_ext final barrier removal ({report.removed} removed, {report.in_regions} inside fusion regions,"
            f" took {report.seconds * 1e3:.2f} ms)"
        )
    )
    return new, report


def recompute_dels(trace: TraceCtx, bsyms: list[BoundSymbol], *, clear_mutable_collections: bool | None = None) -> TraceCtx:
    """A trace like ``trace`` with ``bsyms`` (no ``del``s) and Thunder's ``del_last_used`` run on it.

    ``clear_mutable_collections`` defaults to whether ``trace`` clears collections (the backward does).
    """
    from thunder.executors.passes import del_last_used

    if clear_mutable_collections is None:
        clear_mutable_collections = any(b.sym.name == "clear_mutable_collection" for b in trace.bound_symbols)
    out = from_trace(trace)
    out.bound_symbols = [b for b in bsyms if not is_del_or_clear(b)]
    return del_last_used(out, clear_mutable_collections=clear_mutable_collections)


def _reads_any(bsym: BoundSymbol, rename: dict) -> bool:
    return any(isinstance(p, Proxy) and p.name in rename for p in bsym.flat_proxy_args)
