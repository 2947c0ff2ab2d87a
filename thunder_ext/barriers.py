"""Barrier insertion: make data edges alone order every access to mutated storage.

``insert_barriers(trace)`` is a pure pass from trace to trace.  It

1. strips every ``update_aliases`` barrier already in the trace (Thunder's or ours),
   renaming each barrier output back to its input, so that nothing stacks and applying
   the pass twice changes nothing;
2. walks the bound symbols once in program order and adds a barrier only where the
   data edges do not already give the order (see *Ordering* below);
3. removes dead in-place ops (:mod:`thunder_ext.dead_writes`) and, if it removed any,
   places the barriers again on what is left.

Ordering.  For every storage group with a write (:mod:`thunder_ext.alias_analysis`),
the accesses in program order form epochs ``W_k, R.., W_k+1, R..``.  It is enough that

* every access of epoch ``k`` (its write and its reads) reaches ``W_k+1`` (WAR, WAW), and
* ``W_k`` reaches every access of epoch ``k`` (RAW);

every pair then follows by transitivity.  Reachability is tracked with one bit per
access to a mutated group, so the check is a bit test.  A write renames its destination
to its own output (as Thunder's pass does), which orders later uses of that proxy for
free; other members of the group (views, the base) read after the write go through one
barrier that consumes an output of the write.  A write that does not return what it
writes (``batch_norm``'s running stats) is handled the same way: the barrier consumes
one of the composite's outputs.  The return is an access like any other, so it always
reads the latest version of every mutated input.

Economy.  Besides the barriers that ordering needs, one barrier goes before each write
whose destination is not a trace input: nvFuser can only write to a tensor that is an
input of its fusion region, and the barrier (which nvFuser does not fuse) makes it one.
A write to a trace input needs none.

Pure view creation (``x[0]``, ``expand``, ...) reads no data and is not an access; a
``reshape`` that may copy is.  Barriers, stripped in step 1, are never accesses.

The pass reads the input trace and never mutates it: new bsyms are made with
``from_bsym``/``from_bsym_swap_proxies``, and subsymbols are copied before Thunder's
``dce`` (which edits subsymbols in place) sees them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from thunder.core import prims
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, has_tags
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.extend import Executor, OperatorExecutor

from thunder_ext.alias_analysis import AliasInfo, accessed_groups, input_names, storage_groups
from thunder_ext.errors import UnorderableAccessError
from thunder_ext.op_kinds import describe, is_barrier, is_return, tensor_args, tensor_outs

BARRIER_TAG = "thunder_ext"


@dataclass
class BarrierRecord:
    """Why one barrier was placed: ``reason`` is 'RAW', 'WAR' or 'nvfuser-write-input'."""

    reasons: list[str]
    before: BoundSymbol


@dataclass
class AliasRead:
    """A read, after a write, of a proxy other than the one the write returned (class 5 shape)."""

    write: BoundSymbol
    read: BoundSymbol
    proxy: TensorProxy
    written: TensorProxy


@dataclass
class BarrierReport:
    """What the pass did; the transform and the main job read it."""

    barriers: list[BarrierRecord] = field(default_factory=list)
    alias_reads: list[AliasRead] = field(default_factory=list)
    backward_reads_of_forward_writes: list[tuple[BoundSymbol, BoundSymbol]] = field(default_factory=list)
    dead_writes: list[BoundSymbol] = field(default_factory=list)
    # Witnesses left out because they carry gradients (before autodiff; see place_barriers).
    dropped_witnesses: int = 0
    stripped: int = 0
    seconds: float = 0.0


def strip_barriers(bsyms: Sequence[BoundSymbol]) -> tuple[list[BoundSymbol], dict, dict[str, str]]:
    """Drop every barrier, renaming its outputs back to its (resolved) inputs.

    Also returns the dropped barriers' outputs keyed by their resolved input names, so that
    a barrier placed again over the same inputs reuses the same proxies (stability), and the
    resolution itself (barrier output name -> stripped name).
    """
    swap: dict = {}
    out: list[BoundSymbol] = []
    dropped: dict[tuple[str, ...], list[tuple[TensorProxy, ...]]] = {}
    for bsym in bsyms:
        if is_barrier(bsym):
            ins = [swap.get(variableify(i), i) for i in tensor_args(bsym)]
            outs = tensor_outs(bsym)
            for o, i in zip(outs, ins):
                swap[variableify(o)] = i
            dropped.setdefault(tuple(i.name for i in ins), []).append(tuple(outs))
            continue
        out.append(bsym.from_bsym_swap_proxies(swap) if swap else bsym)
    return out, dropped, {k.proxy.name: v.name for k, v in swap.items()}


def _barrier_symbol(executors: Sequence[Executor] | None):
    """The barrier as the compilation's executors would claim it, so that it needs no further claiming."""
    for ex in executors or ():
        if isinstance(ex, OperatorExecutor):
            impl = ex.implmap.get(prims.PrimIDs.UPDATE_ALIASES)
            if impl is not None and impl.symbol is not None and impl.execution_transform is None:
                return impl.symbol
    return prims.update_aliases


def _witness(bsym: BoundSymbol, prefer: Sequence[TensorProxy] = ()) -> TensorProxy | None:
    """A tensor the bsym produces, to hang a data edge on (an alias of ``prefer`` if there is one)."""
    outs = tensor_outs(bsym)
    return (list(prefer) + outs + [None])[0] if outs else None


def _short(bsym: BoundSymbol) -> str:
    line = describe(bsym)
    return line


class _Placer:
    """One forward walk over stripped bound symbols, adding barriers as ordering requires."""

    def __init__(
        self,
        trace: TraceCtx,
        new_trace: TraceCtx,
        bsyms: list[BoundSymbol],
        executors,
        comment: bool,
        previous: dict,
        remat_writes: frozenset[int] = frozenset(),
        differentiable: frozenset[str] = frozenset(),
        resolved: dict[str, str] | None = None,
    ):
        self.trace, self.new_trace, self.bsyms = trace, new_trace, bsyms
        self.previous = {k: list(v) for k, v in previous.items()}
        self.inputs = input_names(trace)
        self.info: AliasInfo = storage_groups(bsyms, self.inputs)
        self.mutated = self.info.mutated_groups
        self.barrier_sym = _barrier_symbol(executors)
        self.comment = comment
        self.report = BarrierReport()
        self.remat_writes = remat_writes  # stripped indices of writes to guard (see place_barriers)
        self.differentiable = differentiable  # witnesses never to use (see place_barriers)
        self.resolved = resolved or {}  # reused barrier output name -> stripped name
        self.origin: list[int] = []  # output position -> stripped index (-1 for a barrier)

    def run(self) -> list[BoundSymbol]:
        if not self.mutated:
            self.origin = list(range(len(self.bsyms)))
            return list(self.bsyms)
        info, mutated = self.info, self.mutated
        last_use: dict[str, int] = {}
        for i, b in enumerate(self.bsyms):
            for p in b.flat_proxy_args:
                last_use[p.name] = i
        members: dict[str, list[str]] = {g: m for g, m in info.groups.members().items() if g in mutated}
        defined: set[str] = set(self.inputs)
        swap: dict = {}  # variableified stripped proxy -> current version
        holders: dict[str, set] = {}  # current version name -> stripped proxies that map to it
        made_by_barrier: set[str] = set()
        anc: dict[str, int] = {}  # current proxy name -> bitset of accesses it depends on
        last_write: dict[str, tuple[int, TensorProxy | None, BoundSymbol, TensorProxy]] = {}
        epoch: dict[str, list[tuple[int, TensorProxy | None, BoundSymbol]]] = {}
        nbits = 0
        out: list[BoundSymbol] = []

        def current(name_or_proxy) -> TensorProxy:
            return swap.get(variableify(name_or_proxy), name_or_proxy)

        renamed_by: dict = {}  # variableified stripped proxy -> bsym whose write made it stale

        def bump(old: TensorProxy, new: TensorProxy, by: BoundSymbol | None) -> None:
            """Every stripped proxy whose current version is ``old`` now reads ``new``.

            ``by`` is the write that made ``old`` stale, or None for a pure renaming.
            """
            keys = holders.pop(old.name, set()) | {variableify(old)}
            for k in keys:
                swap[k] = new
                if by is not None:
                    renamed_by.setdefault(k, by)
            holders.setdefault(new.name, set()).update(keys)

        def ancestry(bsym: BoundSymbol) -> int:
            acc = 0
            for p in bsym.flat_proxy_args:
                acc |= anc.get(p.name, 0)
            return acc

        def emit(rename: dict, witnesses: list, reasons: list, before: BoundSymbol) -> BoundSymbol | None:
            """Add one barrier over ``rename`` (current name -> (version, cause)) and ``witnesses``."""
            # A write's own output is a member of the written group: renaming it through the
            # barrier is honest about the data flow, so only foreign witnesses are dropped.
            kept = [w for w in witnesses if w.name not in self.differentiable or info.group_of(w) in mutated]
            self.report.dropped_witnesses += len(witnesses) - len(kept)
            witnesses = kept
            if not rename and not witnesses:
                return None
            versions = [v for v, _ in rename.values()]
            barrier, outs = self._barrier(versions, witnesses, before, reasons)
            b_anc = 0
            for p in barrier.flat_proxy_args:
                b_anc |= anc.get(p.name, 0)
            for (v, cause), new in zip(rename.values(), outs):
                bump(v, new, cause)
            for o in tensor_outs(barrier):
                anc[o.name] = b_anc
                made_by_barrier.add(o.name)
            out.append(barrier)
            self.origin.append(-1)
            return barrier

        writes_at: dict[str, list[int]] = {}
        for k, e in enumerate(info.effects):
            for w in e.writes:
                writes_at.setdefault(info.group_of(w), []).append(k)

        def _next_after(ks: list[int]):
            return lambda i: next((k for k in ks if k > i), None)

        next_write = {g: _next_after(ks) for g, ks in writes_at.items()}
        pending_remat: dict[str, BoundSymbol] = {}  # group -> forward write not yet guarded
        witness_of: dict[int, TensorProxy | None] = {}

        def last_write_witness(w: BoundSymbol) -> TensorProxy | None:
            return witness_of.get(id(w))

        def stale_members(g: str, i: int, bit: int | None, cause: BoundSymbol, rename: dict) -> None:
            """Members of ``g`` used at or after ``i`` whose current version does not depend on ``bit``."""
            for m in members.get(g, ()):
                if m in defined and last_use.get(m, -1) >= i:
                    v = current(self._proxy(m))
                    if v.name not in rename and (bit is None or not (anc.get(v.name, 0) >> bit) & 1):
                        rename[v.name] = (v, cause)

        for i, bsym in enumerate(self.bsyms):
            effect = info.effects[i]
            groups = accessed_groups(info, bsym, effect) & mutated
            write_groups = {info.group_of(w) for w in effect.writes}
            groups |= write_groups
            backward = has_tags(bsym, {BoundSymbolTag.BACKWARD})
            if swap and backward:
                # A backward read of a name that a forward write made stale wants the value
                # saved before the write (class 6); renaming would silently read the new one.
                for p in tensor_args(bsym):
                    by = renamed_by.get(variableify(p))
                    if by is not None and not has_tags(by, {BoundSymbolTag.BACKWARD}):
                        self.report.backward_reads_of_forward_writes.append((by, bsym))
            if pending_remat and not is_return(bsym):
                # Fusion executors rematerialize: a consumer region may recompute values of its
                # producer region from the producer's inputs.  Re-running a write is not
                # idempotent, so what is read after a (forward) write goes through a barrier
                # first: the write's output is then needed outside its region and no cut can
                # move the write.  One barrier serves every write since the last read.
                if any(info.group_of(p) in pending_remat for p in tensor_args(bsym)):
                    rename = {}
                    for g in pending_remat:
                        stale_members(g, i, None, None, rename)
                    writers = list(dict.fromkeys(id(w) for w in pending_remat.values()))
                    by_id = {id(w): w for w in pending_remat.values()}
                    wits = [w for w in (last_write_witness(by_id[k]) for k in writers) if w is not None]
                    reasons = [f"remat: {_short(by_id[k])} runs once" for k in writers]
                    pending_remat.clear()
                    if rename:
                        emit(rename, wits, reasons, bsym)
            elif pending_remat:
                pending_remat.clear()
            cur = bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym
            my_anc = ancestry(cur)
            if groups:
                rename: dict[str, tuple[TensorProxy, BoundSymbol]] = {}
                witnesses: list[TensorProxy] = []
                reasons: list[str] = []
                for g in sorted(groups):
                    if g in write_groups:
                        # WAR/WAW: every access since the last write must reach this write.
                        unreached = [(wit, who) for bit, wit, who in epoch.get(g, ()) if not (my_anc >> bit) & 1]
                        for wit, who in unreached:
                            if wit is None:
                                raise UnorderableAccessError(
                                    "this access must precede an in-place write but produces no tensor "
                                    "a barrier could consume",
                                    who,
                                    bsym,
                                )
                            witnesses.append(wit)
                            reasons.append(f"WAR: {_short(who)} before {_short(bsym)}")
                        if unreached:
                            for w in effect.writes:
                                if info.group_of(w) == g:
                                    v = current(w)
                                    rename.setdefault(v.name, (v, bsym))
                        continue
                    # RAW: this read must be reached from the group's last write.
                    lw = last_write.get(g)
                    if lw is None:
                        continue
                    bit, wit, wbsym, written = lw
                    stale = [
                        p
                        for p in tensor_args(bsym)
                        if info.group_of(p) == g and not (anc.get(current(p).name, 0) >> bit) & 1
                    ]
                    # Even when the bsym as a whole is ordered after the write (it also reads the
                    # write's output), a stale name carries no gradient through the write (class 5).
                    for p in stale:
                        self._note_read(wbsym, bsym, p, written)
                    # The return is judged per value: Thunder later unwraps it and drops
                    # ``flat_args``, which may be the only edge from the write.
                    if (my_anc >> bit) & 1 and not (is_return(bsym) and stale):
                        continue
                    if wit is None:
                        raise UnorderableAccessError(
                            "this in-place write produces no tensor a barrier could consume, "
                            "so the later access cannot be ordered after it",
                            wbsym,
                            bsym,
                        )
                    for p in stale:
                        v = current(p)
                        rename.setdefault(v.name, (v, wbsym))
                    # Every stale member used from here on goes through the same barrier, in this
                    # group and in the other groups the same write left stale (batch_norm's rm, rv).
                    stale_members(g, i, bit, wbsym, rename)
                    for g2, lw2 in last_write.items():
                        if g2 != g and lw2[2] is wbsym:
                            stale_members(g2, i, bit, wbsym, rename)
                    witnesses.append(wit)
                    reasons.append(f"RAW: {_short(wbsym)} before {_short(bsym)}")
                # nvFuser can only write to an input of its fusion region; a barrier makes it one.
                needs_input = [
                    current(w)
                    for w in effect.writes
                    if current(w).name not in self.inputs and current(w).name not in made_by_barrier
                ]
                for v in needs_input:
                    if v.name not in rename:
                        rename[v.name] = (v, bsym)
                        reasons.append(f"nvFuser: write to non-input {v.name} in {_short(bsym)}")
                if rename:
                    # The same barrier also serves the next writes of other groups (a module's
                    # buffers are updated one after another), so they need no barrier of their own.
                    for g2, nxt in next_write.items():
                        if g2 not in write_groups and nxt(i) is not None:
                            for w2 in info.effects[nxt(i)].writes:
                                v2 = current(w2)
                                if (
                                    info.group_of(w2) == g2
                                    and v2.name in defined
                                    and v2.name not in self.inputs
                                    and v2.name not in made_by_barrier
                                ):
                                    rename.setdefault(v2.name, (v2, None))
                if rename or witnesses:
                    emit(rename, witnesses, reasons, bsym)
                    cur = bsym.from_bsym_swap_proxies(swap, skip_output=True)
                    my_anc = ancestry(cur)
                if is_return(bsym):
                    self._check_inputs_reached(my_anc, last_write)
                bit = nbits
                nbits += 1
                my_anc |= 1 << bit
                for g in groups:
                    if g in write_groups:
                        dests = [w for w in effect.writes if info.group_of(w) == g]
                        dest_names = {d.name for d in dests}
                        prefer = [o for o, a in effect.aliases if a.name in dest_names]
                        last_write[g] = (bit, _witness(bsym, prefer), bsym, dests[0])
                        witness_of[id(bsym)] = last_write[g][1]
                        epoch[g] = [(bit, _witness(bsym, prefer), bsym)]
                    else:
                        epoch.setdefault(g, []).append((bit, _witness(bsym), bsym))
            out.append(cur)
            self.origin.append(i)
            for p in cur.flat_proxy_outs:
                anc[p.name] = my_anc
                defined.add(p.name)
            # A write's output is the new version of what it wrote.
            for o, a in effect.aliases:
                if any(a is w for w in effect.writes):
                    bump(current(a), o, bsym)
            if i in self.remat_writes and effect.writes and not backward:
                for g in write_groups:
                    pending_remat[g] = bsym
        return out

    def _proxy(self, name: str) -> TensorProxy:
        return self._proxies[name]

    @property
    def _proxies(self) -> dict[str, TensorProxy]:
        cache = getattr(self, "_proxy_cache", None)
        if cache is None:
            cache = {}
            for b in self.bsyms:
                for p in (*b.flat_proxy_args, *b.flat_proxy_outs):
                    if isinstance(p, TensorProxy):
                        cache.setdefault(p.name, p)
            self._proxy_cache = cache
        return cache

    def _note_read(self, wbsym, rbsym, proxy, written) -> None:
        if proxy.name != written.name:
            self.report.alias_reads.append(AliasRead(wbsym, rbsym, proxy, written))

    def _check_inputs_reached(self, ret_anc: int, last_write) -> None:
        for g in self.info.input_groups:
            lw = last_write.get(g)
            if lw is not None and not (ret_anc >> lw[0]) & 1:
                raise UnorderableAccessError(
                    "this write mutates an input, but the return references no member of its storage, "
                    "so nothing orders it before the return",
                    lw[2],
                )

    def _barrier(self, members: list[TensorProxy], witnesses: list[TensorProxy], before: BoundSymbol, reasons):
        seen = {p.name for p in members}
        extra = []
        for w in witnesses:
            if w.name not in seen:
                seen.add(w.name)
                extra.append(w)
        ins = tuple(members) + tuple(extra)
        reuse = self.previous.get(tuple(self.resolved.get(p.name, p.name) for p in ins))
        if reuse:
            outs = reuse.pop(0)
        else:
            with tracectx(self.new_trace):
                outs = tuple(TensorProxy(like=p, requires_grad=p.requires_grad) for p in ins)
        bsym = self.barrier_sym.bind(ins, output=outs)
        header = ""
        if self.comment:
            header = f"{BARRIER_TAG}: " + "; ".join(dict.fromkeys(reasons))
        bsym = bsym.from_bsym(
            header=header,
            source_filename=before.source_filename,
            source_positions=before.source_positions,
        )
        if has_tags(before, {BoundSymbolTag.BACKWARD}):
            bsym.tags.add(BoundSymbolTag.BACKWARD)
        self.report.barriers.append(BarrierRecord(list(reasons), before))
        return bsym, outs[: len(members)]


def unguarded_writes(bsyms: Sequence[BoundSymbol], origin: Sequence[int], effects) -> set[int]:
    """Writes whose outputs fusible bsyms read but no barrier or return does (by stripped index).

    A fusion executor's rematerialization may move such a write into a consumer region and
    run it twice; an output that a non-fusible bsym needs pins the write to its region.
    """
    pinned: set[str] = set()
    fused_reads: set[str] = set()
    for b in bsyms:
        names = (p.name for p in b.flat_proxy_args)
        (pinned if is_barrier(b) or is_return(b) else fused_reads).update(names)
    out = set()
    for b, j in zip(bsyms, origin):
        if j < 0 or not effects[j].writes or has_tags(b, {BoundSymbolTag.BACKWARD}):
            continue
        outs = {p.name for p in tensor_outs(b)}
        if outs & fused_reads and not outs & pinned:
            out.add(j)
    return out


def place_barriers(
    trace: TraceCtx,
    *,
    executors: Sequence[Executor] | None = None,
    comment: bool = True,
    remat_guard: bool = False,
    differentiable: frozenset[str] = frozenset(),
) -> tuple[TraceCtx, BarrierReport]:
    """The full pass, returning the new trace and a report of what it did.

    ``differentiable`` (used before autodiff) names tensors that carry gradients: a barrier
    never consumes one of them as a mere ordering witness, because autodiff would treat the
    barrier's other outputs as depending on it.  Such orderings are left to the fusion-stage
    pass, after autodiff; ``report.dropped_witnesses`` counts them.

    ``remat_guard`` (used at the fusion stage, where fusion executors rematerialize) makes
    sure that the output of every forward write that a fusible bsym reads is also read by a
    barrier or the return (:func:`unguarded_writes`), adding a barrier before the first
    later read where no ordering barrier already does it.
    """
    from thunder_ext.dead_writes import dead_inplace_ops, remove_bsyms

    start = time.perf_counter()
    stripped, previous, resolved = strip_barriers(trace.bound_symbols)
    nstripped = sum(len(v) for v in previous.values())
    new_trace = from_trace(trace)

    def place(
        bsyms: list[BoundSymbol], remat: frozenset[int] = frozenset(), diff: frozenset[str] = frozenset()
    ) -> tuple[_Placer, list[BoundSymbol]]:
        placer = _Placer(trace, new_trace, bsyms, executors, comment, previous, remat, diff, resolved)
        return placer, placer.run()

    placer, out = place(stripped)
    dead_bsyms: list[BoundSymbol] = []
    # A barrier shared by several groups can keep a write alive only through a write that
    # is itself dead, so removal repeats until nothing is dead (each round removes >= 1).
    while dead := dead_inplace_ops(out, placer.inputs):
        dead_origins = {placer.origin[k] for k in dead}
        dead_bsyms += [stripped[j] for j in sorted(dead_origins)]
        stripped = remove_bsyms(trace, stripped, dead_origins)
        placer, out = place(stripped)
    remat: frozenset[int] = frozenset()
    if remat_guard:
        # Guard barriers only add readers that pin writes, so this converges; bound it anyway.
        for _ in range(4):
            need = unguarded_writes(out, placer.origin, placer.info.effects) - remat
            if not need:
                break
            remat = remat | need
            placer, out = place(stripped, remat)
    if differentiable:
        # Liveness above was judged with every witness; only the final placement drops them.
        placer, out = place(stripped, remat, frozenset(differentiable))
    report = placer.report
    report.dead_writes = dead_bsyms
    report.stripped = nstripped
    new_trace.bound_symbols = out
    report.seconds = time.perf_counter() - start
    new_trace.set_provenance(
        TraceProvenance(
            f"thunder_ext barriers ({len(report.barriers)} placed, {nstripped} stripped, "
            f"{len(report.dead_writes)} dead in-place ops removed; took {report.seconds * 1e3:.0f} ms)"
        )
    )
    return new_trace, report


def insert_barriers(trace: TraceCtx, *, executors: Sequence[Executor] | None = None) -> TraceCtx:
    """Return a copy of ``trace`` whose data edges alone order every access to mutated storage.

    Existing ``update_aliases`` barriers are replaced, dead in-place ops are removed, and the
    return stays last.  ``executors``, when given, picks the barrier symbol the compilation's
    executors would claim (used at the fusion stage).
    """
    return place_barriers(trace, executors=executors)[0]
