"""The rematerialization guard: which barrier symbol to bind, and which writes need a pin.

Fusion executors rematerialize (``thunder/core/rematerialization.py``): when one fusion
region feeds another, the consumer may recompute producer values from the producer's inputs
instead of receiving them.  Thunder does not exclude writes from that, and re-running a
write is not idempotent.  A write is safe once its output is read by a bsym that no region
holds (a *pin*: a barrier no fusion executor fuses, or the return), because the output is
then needed outside its region.

Whether barriers are fused decides where regions can break, so the two are chosen together
(:func:`barrier_symbols`):

* **Barriers never fused** (nvFuser has no ``update_aliases``; on a CPU the default
  executors fuse nothing).  Barriers are bound as the operator executor's symbol, so they
  need no later claiming, and every barrier separates regions.  A write and a fused reader
  may then land in different regions, so every forward write that a fusible bsym reads gets
  a pin (:func:`unguarded_writes`).
* **Barriers fused** (``torch_compile_ex`` fuses ``prims.update_aliases``, and the trace
  has no backward, or the fusion type is dataflow: under consecutive fusion the
  forward/backward split cuts the joint trace by data dependence and recomputes what it
  cannot cut, so a region holding a forward write and backward bsyms would run the write
  twice; the dataflow partitioner never merges forward and backward bsyms).  With a
  backward, the backward's regions are rematerialization consumers of the forward's, so
  the forward writes get no pin there: instead the barrier pass pins, at the start of the
  backward, every forward value the backward reads that was computed from mutated storage
  (``BarrierSymbols.backward``, ``executor_policies.RematPins.pin_backward_reads``).  Ordering barriers are
  bound as that prim and stay inside its regions, which keep trace order, so they still
  order.  Regions can then only break at a
  bsym that executor cannot fuse: under consecutive fusion, one that stands between fusible
  bsyms in trace order; under dataflow fusion, one with fusible bsyms both upstream and
  downstream of it in the data graph.  Without such a bsym the fusible bsyms of a
  consecutive run, or of a connected part of the data graph, become one region, nothing can
  be recomputed across a region boundary, and no pin is needed.  With one, the rule above
  applies, pins being bound as the operator executor's symbol, which the fusing executor
  cannot take.

Thunder's dataflow partitioner (``thunder/executors/data_dependent_partition.py``) checks a
merge for cycles by a search it cuts off at trace positions past the merged pair; a region
merged earlier can hold a bsym far before its others, and a cycle through it goes unseen.
Its topological sort then stalls and drops the bsyms left, return included ("Trace has no
return").  So under dataflow fusion the pass runs Thunder's own partitioner on its result
(:func:`partition_keeps_every_bsym`, once per fusion executor that would fuse something) and,
where it drops a bsym, binds fused barriers with the conservative rule instead, and then, if
that is not enough, moves every barrier up to just after its inputs
(:func:`hoist_barriers`): a barrier standing late hides the cycles through it.

Rematerialization also recomputes every input of a consumer region that its min cut does not
supply, one that nothing in the region uses included; so the trace must hold no dead values
when it reaches the fusion pass (the barrier pass runs ``dce`` when it finds one).

Invariants:

* the relaxed rule is used only when the trace has no backward (or fuses by dataflow, and
  the backward's reads are pinned as above) and exactly one fusion
  executor of the compilation can fuse anything in it, and that one fuses barriers;
  otherwise the conservative rule applies;
* a barrier placed before ``get_grad`` (ordering a forward output) is a forward bsym
  (``op_kinds.in_backward``): tagged backward, it would get a region of its own that the
  forward keeps, and its rematerialization would recompute the write it orders;
* a bsym whose fusibility cannot be decided (``can_fuse`` raises) counts as not fusible when
  looking for interior bsyms, and as fusing when looking for other fusion executors, so
  doubt always leads to more pins, never fewer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, Symbol, has_tags
from thunder.core.trace import TraceCtx, from_trace
from thunder.core.utils import consumers, producers
from thunder.extend import Executor, FusionExecutor, OperatorExecutor

from thunder_ext.op_kinds import is_barrier, is_return, tensor_outs


def has_nvfuser(executors: Sequence[Executor] | None) -> bool | None:
    """Whether nvFuser is among ``executors`` (None: the executors are unknown).

    Thunder registers nvFuser only where it can run (CUDA), so its absence is final.
    """
    return None if executors is None else any(getattr(ex, "name", None) == "nvfuser" for ex in executors)


def has_torch_compile(executors: Sequence[Executor] | None) -> bool:
    """Whether ``torch_compile_ex`` is among ``executors`` (its regions are Inductor graphs)."""
    return any(getattr(ex, "name", None) == "torchcompile" for ex in executors or ())


def claimed_barrier_symbol(executors: Sequence[Executor] | None) -> Symbol:
    """The barrier as the compilation's operator executors would claim it (needs no further claiming)."""
    for ex in executors or ():
        if isinstance(ex, OperatorExecutor):
            impl = ex.implmap.get(prims.PrimIDs.UPDATE_ALIASES)
            if impl is not None and impl.symbol is not None and impl.execution_transform is None:
                return impl.symbol
    return prims.update_aliases


def _fuses(ex: FusionExecutor, bsym: BoundSymbol, *, when_unknown: bool) -> bool:
    try:
        return bool(ex.can_fuse(bsym))
    except Exception:  # an executor's checker may not expect every bsym
        return when_unknown


@dataclass(frozen=True)
class BarrierSymbols:
    """``ordering`` binds the barriers that order accesses, ``pin`` the remat pins.

    ``fuser`` is the fusion executor that fuses ordering barriers, or None when none does.
    ``inductor``: whether ``torch_compile_ex`` is among the executors, fused barriers or not;
    its regions must end where Inductor mishandles writes into inputs (see
    ``inductor_regions.InductorRegions.split_for_torch_compile``).
    """

    ordering: Symbol
    pin: Symbol
    fuser: FusionExecutor | None = None
    dataflow: bool = False  # the compilation's fusion_type; unknown counts as consecutive
    inductor: bool = False
    # Ordering barriers fused in a joint trace: the backward's regions are rematerialization
    # consumers of the forward's, so the barrier pass pins the forward values they read.
    backward: bool = False
    # A joint trace that a fusion executor may split into regions: the backward may recompute
    # a forward value from an input that a forward write (an epilogue copy_) has since
    # changed, so the backward's reads of values computed from mutated storage are pinned
    # whether or not ordering barriers are fused.
    remat_backward: bool = False

    def fusible(self, bsym: BoundSymbol) -> bool:
        """Whether ``bsym`` may end up inside a fusion region."""
        if is_return(bsym):
            return False
        if self.fuser is None:
            return not is_barrier(bsym)
        return _fuses(self.fuser, bsym, when_unknown=False)


def barrier_symbols(
    executors: Sequence[Executor] | None, bsyms: Sequence[BoundSymbol] = (), *, dataflow: bool = False
) -> BarrierSymbols:
    """The symbols to bind barriers with at the fusion stage of a compilation using ``executors``."""
    pin = claimed_barrier_symbol(executors)
    inductor = has_torch_compile(executors)
    probe_arg = next((p for b in bsyms for p in b.flat_proxy_args if isinstance(p, TensorProxy)), None)
    # With a backward in the joint trace, consecutive fusion could join forward and backward
    # bsyms in one region, which the forward/backward split then duplicates, write included;
    # the dataflow partitioner never merges them.
    backward = any(has_tags(b, {BoundSymbolTag.BACKWARD}) for b in bsyms)
    fusers = [ex for ex in executors or () if isinstance(ex, FusionExecutor)]
    remat = backward and any(_fuses(ex, b, when_unknown=True) for ex in fusers for b in bsyms)
    if probe_arg is None or (backward and not dataflow):
        return BarrierSymbols(pin, pin, inductor=inductor, remat_backward=remat)
    probe = prims.update_aliases.bind((probe_arg,), output=(probe_arg,))
    barrier_fusers = [ex for ex in fusers if _fuses(ex, probe, when_unknown=False)]
    if len(barrier_fusers) != 1:
        return BarrierSymbols(pin, pin, inductor=inductor, remat_backward=remat)
    (fuser,) = barrier_fusers
    others_fuse = any(_fuses(ex, b, when_unknown=True) for ex in fusers if ex is not fuser for b in bsyms)
    if others_fuse:
        return BarrierSymbols(pin, pin, inductor=inductor, remat_backward=remat)
    return BarrierSymbols(prims.update_aliases, pin, fuser, dataflow, inductor, backward, remat)


def partition_keeps_every_bsym(trace: TraceCtx, bsyms: Sequence[BoundSymbol], fuser: FusionExecutor) -> bool:
    """Whether Thunder's dataflow partitioner, merging what ``fuser`` can fuse, schedules every bsym.

    The merge rule is the one ``torch_compile_ex``'s fusion pass gives the partitioner: two
    nodes merge when each is a merged group already or a bsym the executor can fuse.
    """
    from thunder.executors.data_dependent_partition import dataflow_fusion

    def merge(a, b) -> bool:
        return all(len(n.group_bsyms) > 1 or _fuses(fuser, n.group_bsyms[0], when_unknown=False) for n in (a, b))

    probe = from_trace(trace)
    probe.bound_symbols = list(bsyms)
    return sum(len(group) for group in dataflow_fusion(probe, merge)) == len(bsyms)


def partitioning_fusers(executors: Sequence[Executor] | None, bsyms: Sequence[BoundSymbol]) -> list[FusionExecutor]:
    """The fusion executors of a compilation that would fuse something in ``bsyms``."""
    fusers = [ex for ex in executors or () if isinstance(ex, FusionExecutor)]
    return [ex for ex in fusers if any(_fuses(ex, b, when_unknown=False) for b in bsyms if not is_return(b))]


def hoist_barriers(bsyms: Sequence[BoundSymbol]) -> list[BoundSymbol]:
    """``bsyms`` with each barrier moved up to just after the last bsym producing one of its inputs.

    Under dataflow fusion only data edges order anything, so this changes no order that
    matters.  It helps Thunder's partitioner: its cycle search does not go past a node that
    starts later in the trace than the merged pair, and a barrier standing late, between a
    merged group's early and late members, hides a cycle through it (the module docstring).
    """
    # Position k means "after the k-th non-barrier bsym" (-1: before them all).
    made_at: dict[str, int] = {}
    after: dict[int, list[BoundSymbol]] = {}
    rest: list[BoundSymbol] = []
    ret = [b for b in bsyms if is_return(b)]
    for b in bsyms:
        if is_return(b):
            continue
        if is_barrier(b):
            k = max((made_at.get(p.name, -1) for p in b.flat_proxy_args), default=-1)
            after.setdefault(k, []).append(b)
            for p in b.flat_proxy_outs:
                made_at[p.name] = k
            continue
        rest.append(b)
        for p in b.flat_proxy_outs:
            made_at.setdefault(p.name, len(rest) - 1)
    out = list(after.get(-1, ()))
    for k, b in enumerate(rest):
        out.append(b)
        out.extend(after.get(k, ()))
    return out + ret


def _between_fused(fusible: Sequence[bool]) -> bool:
    """Whether an unfusible bsym stands between fusible ones in trace order (consecutive fusion)."""
    first = next((k for k, f in enumerate(fusible) if f), None)
    last = next((k for k in range(len(fusible) - 1, -1, -1) if fusible[k]), None)
    return first is not None and any(not f for f in fusible[first:last])


def _has_interior_unfused(bsyms: Sequence[BoundSymbol], fusible: Sequence[bool]) -> bool:
    """Whether a bsym outside every region has fusible bsyms both upstream and downstream of it."""
    # As indices into ``fusible``.  Thunder counts no bsym as producing a proxy it also reads,
    # and the searches below skip self-edges anyway.
    bsyms = list(bsyms)
    producer = producers(bsyms, _map_to_numbers=True)
    readers = consumers(bsyms, _map_to_numbers=True)
    above = [False] * len(bsyms)  # a fusible bsym is a strict ancestor
    for k, b in enumerate(bsyms):
        above[k] = any(
            (j := producer.get(p, None)) is not None and j != k and (fusible[j] or above[j]) for p in b.flat_proxy_args
        )
    below = [False] * len(bsyms)  # a fusible bsym is a strict descendant
    for k in range(len(bsyms) - 1, -1, -1):
        below[k] = any(
            r != k and (fusible[r] or below[r]) for p in bsyms[k].flat_proxy_outs for r in readers.get(p, ())
        )
    return any(not f and a and d for f, a, d in zip(fusible, above, below))


def unguarded_writes(
    bsyms: Sequence[BoundSymbol],
    origin: Sequence[int],
    effects,
    symbols: BarrierSymbols,
    unfused: frozenset[str] = frozenset(),
) -> set[int]:
    """Forward writes (by stripped index) that a fusible bsym reads and no pin does.

    Empty when barriers are fused and no bsym can break a region (see the module docstring).
    ``unfused``: outputs of bsyms that a later step binds to an executor that fuses nothing
    (Inductor's epilogue, ``inductor_regions.unfuse_epilogue``): they break regions too.
    """
    fusible = [symbols.fusible(b) and not any(p.name in unfused for p in b.flat_proxy_outs) for b in bsyms]
    if symbols.fuser is not None:
        # The backward's reads of forward values go through pins of their own (symbols.backward).
        fw = [(b, f) for b, f in zip(bsyms, fusible) if not has_tags(b, {BoundSymbolTag.BACKWARD})]
        fw_bsyms, fw_fusible = [b for b, _ in fw], [f for _, f in fw]
        can_break = _has_interior_unfused(fw_bsyms, fw_fusible) if symbols.dataflow else _between_fused(fw_fusible)
        if not can_break:
            return set()
    pinned: set[str] = set()
    fused_reads: set[str] = set()
    for b, f in zip(bsyms, fusible):
        if symbols.backward and has_tags(b, {BoundSymbolTag.BACKWARD}):
            continue
        (fused_reads if f else pinned).update(p.name for p in b.flat_proxy_args)
    out = set()
    for b, j in zip(bsyms, origin):
        if j < 0 or not effects[j].writes or has_tags(b, {BoundSymbolTag.BACKWARD}):
            continue
        outs = {p.name for p in tensor_outs(b)}
        if outs & fused_reads and not outs & pinned:
            out.add(j)
    return out
