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
whose destination is not a trace input, when nvFuser may run the trace (the executors are
unknown, as before autodiff, or include nvFuser): nvFuser can only write to a tensor that is
an input of its fusion region, and the barrier (which nvFuser does not fuse) makes it one.
A write to a trace input needs none, and neither does any write when the compilation's
executors do not include nvFuser (at the fusion stage of a CPU run).

Pure view creation (``x[0]``, ``expand``, ...) reads no data and is not an access; a
``reshape`` that may copy is.  Barriers, stripped in step 1, are never accesses.

Worked example (``insert_barriers`` on the trace of ``v = a[0]; a.mul_(2); return v + 1``,
subsymbols left out)::

    before                                  after
    v = ltorch.getitem(a, 0)                v = ltorch.getitem(a, 0)
    t3 = ltorch.mul_(a, 2)                  t3 = ltorch.mul_(a, 2)
    t4 = ltorch.add(v, 1, alpha=1)          # thunder_ext: RAW: `t3 = mul_` (f.py:2) before `t4 = add` (f.py:3)
    return (t4,)                            (t30, t31) = prims.update_aliases((v, t3))
                                            t4 = ltorch.add(t30, 1, alpha=1)
                                            return (t4,)

``v`` is a view of ``a``: nothing but the barrier makes ``add`` read it after the write.

The pass reads the input trace and never mutates it: new bsyms are made with
``from_bsym``/``from_bsym_swap_proxies``, and subsymbols are copied before Thunder's
``dce`` (which edits subsymbols in place) sees them.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from thunder.core import prims
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, has_tags
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.extend import Executor

from thunder_ext.alias_analysis import AliasInfo, StorageGroups, accessed_groups, input_names, storage_groups
from thunder_ext import stage_config
from thunder_ext.errors import PartitionerWouldDropError, PlacementDidNotConvergeError, UnorderableAccessError
from thunder_ext.op_kinds import (
    describe,
    effect_of,
    is_barrier,
    is_copy,
    is_copy_composite,
    is_return,
    returned_data,
    tensor_args,
    tensor_outs,
    view_kind,
    writes_with_grad,
)
from thunder_ext.functionalize import InputPolicy, functionalize
from thunder_ext.remat_guard import (
    BarrierSymbols,
    barrier_symbols,
    hoist_barriers,
    partition_keeps_every_bsym,
    partitioning_fusers,
    unguarded_writes,
)
from thunder_ext.saved_values import keep_old_values_for_backward
from thunder_ext.stage_config import StageConfig


BARRIER_TAG = "thunder_ext"


@dataclass
class BarrierRecord:
    """Why one barrier was placed: ``reason`` is 'RAW', 'WAR' or 'nvfuser-write-input'."""

    reasons: list[str]
    before: BoundSymbol


@dataclass
class AliasRead:
    """A read, after a write, of a proxy other than the one the write returned (class 5 in docs/design.md)."""

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
    # Writes to private storage rewritten out of place before placing (thunder_ext.functionalize).
    functionalized: list[BoundSymbol] = field(default_factory=list)
    # Inputs whose writes became values with one epilogue copy_ each, and the written inputs
    # left in place with why (thunder_ext.functionalize, before autodiff).
    functional_inputs: list[str] = field(default_factory=list)
    kept_inputs: dict[str, str] = field(default_factory=dict)
    epilogue_writes: dict[str, BoundSymbol] = field(default_factory=dict)  # input -> its epilogue copy_
    # Old values of epilogue inputs the backward reads, cloned where they are made (fusion stage;
    # thunder_ext.saved_values): the copies a correct gradient costs.
    saved_old_values: list[str] = field(default_factory=list)
    # Witnesses left out because they carry gradients (before autodiff; see place_barriers).
    dropped_witnesses: int = 0
    stripped: int = 0
    seconds: float = 0.0

    # A dataclass repr would print whole bound symbols; summaries.py writes readable ones.
    def __repr__(self) -> str:
        from thunder_ext.summaries import barrier_report_headline

        return f"<BarrierReport {barrier_report_headline(self)}>"

    def __str__(self) -> str:
        from thunder_ext.summaries import barrier_report_text

        return barrier_report_text(self)

    def _repr_html_(self) -> str:
        from thunder_ext.summaries import barrier_report_html

        return barrier_report_html(self)


def strip_barriers(bsyms: Sequence[BoundSymbol]) -> tuple[list[BoundSymbol], dict, dict[str, str]]:
    """Drop every barrier, renaming its outputs back to its (resolved) inputs.

    Also returns the dropped barriers' outputs keyed by their resolved input names, so that
    a barrier placed again over the same inputs reuses the same proxies (stability), and the
    resolution itself (barrier output name -> stripped name).
    """
    swap: dict = {}
    out: list[BoundSymbol] = []
    dropped: dict[tuple[str, ...], list[tuple[TensorProxy, ...]]] = {}
    producer: dict[str, BoundSymbol] = {}
    for bsym in bsyms:
        if is_barrier(bsym):
            ins = [swap.get(variableify(i), i) for i in tensor_args(bsym)]
            outs = tensor_outs(bsym)
            newer = _written_versions(ins, producer)
            for o, i in zip(outs, ins):
                swap[variableify(o)] = newer.get(i.name, i)
            dropped.setdefault(tuple(i.name for i in ins), []).append(tuple(outs))
            continue
        # Swap only what this bsym reads: Thunder's swap walks the whole map for every proxy.
        mine = {v: swap[v] for v in map(variableify, bsym.flat_proxy_args) if v in swap} if swap else None
        out.append(bsym.from_bsym_swap_proxies(mine) if mine else bsym)
        for p in bsym.flat_proxy_outs:
            producer[p.name] = out[-1]
    return out, dropped, {k.proxy.name: v.name for k, v in swap.items()}


def _written_versions(ins: Sequence[TensorProxy], producer: dict[str, BoundSymbol]) -> dict[str, TensorProxy]:
    """For a barrier over ``ins``: input name -> another input that is a write's output over it.

    Such a barrier output holds the written data (the straight-through barrier after a write
    made with grad disabled, ``_Placer.straight_through``), so stripping resolves it to the
    write's output, not to the version the write replaced.
    """
    if len(ins) < 2:
        return {}
    names = {i.name for i in ins}
    newer: dict[str, TensorProxy] = {}
    for j in ins:
        write = producer.get(j.name)
        if write is None:
            continue
        effect = effect_of(write)
        for o, a in effect.aliases:
            if o.name == j.name and a.name in names and any(a is w for w in effect.writes):
                newer.setdefault(a.name, j)
    return newer


def _witness(bsym: BoundSymbol, prefer: Sequence[TensorProxy] = ()) -> TensorProxy | None:
    """A tensor the bsym produces, to hang a data edge on (an alias of ``prefer`` if there is one)."""
    outs = tensor_outs(bsym)
    return (list(prefer) + outs + [None])[0] if outs else None


@dataclass
class _LastWrite:
    """The latest write to a storage group: its access bit, a tensor it produced, itself, its destination."""

    bit: int
    witness: TensorProxy | None
    bsym: BoundSymbol
    dest: TensorProxy


@dataclass
class _Plan:
    """One barrier to place before a bsym: versions to rename (name -> (version, stale-making write)),
    witnesses to consume, and why."""

    rename: dict[str, tuple[TensorProxy, BoundSymbol | None]] = field(default_factory=dict)
    witnesses: list[TensorProxy] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rename or self.witnesses)


class _RegionEnd(NamedTuple):
    """Where a ``torch_compile_ex`` region must end (see ``_Placer.split_for_torch_compile``)."""

    who: BoundSymbol  # the access that makes the region unsafe to extend
    witness: TensorProxy  # an output of ``who`` the ending barrier consumes
    why: str
    # What ends it: "use" (any use of the group), "write" (a write using the group), or
    # "write_into" (a write into the group).
    trigger: str
    partial: bool = False  # ``who`` writes only part of a tensor (see ``_Placer.writes_part``)


@dataclass(frozen=True)
class PlacementOptions:
    """What every placement round of one pass shares; only the bsyms and the guards vary per round."""

    new_trace: TraceCtx  # the trace new barrier proxies are made in
    inputs: frozenset[str]  # names of the trace's tensor inputs
    symbols: BarrierSymbols
    config: StageConfig  # the stage's compilation, read once (thunder_ext.stage_config)
    # Outputs of the barriers stripped from the input trace, keyed by their resolved input
    # names, and barrier output name -> stripped name: a barrier placed again reuses its proxies.
    previous_barriers: dict[tuple[str, ...], list[tuple[TensorProxy, ...]]]
    resolved_names: dict[str, str]
    effects_cache: dict | None = None  # effects of bsyms analysed in more than one round (see storage_groups)


class _Placer:
    """One forward walk over stripped bound symbols, adding barriers as ordering requires.

    Walk state:

    * ``versions`` is a union-find of versions (:class:`StorageGroups`): a write or barrier
      that replaces a version unions it under the new one, so the root of any stripped proxy is
      its current version, found in near-constant time (renaming every earlier version on each
      write made long traces quadratic); ``next_version`` keeps the uncompressed chain with the
      write that made each version stale;
    * ``anc`` maps a current proxy name to the bitset of accesses it depends on (one bit per
      access to a mutated group, in program order);
    * ``last_write`` and ``epoch`` hold, per group, the latest write and the accesses since.
    """

    def __init__(
        self,
        options: PlacementOptions,
        bsyms: list[BoundSymbol],
        *,
        remat_writes: frozenset[int] = frozenset(),
        differentiable: frozenset[str] = frozenset(),
    ):
        self.options, self.bsyms = options, bsyms
        # Each round pops the barrier outputs it reuses from its own copy.
        self.reusable = {k: list(v) for k, v in options.previous_barriers.items()}
        self.inputs = options.inputs
        self.info: AliasInfo = storage_groups(bsyms, self.inputs, options.config.aliased_inputs, cache=options.effects_cache)
        self.mutated = self.info.mutated_groups
        self.report = BarrierReport()
        self.remat_writes = remat_writes  # stripped indices of writes to guard (see place_barriers)
        self.differentiable = differentiable  # witnesses never to use (see place_barriers)
        # Versions that carry gradients: a write with grad disabled into one gets a straight-through barrier.
        self.grad_versions: set[str] = set(differentiable)
        self.straight_versions: set[str] = set()  # the versions straight_through made
        self.origin: list[int] = []  # output position -> stripped index (-1 for a barrier)
        self.out: list[BoundSymbol] = []

        self.proxies: dict[str, TensorProxy] = {}
        self.last_use: dict[str, int] = {}
        self.first_use: dict[str, int] = {}
        self.made_at: dict[str, int] = {}  # name -> stripped index of the bsym that produces it
        for i, b in enumerate(bsyms):
            for p in b.flat_proxy_args:
                self.last_use[p.name] = i
                self.first_use.setdefault(p.name, i)
            for p in b.flat_proxy_outs:
                self.made_at.setdefault(p.name, i)
            for p in (*b.flat_proxy_args, *b.flat_proxy_outs):
                if isinstance(p, TensorProxy):
                    self.proxies.setdefault(p.name, p)
        self.members = {g: m for g, m in self.info.groups.members().items() if g in self.mutated}
        self.writes_at: dict[str, list[int]] = {}
        self.position: dict[int, int] = {}  # id(bsym) -> stripped index
        # name -> index of the first forward bsym that reads its data (class 6 needs a read
        # *before* the write; a value first read after it is what the backward gets anyway).
        self.first_forward_read: dict[str, int] = {}
        for k, (b, e) in enumerate(zip(bsyms, self.info.effects)):
            self.position[id(b)] = k
            for w in e.writes:
                self.writes_at.setdefault(self.info.group_of(w), []).append(k)
            # A reshape that may copy reads data, but its backward never needs its input.
            if not (e.is_view or e.is_barrier or view_kind(b) or has_tags(b, {BoundSymbolTag.BACKWARD})):
                for p in tensor_args(b):
                    self.first_forward_read.setdefault(p.name, k)

        self.defined: set[str] = set(self.inputs)
        self.versions = StorageGroups()
        self.version_proxy: dict[str, TensorProxy] = {}
        self.next_version: dict[str, tuple[str, BoundSymbol | None]] = {}  # version -> (next, stale-making write)
        self.made_by_barrier: set[str] = set()
        # A backward barrier's output -> the version it renamed: the forward never reads one.
        self.backward_renamed: dict[str, TensorProxy] = {}
        # (group, trigger) -> where the next such access starts a new region (torch.compile)
        self.region_ends: dict[tuple[str, str], _RegionEnd] = {}
        # Since the last region end: name -> input groups whose reads it derives from, and
        # group -> those names (see split_for_torch_compile, third family).
        self.derived_from: dict[str, frozenset[str]] = {}
        self.derived_names: dict[str, list[str]] = {}
        self.grad_taken: set[str] = set()  # arguments of get_grad so far, by stripped and current name
        self._all_members: dict[str, list[str]] | None = None
        self._group_numel: dict[str, int] | None = None  # group -> elements of its largest member
        self._input_groups: set[str] | None = None
        self.routed: set[str] = set()  # names (any version) whose value a region end routed across the cut
        # Since the last cut: name (any version) -> (the cut output it is a version of, its
        # group); per group, the cut outputs used so far; the groups written so far.
        self.cut_origin: dict[str, tuple[str, str]] = {}
        self.region_inputs_used: dict[str, set[str]] = {}
        self.region_written: set[str] = set()
        self.version_group: dict[str, str] = {}  # a version's name -> the group of what it is a version of
        self.anc: dict[str, int] = {}
        self.nbits = 0
        self.last_write: dict[str, _LastWrite] = {}
        self.epoch: dict[str, list[tuple[int, TensorProxy | None, BoundSymbol]]] = {}
        self.pending_remat: dict[str, _LastWrite] = {}  # group -> forward write not yet pinned
        self.touched_forward: set[str] = set()  # forward values computed from mutated storage

    # -- versions and reachability ------------------------------------------------------------

    def current(self, proxy) -> TensorProxy:
        root = self.versions.group(proxy.name)
        return proxy if root == proxy.name else self.version_proxy[root]

    def bump(self, old: TensorProxy, new: TensorProxy, by: BoundSymbol | None) -> None:
        """Every stripped proxy whose current version is ``old`` now reads ``new``.

        ``by`` is the write that made ``old`` stale, or None for a pure renaming.
        """
        if old.name == new.name:
            return
        self.version_proxy[new.name] = new
        self.versions.union(old.name, new.name)  # ``new`` is fresh, so it becomes the root
        self.version_group[new.name] = self.storage_of(old.name)
        if old.name in self.cut_origin:
            self.cut_origin[new.name] = self.cut_origin[old.name]
        self.next_version[old.name] = (new.name, by)

    def storage_of(self, name: str) -> str:
        """The storage group of a stripped proxy or of any later version of one."""
        return self.version_group.get(name) or self.info.group_of(name)

    def stale_by(self, name: str) -> BoundSymbol | None:
        """The first write that made the version ``name`` stale (pure renamings skipped), or None."""
        while name in self.next_version:
            name, by = self.next_version[name]
            if by is not None:
                return by
        return None

    def ancestry(self, bsym: BoundSymbol) -> int:
        acc = 0
        for p in bsym.flat_proxy_args:
            acc |= self.anc.get(p.name, 0)
        return acc

    def reaches(self, proxy: TensorProxy, bit: int) -> bool:
        return bool((self.anc.get(proxy.name, 0) >> bit) & 1)

    def renamed(self, bsym: BoundSymbol) -> BoundSymbol:
        swap = {}
        for p in bsym.flat_proxy_args:
            v = self.current(p)
            if v is not p:
                swap[variableify(p)] = v
        return bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym

    def stale_members(self, g: str, i: int, bit: int | None, cause, plan: _Plan) -> None:
        """Add the members of ``g`` used at or after ``i`` whose version does not depend on ``bit``."""
        for m in self.members.get(g, ()):
            if m in self.defined and self.last_use.get(m, -1) >= i:
                v = self.current(self.proxies[m])
                if v.name not in plan.rename and (bit is None or not self.reaches(v, bit)):
                    plan.rename[v.name] = (v, cause)

    def next_write(self, g: str, i: int) -> int | None:
        ks = self.writes_at.get(g, ())
        k = bisect.bisect_right(ks, i)
        return ks[k] if k < len(ks) else None

    # -- the walk -------------------------------------------------------------------------------

    def run(self) -> list[BoundSymbol]:
        if not self.mutated:
            self.origin = list(range(len(self.bsyms)))
            return list(self.bsyms)
        for i, bsym in enumerate(self.bsyms):
            self.step(i, bsym)
        return self.out

    def step(self, i: int, bsym: BoundSymbol) -> None:
        info = self.info
        effect = info.effects[i]
        write_groups = {info.group_of(w) for w in effect.writes}
        groups = (accessed_groups(info, bsym, effect) & self.mutated) | write_groups
        backward = has_tags(bsym, {BoundSymbolTag.BACKWARD})
        if backward:
            self.note_backward_reads(bsym)
            self.pin_backward_reads(bsym)
        self.pin_pending_writes(i, bsym)
        self.split_for_torch_compile(i, bsym, effect, write_groups)
        cur = self.renamed(bsym)
        if bsym.sym.id == prims.PrimIDs.GET_GRAD:
            self.grad_taken.update(p.name for p in (*bsym.flat_proxy_args, *cur.flat_proxy_args))
        my_anc = self.ancestry(cur)
        if groups:
            plan = _Plan()
            for g in sorted(groups):
                if g in write_groups:
                    self.order_write(g, bsym, effect, my_anc, plan)
                else:
                    self.order_read(g, i, bsym, my_anc, plan)
            if self.options.config.write_barriers:
                self.make_write_inputs(i, bsym, effect, write_groups, plan)
            if plan:
                self.emit(plan, bsym)
            cur = self.renamed(bsym)
            if is_return(bsym) and self.straight_versions:
                cur = self.keep_grad_inputs(cur)
            if is_return(bsym) and self.backward_renamed:
                cur = self.forward_flat_args(cur)
            my_anc = self.ancestry(cur)
            if is_return(bsym):
                self.check_inputs_reached(my_anc)
            my_anc |= self.record_access(bsym, effect, groups, write_groups)
        self.out.append(cur)
        self.origin.append(i)
        touched = not backward and (bool(groups) or any(p.name in self.touched_forward for p in cur.flat_proxy_args))
        for p in cur.flat_proxy_outs:
            self.anc[p.name] = my_anc
            self.defined.add(p.name)
            if touched:
                self.touched_forward.add(p.name)
        # A write's output is the new version of what it wrote.
        for o, a in effect.aliases:
            if any(a is w for w in effect.writes):
                prev = self.current(a)
                self.bump(prev, o, bsym)
                if prev.name in self.grad_versions and not writes_with_grad(bsym):
                    self.straight_through(prev, o, bsym)
        self.note_region_ends(bsym, effect, write_groups)
        if i in self.remat_writes and effect.writes and not backward:
            for g in write_groups:
                self.pending_remat[g] = self.last_write[g]

    def split_for_torch_compile(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        """After a ``copy_`` out of a group, the group's next use goes to a new fusion region
        (torch.compile); after a write into an input, the next write that uses any input it read
        or wrote does; after a read of an input, the next write into that input does.

        Inductor gets some in-place programs wrong inside one ``torch_compile_ex`` region,
        although data edges order everything:

        * the source of an earlier ``copy_`` used again: ``rm.copy_(rv); rv.mul_(rm)`` leaves
          ``rm`` with the new ``rv``; ``t = batch_norm(a, ...); a.copy_(t); u = t * 3; return
          t.mean(1), u`` returns a wrong mean;
        * an input used after a write into an input: ``a[0] = -0.5; s = a.sum(0); rv.add_(s);
          a.tanh_(); rv.tanh_()`` leaves a wrong ``rv``, ``t = batch_norm(b, rm, rv, ...);
          t[1:] = rv`` a wrong ``t``, ``rm`` and ``rv``, and ``a[0] = rm; rm.mul_(0.9)`` a wrong
          ``rm``, under plain ``torch.compile`` too (torch 2.11; upstream pytorch/pytorch#198270
          is one of this family).  Dynamo turns a write into an input into a functional value
          plus a copy back at the end of the graph, and Inductor's reinplacing and scheduling
          of those copies is where these go wrong; a region in which no input is used after a
          write that touched it is the case it gets right.

        In the second family a read of the written input alone is safe (``a.tanh_(); return
        a * a`` is right in one region, and ``a[0] = -0.5; s = a.sum(0); rv.add_(s)`` too); it
        is the next write that uses the input which goes wrong, so only a write ends the region
        there, and plain Thunder's region count is kept on programs that only read it.  Every
        wrong case found has a write into part of a tensor as one of the two writes; two
        whole-tensor writes (``bn(bn(x).sin())`` in training mode writes the running stats
        twice) are right in one region, so such a pair ends none (``write_after_write``).

        The third family: an input read, then written in part, with the read's value used
        again: ``t0 = b.sin(); b[0] = 0.5; t1 = a + t0; return t0, t1`` returns a ``t0`` whose
        first row is ``sin(0.5)`` (``b.clone()`` or ``b.sum(0)`` as the read, ``b[1:].mul_(3)``
        or ``b[0].copy_(a[0])`` as the write, all the same under plain ``torch.compile``, torch
        2.11).  Only a write into part of the input does it: through a smaller view, or by
        ``setitem``; and only when a value derived from the read is used after the write.  A whole-tensor write (``add_``, ``copy_``, ``zero_``, through ``b.t()``),
        ``masked_fill_``, ``index_put_``, ``index_copy_`` and ``scatter_`` come out right, so a
        write-after-read such as ``a = x * z; x.add_(1)`` keeps its one region.

        Such a region is possible whether barriers are fused or not (with a backward they are
        not): where data edges already order the accesses no barrier stands between them
        (``rv.copy_(rm); rm += rv`` with grad).  So whenever ``torch_compile_ex`` is among the
        executors, one unfused barrier over the write's output, through which every later use
        of the storage goes, ends the region there.

        Still needed for the inputs the functional pass keeps in place, and only for them (writes
        to other inputs are values by now): switched off, three ``torch_compile`` tests go
        silently wrong, each on such an input (docs/workarounds.md, *torch_compile_ex region ends*).
        """
        # Nothing follows the return in its region.  A backward bsym ends none either: the
        # forward/backward split would put a barrier over backward values into the forward.
        if is_return(bsym) or has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            return
        aliased = self.aliased_region_inputs(bsym, write_groups)
        if self.region_ends or aliased:
            self.end_region(i, bsym, effect, write_groups, aliased)
        self.note_region_inputs(bsym, write_groups)

    def end_region(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str], aliased: set[str]) -> None:
        used = {self.info.group_of(p) for p in tensor_args(bsym)}
        touched = sorted(
            {g for g in used if (g, "use") in self.region_ends or self.write_after_write(g, bsym, effect, write_groups)}
            | {g for g in write_groups if (g, "write_into") in self.region_ends and self.read_used_after(g, i)
               and self.writes_part_of(g, bsym, effect)}
            | aliased
        )
        if not touched:
            return
        plan = _Plan()
        if aliased:
            plan.reasons.append(f"torch.compile: {describe(bsym)} would make one region write an input aliased by another of its inputs")
        for g in touched:
            for m in self.all_members().get(g, ()):
                if m in self.defined and self.last_use.get(m, -1) >= i and not self.grad_taken_of(m):
                    v = self.current(self.proxies[m])
                    plan.rename.setdefault(v.name, (v, None))
                    self.routed.add(m)
        # One barrier ends the region for everything pending: after it a new region starts.
        for end in {(id(e.who), e.why): e for e in self.region_ends.values()}.values():
            plan.witnesses.append(end.witness)
            plan.reasons.append(f"torch.compile: {describe(bsym)} {end.why} {describe(end.who)}")
        self.cross_cut(i, bsym, plan)

    def cross_cut(self, i: int, bsym: BoundSymbol, plan: _Plan) -> None:
        """Emit ``plan`` as the unfused barrier before ``bsym`` at which a new ``torch_compile_ex``
        region starts, and route through it every value the regions after it still need."""
        self.region_ends.clear()
        self.derived_from.clear()
        self.derived_names.clear()
        # A view first used after the cut moves after it instead of crossing it (see deferred_views).
        deferred = self.deferred_views(i, plan)
        # Every other value still needed crosses the cut through this barrier too: a region
        # after it then has no direct edge from one before it, so Thunder's rematerialization
        # cannot recompute such a value there from an input the write has since changed.
        for m, p in self.proxies.items():  # trace order: the barrier's text is stable
            if m in deferred:
                continue
            if m in self.defined and m not in self.inputs and self.last_use.get(m, -1) >= i and not self.grad_taken_of(m):
                v = self.current(p)
                plan.rename.setdefault(v.name, (v, None))
                self.routed.add(m)
        # So do the witnesses of accesses a later barrier may still have to order.
        for accesses in self.epoch.values():
            for _, wit, _ in accesses:
                if wit is not None and wit.name not in self.inputs and not self.grad_taken_of(wit.name):
                    v = self.current(wit)
                    plan.rename.setdefault(v.name, (v, None))
                    self.routed.add(wit.name)
        # By the names they are recorded under too: a witness may be an older name of a
        # version an earlier region end already renamed.
        self.routed.update(plan.rename)
        self.emit(plan, bsym, pin=True)
        self.move_after_cut(deferred)

    def deferred_views(self, i: int, plan: _Plan) -> dict[str, int]:
        """Views made before the cut at ``i`` and first used at or after it: name -> output position.

        Routed across the cut, such a view of an input reaches the next region as a second input
        aliasing the first, and AOT autograd's synthetic base fails when the region writes one
        of them (``t2 = a[:2]; <cut>; a.index_copy_(0, idx, t2)``: ``create_synthetic_base_metadata``,
        torch 2.11).  Made after the cut instead, it is computed inside the region from its base.
        A view reads no data, so where it is made orders nothing."""
        out: dict[str, int] = {}
        candidates = {k for m, k in self.made_at.items() if k < i and m in self.defined and self.last_use.get(m, -1) >= i}
        if not candidates:
            return out
        witnesses = {w.name for accesses in self.epoch.values() for _, w, _ in accesses if w is not None}
        read_so_far: set[str] | None = None  # names the output already reads (barriers included)
        for k in sorted(candidates):
            b, e = self.bsyms[k], self.info.effects[k]
            if not e.is_view or e.writes or view_kind(b) != "view" or has_tags(b, {BoundSymbolTag.BACKWARD}):
                continue
            names = [o.name for o in b.flat_proxy_outs]
            # Every output moves with the bsym: none may be read before the cut (a barrier
            # included), renamed, pending as a witness, or already differentiated.
            if any(
                self.first_use.get(n, i) < i or n in witnesses or n in plan.rename or n in self.inputs
                or (n in self.proxies and (self.current(self.proxies[n]).name != n or self.grad_taken_of(n)))
                for n in names
            ):
                continue
            if read_so_far is None:
                read_so_far = {p.name for o in self.out for p in o.flat_proxy_args}
            if read_so_far.intersection(names):
                continue
            out.update((n, k) for n in names)
        return out

    def move_after_cut(self, deferred: dict[str, int]) -> None:
        """Move the bsyms making ``deferred`` views to the end of the output, on current names."""
        if not deferred:
            return
        ks = set(deferred.values())
        keep = [(b, j) for b, j in zip(self.out, self.origin) if j not in ks]
        self.out, self.origin = [b for b, _ in keep], [j for _, j in keep]
        for k in sorted(ks):
            cur = self.renamed(self.bsyms[k])
            anc = self.ancestry(cur)
            for o in cur.flat_proxy_outs:
                self.anc[o.name] = anc
            self.out.append(cur)
            self.origin.append(k)

    def aliased_region_inputs(self, bsym: BoundSymbol, write_groups: set[str]) -> set[str]:
        """The groups of which ``bsym`` would make its region receive two inputs, one written.

        AOT autograd replays the views of such inputs on a synthetic base and fails on some
        (``t0 = a.reshape(3, 4)`` with ``a`` of shape (12,), then ``a[0] = 2.0; a[0] = 0.5; t1
        = t0[::2]`` with a cut between the writes: "incorrect out shape after application of
        ViewMeta sequence", torch 2.11).  Plain Thunder never hands a region two aliased
        inputs; a cut does, routing ``a`` and ``t0`` across it.  A further cut keeps them in
        different regions, unless ``bsym`` alone brings both."""
        if not self.cut_origin:
            return set()
        mine = self.region_inputs_of(bsym)
        conflicts = set()
        for g in mine.keys() | write_groups:
            names = mine.get(g, set())
            together = self.region_inputs_used.get(g, set()) | names
            written = g in self.region_written or g in write_groups
            alone = g in write_groups and len(names) > 1
            if written and len(together) > 1 and not alone:
                conflicts.add(g)
        return conflicts

    def region_inputs_of(self, bsym: BoundSymbol) -> dict[str, set[str]]:
        """Per group, the outputs of the last cut that ``bsym``'s arguments are versions of."""
        mine: dict[str, set[str]] = {}
        for p in tensor_args(bsym):
            o = self.cut_origin.get(self.current(p).name)
            if o is not None:
                mine.setdefault(o[1], set()).add(o[0])
        return mine

    def note_region_inputs(self, bsym: BoundSymbol, write_groups: set[str]) -> None:
        if not self.cut_origin:
            return
        for g, names in self.region_inputs_of(bsym).items():
            self.region_inputs_used.setdefault(g, set()).update(names)
        self.region_written |= write_groups

    def grad_taken_of(self, name: str) -> bool:
        """Whether the joint trace already took the cotangent of this value (``get_grad``).

        Autodiff's split matches each ``get_grad`` argument to a forward output by name, so a
        value renamed after its ``get_grad`` would be returned under a name it cannot find."""
        return name in self.grad_taken or self.current(self.proxies[name]).name in self.grad_taken

    def read_used_after(self, g: str, i: int) -> bool:
        """Whether a value derived from a read of input ``g`` in this region is used after bsym ``i``.

        Only then can Inductor recompute the read after the write; the reads inside a write's
        own decomposition (``x.view(-1)[::2].mul_(2)`` reshapes and multiplies ``x``) feed
        that write alone."""
        return any(self.last_use.get(n, -1) > i for n in self.derived_names.get(g, ()))

    def write_after_write(self, g: str, bsym: BoundSymbol, effect, write_groups: set[str]) -> bool:
        """Whether ``bsym`` is a write that uses ``g`` after a write into an input that used it,
        with one of the two writing only part of a tensor (the second family of
        :meth:`split_for_torch_compile`)."""
        end = self.region_ends.get((g, "write"))
        return bool(write_groups) and end is not None and (end.partial or self.writes_part(bsym, effect))

    def writes_part(self, bsym: BoundSymbol, effect) -> bool:
        """Whether ``bsym`` writes only part of some tensor: ``setitem_``, or through a view with
        fewer elements than the largest member of its storage group (its base)."""
        if bsym.sym.name == "setitem_":
            return True
        if self._group_numel is None:  # once per pass: a scan per write would be quadratic on loops
            self._group_numel = {}
            for name, p in self.proxies.items():
                g = self.info.group_of(name)
                self._group_numel[g] = max(self._group_numel.get(g, 0), p.numel)
        return any(w.numel < self._group_numel.get(self.info.group_of(w), 0) for w in effect.writes)

    def copies_a_slice_write(self, bsym: BoundSymbol) -> bool:
        """A ``copy_`` of a value a partial write made (``b[1:] = t`` decomposed at the fusion stage:
        ``t32 = copy_with_setitem(b, ...); copy_(t32, b)``): in a region, Inductor treats it as the
        partial write it is (soak seed 15000: ``t2 = b.cos(); b[1:] = t1; return t2``, grad)."""
        if not is_copy(bsym):
            return False
        # An epilogue copy_ (an input whose writes became values) stays out of every region
        # (unfuse_epilogue), and on the final trace writes the slice in place (reinplace_inputs).
        if any(self.info.group_of(w) == self.info.group_of(n) for w in effect_of(bsym).writes for n in self.options.config.epilogue_inputs if n in self.proxies):
            return False
        src = tensor_args(bsym)[0]
        k = self.made_at.get(src.name)
        return k is not None and str(self.bsyms[k].sym.name) in _SLICE_WRITES

    def writes_part_of(self, g: str, bsym: BoundSymbol, effect) -> bool:
        """Whether ``bsym`` writes only part of the input storage ``g`` (setitem, or through a smaller
        view, or a copy of a value a partial write made)."""
        if bsym.sym.name == "setitem_" or self.copies_a_slice_write(bsym):
            return True
        whole = max((self.proxies[n].numel for n in self.inputs if n in self.proxies and self.info.group_of(self.proxies[n]) == g), default=0)
        return any(self.info.group_of(w) == g and w.numel < whole for w in effect.writes)

    def note_region_ends(self, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        """Remember where a region must end (see :meth:`split_for_torch_compile`)."""
        if not self.options.symbols.inductor or has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            return
        outs = tensor_outs(bsym)
        if not outs:
            return
        ends = self.region_ends
        if is_copy(bsym) or is_copy_composite(bsym):
            for p in tensor_args(bsym):
                g = self.info.group_of(p)
                if g not in write_groups and not any(p is w for w in effect.writes):
                    ends[(g, "use")] = _RegionEnd(bsym, outs[0], "uses the source of", "use")
        read_inputs = {self.info.group_of(p) for p in tensor_args(bsym)} & self.input_groups()
        if write_groups & self.input_groups():
            # The inputs it reads too, not only the one it writes: `a[0] = rm; rm.mul_(0.9)` in
            # one region leaves a wrong `rm`.
            partial = self.writes_part(bsym, effect)
            for g in read_inputs:
                end = ends.get((g, "write"))
                if end is None or (partial and not end.partial):
                    ends[(g, "write")] = _RegionEnd(bsym, outs[0], "writes with an input after the write", "write", partial)
        # What this bsym's outputs derive from: its own reads of inputs, and what its arguments
        # derive from; a write's output is the new version of its destination, not a read of it.
        derived = set().union(*(self.derived_from.get(p.name, ()) for p in tensor_args(bsym)))
        if not (effect.is_view or effect.is_barrier or is_return(bsym)):
            for g in read_inputs - write_groups:
                ends.setdefault((g, "write_into"), _RegionEnd(bsym, outs[0], "writes an input read by", "write_into"))
                derived.add(g)
        derived -= write_groups
        if derived:
            frozen = frozenset(derived)
            for o in outs:
                self.derived_from[o.name] = frozen
                for g in frozen:
                    self.derived_names.setdefault(g, []).append(o.name)

    def input_groups(self) -> set[str]:
        """The storage groups of the trace's inputs (what the caller can observe)."""
        if self._input_groups is None:
            self._input_groups = {self.info.group_of(self.proxies[n]) for n in self.inputs if n in self.proxies}
        return self._input_groups

    def all_members(self) -> dict[str, list[str]]:
        if self._all_members is None:
            self._all_members = self.info.groups.members()
        return self._all_members

    def note_backward_reads(self, bsym: BoundSymbol) -> None:
        # A backward read of a name that a forward write made stale may want the value the
        # forward read before the write (class 6, docs/design.md); renaming would silently read the new one.
        # If the forward read that name only after the write, the new value is the one saved.
        for p in tensor_args(bsym):
            by = self.stale_by(p.name)
            if (
                by is not None
                and not has_tags(by, {BoundSymbolTag.BACKWARD})
                and self.first_forward_read.get(p.name, len(self.bsyms)) < self.position.get(id(by), len(self.bsyms))
            ):
                self.report.backward_reads_of_forward_writes.append((by, bsym))

    def pin_backward_reads(self, bsym: BoundSymbol) -> None:
        """In a joint trace that a fusion executor splits into regions, a backward region is a
        rematerialization consumer of the forward region: its min cut may recompute a forward
        value from the forward's inputs, re-running a write or reading an input after the write
        (an input written back by an epilogue ``copy_``, ``BarrierSymbols.remat_backward``).  So each
        forward value a backward bsym reads whose computation touched mutated storage goes
        through an unfused barrier first, at the start of the backward."""
        if not self.options.symbols.remat_backward or bsym.sym.id == prims.PrimIDs.GET_GRAD:
            return
        plan = _Plan()
        for p in tensor_args(bsym):
            v = self.current(p)
            if v.name in self.touched_forward and not self.grad_taken_of(p.name):
                plan.rename.setdefault(v.name, (v, None))
        if plan.rename:
            plan.reasons.append("remat: the backward reads forward values computed from mutated storage")
            self.emit(plan, bsym, pin=True, cut=False)

    def pin_pending_writes(self, i: int, bsym: BoundSymbol) -> None:
        """Fusion executors rematerialize: a consumer region may recompute values of its producer
        region from the producer's inputs, and re-running a write is not idempotent.  So what is
        read after a guarded write goes through a barrier first: the write's output is then
        needed outside its region and no cut can move the write.  One barrier serves every
        write since the last read."""
        if not self.pending_remat:
            return
        # The return pins what it reads itself, but a stale name it reads gets a barrier first,
        # and that barrier must be the pin (a fused one would leave the write's output read
        # only inside a region, free to be recomputed).
        if not any(self.info.group_of(p) in self.pending_remat for p in tensor_args(bsym)):
            return
        plan = _Plan()
        for g in self.pending_remat:
            self.stale_members(g, i, None, None, plan)
        writes = {id(lw.bsym): lw for lw in self.pending_remat.values()}
        plan.witnesses = [lw.witness for lw in writes.values() if lw.witness is not None]
        plan.reasons = [f"remat: {describe(lw.bsym)} runs once" for lw in writes.values()]
        self.pending_remat.clear()
        if plan.rename and self.options.symbols.inductor and not has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            # The pin starts a new region: what crosses it goes through it, as at a region end,
            # or rematerialization could recompute it after the write (a fused ordering barrier
            # and its witness included).
            self.cross_cut(i, bsym, plan)
        elif plan.rename:
            self.emit(plan, bsym, pin=True)

    def straight_through(self, prev: TensorProxy, out: TensorProxy, write: BoundSymbol) -> None:
        """After a write made with grad disabled, later reads of ``prev`` differentiate into ``prev``.

        In eager such a write changes the data and leaves the autograd history alone (an EMA's
        ``with torch.no_grad(): e.lerp_(p, 0.1)``, then ``e.norm()``).  Thunder's write output is
        constant for autodiff, so reading it would drop the gradient.  One barrier over ``prev``
        and the write's output ``out`` gives the storage a new version that holds the new data
        (ordered after the write) and whose gradient goes, through ``update_aliases``' identity
        VJP, to ``prev``.  :func:`strip_barriers` resolves it to ``out``.
        """
        plan = _Plan(
            rename={prev.name: (prev, write)},
            witnesses=[out],
            reasons=[f"no-grad write: later reads of `{prev.name}` keep its gradient ({describe(write)})"],
        )
        self.emit(plan, write)  # after the write, which is already out
        self.grad_versions.add(self.current(prev).name)
        self.straight_versions.add(self.current(prev).name)

    def keep_grad_inputs(self, cur: BoundSymbol) -> BoundSymbol:
        """The return's ``flat_args`` keep an input's own name where its newest version is straight-through.

        Thunder's grad transform collects the inputs' gradients by the names in ``flat_args``;
        a newer version there would get none (plain Thunder's gradient sink).  Ordering the
        write before the return is then the fusion-stage pass's job, as for a dropped witness.
        """
        # The input each straight-through version is the newest version of (Thunder's own alias
        # pass already renamed flat_args to the write's output, so the name is found this way).
        newest = {}
        for x in self.inputs:
            if x in self.proxies:
                newest.setdefault(self.current(self.proxies[x]).name, []).append(self.proxies[x])
        return _map_flat_args(
            cur,
            lambda c: newest[c.name][0]
            if isinstance(c, TensorProxy) and c.name in self.straight_versions and len(newest.get(c.name, ())) == 1
            else c,
        )

    def forward_flat_args(self, cur: BoundSymbol) -> BoundSymbol:
        """The joint trace's return keeps, in ``flat_args``, the forward's version of each input.

        A barrier placed for a backward read is backward; were the forward's return to read its
        output, the forward/backward split would pull it (and the backward region it fuses with,
        under ``torch_compile_ex``) into the forward.  ``flat_args`` orders nothing: Thunder
        unwraps the return and drops it.
        """

        def forward(c):
            while isinstance(c, TensorProxy) and c.name in self.backward_renamed:
                c = self.backward_renamed[c.name]
            return c

        return _map_flat_args(cur, forward)

    def order_write(self, g: str, bsym: BoundSymbol, effect, my_anc: int, plan: _Plan) -> None:
        """WAR/WAW: every access to ``g`` since its last write must reach this write."""
        unreached = [(wit, who) for bit, wit, who in self.epoch.get(g, ()) if not (my_anc >> bit) & 1]
        for wit, who in unreached:
            if wit is None:
                raise UnorderableAccessError(
                    "this access must precede an in-place write but produces no tensor a barrier could consume",
                    who,
                    bsym,
                )
            plan.witnesses.append(wit)
            plan.reasons.append(f"WAR: {describe(who)} before {describe(bsym)}")
        if unreached:
            for w in effect.writes:
                if self.info.group_of(w) == g:
                    v = self.current(w)
                    plan.rename.setdefault(v.name, (v, bsym))

    def order_read(self, g: str, i: int, bsym: BoundSymbol, my_anc: int, plan: _Plan) -> None:
        """RAW: this read of ``g`` must be reached from the group's last write."""
        lw = self.last_write.get(g)
        if lw is None:
            return
        stale = [p for p in tensor_args(bsym) if self.info.group_of(p) == g and not self.reaches(self.current(p), lw.bit)]
        # Even when the bsym as a whole is ordered after the write (it also reads the write's
        # output), a stale name carries no gradient through the write (class 5, docs/design.md).
        for p in stale:
            if p.name != lw.dest.name:
                self.report.alias_reads.append(AliasRead(lw.bsym, bsym, p, lw.dest))
        # The return is judged per value: Thunder later unwraps it and drops ``flat_args``,
        # which may be the only edge from the write.
        if (my_anc >> lw.bit) & 1 and not (is_return(bsym) and stale):
            return
        if lw.witness is None:
            raise UnorderableAccessError(
                "this in-place write produces no tensor a barrier could consume, "
                "so the later access cannot be ordered after it",
                lw.bsym,
                bsym,
            )
        for p in stale:
            v = self.current(p)
            plan.rename.setdefault(v.name, (v, lw.bsym))
        # Every stale member used from here on goes through the same barrier, in this group and
        # in the other groups the same write left stale (batch_norm's running mean and var).
        for g2, lw2 in self.last_write.items():
            if g2 == g or lw2.bsym is lw.bsym:
                self.stale_members(g2, i, lw.bit, lw.bsym, plan)
        plan.witnesses.append(lw.witness)
        plan.reasons.append(f"RAW: {describe(lw.bsym)} before {describe(bsym)}")

    def make_write_inputs(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str], plan: _Plan) -> None:
        """nvFuser can only write to an input of its fusion region; a barrier makes the destination one."""
        for w in effect.writes:
            v = self.current(w)
            if v.name not in self.inputs and v.name not in self.made_by_barrier and v.name not in plan.rename:
                plan.rename[v.name] = (v, bsym)
                plan.reasons.append(f"nvFuser: write to non-input {v.name} in {describe(bsym)}")
        if not plan.rename:
            return
        # The same barrier also serves the next write of every other group (a module's buffers
        # are updated one after another), so those need no barrier of their own.
        for g2 in self.writes_at:
            k = self.next_write(g2, i) if g2 not in write_groups else None
            if k is None:
                continue
            for w2 in self.info.effects[k].writes:
                v2 = self.current(w2)
                if (
                    self.info.group_of(w2) == g2
                    and v2.name in self.defined
                    and v2.name not in self.inputs
                    and v2.name not in self.made_by_barrier
                ):
                    plan.rename.setdefault(v2.name, (v2, None))

    def record_access(self, bsym: BoundSymbol, effect, groups: set[str], write_groups: set[str]) -> int:
        """Give this access its bit and update the groups' last write and epoch; return the bit mask."""
        bit = self.nbits
        self.nbits += 1
        for g in groups:
            if g in write_groups:
                dests = [w for w in effect.writes if self.info.group_of(w) == g]
                dest_names = {d.name for d in dests}
                wit = _witness(bsym, [o for o, a in effect.aliases if a.name in dest_names])
                self.last_write[g] = _LastWrite(bit, wit, bsym, dests[0])
                self.epoch[g] = [(bit, wit, bsym)]
            else:
                self.epoch.setdefault(g, []).append((bit, _witness(bsym), bsym))
        return 1 << bit

    def check_inputs_reached(self, ret_anc: int) -> None:
        for g in self.info.input_groups:
            lw = self.last_write.get(g)
            if lw is not None and self.current(lw.dest).name in self.straight_versions:
                self.report.dropped_witnesses += 1  # see keep_grad_inputs
                continue
            if lw is not None and lw.witness is not None and self.dropped(lw.witness):
                # The witness that would order it carries gradients: this order is the
                # fusion-stage pass's job (see place_barriers), which checks it there.
                self.report.dropped_witnesses += 1
                continue
            if lw is not None and not (ret_anc >> lw.bit) & 1:
                raise UnorderableAccessError(
                    "this write mutates an input, but the return references no member of its storage, "
                    "so nothing orders it before the return",
                    lw.bsym,
                )

    # -- making barriers ------------------------------------------------------------------------

    def dropped(self, witness: TensorProxy) -> bool:
        """Whether a barrier must not consume ``witness`` (it carries gradients; before autodiff only)."""
        # A write's own output is a member of the written group: renaming it through the
        # barrier is honest about the data flow, so only foreign witnesses are dropped.
        return witness.name in self.differentiable and self.info.group_of(witness) not in self.mutated

    def emit(self, plan: _Plan, before: BoundSymbol, *, pin: bool = False, cut: bool = True) -> None:
        # A witness a region end has routed is read through its new name, or the barrier would
        # bring a direct edge across the cut (see split_for_torch_compile).
        witnesses = [self.current(w) if w.name in self.routed else w for w in plan.witnesses]
        kept = [w for w in witnesses if not self.dropped(w)]
        self.report.dropped_witnesses += len(witnesses) - len(kept)
        if not plan.rename and not kept:
            return
        symbol = self.options.symbols.pin if pin else self.options.symbols.ordering
        barrier, outs = self.barrier(symbol, [v for v, _ in plan.rename.values()], kept, before, plan.reasons)
        b_anc = self.ancestry(barrier)
        cut = cut and pin and self.options.symbols.inductor
        if cut:  # a new torch.compile region starts after this barrier
            self.cut_origin, self.region_inputs_used, self.region_written = {}, {}, set()
        backward = has_tags(before, {BoundSymbolTag.BACKWARD})
        for (v, cause), new in zip(plan.rename.values(), outs):
            self.bump(v, new, cause)
            if backward:
                self.backward_renamed[new.name] = v
            if v.name in self.grad_versions:  # a barrier's output carries what its input carries
                self.grad_versions.add(new.name)
            if cut:
                self.cut_origin[new.name] = (new.name, self.storage_of(v.name))
        forward = not has_tags(before, {BoundSymbolTag.BACKWARD})
        for o in tensor_outs(barrier):
            self.anc[o.name] = b_anc
            self.made_by_barrier.add(o.name)
            if forward:  # a barrier orders accesses to mutated storage
                self.touched_forward.add(o.name)
        self.out.append(barrier)
        self.origin.append(-1)

    def barrier(self, symbol, members: list[TensorProxy], witnesses: list[TensorProxy], before: BoundSymbol, reasons):
        seen = {p.name for p in members}
        extra = []
        for w in witnesses:
            if w.name not in seen:
                seen.add(w.name)
                extra.append(w)
        ins = tuple(members) + tuple(extra)
        resolved = self.options.resolved_names
        reuse = self.reusable.get(tuple(resolved.get(p.name, p.name) for p in ins))
        if reuse:
            outs = reuse.pop(0)
        else:
            with tracectx(self.options.new_trace):
                outs = tuple(TensorProxy(like=p, requires_grad=p.requires_grad) for p in ins)
        bsym = symbol.bind(ins, output=outs)
        header = f"{BARRIER_TAG}: " + "; ".join(dict.fromkeys(reasons)) if self.options.config.comment else ""
        bsym = bsym.from_bsym(
            header=header,
            source_filename=before.source_filename,
            source_positions=before.source_positions,
        )
        if has_tags(before, {BoundSymbolTag.BACKWARD}):
            bsym.tags.add(BoundSymbolTag.BACKWARD)
        self.report.barriers.append(BarrierRecord(list(reasons), before))
        return bsym, outs[: len(members)]


def _map_flat_args(ret: BoundSymbol, f) -> BoundSymbol:
    """``ret`` (Thunder's wrapped return) with ``f`` applied to each entry of its ``flat_args``."""
    now = ret.args[0] if ret.args else None
    if not isinstance(now, dict) or "flat_args" not in now:
        return ret
    return ret.from_bsym(args=({**now, "flat_args": [f(c) for c in now["flat_args"]]}, *ret.args[1:]))


def place_barriers(
    trace: TraceCtx,
    *,
    executors: Sequence[Executor] | None = None,
    comment: bool = True,
    remat_guard: bool = False,
    differentiable: frozenset[str] = frozenset(),
    aliased_inputs: tuple[frozenset[str], ...] = (),
    functional: bool = True,
    dataflow: bool = False,
    nvfuser_may_run: bool | None = None,
    functional_inputs: "InputPolicy | None" = None,
    epilogue_inputs: frozenset[str] = frozenset(),
) -> tuple[TraceCtx, BarrierReport]:
    """The full pass, returning the new trace and a report of what it did.

    The keywords make the :class:`thunder_ext.stage_config.StageConfig` that
    :func:`barrier_pass` takes; the transform builds its stages' configs from compile data.

    ``nvfuser_may_run``: whether nvFuser is among the compilation's executors, so that a write
    needs its destination to be a region input; None decides from ``executors`` (no executors:
    assume it may).

    ``differentiable`` (used before autodiff) names tensors that carry gradients: a barrier
    never consumes one of them as a mere ordering witness, because autodiff would treat the
    barrier's other outputs as depending on it.  Such orderings are left to the fusion-stage
    pass, after autodiff; ``report.dropped_witnesses`` counts them.

    ``remat_guard`` (used at the fusion stage, where fusion executors rematerialize) makes
    sure that every forward write a fusion region could hold and another could recompute is
    pinned: its output is also read by an unfused barrier or the return
    (:mod:`thunder_ext.remat_guard`), with a barrier before the first later read where no
    ordering barrier already does it.  ``executors`` also decides whether ordering barriers
    are bound so that a fusion executor fuses them (``torch_compile_ex``).

    ``dataflow``: the compilation's ``fusion_type`` is ``"dataflow"`` (where regions can break
    depends on it, :mod:`thunder_ext.remat_guard`).

    ``aliased_inputs`` names sets of inputs that share storage at run time (Thunder ``main``
    passes ``f(x, x[0, 0])`` as two arguments; :mod:`thunder_ext.input_aliases`).

    ``functional`` first rewrites writes to private storage out of place
    (:mod:`thunder_ext.functionalize`); barriers are then placed on what is left.
    ``functional_inputs`` (before autodiff; :class:`thunder_ext.functionalize.InputPolicy`)
    rewrites writes to inputs no gradient flows through too, each written input getting its
    final value back by one epilogue ``copy_``.
    """
    config = stage_config.direct(
        executors, comment=comment, remat_guard=remat_guard, differentiable=frozenset(differentiable),
        aliased_inputs=aliased_inputs, functional=functional, dataflow=dataflow, nvfuser_may_run=nvfuser_may_run,
        functional_inputs=functional_inputs or InputPolicy(), epilogue_inputs=frozenset(epilogue_inputs),
    )  # fmt: skip
    return barrier_pass(trace, config)


def barrier_pass(trace: TraceCtx, config: StageConfig) -> tuple[TraceCtx, BarrierReport]:
    """The pass for one stage of a compilation: the new trace, and a report of what it did."""
    # The cyclic GC's full collections scan the caller's whole heap (Thunder's traces), which made
    # this pass's time grow with what the caller had built rather than with the trace; the pass
    # makes no cycles worth collecting mid-way, so collection waits until it returns.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _pipeline(trace, config)
    finally:
        if was_enabled:
            gc.enable()


def unfuse_epilogue(
    bsyms: list[BoundSymbol], epilogue_inputs: frozenset[str], executors, pin, trace: TraceCtx | None = None
) -> list[BoundSymbol]:
    """The epilogue (the ``copy_``s into ``epilogue_inputs`` after which the forward writes
    nothing, thunder_ext.functionalize's write-back) bound as the torch executor's ``copy_``,
    which ``torch_compile_ex`` does not fuse: its regions then hold values only.

    Inductor miscompiles regions that end with such copies: ``rm.copy_(rv); rv.mul_(rm)`` as
    values (``rm1 = clone(rv); rv1 = rv * rm1``, then ``copy_(rm1, rm); copy_(rv1, rv)``) leaves
    ``rm == rv * rv`` (torch 2.11); ``t = batch_norm(a, rm, rv, training=True); a.copy_(t); return
    t.mean(1), t * 3`` a wrong mean.  Unfused, each copy is one eager ``copy_`` call after the
    region, and the region count stays plain Thunder's.  A barrier among them is bound as ``pin``
    (unfused) too, or under consecutive fusion it would make a region of its own.
    """
    from thunder.executors.torchex import copy_ as torch_copy_

    if not any(getattr(ex, "name", None) == "torch" for ex in executors or ()):
        return bsyms
    out = list(bsyms)
    sources: dict[str, str] = {}  # the value an epilogue copies -> the input it copies it into
    through: dict[str, str] = {}  # barrier output -> the name it renames (an epilogue writes through one)
    for b in out:
        if is_barrier(b):
            for o, i in zip(tensor_outs(b), tensor_args(b)):
                through[o.name] = through.get(i.name, i.name)
    for k in range(len(out) - 1, -1, -1):
        b = out[k]
        if is_return(b) or has_tags(b, {BoundSymbolTag.BACKWARD}):
            continue
        if is_barrier(b):
            if b.sym is not pin:
                out[k] = pin.bind(*b.args, output=b.output).from_bsym(
                    header=b.header, source_filename=b.source_filename, source_positions=b.source_positions
                )
            continue
        effect = effect_of(b)
        if effect.is_view and not effect.writes:
            continue  # a view reads no data: one of an epilogue's output (``b.unsqueeze(0)`` returned) may follow it
        if not effect.writes or not all(through.get(w.name, w.name) in epilogue_inputs for w in effect.writes):
            break
        copy = b if b.sym.id == prims.PrimIDs.COPY_ else (b.subsymbols[-1] if b.subsymbols else None)
        outs = tensor_outs(b)
        if copy is None or copy.sym.id != prims.PrimIDs.COPY_ or len(outs) != 1 or len(copy.args) < 2:
            break
        src, dst = copy.args[0], copy.args[1]
        if src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
            break  # a cast inside the composite: leave it as it is
        out[k] = torch_copy_.bind(src, dst, grad_enabled=False, output=outs[0]).from_bsym(
            header=b.header, source_filename=b.source_filename, source_positions=b.source_positions
        )
        sources[src.name] = through.get(dst.name, dst.name)
    return _unfuse_dying_slice_writes(out, sources, through, trace) if trace is not None else out


# The ops functionalize turns a partial write into (a setitem; a scatter through a slice).
_SLICE_WRITES = frozenset({"setitem", "copy_with_setitem", "index_copy"})


def _unfuse_dying_slice_writes(out: list[BoundSymbol], sources: dict[str, str], through: dict[str, str], trace) -> list[BoundSymbol]:
    """An epilogue's value made by a partial write of its input (``kc[:, pos] = k`` as a value:
    a setitem or a slice scatter) whose old value nothing reads afterwards: that op is claimed by
    the torch executor too, outside every ``torch_compile_ex`` region, so that on the final trace
    it can write the input in place (``reinplace.reinplace_inputs``) instead of a region copying
    the whole input on every call."""
    from thunder.executors.torchex import ex as torchex

    from thunder_ext.functionalize import _claim

    made_at = {p.name: k for k, b in enumerate(out) for p in b.flat_proxy_outs}
    for src, x in sources.items():
        k = made_at.get(src)
        if k is None:
            continue
        p = out[k]
        args = tensor_args(p)
        if p.sym.name not in _SLICE_WRITES or has_tags(p, {BoundSymbolTag.BACKWARD}) or not args:
            continue
        if through.get(args[0].name, args[0].name) != x:
            continue
        late = False
        for b in out[k + 1 :]:
            writes = effect_of(b).writes
            if is_barrier(b) or (writes and through.get(writes[0].name, writes[0].name) == x):
                continue
            names = returned_data(b) if is_return(b) else {a.name for a in tensor_args(b)}
            if any(through.get(n, n) == x for n in names):
                late = True
                break
        if late:
            continue
        claimed = _claim(trace, [p], [torchex])
        if not claimed or any(c.sym.executor is not torchex for c in claimed):
            continue
        out[k : k + 1] = [c.from_bsym(source_filename=p.source_filename, source_positions=p.source_positions) for c in claimed]
        made_at = {q.name: j for j, b in enumerate(out) for q in b.flat_proxy_outs}
    return out


def _write_count(placer: _Placer) -> int:
    """How many of the placer's bsyms write in place: the most rounds a fixed-point loop over them takes."""
    return sum(1 for e in placer.info.effects if e.writes)


class _FixedPoint:
    """Counts the rounds of a loop that must converge: each round acts on at least one more write,
    so a loop that runs more rounds than there are writes is a bug, reported as such."""

    def __init__(self, loop: str, bound: int) -> None:
        self.loop, self.bound, self.rounds = loop, bound, 0

    def next_round(self) -> None:
        self.rounds += 1
        if self.rounds > self.bound:
            raise PlacementDidNotConvergeError(
                f"{self.loop} did not reach a fixed point within {self.bound} rounds (one per in-place write)"
            )


def _pipeline(trace: TraceCtx, config: StageConfig, pruned: tuple[BoundSymbol, ...] = ()) -> tuple[TraceCtx, BarrierReport]:
    """The pass's steps, in order; each reads bsyms and returns new ones, the input trace untouched.

    1. strip: every barrier goes, its outputs renamed back to its inputs (:func:`strip_barriers`);
    2. dce: what only a stripped barrier read;
    3. functionalize: writes become values, written inputs get their epilogue ``copy_``
       (:mod:`thunder_ext.functionalize`); at the fusion stage, an old value of such an input that
       the backward reads is cloned where it is made (:mod:`thunder_ext.saved_values`);
    4. fallback barriers on what is left (:class:`_Placer`), and 5. dead in-place writes removed
       (:mod:`thunder_ext.dead_writes`), repeated until nothing is dead; where a dead write kept
       storage in place, the pipeline starts again once without it;
    6. executor policies (``config``): the remat guard, and Inductor's epilogue outside its regions;
    7. partition check: Thunder's dataflow partitioner keeps every bsym.
    """
    from thunder_ext.dead_writes import has_dead_values, remove_bsyms

    start = time.perf_counter()
    stripped, previous, resolved = strip_barriers(trace.bound_symbols)  # 1
    nstripped = sum(len(v) for v in previous.values())
    if has_dead_values(stripped):  # 2
        stripped = remove_bsyms(trace, stripped, set())
    unfunctionalized = stripped
    new_trace = from_trace(trace)
    effects: dict = {}  # the effects of bsyms analysed more than once (see storage_groups)
    stripped, freport, dead_functional = _functionalize(trace, new_trace, stripped, config, effects)  # 3
    stripped, saved = keep_old_values_for_backward(trace, new_trace, stripped, config, effects)
    options = PlacementOptions(
        new_trace=new_trace,
        inputs=frozenset(input_names(trace)),
        symbols=barrier_symbols(config.executors, stripped, dataflow=config.dataflow),
        config=config,
        previous_barriers=previous,
        resolved_names=resolved,
        effects_cache=effects,
    )
    stripped, placer, out, dead_in_place = _place_without_dead_writes(trace, options, stripped)  # 4, 5
    if dead_in_place and freport is not None and (freport.kept_private_groups or freport.kept_inputs) and not pruned:
        again = _without_writes(trace, unfunctionalized, dead_in_place)
        if again is not None:
            return _pipeline(again, config, pruned=tuple(dead_in_place))
    placer, out = _apply_executor_policies(trace, options, stripped, placer, out)  # 6
    placer, out = _check_partition(trace, options, stripped, placer, out)  # 7

    report = placer.report
    report.dead_writes = [*pruned, *dead_functional, *dead_in_place]
    report.functionalized = freport.rewritten if freport is not None else []
    if freport is not None:
        report.functional_inputs, report.kept_inputs = freport.functional_inputs, freport.kept_inputs
        report.epilogue_writes = freport.epilogue_writes
    report.stripped = nstripped
    report.saved_old_values = saved
    new_trace.bound_symbols = out
    report.seconds = time.perf_counter() - start
    new_trace.set_provenance(
        TraceProvenance(
            f"thunder_ext barriers ({len(report.functionalized)} writes made functional"
            f"{f' ({len(report.functional_inputs)} inputs copied back once)' if report.functional_inputs else ''}, "
            f"{len(report.barriers)} placed, {nstripped} stripped, "
            f"{len(report.dead_writes)} dead in-place ops removed; took {report.seconds * 1e3:.0f} ms)"
        )
    )
    return new_trace, report


def _functionalize(trace, new_trace, bsyms, config: StageConfig, effects: dict):
    """Step 3: ``bsyms`` with the writes :mod:`thunder_ext.functionalize` can rewrite made values,
    its report (None when ``config.functional`` is off), and the rewritten writes whose value
    nothing reads (dead in-place ops, which ``dce`` removed with their values)."""
    from thunder_ext.dead_writes import remove_bsyms

    if not config.functional:
        return bsyms, None, []
    bsyms, freport = functionalize(
        trace, new_trace, bsyms, input_names(trace), config.executors, effects, config.differentiable,
        config.functional_inputs, config.aliased_inputs,
    )  # fmt: skip
    if not freport.rewritten:
        return bsyms, freport, []
    bsyms = remove_bsyms(trace, bsyms, set())  # what only the rewritten writes' old versions needed
    produced = {p.name for b in bsyms for p in b.flat_proxy_outs}
    return bsyms, freport, [w for w, value in freport.new_values if value.name not in produced]


def _place(
    options: PlacementOptions, bsyms: list[BoundSymbol], remat: frozenset[int] = frozenset(), diff: frozenset[str] = frozenset()
) -> tuple[_Placer, list[BoundSymbol]]:
    """Step 4: one placement walk over ``bsyms``."""
    placer = _Placer(options, bsyms, remat_writes=remat, differentiable=diff)
    return placer, placer.run()


def _place_without_dead_writes(trace, options: PlacementOptions, stripped: list[BoundSymbol]):
    """Steps 4 and 5: barriers placed on ``stripped`` less its dead in-place writes; returns the
    bsyms left, the last placer and its output, and the writes removed (in stripped order)."""
    from thunder_ext.dead_writes import dead_inplace_ops, remove_bsyms

    placer, out = _place(options, stripped)
    dead_in_place: list[BoundSymbol] = []
    # A barrier shared by several groups can keep a write alive only through a write that
    # is itself dead, so removal repeats until nothing is dead (each round removes >= 1).
    rounds = _FixedPoint("dead in-place op removal", _write_count(placer))
    while dead := dead_inplace_ops(out, placer.inputs, options.effects_cache):
        rounds.next_round()
        dead_origins = {placer.origin[k] for k in dead}
        dead_in_place += [stripped[j] for j in sorted(dead_origins)]
        stripped = remove_bsyms(trace, stripped, dead_origins)
        placer, out = _place(options, stripped)
    return stripped, placer, out, dead_in_place


def _without_writes(trace, bsyms: list[BoundSymbol], dead: list[BoundSymbol]) -> TraceCtx | None:
    """The trace to start again from when dead writes were removed and storage was kept in place.

    A dead write may be what kept its storage in place (a no-grad write into a tensor gradients
    flow through): without it, the storage may go functional, and a backward that needs a value
    from before an earlier write then gets it.  Only writes dead in place: a write made a value
    whose value nothing names may still be read through its base's later value.  None when
    nothing is left out.
    """
    from thunder_ext.dead_writes import remove_bsyms

    dead_outs = {p.name for b in dead for p in b.flat_proxy_outs}
    keep, swap = [], {}
    for b in bsyms:
        effect = effect_of(b)
        if effect.writes and any(p.name in dead_outs for p in b.flat_proxy_outs):
            # A later access may name the removed write's output: it names the storage written.
            swap.update({variableify(o): swap.get(variableify(a), a) for o, a in effect.aliases if any(a is w for w in effect.writes)})
            continue
        mine = {v: swap[v] for v in map(variableify, b.flat_proxy_args) if v in swap} if swap else None
        keep.append(b.from_bsym_swap_proxies(mine) if mine else b)
    if len(keep) == len(bsyms):
        return None
    again = from_trace(trace)
    again.bound_symbols = remove_bsyms(trace, keep, set())
    return again


def _guard(options: PlacementOptions, stripped: list[BoundSymbol], placer: _Placer, out: list[BoundSymbol]):
    """The remat guard (``config.remat_guard``), then the final placement without gradient witnesses."""
    config = options.config
    remat: frozenset[int] = frozenset()
    if config.remat_guard:
        # Each round pins writes no earlier round pinned, and a trace has finitely many writes:
        # the loop ends exactly at the fixed point, where every fused-read write is pinned.
        rounds = _FixedPoint("the remat guard", _write_count(placer))
        while need := unguarded_writes(out, placer.origin, placer.info.effects, options.symbols) - remat:
            rounds.next_round()
            remat = remat | need
            placer, out = _place(options, stripped, remat)
    if config.differentiable:
        # Liveness above was judged with every witness; only the final placement drops them.
        placer, out = _place(options, stripped, remat, config.differentiable)
    return placer, out


def _unfused(trace, options: PlacementOptions, out: list[BoundSymbol]) -> list[BoundSymbol]:
    """Inductor's epilogue (:func:`unfuse_epilogue`), where ``torch_compile_ex`` runs the trace."""
    config = options.config
    if options.symbols.inductor and config.epilogue_inputs:
        return unfuse_epilogue(out, config.epilogue_inputs, config.executors, options.symbols.pin, trace)
    return out


def _apply_executor_policies(trace, options: PlacementOptions, stripped, placer: _Placer, out):
    """Step 6."""
    placer, out = _guard(options, stripped, placer, out)
    return placer, _unfused(trace, options, out)


def _check_partition(trace, options: PlacementOptions, stripped, placer: _Placer, out):
    """Step 7: under dataflow fusion, Thunder's partitioner must keep every bsym of ``out``.

    Where it would drop some (remat_guard's docstring), first bind every barrier unfused, which
    leaves it fewer merges, under that rule's remat guard; then move barriers up to their inputs,
    where its cycle search sees past them.
    """
    config = options.config
    fusers = partitioning_fusers(config.executors, out) if config.dataflow and placer.report.barriers else []

    def partitioned(bsyms: list[BoundSymbol]) -> bool:
        return all(partition_keeps_every_bsym(trace, bsyms, f) for f in fusers)

    if not fusers or partitioned(out):
        return placer, out
    if options.symbols.fuser is not None:
        options = replace(options, symbols=replace(options.symbols, ordering=options.symbols.pin, fuser=None))
        placer, out = _apply_executor_policies(trace, options, stripped, *_place(options, stripped))
    if not partitioned(out):
        out = hoist_barriers(out)
        if not partitioned(out):
            raise PartitionerWouldDropError(
                "Thunder's dataflow partitioner would drop bound symbols of this trace (a cycle its "
                "search misses; docs/design.md); compile with fusion_type='consecutive'",
                next(b for b in out if is_barrier(b)),
            )
    return placer, out


def insert_barriers(
    trace: TraceCtx,
    *,
    executors: Sequence[Executor] | None = None,
    aliased_inputs: tuple[frozenset[str], ...] = (),
) -> TraceCtx:
    """Return a copy of ``trace`` whose data edges alone order every access to mutated storage.

    Existing ``update_aliases`` barriers are replaced, dead in-place ops are removed, and the
    return stays last.  ``executors``, when given, picks the barrier symbol for the
    compilation's executors (one they claim, or one ``torch_compile_ex`` fuses; used at the
    fusion stage, see :mod:`thunder_ext.remat_guard`).  ``aliased_inputs``: sets of input
    names that share storage at run time.
    """
    return place_barriers(trace, executors=executors, aliased_inputs=aliased_inputs)[0]
