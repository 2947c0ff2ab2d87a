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

from thunder.core import prims
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, Symbol, has_tags
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.extend import Executor

from thunder_ext.barrier_plan import Plan
from thunder_ext.copied_views import replay_views_after_grad_writes, replay_views_autodiff_copies
from thunder_ext.alias_analysis import AliasInfo, StorageGroups, accessed_groups, input_names, storage_groups
from thunder_ext import stage_config
from thunder_ext.errors import PartitionerWouldDropError, PlacementDidNotConvergeError, UnorderableAccessError
from thunder_ext.op_kinds import (
    describe,
    effect_of,
    in_backward,
    is_barrier,
    is_copy,
    is_return,
    tensor_args,
    tensor_outs,
    view_kind,
    writes_with_grad,
)
from thunder_ext.executor_policies import policies_for
from thunder_ext.functionalize import InputPolicy, functionalize
from thunder_ext.inductor_regions import eager_overlapping_copies, epilogue_fits_a_region, unfuse_epilogue, unfuse_scatters
from thunder_ext.remat_guard import (
    BarrierSymbols,
    barrier_symbols,
    hoist_barriers,
    partition_keeps_every_bsym,
    partitioning_fusers,
    unguarded_writes,
)
from thunder_ext.nvfuser_forms import (
    copy_clones,
    copy_strided_writes_outside_nvfuser,
    epilogues_after_derived_reads,
    slice_epilogues_outside_nvfuser,
    unfuse_squeezing_views,
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
    kept_private_groups: int = 0  # private storage groups left in place, with their writes
    # Ops that are a view or a copy by strides, both answers computed and chosen at run time
    # (thunder_ext.stride_choices.StrideChoiceReport; before autodiff), or None.
    stride_choices: object = None
    epilogue_writes: dict[str, BoundSymbol] = field(default_factory=dict)  # input -> its epilogue copy_
    # Inputs written with a value carrying a gradient -> that value, and the flat output positions
    # that hand such an input back (thunder_ext.functionalize; read by thunder_ext.input_histories).
    histories: dict[str, object] = field(default_factory=dict)
    returned_inputs: dict[int, str] = field(default_factory=dict)
    # Old values of epilogue inputs the backward reads, cloned where they are made (fusion stage;
    # thunder_ext.saved_values): the copies a correct gradient costs.
    saved_old_values: list[str] = field(default_factory=list)
    # Outputs handed back twice once identity ops were folded or a returned input became its
    # final value, the second time as a shallow_copy
    # (thunder_ext.identity_ops.separate_repeated_outputs; before autodiff only).
    repeated_outputs: list[str] = field(default_factory=list)
    # Writes through an op assumed a view (thunder_ext.stride_choices) that eager raises on, as a
    # write through a view older than its storage's gradient: the view answer is refused at run time.
    eager_raises_if_view: list[str] = field(default_factory=list)
    # Clones of written storage bound to an operator executor, where nvFuser would alias them
    # to their input (fusion stage; thunder_ext.nvfuser_forms).
    clones_copied: int = 0
    # Squeezing views (``t[0]``) bound to an operator executor, out of nvFuser's regions.
    views_unfused: int = 0
    # Epilogue copy_s put after every fusible read of a value computed from a written input
    # (nvFuser, dataflow: its regions could recompute such a read after the copy).
    epilogues_ordered: int = 0
    # torch_compile_ex: epilogue copy_s left in Inductor's region, which writes the inputs itself
    # (a region of values only: thunder_ext.inductor_regions.epilogue_fits_a_region).
    epilogues_in_region: int = 0
    # nvFuser: epilogue copy_s of dying slice writes kept out of its regions (reinplaced later).
    slice_epilogues_unfused: int = 0
    # Writes into views that may not be dense, their copy_ run by torch (nvFuser writes them as dense).
    strided_writes_copied: int = 0
    # Zero gradients autodiff bound without a decomposition, bound again with one, so that a
    # fusion region keeps them (thunder_ext.bare_symbols).
    bare_symbols_decomposed: int = 0
    # Whole-tensor overwrites of storage gradients flow through, made values that keep eager's
    # zero gradient to the overwritten tensor (before autodiff; thunder_ext.functionalize).
    zero_gradient_links: int = 0
    # Views of grad-requiring inputs made again from the input's new name rather than handed
    # from one torch_compile_ex region to the next (fusion stage; thunder_ext.inductor_regions).
    views_made_again: int = 0
    # Views autodiff computes as copies (``diagonal``), made again around the writes into their
    # storage: no-grad write handles, and reads after a write (before autodiff; thunder_ext.copied_views).
    copied_view_handles: int = 0
    copied_views_replayed: int = 0
    # Views made again after a write with a gradient into their base, for the uses that follow
    # (thunder_ext.copied_views.replay_views_after_grad_writes).
    views_rebased: int = 0
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

    The walk orders accesses and nothing else; what an executor needs besides (remat pins,
    ``torch_compile_ex`` region cuts, nvFuser's write inputs) is a policy chosen once from the
    stage's configuration (:mod:`thunder_ext.executor_policies`), called at fixed points of
    :meth:`step`.
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
        self.differentiable = differentiable  # witnesses never to use (see place_barriers)
        # Versions that carry gradients: a write with grad disabled into one gets a straight-through barrier.
        self.grad_versions: set[str] = set(differentiable)
        self.straight_versions: set[str] = set()  # the versions straight_through made
        self.grad_written: set[str] = set()  # groups written with grad enabled
        self.no_grad_written: set[str] = set()  # groups written with grad disabled
        self.kept_in_flat_args: set[str] = set()  # input groups the return names by the input itself
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
        self.grad_taken: set[str] = set()  # arguments of get_grad so far, by stripped and current name
        self.version_group: dict[str, str] = {}  # a version's name -> the group of what it is a version of
        self.anc: dict[str, int] = {}
        self.nbits = 0
        self.last_write: dict[str, _LastWrite] = {}
        self.last_grad_write: dict[str, _LastWrite] = {}  # per group, its last write made with grad
        self.epoch: dict[str, list[tuple[int, TensorProxy | None, BoundSymbol]]] = {}
        self.touched_forward: set[str] = set()  # forward values computed from mutated storage
        # The executors' rules, chosen once (thunder_ext.executor_policies); the walk itself orders only.
        self.policies = policies_for(self, remat_writes)

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
        self.next_version[old.name] = (new.name, by)
        for policy in self.policies:
            policy.version_bumped(old, new)

    def storage_of(self, name: str) -> str:
        """The storage group of a stripped proxy or of any later version of one."""
        return self.version_group.get(name) or self.info.group_of(name)

    def stale_by(self, name: str) -> list[BoundSymbol]:
        """The writes that made the version ``name`` and its later versions stale, in order
        (pure renamings skipped)."""
        found = []
        while name in self.next_version:
            name, by = self.next_version[name]
            if by is not None:
                found.append(by)
        return found

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

    def stale_members(self, g: str, i: int, bit: int | None, cause, plan: Plan) -> None:
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
        for policy in self.policies:
            policy.before(i, bsym, effect, write_groups)
        cur = self.renamed(bsym)
        if effect.writes and writes_with_grad(bsym):
            self.grad_written |= write_groups
        elif effect.writes:
            self.no_grad_written |= write_groups
        if bsym.sym.id == prims.PrimIDs.GET_GRAD:
            self.grad_taken.update(p.name for p in (*bsym.flat_proxy_args, *cur.flat_proxy_args))
        my_anc = self.ancestry(cur)
        if groups:
            plan = Plan()
            for g in sorted(groups):
                if g in write_groups:
                    self.order_write(g, bsym, effect, my_anc, plan)
                else:
                    self.order_read(g, i, bsym, my_anc, plan)
            for policy in self.policies:
                policy.extend(i, bsym, effect, write_groups, plan)
            if plan:
                self.emit(plan, bsym)
            cur = self.renamed(bsym)
            if is_return(bsym) and self.no_grad_written:
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
        for policy in self.policies:
            policy.after(i, bsym, effect, write_groups)

    def grad_taken_of(self, name: str) -> bool:
        """Whether the joint trace already took the cotangent of this value (``get_grad``).

        Autodiff's split matches each ``get_grad`` argument to a forward output by name, so a
        value renamed after its ``get_grad`` would be returned under a name it cannot find."""
        return name in self.grad_taken or self.current(self.proxies[name]).name in self.grad_taken

    def note_backward_reads(self, bsym: BoundSymbol) -> None:
        # A backward read of a name that a forward write made stale may want the value the
        # forward read before the write (class 6, docs/design.md); renaming would silently read the new one.
        # If the forward read that name only after the write, the new value is the one saved.
        if bsym.sym.id == prims.PrimIDs.GET_GRAD:
            return  # a cotangent looked up by the output's name: no data read
        for p in tensor_args(bsym):
            read_at = self.first_forward_read.get(p.name, len(self.bsyms))
            for by in (*self.stale_by(p.name), self.written_through_another_name(p)):
                if by is not None and not has_tags(by, {BoundSymbolTag.BACKWARD}) and read_at < self.position.get(id(by), len(self.bsyms)):
                    self.report.backward_reads_of_forward_writes.append((by, bsym))
                    break

    def written_through_another_name(self, p: TensorProxy) -> BoundSymbol | None:
        """The last forward write into ``p``'s storage that ``p``'s current version does not reach.

        A write through a view (``a[:2].add_(1)`` after ``y = a.sin()``) renames no version of
        ``a`` until ``a`` is read again, so :meth:`stale_by` cannot see it.  Left alone, the
        backward's read of ``a`` would get a barrier after the write, and the forward/backward
        split would move the write into the backward with it."""
        lw = self.last_write.get(self.info.group_of(p))
        if lw is None or has_tags(lw.bsym, {BoundSymbolTag.BACKWARD}) or self.reaches(self.current(p), lw.bit):
            return None
        return lw.bsym

    def straight_through(self, prev: TensorProxy, out: TensorProxy, write: BoundSymbol) -> None:
        """After a write made with grad disabled, later reads of ``prev`` differentiate into ``prev``.

        In eager such a write changes the data and leaves the autograd history alone (an EMA's
        ``with torch.no_grad(): e.lerp_(p, 0.1)``, then ``e.norm()``).  Thunder's write output is
        constant for autodiff, so reading it would drop the gradient.  One barrier over ``prev``
        and the write's output ``out`` gives the storage a new version that holds the new data
        (ordered after the write) and whose gradient goes, through ``update_aliases``' identity
        VJP, to ``prev``.  :func:`strip_barriers` resolves it to ``out``.
        """
        plan = Plan(
            rename={prev.name: (prev, write)},
            witnesses=[out],
            reasons=[f"no-grad write: later reads of `{prev.name}` keep its gradient ({describe(write)})"],
        )
        self.emit(plan, write)  # after the write, which is already out
        self.grad_versions.add(self.current(prev).name)
        self.straight_versions.add(self.current(prev).name)

    def keep_grad_inputs(self, cur: BoundSymbol) -> BoundSymbol:
        """The return's ``flat_args`` keep an input's own name where its newest version is
        straight-through, or is any version of an input gradients flow through whose storage was
        written under no-grad only (through a view: ``t1 = a.reshape(3, 4)``, then a no-grad
        ``t1.mul_(0.5)``, leaves ``a`` renamed by the return's own barrier; or through
        ``detach()``, whose alias no gradient reaches, so no write through it is straight-through).

        Thunder's grad transform collects the inputs' gradients by the names in ``flat_args``;
        a newer version there would get none (plain Thunder's gradient sink: with a barrier's
        output there, every output lost its history).  Ordering the write before the return is
        then the fusion-stage pass's job, as for a dropped witness.
        """
        # The input each straight-through version is the newest version of (Thunder's own alias
        # pass already renamed flat_args to the write's output, so the name is found this way).
        newest = {}
        for x in self.inputs:
            if x in self.proxies:
                newest.setdefault(self.current(self.proxies[x]).name, []).append(self.proxies[x])

        def keep(c):
            if not isinstance(c, TensorProxy) or len(newest.get(c.name, ())) != 1:
                return c
            x = newest[c.name][0]
            g = self.storage_of(x.name)
            no_grad_only = x.name in self.differentiable and g in self.no_grad_written and g not in self.grad_written
            if c.name in self.straight_versions or no_grad_only:
                self.kept_in_flat_args.add(g)
                return x
            return c

        return _map_flat_args(cur, keep)

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

    def order_write(self, g: str, bsym: BoundSymbol, effect, my_anc: int, plan: Plan) -> None:
        """WAR/WAW: every access to ``g`` since its last write must reach this write."""
        if not writes_with_grad(bsym):
            # A no-grad write keeps the history of the name it writes (the straight-through
            # barrier).  A name that misses an earlier write with grad through another alias has
            # none of that write's history, which eager's tensor keeps (``v = t[2:]``, ``v.add_(b)``,
            # then ``t.mul_(2)`` under no-grad): a stale read, class 5.
            gw = self.last_grad_write.get(g)
            for p in effect.writes:
                if gw is not None and self.info.group_of(p) == g and p.name != gw.dest.name:
                    if not self.reaches(self.current(p), gw.bit):
                        self.report.alias_reads.append(AliasRead(gw.bsym, bsym, p, gw.dest))
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

    def order_read(self, g: str, i: int, bsym: BoundSymbol, my_anc: int, plan: Plan) -> None:
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
        # An earlier write with grad that a stale name misses is such a read too, though a later
        # write (one under no-grad) is the last: it gave the storage history the name lacks
        # (``t1 = c.reshape(3, 4)``, ``c.copy_(a)``, then ``c.mul_(2)`` under no-grad; soak 41000).
        # The last one is enough: a write is ordered after the group's earlier writes, so a name
        # that reaches it reaches them.
        gw = self.last_grad_write.get(g)
        if gw is not None and gw is not lw:
            for p in tensor_args(bsym):
                if self.info.group_of(p) == g and p.name != gw.dest.name and not self.reaches(self.current(p), gw.bit):
                    self.report.alias_reads.append(AliasRead(gw.bsym, bsym, p, gw.dest))
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
                if writes_with_grad(bsym):
                    self.last_grad_write[g] = self.last_write[g]
                self.epoch[g] = [(bit, wit, bsym)]
            else:
                self.epoch.setdefault(g, []).append((bit, _witness(bsym), bsym))
        return 1 << bit

    def check_inputs_reached(self, ret_anc: int) -> None:
        for g in self.info.input_groups:
            lw = self.last_write.get(g)
            if lw is not None and (self.current(lw.dest).name in self.straight_versions or g in self.kept_in_flat_args):
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

    def emit(
        self, plan: Plan, before: BoundSymbol, *, pin: bool = False, cut: bool = True, symbol: Symbol | None = None
    ) -> None:
        """Place ``plan``'s barrier, bound to ``symbol`` (default: the pin or the ordering symbol)."""
        if self.differentiable:
            carries = [v for v, _ in plan.rename.values() if v.name in self.grad_versions]
            if carries and len(carries) < len(plan.rename):
                # Before autodiff, one barrier links every output to every input: a name that
                # carries no gradient renamed beside one that does would carry it (an output
                # that eager gives no grad, and a backward of zeros; soak seed 62000).  So the
                # two kinds get a barrier each, and the second no witness carrying gradients.
                plain = Plan(
                    rename={k: vc for k, vc in plan.rename.items() if vc[0].name not in self.grad_versions},
                    witnesses=[w for w in plan.witnesses if w.name not in self.grad_versions],
                    reasons=plan.reasons,
                )
                self.report.dropped_witnesses += len(plan.witnesses) - len(plain.witnesses)
                plan = Plan(
                    rename={k: vc for k, vc in plan.rename.items() if vc[0].name in self.grad_versions},
                    witnesses=plan.witnesses,
                    reasons=plan.reasons,
                )
                self.emit(plain, before, pin=pin, cut=cut, symbol=symbol)
        witnesses = list(plan.witnesses)
        for policy in self.policies:
            witnesses = [policy.witness(w) for w in witnesses]
        kept = [w for w in witnesses if not self.dropped(w)]
        self.report.dropped_witnesses += len(witnesses) - len(kept)
        if not plan.rename and not kept:
            return
        if symbol is None:
            symbol = self.options.symbols.pin if pin else self.options.symbols.ordering
        barrier, outs = self.barrier(symbol, [v for v, _ in plan.rename.values()], kept, before, plan.reasons)
        b_anc = self.ancestry(barrier)
        backward = in_backward(before)
        for (v, cause), new in zip(plan.rename.values(), outs):
            self.bump(v, new, cause)
            if backward:
                self.backward_renamed[new.name] = v
            if v.name in self.grad_versions:  # a barrier's output carries what its input carries
                self.grad_versions.add(new.name)
        renamed = [(v, new) for (v, _), new in zip(plan.rename.values(), outs)]
        for policy in self.policies:
            policy.barrier_placed(renamed, cut=cut and pin)
        forward = not backward
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
        # Thunder's dataflow partitioner never merges a backward bsym with a forward one; a
        # barrier tagged backward that the forward returns would get a region of its own, and
        # rematerialization would recompute its inputs there, writes included.
        if in_backward(before):
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


def _pipeline(
    trace: TraceCtx, config: StageConfig, pruned: tuple[BoundSymbol, ...] = (), start: float | None = None
) -> tuple[TraceCtx, BarrierReport]:
    """The pass's steps, in order; each reads bsyms and returns new ones, the input trace untouched.

    1. strip: every barrier goes, its outputs renamed back to its inputs (:func:`strip_barriers`);
    2. dce: what only a stripped barrier read;
    3. functionalize: writes become values, written inputs get their epilogue ``copy_``
       (:mod:`thunder_ext.functionalize`); at the fusion stage, an old value of such an input that
       the backward reads is cloned where it is made (:mod:`thunder_ext.saved_values`), and where
       nvFuser runs, a clone of written storage is made a real copy and squeezing views leave its
       regions (:mod:`thunder_ext.nvfuser_forms`); before autodiff, a view autodiff computes as
       a copy is made again around the writes left in place (:mod:`thunder_ext.copied_views`);
    4. fallback barriers on what is left (:class:`_Placer`), and 5. dead in-place writes removed
       (:mod:`thunder_ext.dead_writes`), repeated until nothing is dead; where a dead write kept
       storage in place, the pipeline starts again once without it;
    6. executor policies (``config``): the remat guard, and Inductor's epilogue outside its regions;
    7. partition check: Thunder's dataflow partitioner keeps every bsym;
    8. the zero gradients autodiff binds bare get their decomposition (:mod:`thunder_ext.bare_symbols`).
    """
    from thunder_ext.bare_symbols import decompose_bare_symbols
    from thunder_ext.dead_writes import has_dead_values, remove_bsyms

    start = time.perf_counter() if start is None else start  # a restart counts the first run's time too
    stripped, previous, resolved = strip_barriers(trace.bound_symbols)  # 1
    nstripped = sum(len(v) for v in previous.values())
    if has_dead_values(stripped):  # 2
        stripped = remove_bsyms(trace, stripped, set())
    unfunctionalized = stripped
    new_trace = from_trace(trace)
    effects: dict = {}  # the effects of bsyms analysed more than once (see storage_groups)
    stripped, freport, dead_functional = _functionalize(trace, new_trace, stripped, config, effects)  # 3
    copied = None
    if config.differentiable:  # autodiff will run: its copies of views must not cross a write
        stripped, copied = replay_views_autodiff_copies(new_trace, stripped, input_names(trace), effects)
        made = frozenset(new for new, old in copied.stands_for.items() if old in config.differentiable)
        config = replace(config, differentiable=config.differentiable | made)
        stripped, rebased = replay_views_after_grad_writes(
            new_trace, stripped, input_names(trace), config.differentiable, effects
        )
        config = replace(config, differentiable=config.differentiable | rebased.stands_for.keys())
    stripped, saved = keep_old_values_for_backward(trace, new_trace, stripped, config, effects)
    stripped, clones_copied = copy_clones(
        trace, stripped, input_names(trace), config.executors, config.aliased_inputs, effects
    )
    stripped, views_unfused = unfuse_squeezing_views(trace, stripped, config.executors)
    stripped, strided_writes = copy_strided_writes_outside_nvfuser(trace, stripped, config.executors)
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
            return _pipeline(again, config, pruned=tuple(dead_in_place), start=start)
    placer, out = _apply_executor_policies(trace, options, stripped, placer, out)  # 6
    placer, out = _check_partition(trace, options, stripped, placer, out)  # 7
    out, placer.report.bare_symbols_decomposed = decompose_bare_symbols(trace, new_trace, out, config.executors)  # 8

    report = placer.report
    report.dead_writes = [*pruned, *dead_functional, *dead_in_place]
    report.functionalized = freport.rewritten if freport is not None else []
    if freport is not None:
        report.functional_inputs, report.kept_inputs = freport.functional_inputs, freport.kept_inputs
        report.kept_private_groups = freport.kept_private_groups
        report.epilogue_writes = freport.epilogue_writes
        report.histories, report.returned_inputs = freport.histories, freport.returned_inputs
        report.zero_gradient_links = freport.zero_gradient_links
    if copied is not None:
        report.copied_view_handles, report.copied_views_replayed = copied.write_handles, copied.replayed_reads
        report.views_rebased = rebased.replayed_reads
    report.stripped = nstripped
    report.saved_old_values = saved
    report.clones_copied, report.views_unfused = clones_copied, views_unfused
    report.strided_writes_copied = strided_writes
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
        config.functional_inputs, config.aliased_inputs, config.assumed_views,
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
    out = placer.run()
    keep = _not_dead_views(out)
    if len(keep) < len(out):
        placer.origin = [placer.origin[k] for k in keep]
        out = [out[k] for k in keep]
    return placer, out


def _not_dead_views(out: list[BoundSymbol]) -> list[int]:
    """Positions of ``out`` less the views nothing reads any more.

    A view the walk made again from an input's newest name (Inductor's regions) leaves the one it
    replaces unread.  Fusion must not see a dead value: rematerialization would recompute it in
    a later region from its producer, a write included, and run that write twice (remat_guard).
    Only views, which read no data; anything else the placement leaves is read or is a write.
    """
    read: set[str] = set()
    keep: list[int] = []
    for k in range(len(out) - 1, -1, -1):
        b = out[k]
        unread = not is_return(b) and not any(p.name in read for p in b.flat_proxy_outs)
        if not (unread and effect_of(b).is_view and not effect_of(b).writes):  # effect_of last: it costs most
            keep.append(k)
            read.update(p.name for p in b.flat_proxy_args)
    return keep[::-1]


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


def _guard(trace, options: PlacementOptions, stripped: list[BoundSymbol], placer: _Placer, out: list[BoundSymbol]):
    """The remat guard (``config.remat_guard``), then the final placement without gradient witnesses."""
    config = options.config
    remat: frozenset[int] = frozenset()
    if config.remat_guard:
        # (Inductor's epilogue is unfused after the guard, so the guard asks what it will unfuse.)
        # Each round pins writes no earlier round pinned, and a trace has finitely many writes:
        # the loop ends exactly at the fixed point, where every fused-read write is pinned.
        rounds = _FixedPoint("the remat guard", _write_count(placer))
        while need := unguarded_writes(out, placer.origin, placer.info.effects, options.symbols, _unfused_outs(trace, options, out)) - remat:
            rounds.next_round()
            remat = remat | need
            placer, out = _place(options, stripped, remat)
    if config.differentiable:
        # Liveness above was judged with every witness; only the final placement drops them.
        placer, out = _place(options, stripped, remat, config.differentiable)
    return placer, out


def _unfused_outs(trace, options: PlacementOptions, out: list[BoundSymbol]) -> frozenset[str]:
    """Outputs of the bsyms :func:`_unfused` would take out of every fusion region: the remat
    guard must see the regions they split (a region after Inductor's epilogue could otherwise
    recompute a write from before it, running it twice)."""
    symbols = options.symbols
    return frozenset(
        p.name for b in _unfused(trace, options, out)[0] if not is_return(b) and not symbols.fusible(b) for p in b.flat_proxy_outs
    )


def _unfused(trace, options: PlacementOptions, out: list[BoundSymbol]) -> tuple[list[BoundSymbol], int, int]:
    """Inductor's epilogue (:func:`unfuse_epilogue`) and the scatters Inductor gets wrong
    (:func:`thunder_ext.inductor_regions.unfuse_scatters`), where ``torch_compile_ex``
    runs the trace; where nvFuser does, the epilogues of dying slice writes
    (:func:`thunder_ext.nvfuser_forms.slice_epilogues_outside_nvfuser`); how many of those, and how
    many epilogue copies stay in Inductor's region (:func:`epilogue_fits_a_region`)."""
    config = options.config
    if options.symbols.inductor:
        out = unfuse_scatters(out, trace)[0]
        out = eager_overlapping_copies(out, input_names(trace))[0]
        if config.epilogue_inputs and epilogue_fits_a_region(out, config.epilogue_inputs):
            return out, 0, sum(1 for b in out if is_copy(b))  # the epilogue's, the region's only copies
        if config.epilogue_inputs:
            out = unfuse_epilogue(out, config.epilogue_inputs, config.executors, options.symbols.pin, trace)
        return out, 0, 0
    return (*slice_epilogues_outside_nvfuser(out, frozenset(config.epilogue_inputs), config.executors, trace), 0)


def _apply_executor_policies(trace, options: PlacementOptions, stripped, placer: _Placer, out):
    """Step 6."""
    placer, out = _guard(trace, options, stripped, placer, out)
    out, placer.report.slice_epilogues_unfused, placer.report.epilogues_in_region = _unfused(trace, options, out)
    return placer, _order_epilogues(options, placer, out)


def _order_epilogues(options: PlacementOptions, placer: _Placer, out: list[BoundSymbol]) -> list[BoundSymbol]:
    """nvFuser under dataflow fusion: the epilogue after every recomputable read of what it writes
    (:func:`thunder_ext.nvfuser_forms.epilogues_after_derived_reads`)."""
    config = options.config
    if not config.dataflow:
        return out
    epilogue_inputs = frozenset(config.epilogue_inputs)

    def barrier(members, witnesses, before):
        reason = "nvFuser: the epilogue after every value a region could recompute from what it writes"
        return placer.barrier(options.symbols.pin, members, witnesses, before, [reason])

    out, ordered = epilogues_after_derived_reads(out, epilogue_inputs, config.executors, barrier)
    placer.report.epilogues_ordered = ordered
    return out


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
