"""``torch_compile_ex``'s regions: where the walk ends them, and the epilogue kept out of them.

Inductor gets some in-place programs wrong inside one region although data edges order
everything (torch 2.11; the families are in :meth:`InductorRegions.split_for_torch_compile`).  This policy of
the barrier walk (:mod:`thunder_ext.barrier_plan`) ends a region there with one unfused
barrier (a *cut*) and routes through it every value the later regions need, so that no region
reads a value from before the cut directly.  After the walk, :func:`unfuse_epilogue` binds
the epilogue ``copy_``s of written inputs to the torch executor, outside every region, unless
the forward computes values only (:func:`epilogue_fits_a_region`).

Worked example: the fusion stage of ``rv.copy_(rm); rm += rv`` (``rm``, ``rv`` running stats
that ``batch_norm`` later updates, so kept in place; ``a`` requires grad), condensed::

    before                                   after
    t40 = prims.copy_(rm, rv)                t40 = prims.copy_(rm, rv)
    t42 = ltorch.add(rm, t40)                # thunder_ext: torch.compile: `t42 = add` uses the source of `t40 = copy_`; ...
    t44 = prims.copy_(t42, rm)               (t148, t149) = update_aliases((rm, t40))
                                             t42 = ltorch.add(t148, t149)
                                             t44 = prims.copy_(t42, t148)

The barrier is unfused, so ``copy_`` and ``add`` land in different regions; in one region
Inductor aliased ``rv``'s new value to ``rm`` and the add reached ``rv`` too.

Both are chosen only when ``torch_compile_ex`` claims the trace (``BarrierSymbols.inductor``);
docs/workarounds.md says which tests still need them.

Invariant: a cut only adds a barrier and moves views (which read no data) after it; it never
moves an access to storage.
"""

from __future__ import annotations

from typing import NamedTuple

from thunder.core import prims
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, has_tags
from thunder.core.trace import TraceCtx, tracectx

from thunder_ext.alias_analysis import input_names, view_chain
from thunder_ext.barrier_plan import Plan, WalkPolicy
from thunder_ext.functionalize import _claim
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
)

# The ops functionalize turns a partial write into (a setitem; a scatter through a slice).
SLICE_WRITES = frozenset({"setitem", "copy_with_setitem", "index_copy"})

# In-place writes Inductor lowers to a scatter into the input (with ``setitem_`` and writes
# through a smaller view, what ``writes_part`` finds): the sixth family.
INDEXED_WRITES = frozenset({"index_copy_", "index_add_", "index_put_"})

# Ops that copy a whole tensor into new storage, which Inductor may remove (the sixth family);
# ``contiguous`` copies a non-contiguous input, and plain torch.compile loses that copy the same way.
WHOLE_COPIES = frozenset({"clone", "contiguous"})

# Writes Inductor fuses with an earlier read of their input into one loop that, for an input not
# laid out contiguously, reads elements it has already written (the eighth family): ``lerp`` by a
# number, as ``lerp_`` or as the value a ``copy_`` writes back.
READ_FUSED_WRITES = frozenset({"lerp_", "lerp"})

# Ops Inductor calls as library kernels (extern kernels) rather than generating code for: the
# fifth family of ``InductorRegions.split_for_torch_compile``.
EXTERN_KERNEL_READS = frozenset({
    "matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "einsum",
    "conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
})  # fmt: skip


class _RegionEnd(NamedTuple):
    """Where a ``torch_compile_ex`` region must end (see ``InductorRegions.split_for_torch_compile``)."""

    who: BoundSymbol  # the access that makes the region unsafe to extend
    witness: TensorProxy  # an output of ``who`` the ending barrier consumes
    why: str
    # What ends it: "use" (any use of the group), "write" (a write using the group), or
    # "write_into" (a write into the group).
    trigger: str
    partial: bool = False  # ``who`` writes only part of a tensor (see ``InductorRegions.writes_part``)
    operands: frozenset = frozenset()  # an extern kernel's other operands, by storage group ("extern_write_into")


class InductorRegions(WalkPolicy):
    """The walk's policy under ``torch_compile_ex``: region ends, and the cuts that make them.

    State, reset at each cut: ``region_ends`` (group, trigger) -> where the next such access
    starts a new region; ``derived_from``/``derived_names``, which input groups' reads a value
    derives from; ``cut_origin``, a name (any version) -> the cut output it is a version of and
    its group; ``region_inputs_used`` and ``region_written`` per group since the cut.
    ``routed``: names (any version) whose value a cut routed across it.
    """

    def __init__(self, walk) -> None:
        super().__init__(walk)
        self.region_ends: dict[tuple[str, str], _RegionEnd] = {}
        self.derived_from: dict[str, frozenset[str]] = {}
        self.derived_names: dict[str, list[str]] = {}
        self.routed: set[str] = set()
        self.cut_origin: dict[str, tuple[str, str]] = {}
        self.region_inputs_used: dict[str, set[str]] = {}
        self.region_written: set[str] = set()
        # Seventh family, since the last cut: whether a functional partial write was seen, and
        # the inputs written (group -> the write).
        self.region_scatters = False
        self.region_inputs_written: dict[str, BoundSymbol] = {}
        self._all_members: dict[str, list[str]] | None = None
        self._group_numel: dict[str, int] | None = None  # group -> elements of its largest member
        self._uses: dict[str, int] | None = None  # name -> how many bsyms read it (each return slot counts)
        self._input_groups: set[str] | None = None
        self._replayable: dict[str, tuple | None] = {}
        self._backward_reads: set[str] | None = None
        # A view of an input (any version) -> the input's name it was made from.
        self.made_from: dict[str, str] = {}
        self.replayed_from: dict[str, str] = {}  # a view made again -> the stripped name it stands for

    # -- hooks ----------------------------------------------------------------------------------

    def before(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        self.split_for_torch_compile(i, bsym, effect, write_groups)
        self.replay_views_of_renamed_inputs(bsym)

    def after(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        self.note_view_made(bsym, effect)
        self.note_region_ends(bsym, effect, write_groups)
        self.rename_input_written_through_view(bsym, effect)

    def rename_input_written_through_view(self, bsym: BoundSymbol, effect) -> None:
        """At the fusion stage, a write through a view of an input that requires grad renames the
        input right after it, with a barrier that the write's region fuses.

        Otherwise a later reader of the input (the return, for one) is ordered after the write
        through the written view, which then leaves the region as an output, and Inductor refuses
        a graph returning a view of a grad-requiring input written in place: "A view was created
        in no_grad mode and its base ... has been modified inplace" (torch 2.11; plain Thunder
        returns the renamed input instead).  The input's new name is that input to Inductor.
        """
        walk = self.walk
        if walk.options.config.executors is None or has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            return  # before autodiff a rename would hide the input from Thunder's gradient collection
        plan = Plan()
        for o, a in effect.aliases:
            if not any(a is w for w in effect.writes):
                continue
            g = walk.info.group_of(a)
            for name in sorted(walk.info.groups.members().get(g, ())):
                x = walk.proxies.get(name)
                if name not in walk.inputs or x is None or not x.requires_grad:
                    continue
                v = walk.current(x)
                if v.name != o.name and v.name not in plan.rename:  # o is not the whole input
                    plan.rename[v.name] = (v, bsym)
                    plan.witnesses.append(o)
                    plan.reasons.append(f"torch.compile: {describe(bsym)} writes a view of `{name}`, which requires grad")
        if not plan:
            return
        symbols = walk.options.symbols
        if symbols.ordering is not symbols.pin:
            walk.emit(plan, bsym)
            return
        # Ordering barriers are not fused here (consecutive fusion of a joint trace, see
        # remat_guard.barrier_symbols), but the rename must be, or the region returns the written
        # view.  An unfused barrier right after it reads the renamed input, so the region still
        # ends there, as it did at the unfused rename.
        walk.emit(plan, bsym, symbol=prims.update_aliases)
        renamed = [walk.current(v) for v, _ in plan.rename.values()]
        walk.emit(Plan(rename={r.name: (r, None) for r in renamed}, reasons=["torch.compile: the region ends after the rename"]), bsym)

    # -- views of inputs: made again, never handed from region to region -----------------------

    def replay_views_of_renamed_inputs(self, bsym: BoundSymbol) -> None:
        """An access through a view of an input, made before the input was last renamed, goes
        through the view made again from the input's new name.

        Otherwise an earlier region hands the view to this one.  Where the input requires grad,
        AOT autograd refuses a region
        returning a view of a grad-requiring input written in place ("A view was created in
        no_grad mode ..."): ``t0 = a[:2]``, then ``t0.add_(t0)`` and ``t0.lerp_(a[:2], 0.1)``
        under no-grad, plain Thunder right.  Such views never cross a cut either
        (:meth:`replayable`); the input does.  A view reads no data: made again from the new
        name, it is ordered after every write that name is ordered after.

        Where it does not, the region receives the view and the input as two inputs that share
        storage, and AOT autograd can get a region wrong that returns a view of one and writes
        the other: ``t0 = rv[1:]``, ``batch_norm`` updating ``rv``, ``a[0] = rm`` (unfused), then
        ``t0[0]`` returned and ``rv`` updated again came back with the first update's value
        (soak seed 56000, no grad, consecutive; plain Thunder's one region is right).

        The joint trace's ``get_grad`` and the return are such accesses too: a view returned
        after a no-grad write into its input (``t0 = a.t()`` or ``a[1:]``, then ``a.add_(1.5)``
        or ``t0.mul_(1.5)`` under no-grad, ``return t0``; soak seeds 51000 and 54000, where
        plain Thunder crashes).  Autodiff's split matches each ``get_grad`` to a forward output
        by name, and the ``get_grad`` comes first: it reads the view made again, so does the
        return after it (``grad_taken_of`` keeps the name
        from then on), and the backward, built already, never reads the forward's view."""
        walk = self.walk
        backward = has_tags(bsym, {BoundSymbolTag.BACKWARD}) and bsym.sym.id != prims.PrimIDs.GET_GRAD
        if walk.options.config.executors is None or backward:
            return
        for p in tensor_args(bsym):
            found = self.replayable(p.name)
            if found is None or walk.grad_taken_of(p.name):
                continue
            x, chain = found
            base = walk.current(x)
            cur = walk.current(p)
            if self.made_from.get(cur.name, self.made_from.get(tensor_outs(chain[0])[0].name)) == base.name:
                continue  # made from the input's newest name: this region's own
            start = len(walk.out)
            with tracectx(walk.options.new_trace):
                for view in chain:
                    out = view.flat_proxy_outs[0]
                    new = TensorProxy(like=out)
                    made = view.from_bsym_swap_proxies({variableify(view.args[0]): base, variableify(out): new})
                    walk.out.append(made)
                    walk.origin.append(-1)  # no stripped bsym of its own, as a barrier
                    walk.anc[new.name] = walk.ancestry(made)
                    walk.defined.add(new.name)
                    walk.touched_forward.add(new.name)
                    base = new
            if is_return(bsym):
                self.move_before_backward(start, walk.current(x))
            self.made_from[base.name] = walk.current(x).name
            self.replayed_from[base.name] = p.name
            walk.report.views_made_again += 1
            walk.bump(cur, base, None)

    def move_before_backward(self, start: int, base: TensorProxy) -> None:
        """Move the views made again for the return (``walk.out[start:]``) before the joint
        trace's backward, where ``base`` is defined by then.

        Made at the return, they come after the backward's bsyms, and a consecutive
        ``torch_compile_ex`` region can then take both: autodiff's split puts the region, which
        makes a forward output, in the forward, and the forward reads the ``get_grad`` outputs it
        never defines (``t4 = rv[::2]`` returned after ``batch_norm`` updated ``rv``, beside an
        output with a gradient; soak seed 64000, plain Thunder right)."""
        walk = self.walk
        first = next(
            (j for j in range(start) if walk.out[j].sym.id == prims.PrimIDs.GET_GRAD
             or has_tags(walk.out[j], {BoundSymbolTag.BACKWARD})),
            None,
        )  # fmt: skip
        if first is None:
            return
        defined = {p.name for b in walk.out[:first] for p in b.flat_proxy_outs} | set(walk.options.inputs)
        if base.name not in defined:
            return
        order = [*range(first), *range(start, len(walk.out)), *range(first, start)]
        walk.out = [walk.out[j] for j in order]
        walk.origin = [walk.origin[j] for j in order]

    def leave_views_to_replay(self, plan: Plan) -> None:
        """Leave out of ``plan``'s renames the views of an input that ``plan`` renames too.

        Each is made again from the input's new name at its next forward access
        (:meth:`replay_views_of_renamed_inputs`), so its own rename orders nothing, and reads the
        view as an output of the region before: where that view was written in place and its
        input requires grad, AOT autograd refuses the region ("A view was created in no_grad mode
        ..."): ``a.add_(a)``, ``t0 = a[1:]``, ``t0.add_(t0)`` under no-grad, both returned, with a
        remat pin after the second write (soak seed 61000; plain Thunder crashes too).

        A view the backward reads keeps its rename: the backward reads it as written, and the pin
        is what keeps the write from being recomputed there."""
        walk = self.walk
        if self._backward_reads is None:
            self._backward_reads = {
                p.name for b in walk.bsyms
                if has_tags(b, {BoundSymbolTag.BACKWARD}) and b.sym.id != prims.PrimIDs.GET_GRAD
                for p in tensor_args(b)
            }  # fmt: skip
        for name in list(plan.rename):
            found = self.replayable(name)
            if (
                found is not None
                and walk.current(found[0]).name in plan.rename
                and name not in self._backward_reads
                and not walk.grad_taken_of(name)
            ):
                del plan.rename[name]

    def stripped_name(self, name: str) -> str:
        return self.replayed_from.get(name, name)

    def replayable(self, name: str) -> tuple[TensorProxy, list[BoundSymbol]] | None:
        """(the input, the views from it to ``name``) where ``name`` is a forward view (through
        in-place ops that return what they write) of an input; else None."""
        walk = self.walk
        if name not in self._replayable:
            root, chain = view_chain(name, walk.bsyms, walk.info.effects, walk.made_at, walk.inputs)
            x = walk.proxies.get(root) if root is not None else None
            ok = x is not None and not any(has_tags(b, {BoundSymbolTag.BACKWARD}) for b in chain)
            self._replayable[name] = (x, chain) if ok else None
        return self._replayable[name]

    def note_view_made(self, bsym: BoundSymbol, effect) -> None:
        """Which name of its input a view of an input was made from."""
        if not effect.is_view or has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            return
        walk = self.walk
        for o, _ in effect.aliases:
            found = self.replayable(o.name)
            if found is not None and len(found[1]) == 1:  # made from the input, or a write's output that is it
                self.made_from.setdefault(o.name, walk.current(found[0]).name)

    def witness(self, w: TensorProxy) -> TensorProxy:
        # A witness a cut has routed is read through its new name, or the barrier would bring a
        # direct edge across the cut.
        walk = self.walk
        found = self.replayable(self.stripped_name(w.name))
        if found is not None:
            # A view of an input is never handed on (replay_views_of_renamed_inputs):
            # the input's newest name witnesses it where that name is ordered after it.
            x = walk.current(found[0])
            mine, theirs = walk.anc.get(w.name, 0), walk.anc.get(x.name, 0)
            if x.name != w.name and mine & ~theirs == 0:
                return x
        return walk.current(w) if w.name in self.routed else w

    def version_bumped(self, old: TensorProxy, new: TensorProxy) -> None:
        if old.name in self.cut_origin:
            self.cut_origin[new.name] = self.cut_origin[old.name]

    def barrier_placed(self, renamed: list[tuple[TensorProxy, TensorProxy]], *, cut: bool) -> None:
        if not cut:
            return
        # A new region starts after this barrier: its outputs are the region's inputs.
        self.cut_origin, self.region_inputs_used, self.region_written = {}, {}, set()
        self.region_scatters, self.region_inputs_written = False, {}
        for v, new in renamed:
            self.cut_origin[new.name] = (new.name, self.walk.storage_of(v.name))

    # -- where regions end ----------------------------------------------------------------------

    def split_for_torch_compile(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        """After a ``copy_`` out of a group, the group's next use goes to a new fusion region
        (torch.compile); after a write into an input, the next write that uses any input it read
        or wrote does; after a read of an input, the next write into that input does; after a
        write into part of an input, its next copy does.

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

        The fourth family: a value read from an input, the input written, then that value
        written: ``t = c.clone(); c.add_(0.5); t[0] = rv`` leaves ``t`` with ``c``'s new values
        (any write into ``c``, whole or in part; ``t[1:].add_(1)`` as the later write too; plain
        ``torch.compile``, torch 2.11).  It reaches the transform's traces where ``c`` is kept in
        place and ``t`` is a value (``b.copy_(c); with torch.no_grad(): c.add_(0.5); b[0] = rv``,
        ``c`` requiring grad: soak seed 38000, where plain Thunder is right), so such a later write, in
        place or a functional partial write, starts a new region.

        The fifth family: an extern kernel (a matmul, :data:`EXTERN_KERNEL_READS`) reads an input
        and a value, the input is then written whole with that value, and the value is used
        again: ``t0 = x * 2; t1 = w @ t0.t(); w.sub_(t0); t2 = torch.where(m, 0.5, t0); return
        t1, t2`` returns a wrong ``t1`` (``t0[1:] = 0.5`` on a clone as the later use too; plain
        ``torch.compile``, torch 2.11).  It reaches the transform's traces where ``w`` is kept in
        place because an alias of it that may be a copy (``w.contiguous()``) is read after the
        write.  A write that does not use the kernel's other operand (``w.add_(1)``), a reduction
        or an elementwise op as the reader, and a value used by nothing else come out right, so
        only a write into the input that uses such an operand starts a new region.

        The sixth family: an input written in part (a slice, ``setitem_``, ``index_copy_``,
        ``index_add_``, ``index_put_``), then cloned: Inductor removes the clone and hands out the
        input itself, so a later write into the input reaches the copy (``x[0] = -0.5; t =
        x.clone(); x.mul_(2); return t``, plain ``torch.compile`` too, torch 2.11; upstream
        pytorch/pytorch#195451).  It reaches the transform's traces where the input is kept in
        place (written through ``contiguous``) and a value snapshots it (``rm.copy_(t0)`` makes
        ``rm``'s value a clone: soak seed 72000, where plain Thunder is right), so such a clone
        starts a new region.

        The seventh family: a functional partial write used as a value (``t0 = c.clone(); t0[1:]
        = rv``, or ``copy_with_setitem``) and a whole write into an input in one region, in either
        order, then the input used: ``b.mul_(t0); return t0 + 1, b.mean(0)`` returns the mean of ``b *
        t0 * t0`` (Inductor recomputes the written value from ``b`` after writing it;
        ``b.mul_(c)`` as the write with ``t0 + b, b.mean(0)`` read after, too; plain
        ``torch.compile``, torch 2.11).  It reaches the transform's traces where ``b`` is kept in
        place (a leaf that requires grad, written under ``torch.no_grad()``) and a write to
        another input became a functional partial write (soak seed 84001, where plain Thunder
        is right), so the input's next use starts a new region.  Without the partial write
        (``t0 = c * 2``) the same region comes out right, and so does an elementwise read of
        ``b`` alone, but the rule does not rely on which reads Inductor recomputes.

        The eighth family: an input read (a reduction, a matmul, a view's elements), then written
        whole by ``lerp`` with a number weight, the read's value used after: for an input not
        laid out contiguously (strides ``(1, 4)`` for a ``(4, 3)`` tensor), ``t = a.sum(0);
        a.lerp_(b, 0.1); return t`` returns the sum of the new ``a`` (plain ``torch.compile``
        too, torch 2.11: one fused loop reads elements it has already written).  ``lerp`` by a
        tensor, ``add_``, ``mul_``, ``copy_`` and an elementwise read come out right.  Strides
        are not in the trace, so such a write ends the region for every layout (soak seed 90000,
        the first with transposed inputs; plain Thunder crashes or is wrong there).

        The ninth family: a clone of an input written in part as a value, then the input written
        whole, the partial write's value used after: ``t = rv.clone(); t[1:] = 0.5; rv.zero_();
        return t`` returns zeros (plain ``torch.compile`` too, torch 2.11: the partial write goes
        into the clone's buffer in place, and the clone is the input itself).  ``return t * 1``
        comes out right, but the rule does not rely on how the value is used.  It reaches the
        transform's traces where the input is kept in place (``rv.contiguous()`` read after the
        write) and another input's new value is that partial write (``rm.copy_(rv); rm[1:] =
        0.5``: soak seeds 86000 and 86001, where plain Thunder is right).

        The tenth family: an input read twice by one op (``b * b``, ``b + b``, ``b / (b.abs() +
        1)``, ``a.addcmul_(b, b)``, ``a.addcdiv_(b, b.abs() + 1)``), written into another input,
        then written itself, the read's value used after: ``a.add_(b * b); b.add_(a)`` leaves a
        wrong ``b`` when ``b`` is transposed (plain ``torch.compile`` too, torch 2.11; soak seed
        92000, where ThunderFX hands the transform ``addcdiv_`` decomposed).  One read (``b * 2``,
        ``b.sin()``, ``b.abs()``) comes out right, and so does a region that writes no other input
        first (``t0 = b + b; b.sub_(t0)``, or ``a.add_(b * b)`` after it).  Where another input was
        written in the region, the write into the read input ends it, for every layout.

        The eleventh family: an input read elementwise, the read's value used twice, and the input
        written whole from itself and another tensor: ``t = b.neg(); b.add_(a); return t,
        t.sin()`` returns a ``t`` of the new ``b`` when ``a`` is transposed and ``b`` is not, or
        when ``a`` broadcasts (``b.add_(a.sum(0))``, any layout); plain ``torch.compile`` too,
        torch 2.11.  Inductor's C++ kernel runs the write's loop (tiled for ``a``'s strides)
        before the loop that reads ``b``.  A write from ``b`` alone (``b.copy_(b.sin())``), from
        ``a`` alone, or by a number comes out right, and so does a read used once (``before =
        rm.cos()`` returned, then ``batch_norm`` updating ``rm``: one region, as plain
        Thunder's).  Strides are not in the trace, so where a value whose loop reads the input
        itself (not through a matmul's result: ``power_iteration`` keeps its one region) has two
        uses, one after the write, and the write reads another tensor, the write ends the region
        for every layout.  It reaches the transform's traces where ``b`` is kept in place (a leaf
        written under ``torch.no_grad()``: soak seed 101000), and where ``b``'s write is a value
        whose epilogue ``copy_`` would stay in the region; there the cut moves the copy after
        the region, and the barrier, ordering nothing then, goes (``final_barriers``).

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
        used = {self.walk.info.group_of(p) for p in tensor_args(bsym)}
        touched = sorted(
            {g for g in used if (g, "use") in self.region_ends or self.write_after_write(g, bsym, effect, write_groups)}
            | {g for g in write_groups if (g, "write_into") in self.region_ends and self.read_used_after(g, i)
               and (self.writes_part_of(g, bsym, effect) or self.fuses_with_the_read(bsym) or self.scatters_a_read(g, i)
                    or (self.writes_with_another_tensor(g, bsym) and self.read_used_twice(g, i)))}
            | {g for g in self.rewritten_reads(bsym, effect) if (g, "derived_write") in self.region_ends}
            | {g for g in write_groups if (g, "fused_read") in self.region_ends and self.read_used_after(g, i)
               and any(h != g for h in self.region_inputs_written)}
            | {g for g in write_groups if self.writes_an_extern_kernels_operands(g, i, bsym)}
            | {g for g in used if (g, "copy") in self.region_ends and str(bsym.sym.name) in WHOLE_COPIES}
            | aliased
        )
        if not touched:
            return
        plan = Plan()
        if aliased:
            plan.reasons.append(f"torch.compile: {describe(bsym)} would make one region write an input aliased by another of its inputs")
        for g in touched:
            for m in self.all_members().get(g, ()):
                if m in self.walk.defined and self.walk.last_use.get(m, -1) >= i and not self.walk.grad_taken_of(m):
                    self.route(m, plan)
        # One barrier ends the region for everything pending: after it a new region starts.
        for end in {(id(e.who), e.why): e for e in self.region_ends.values()}.values():
            plan.witnesses.append(end.witness)
            plan.reasons.append(f"torch.compile: {describe(bsym)} {end.why} {describe(end.who)}")
        self.cross_cut(i, bsym, plan)

    def cross_cut(self, i: int, bsym: BoundSymbol, plan: Plan) -> None:
        """Emit ``plan`` as the unfused barrier before ``bsym`` at which a new ``torch_compile_ex``
        region starts, and route through it every value the regions after it still need."""
        self.region_ends.clear()
        self.derived_from.clear()
        self.derived_names.clear()
        self.region_scatters, self.region_inputs_written = False, {}
        for key, (v, _) in list(plan.rename.items()):  # a caller's plan (a remat pin) may hold views
            if self.replayable(self.stripped_name(v.name)) is not None:
                del plan.rename[key]
                self.route(self.stripped_name(v.name), plan)
        # A view first used after the cut moves after it instead of crossing it (see deferred_views).
        deferred = self.deferred_views(i, plan)
        # Every other value still needed crosses the cut through this barrier too: a region
        # after it then has no direct edge from one before it, so Thunder's rematerialization
        # cannot recompute such a value there from an input the write has since changed.
        for m, p in self.walk.proxies.items():  # trace order: the barrier's text is stable
            if m in deferred:
                continue
            if m in self.walk.defined and m not in self.walk.inputs and self.walk.last_use.get(m, -1) >= i and not self.walk.grad_taken_of(m):
                self.route(m, plan)
        # So do the witnesses of accesses a later barrier may still have to order.
        for accesses in self.walk.epoch.values():
            for _, wit, _ in accesses:
                if wit is not None and wit.name not in self.walk.inputs and not self.walk.grad_taken_of(wit.name):
                    if self.replayable(wit.name) is None:
                        v = self.walk.current(wit)
                        plan.rename.setdefault(v.name, (v, None))
                        self.routed.add(wit.name)
                    else:
                        self.route(wit.name, plan)
        # By the names they are recorded under too: a witness may be an older name of a
        # version an earlier region end already renamed.
        self.routed.update(plan.rename)
        self.walk.emit(plan, bsym, pin=True)
        self.move_after_cut(deferred)

    def route(self, m: str, plan: Plan) -> None:
        """``m`` crosses the cut through its barrier; a view of an input does not:
        the input does, and the view is made again after the cut from its new name
        (:meth:`replay_views_of_renamed_inputs`)."""
        found = self.replayable(self.stripped_name(m))
        if found is not None:
            m = found[0].name
        v = self.walk.current(self.walk.proxies[m])
        plan.rename.setdefault(v.name, (v, None))
        self.routed.add(m)

    def deferred_views(self, i: int, plan: Plan) -> dict[str, int]:
        """Views made before the cut at ``i`` and first used at or after it: name -> output position.

        Routed across the cut, such a view of an input reaches the next region as a second input
        aliasing the first, and AOT autograd's synthetic base fails when the region writes one
        of them (``t2 = a[:2]; <cut>; a.index_copy_(0, idx, t2)``: ``create_synthetic_base_metadata``,
        torch 2.11).  Made after the cut instead, it is computed inside the region from its base.
        A view reads no data, so where it is made orders nothing."""
        out: dict[str, int] = {}
        candidates = {k for m, k in self.walk.made_at.items() if k < i and m in self.walk.defined and self.walk.last_use.get(m, -1) >= i}
        if not candidates:
            return out
        witnesses = {w.name for accesses in self.walk.epoch.values() for _, w, _ in accesses if w is not None}
        read_so_far: set[str] | None = None  # names the output already reads (barriers included)
        for k in sorted(candidates):
            b, e = self.walk.bsyms[k], self.walk.info.effects[k]
            if not e.is_view or e.writes or view_kind(b) != "view" or has_tags(b, {BoundSymbolTag.BACKWARD}):
                continue
            names = [o.name for o in b.flat_proxy_outs]
            # Every output moves with the bsym: none may be read before the cut (a barrier
            # included), renamed, pending as a witness, or already differentiated.
            if any(
                self.walk.first_use.get(n, i) < i or n in witnesses or n in plan.rename or n in self.walk.inputs
                or (n in self.walk.proxies and (self.walk.current(self.walk.proxies[n]).name != n or self.walk.grad_taken_of(n)))
                for n in names
            ):
                continue
            if read_so_far is None:
                read_so_far = {p.name for o in self.walk.out for p in o.flat_proxy_args}
            if read_so_far.intersection(names):
                continue
            out.update((n, k) for n in names)
        return out

    def move_after_cut(self, deferred: dict[str, int]) -> None:
        """Move the walk's output bsyms that make ``deferred`` views to its end, on current names."""
        if not deferred:
            return
        walk = self.walk
        ks = set(deferred.values())
        keep = [(b, j) for b, j in zip(walk.out, walk.origin) if j not in ks]
        walk.out, walk.origin = [b for b, _ in keep], [j for _, j in keep]
        for k in sorted(ks):
            cur = walk.renamed(walk.bsyms[k])
            anc = walk.ancestry(cur)
            for o in cur.flat_proxy_outs:
                walk.anc[o.name] = anc
            walk.out.append(cur)
            walk.origin.append(k)

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
            o = self.cut_origin.get(self.walk.current(p).name)
            if o is not None:
                mine.setdefault(o[1], set()).add(o[0])
        return mine

    def note_region_inputs(self, bsym: BoundSymbol, write_groups: set[str]) -> None:
        if not self.cut_origin:
            return
        for g, names in self.region_inputs_of(bsym).items():
            self.region_inputs_used.setdefault(g, set()).update(names)
        self.region_written |= write_groups

    def read_used_after(self, g: str, i: int) -> bool:
        """Whether a value derived from a read of input ``g`` in this region is used after bsym ``i``.

        Only then can Inductor recompute the read after the write; the reads inside a write's
        own decomposition (``x.view(-1)[::2].mul_(2)`` reshapes and multiplies ``x``) feed
        that write alone."""
        return any(self.walk.last_use.get(n, -1) > i for n in self.derived_names.get(g, ()))

    def fuses_with_the_read(self, bsym: BoundSymbol) -> bool:
        """Whether ``bsym`` is a write Inductor fuses with an earlier read of its input into one
        loop (:data:`READ_FUSED_WRITES`, a number weight): ``lerp_``, or a ``copy_`` of a ``lerp``
        (the eighth family of :meth:`split_for_torch_compile`)."""
        bsym = self.value_op(bsym)
        if str(bsym.sym.name) not in READ_FUSED_WRITES:
            return False
        weight = bsym.args[2] if len(bsym.args) > 2 else bsym.kwargs.get("weight")
        return not isinstance(weight, TensorProxy)

    def writes_with_another_tensor(self, g: str, bsym: BoundSymbol) -> bool:
        """Whether the write ``bsym`` into input ``g`` computes its value from a tensor other than
        ``g`` and what was read from ``g`` alone (the eleventh family of
        :meth:`split_for_torch_compile`); for a ``copy_``, the op that made its source."""
        group_of = self.walk.info.group_of
        return any(
            group_of(p) != g and self.derived_from.get(p.name) != frozenset({g}) for p in tensor_args(self.value_op(bsym))
        )

    def value_op(self, write: BoundSymbol) -> BoundSymbol:
        """The op that computes what ``write`` stores: for a ``copy_``, the op of this walk that
        made its source (where there is one); else the write itself."""
        if is_copy(write):
            return self.maker(tensor_args(write)[0].name) or write
        return write

    def read_used_twice(self, g: str, i: int) -> bool:
        """Whether a value read from input ``g`` in this region, used after bsym ``i``, has two uses
        or more (two ops, or an op and the return): Inductor then computes it in a loop of its own
        (the eleventh family of :meth:`split_for_torch_compile`)."""
        if self._uses is None:  # once per pass, as _group_numel
            self._uses = {}
            for b in self.walk.bsyms:
                names = [p.name for p in b.flat_proxy_args]
                for n in names if is_return(b) else set(names):
                    self._uses[n] = self._uses.get(n, 0) + 1
        return any(
            self.walk.last_use.get(n, -1) > i and self._uses.get(n, 0) >= 2 and self.loops_read(n, g)
            for n in self.derived_names.get(g, ())
        )

    def loops_read(self, name: str, g: str) -> bool:
        """Whether Inductor's loop for ``name`` may read input ``g`` itself: ``name`` is made from
        ``g`` by ops that each compute in a loop, none of them a write (whose output is the
        input's storage) or an extern kernel (a library call, :data:`EXTERN_KERNEL_READS`,
        whose result is a buffer of its own that later loops read instead of ``g``)."""
        group_of = self.walk.info.group_of
        stack, seen = [name], set()
        while stack:
            n = stack.pop()
            made = self.maker(n)
            if n in seen or made is None or effect_of(made).writes or str(made.sym.name) in EXTERN_KERNEL_READS:
                continue
            seen.add(n)
            for p in tensor_args(made):
                if group_of(p) == g:
                    return True
                if g in self.derived_from.get(p.name, ()):
                    stack.append(p.name)
        return False

    def scatters_a_read(self, g: str, i: int) -> bool:
        """Whether a value read from input ``g`` in this region was written in part as a value
        (:data:`SLICE_WRITES`) and is used after bsym ``i`` (the ninth family of
        :meth:`split_for_torch_compile`)."""
        return any(self.walk.last_use.get(n, -1) > i and self.made_by_a_partial_write(n) for n in self.derived_names.get(g, ()))

    def maker(self, name: str) -> BoundSymbol | None:
        """The bsym of the walk that made ``name``, if the walk made it."""
        k = self.walk.made_at.get(name)
        return self.walk.bsyms[k] if k is not None else None

    def made_by_a_partial_write(self, name: str) -> bool:
        """Whether ``name`` is a value a functional partial write made (:data:`SLICE_WRITES`)."""
        made = self.maker(name)
        return made is not None and str(made.sym.name) in SLICE_WRITES

    def writes_an_extern_kernels_operands(self, g: str, i: int, bsym: BoundSymbol) -> bool:
        """Whether ``bsym`` writes input ``g`` using a value that an extern kernel (a matmul) read
        together with ``g`` in this region, and that kernel's result is used after (the fifth
        family of :meth:`split_for_torch_compile`)."""
        end = self.region_ends.get((g, "extern_write_into"))
        if end is None or not self.read_used_after(g, i):
            return False
        return bool(end.operands & {self.walk.info.group_of(p) for p in tensor_args(bsym)})

    def write_after_write(self, g: str, bsym: BoundSymbol, effect, write_groups: set[str]) -> bool:
        """Whether ``bsym`` is a write that uses ``g`` after a write into an input that used it,
        with one of the two writing only part of a tensor (the second family of
        :meth:`split_for_torch_compile`)."""
        end = self.region_ends.get((g, "write"))
        return bool(write_groups) and end is not None and (end.partial or self.writes_part(bsym, effect))

    def rewritten_reads(self, bsym: BoundSymbol, effect) -> set[str]:
        """The input groups that what ``bsym`` writes was read from: its in-place destinations,
        and the tensor a functional partial write (``copy_with_setitem``, ``index_copy``) starts
        from (the fourth family of :meth:`split_for_torch_compile`)."""
        dests = list(effect.writes)
        if str(bsym.sym.name) in SLICE_WRITES:
            dests += tensor_args(bsym)[:1]
        return set().union(*(self.derived_from.get(d.name, ()) for d in dests))

    def writes_part(self, bsym: BoundSymbol, effect) -> bool:
        """Whether ``bsym`` writes only part of some tensor: ``setitem_``, or through a view with
        fewer elements than the largest member of its storage group (its base)."""
        if bsym.sym.name == "setitem_":
            return True
        if self._group_numel is None:  # once per pass: a scan per write would be quadratic on loops
            self._group_numel = {}
            for name, p in self.walk.proxies.items():
                g = self.walk.info.group_of(name)
                self._group_numel[g] = max(self._group_numel.get(g, 0), p.numel)
        return any(w.numel < self._group_numel.get(self.walk.info.group_of(w), 0) for w in effect.writes)

    def copies_a_slice_write(self, bsym: BoundSymbol) -> bool:
        """A ``copy_`` of a value a partial write made (``b[1:] = t`` decomposed at the fusion stage:
        ``t32 = copy_with_setitem(b, ...); copy_(t32, b)``): in a region, Inductor treats it as the
        partial write it is (soak seed 15000: ``t2 = b.cos(); b[1:] = t1; return t2``, grad)."""
        if not is_copy(bsym):
            return False
        # An epilogue copy_ (an input whose writes became values) stays out of every region
        # (unfuse_epilogue), and on the final trace writes the slice in place (reinplace_inputs).
        if any(self.walk.info.group_of(w) == self.walk.info.group_of(n) for w in effect_of(bsym).writes for n in self.walk.options.config.epilogue_inputs if n in self.walk.proxies):
            return False
        return self.made_by_a_partial_write(tensor_args(bsym)[0].name)

    def writes_part_of(self, g: str, bsym: BoundSymbol, effect) -> bool:
        """Whether ``bsym`` writes only part of the input storage ``g`` (setitem, or through a smaller
        view, or a copy of a value a partial write made)."""
        if bsym.sym.name == "setitem_" or self.copies_a_slice_write(bsym):
            return True
        whole = max((self.walk.proxies[n].numel for n in self.walk.inputs if n in self.walk.proxies and self.walk.info.group_of(self.walk.proxies[n]) == g), default=0)
        return any(self.walk.info.group_of(w) == g and w.numel < whole for w in effect.writes)

    def note_region_ends(self, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        """Remember where a region must end (see :meth:`split_for_torch_compile`)."""
        if has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            return
        outs = tensor_outs(bsym)
        if not outs:
            return
        ends = self.region_ends
        if is_copy(bsym) or is_copy_composite(bsym):
            for p in tensor_args(bsym):
                g = self.walk.info.group_of(p)
                if g not in write_groups and not any(p is w for w in effect.writes):
                    ends[(g, "use")] = _RegionEnd(bsym, outs[0], "uses the source of", "use")
        read_inputs = {self.walk.info.group_of(p) for p in tensor_args(bsym)} & self.input_groups()
        for g in sorted(write_groups & self.input_groups()):
            if self.derived_names.get(g):  # a value read from g before this write (fourth family)
                ends.setdefault((g, "derived_write"), _RegionEnd(bsym, outs[0], "writes an input a value written later was read from:", "derived_write"))
        if write_groups & self.input_groups():
            # The inputs it reads too, not only the one it writes: `a[0] = rm; rm.mul_(0.9)` in
            # one region leaves a wrong `rm`.
            partial = self.writes_part(bsym, effect)
            for g in sorted(read_inputs):
                end = ends.get((g, "write"))
                if end is None or (partial and not end.partial):
                    ends[(g, "write")] = _RegionEnd(bsym, outs[0], "writes with an input after the write", "write", partial)
        if write_groups & self.input_groups() and (self.writes_part(bsym, effect) or str(bsym.sym.name) in INDEXED_WRITES):
            # Sixth family: a later clone of the input in this region would hand out the input.
            for g in sorted(write_groups & self.input_groups()):
                ends.setdefault((g, "copy"), _RegionEnd(bsym, outs[0], "copies an input written in part by", "copy"))
        # Seventh family: a functional partial write used as a value and a write into an input
        # in one region, in either order; the input's next use starts a new region.  A partial
        # write only copied back into its input (``rm[1:] = 0.5`` at the fusion stage) is the
        # second family's, and a cut there hands AOT autograd views it refuses (soak seed 62000).
        why = "uses an input written in a region with a functional partial write:"
        if not is_copy(bsym) and self.reads_a_partial_write(bsym):
            self.region_scatters = True
            for g, w in self.region_inputs_written.items():
                ends.setdefault((g, "use"), _RegionEnd(w, tensor_outs(w)[0], why, "use"))
        for g in sorted(write_groups & self.input_groups()):
            self.region_inputs_written.setdefault(g, bsym)
            if self.region_scatters:
                ends.setdefault((g, "use"), _RegionEnd(bsym, outs[0], why, "use"))
        # What this bsym's outputs derive from: its own reads of inputs, and what its arguments
        # derive from; a write's output is the new version of its destination, not a read of it.
        derived = set().union(*(self.derived_from.get(p.name, ()) for p in tensor_args(bsym)))
        if not (effect.is_view or effect.is_barrier or is_return(bsym)):
            for g in sorted(read_inputs - write_groups):  # sorted: stable barrier operands
                ends.setdefault((g, "write_into"), _RegionEnd(bsym, outs[0], "writes an input read by", "write_into"))
                if self.reads_twice(bsym, g):  # the tenth family
                    ends.setdefault((g, "fused_read"), _RegionEnd(bsym, outs[0], "writes an input read twice by", "fused_read"))
                derived.add(g)
                if str(bsym.sym.name) in EXTERN_KERNEL_READS:
                    others = frozenset(self.walk.info.group_of(p) for p in tensor_args(bsym)) - {g}
                    end = ends.get((g, "extern_write_into")) or _RegionEnd(
                        bsym, outs[0], "writes, with an operand of, an input read by", "extern_write_into"
                    )
                    ends[(g, "extern_write_into")] = end._replace(operands=end.operands | others)
        derived -= write_groups
        if derived:
            frozen = frozenset(derived)
            for o in outs:
                self.derived_from[o.name] = frozen
                for g in frozen:
                    self.derived_names.setdefault(g, []).append(o.name)

    def reads_twice(self, bsym: BoundSymbol, g: str) -> bool:
        """Whether two arguments of ``bsym`` are, or were computed in this region from, input ``g``."""
        group_of = self.walk.info.group_of
        return sum(group_of(p) == g or g in self.derived_from.get(p.name, ()) for p in tensor_args(bsym)) >= 2

    def reads_a_partial_write(self, bsym: BoundSymbol) -> bool:
        """Whether ``bsym`` reads a value a functional partial write made (:data:`SLICE_WRITES`)."""
        return any(self.made_by_a_partial_write(p.name) for p in tensor_args(bsym))

    def input_groups(self) -> set[str]:
        """The storage groups of the trace's inputs (what the caller can observe)."""
        if self._input_groups is None:
            self._input_groups = {self.walk.info.group_of(self.walk.proxies[n]) for n in self.walk.inputs if n in self.walk.proxies}
        return self._input_groups

    def all_members(self) -> dict[str, list[str]]:
        if self._all_members is None:
            self._all_members = self.walk.info.groups.members()
        return self._all_members


# -- after the walk: the epilogue outside every region ----------------------------------------


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
    (unfused) too, or under consecutive fusion it would make a region of its own.  Applied only
    where the epilogue does not fit a region (:func:`epilogue_fits_a_region`, the caller's test).
    """
    from thunder.executors.torchex import copy_ as torch_copy_

    if not any(getattr(ex, "name", None) == "torch" for ex in executors or ()):
        return bsyms
    out = list(bsyms)
    sources: dict[str, str] = {}  # the value an epilogue copies -> the input it copies it into
    through = through_barriers(out)
    pending: list[int] = []  # barriers seen, pinned once an epilogue copy is found before them
    for k in range(len(out) - 1, -1, -1):
        b = out[k]
        if is_return(b) or has_tags(b, {BoundSymbolTag.BACKWARD}):
            continue
        if is_barrier(b):
            pending.append(k)
            if any(through.get(a.name, a.name) in epilogue_inputs for a in tensor_args(b)):
                _pin_all(out, pending, pin)  # it orders an epilogue copy
            continue
        effect = effect_of(b)
        if (effect.is_view or view_kind(b) == "maybe") and not effect.writes:
            # A view of an epilogue's output (``b.unsqueeze(0)``, ``a.reshape(3, 4)`` returned) may
            # follow it; a reshape that copies reads the copied value, after the copy either way.
            continue
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
        first = k
        # A barrier before the first epilogue copy that orders none stays fused: it belongs to the
        # region before (InductorRegions.rename_input_written_through_view).
        _pin_all(out, pending, pin)
    if sources:
        out = _private_views_before_epilogue(out, first, epilogue_inputs, through)
        if trace is not None:
            out = _views_after_epilogue_unfused(trace, out, executors, torch_copy_.id)
    return _unfuse_dying_slice_writes(out, sources, through, trace) if trace is not None else out


def _views_after_epilogue_unfused(trace: TraceCtx, out: list[BoundSymbol], executors, copy_id) -> list[BoundSymbol]:
    """``out`` with each view left after the unfused epilogue copies (a view of a written input,
    which reads the copied value) bound to an operator executor.

    Fused, such views make a region of their own after the copies, with nothing to compute: a
    region call on every step for what is a few stride changes (``v = a[0]; a.mul_(w); return v``,
    a ``getitem`` region after the copy back into ``a``; gallery ``grad_through_view_of_input``).
    Unfused, each is one eager view call."""
    from thunder_ext.nvfuser_forms import _unfused

    first = next((k for k, b in enumerate(out) if b.sym.id == copy_id), None)
    if first is None:
        return out
    out = list(out)
    for k in range(first + 1, len(out)):
        b = out[k]
        if is_return(b) or has_tags(b, {BoundSymbolTag.BACKWARD}) or b.sym.id == copy_id:
            continue
        effect = effect_of(b)
        if effect.is_view and not effect.writes:
            out[k] = _unfused(trace, b, executors) or b
    return out


# The leaf prims a region may compute besides its epilogue and still get Inductor's write-back
# right (torch 2.11): elementwise ops, reductions, full tensors and the broadcasts and casts their
# decompositions carry (and the ``shallow_copy`` of a no-op ``to``).  Nothing else: ``clone``/``copy_`` of an input written later is what
# Inductor's ``remove_noop_ops`` turns into the input itself (pytorch/pytorch#198131), a scatter
# into an input with an epilogue is what its reinplacing writes into that input's buffer too early
# (pytorch/pytorch#198096), shape prims may be views of an input, and random or opaque ops are
# not characterised.
_VALUE_PRIMS = frozenset(
    getattr(prims.PrimIDs, n)
    for n in (
        "ABS ACOS ACOSH ADD ASIN ASINH ATAN ATAN2 ATANH BITWISE_AND BITWISE_NOT BITWISE_OR BITWISE_XOR CEIL "
        "CONVERT_ELEMENT_TYPE COS COSH DIGAMMA DIV EQ ERF ERFC ERFCINV ERFINV EXP EXP2 EXPM1 FLOOR FMOD GE GT "
        "ISFINITE LE LERP LGAMMA LOG LOG10 LOG1P LOG2 LT MAXIMUM MINIMUM MUL NDTRI NE NEG NEXTAFTER POW "
        "RECIPROCAL REMAINDER ROUND RSQRT SIGN SIGNBIT SIN SINH SQRT SUB TAN TANH TRUNC WHERE ZETA "
        "AMAX AMIN SUM PROD VAR VAR_MEAN FULL BROADCAST_IN_DIM SHALLOW_COPY"
    ).split()
)


def _pure_value(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` computes new values only: every leaf of its decomposition that touches a
    tensor is one of :data:`_VALUE_PRIMS` (no view, copy, scatter, random or in-place op).  A
    ``shallow_copy`` is what a no-op ``to`` leaves inside a decomposition (``addcmul``, ``sum``);
    an output that aliases an argument through one makes ``bsym`` an alias, refused here."""
    effect = effect_of(bsym)
    if effect.writes or effect.aliases or effect.is_view or view_kind(bsym) is not None:
        return False
    stack = [bsym]
    while stack:
        b = stack.pop()
        if b.subsymbols:
            stack.extend(b.subsymbols)
        elif (tensor_args(b) or tensor_outs(b)) and b.sym.id not in _VALUE_PRIMS:
            return False
    return True


def _unpacks(bsym: BoundSymbol) -> bool:
    """An input's unpacking at the top of the trace (``unpack_trivial``): it computes nothing."""
    return isinstance(bsym.sym.id, prims.PrimIDs) and bsym.sym.id.name.startswith("UNPACK_")


def epilogue_fits_a_region(bsyms: list[BoundSymbol], epilogue_inputs: frozenset[str]) -> bool:
    """Whether the epilogue may stay in ``torch_compile_ex``'s region, as plain Thunder's writes do.

    Inductor then stores each new value straight into its input, where otherwise the region
    returns one new tensor per written input and an eager ``copy_`` follows it (``foreach_copy_``
    after ``batched_copies``): an allocation and a call per step of an optimizer.  Only a region of
    the shape Inductor gets right: the forward computes values only (:func:`_pure_value`: plain
    SGD's and the EMA's updates), then the epilogue copies of those values into inputs that
    share no storage, then the return; no backward; and no copied value read by another op
    (SGD with momentum and Adam read their new states: below).  Every program
    :func:`unfuse_epilogue`'s docstring lists has a clone, a scatter or an opaque op before its
    epilogue, and keeps it out of the region.

    The EMA, ``r = e.sum()`` then ``e.mul_(0.9).add_(p, alpha=0.1)`` under no-grad, at the fusion
    stage and on the final trace::

        t11 = ltorch.mul(e, 0.9)                       [r, t14] = TorchCompile0(e, p)
        t13 = ltorch.add(t11, p, alpha=0.1)              # r = ltorch.sum(e, ...)
        (t15, t16) = prims.update_aliases((e, r))        # t11 = ltorch.mul(e, 0.9)
        t14 = prims.copy_(t13, t15)                      # t13 = ltorch.add(t11, p, alpha=0.1)
                                                         # ... update_aliases, t14 = copy_(t13, t15)

    where otherwise the region returns ``t13`` and a ``copy_(t13, e)`` follows it.
    """
    through = through_barriers(bsyms)
    copies: list[BoundSymbol] = []
    values: set[str] = set()  # what the region computes: the outputs of the pure values below
    for b in bsyms:
        if is_return(b) or is_barrier(b) or _unpacks(b):
            continue
        if has_tags(b, {BoundSymbolTag.BACKWARD}):
            return False
        if b.sym.id == prims.PrimIDs.COPY_ and len(b.args) >= 2 and isinstance(b.args[1], TensorProxy):
            dst = through.get(b.args[1].name, b.args[1].name)
            if dst not in epilogue_inputs or any(through.get(c.args[1].name, c.args[1].name) == dst for c in copies):
                return False
            copies.append(b)
            continue
        if copies:
            return False  # something after the epilogue
        if _pure_value(b):
            values.update(p.name for p in tensor_outs(b))
        elif tensor_args(b) or tensor_outs(b):
            return False  # not a pure value before it
    # A value copied into an input and read by another op of the region: Inductor may inline the
    # value into that op's loop, recomputed from the input, which the copy may already have
    # written there.  Seen where the op is a reduction (``a.mul_(-0.5); rm.add_(a.mean(0))``,
    # soak seed 95000) and where its loop follows other strides than the input's (``a.add_(b);
    # return b - a`` with ``b`` transposed, soak seed 97000; Adam's update with ``p`` and its
    # gradient transposed, its states not).  Torch 2.11, plain Thunder too; plain torch.compile is
    # right, applying input writes after its graph.  The strides are the caller's, so any such
    # read keeps the copies after the region.
    copied = {c.args[0].name for c in copies if isinstance(c.args[0], TensorProxy)}
    for b in bsyms:
        if any(b is c for c in copies) or is_return(b) or is_barrier(b):
            continue
        if any(p.name in copied for p in tensor_args(b)):
            return False
    # Each copied value is computed by the region: not an input (unpacked, or a barrier's name of one).
    return bool(copies) and all(
        isinstance(c.args[0], TensorProxy) and c.args[0].name in values
        and c.args[0].dtype == c.args[1].dtype and tuple(c.args[0].shape) == tuple(c.args[1].shape)
        for c in copies
    )  # fmt: skip


def _private_views_before_epilogue(
    out: list[BoundSymbol], first: int, epilogue_inputs: frozenset[str], through: dict[str, str]
) -> list[BoundSymbol]:
    """``out`` with each view after the first epilogue copy (at ``first``) that reads no storage an
    epilogue writes moved just before that copy, in order.

    A view there would start a region of its own after the unfused copies, and under consecutive
    fusion Thunder's rematerialization let that region recompute its input from the input the
    copies had just written: ``a.add_(a); t0 = a.sin(); a.sin_(); t1 = t0.sin(); t4 = t1[:2];
    t1.mul_(0.5); return t4`` (no grad) returned ``t4`` computed from the new ``a`` (soak seed
    43000).  Before the copies, the view joins the region that makes its input.  A view of a
    written input (``a.reshape(3, 4)`` returned) reads the copied value and stays after."""
    made_at = {p.name: k for k, b in enumerate(out) for p in b.flat_proxy_outs}

    def reads_epilogue_storage(name: str) -> bool:
        for _ in range(10_000):
            name = through.get(name, name)
            if name in epilogue_inputs:
                return True
            k = made_at.get(name)
            if k is None:
                return False  # a trace input no epilogue writes
            b = out[k]
            aliased = [a for o, a in effect_of(b).aliases if o.name == name]
            if aliased:
                name = aliased[0].name
            elif view_kind(b) == "maybe" and tensor_args(b):
                name = tensor_args(b)[0].name
            else:
                return False  # a value computed here: private storage
        return True  # doubt keeps the order

    before, after, moved = out[:first], [], set()
    for b in out[first:]:
        effect = effect_of(b)
        args = tensor_args(b)
        movable = (
            not is_return(b) and not is_barrier(b) and not effect.writes
            and (effect.is_view or view_kind(b) == "maybe")
            and all(made_at.get(a.name, -1) < first or a.name in moved for a in args)
            and not any(reads_epilogue_storage(a.name) for a in args)
        )  # fmt: skip
        if movable:
            before.append(b)
            moved.update(p.name for p in b.flat_proxy_outs)
        else:
            after.append(b)
    return before + after if moved else out


def _eager_scatters() -> dict[str, object]:
    """Scatters as symbols of an operator executor of the transform's own, which no fusion
    executor takes (``torch_compile_ex`` fuses whatever the torch executor runs): ltorch's meta,
    torch's out-of-place kernel.  Registered on the executor, never on Thunder's module state."""
    import thunder.torch as ltorch
    import torch

    from thunder_ext.eager_ops import eager_executor

    ex = eager_executor()
    return {
        name: ex.register_operator(f"eager_{name}", like=getattr(ltorch, name), fn=getattr(torch, name))
        for name in sorted(_SCATTER_NAMES)
    }


_EAGER_SCATTERS: dict[str, object] = {}


# Reduction prims.  Inductor (torch 2.11, CPU) computes an index_copy/index_add wrongly when an op
# that reads its result also reads a tensor a reduction of the same graph reads:
# ``(b - b.mean(0), torch.index_copy(a, 0, i, v) + b)`` under torch.compile alone (soak seed 60000).
_REDUCTIONS = frozenset(
    getattr(prims.PrimIDs, n) for n in ("SUM", "PROD", "VAR", "VAR_MEAN", "AMAX", "AMIN", "ARGMAX", "ARGMIN", "TOPK", "SORT")
    if hasattr(prims.PrimIDs, n)
)


_SCATTER_NAMES = frozenset({"index_copy", "index_add"})  # the symbols eager_scatter binds


def _decomposes_into(bsym: BoundSymbol, found) -> bool:
    """``found`` holds for ``bsym`` or one of its subsymbols, at any depth."""
    stack = [bsym]
    while stack:
        b = stack.pop()
        if found(b):
            return True
        stack.extend(b.subsymbols)
    return False


def _reduces(bsym: BoundSymbol) -> bool:
    """``bsym`` is, or decomposes into, a reduction prim."""
    return _decomposes_into(bsym, lambda b: b.sym.id in _REDUCTIONS)


def _passes_data(b: BoundSymbol) -> bool:
    """``b`` hands its argument's elements on unchanged: a view, a reshape (which may copy), a
    ``shallow_copy``."""
    return view_kind(b) is not None or effect_of(b).is_view or b.sym.id == prims.PrimIDs.SHALLOW_COPY


def _through_views(forward: list[BoundSymbol]) -> dict[str, BoundSymbol]:
    """Each name a :func:`_passes_data` bsym makes -> that bsym."""
    return {o.name: b for b in forward if _passes_data(b) for o in tensor_outs(b)}


def _read_by_reductions(forward: list[BoundSymbol]) -> set[str]:
    """The names whose data a reduction of ``forward`` reads, through views and shallow copies."""
    viewed = _through_views(forward)
    names: set[str] = set()
    todo = [p for b in forward if _reduces(b) for p in tensor_args(b)]
    while todo:
        p = todo.pop()
        if p.name not in names:
            names.add(p.name)
            if p.name in viewed:
                todo.extend(tensor_args(viewed[p.name]))
    return names


def _computed_from_reductions(forward: list[BoundSymbol]) -> set[str]:
    """The names a reduction of ``forward`` makes, and every name computed from one."""
    names: set[str] = set()
    for b in forward:
        if _reduces(b) or any(p.name in names for p in tensor_args(b)):
            names.update(o.name for o in tensor_outs(b))
    return names


def _read_beside(scatter: BoundSymbol, forward: list[BoundSymbol], reduced: set[str]) -> bool:
    """A bsym of ``forward`` reads ``scatter``'s result (or a view of it) and also a name a
    reduction reads, or one computed from a reduction (``reduced`` holds both): the kernel
    Inductor gets wrong."""
    result = {o.name for o in tensor_outs(scatter)}
    for b in forward:
        names = {p.name for p in tensor_args(b)}
        if not names & result:
            continue
        if _passes_data(b):
            result |= {o.name for o in tensor_outs(b)}
        elif (names - result) & reduced:
            return True
    return False


def _is_stepped_slice(b: BoundSymbol) -> bool:
    strides = b.args[3] if b.sym.id == prims.PrimIDs.SLICE and len(b.args) > 3 else None
    return strides is not None and any(not isinstance(k, int) or k != 1 for k in strides)


def _steps(bsym: BoundSymbol) -> bool:
    """``bsym`` is, or decomposes into, a ``slice`` with a step other than 1."""
    return _decomposes_into(bsym, _is_stepped_slice)


def _added_from_a_stepped_input(
    scatter: BoundSymbol, made: dict[str, BoundSymbol], viewed: dict[str, BoundSymbol], inputs: set[str]
) -> bool:
    """An ``index_add`` whose source is computed (through any ops) from a stepped slice of a
    trace input (or of a view of one): Inductor adds wrong values when that input is laid out
    as a transpose (``a.index_add_(0, idx, b[::2])``, also ``b[::2] * 1``; ``b[:2]``, a
    contiguous ``b`` and ``index_copy`` come out right; soak seed 104000).  Strides are not in
    the trace, so every layout counts.  ``made``: output name -> its forward bsym; ``viewed``:
    :func:`_through_views` of the forward."""
    if "index_add" not in str(scatter.sym.name) or not inputs:
        return False

    def of_an_input(name: str) -> bool:
        seen: set[str] = set()
        while name not in inputs:
            if name in seen or name not in viewed:
                return False
            seen.add(name)
            args = tensor_args(viewed[name])
            if not args:
                return False
            name = args[0].name
        return True

    todo, seen = [tensor_args(scatter)[-1].name], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in made:
            continue
        seen.add(name)
        b = made[name]
        if _steps(b) and tensor_args(b) and of_an_input(tensor_args(b)[0].name):
            return True
        todo.extend(p.name for p in tensor_args(b))
    return False


def unfuse_scatters(out: list[BoundSymbol], trace: TraceCtx | None = None) -> tuple[list[BoundSymbol], int]:
    """``out`` with the forward ``index_copy``/``index_add`` calls Inductor gets wrong run eagerly,
    outside every ``torch_compile_ex`` region, and how many.  Three families (torch 2.11, CPU,
    ``torch.compile`` alone too):

    * a scatter whose source is its own ``self`` (one proxy, both places): Inductor computes
      ``index_copy(t, 0, idx, t)`` of a value ``t`` its region makes wrongly (with ``t.clone()``
      as the source as well, which it removes); eager's out-of-place kernel copies ``self``
      before it writes.  Functionalization makes such a call from ``t0.copy_(t1);
      t0.index_copy_(0, idx, t1)`` (soak seed 44000);
    * a scatter whose result (or a view of it) is read by an op that also reads a tensor a
      reduction reads, or one computed from a reduction: Inductor's kernel for that op comes out
      as if the scatter had not run.  Functionalization makes the scatter from a write through a
      view (``a.t().add_(0.5)`` next to a ``batch_norm``, soak seed 60000; ``t0 =
      torch.diagonal(b)``, ``t1 = b.sum(0) * b``, ``t0[1:] = 0.5``, ``b.lerp_(t1, 0.1)``: soak seed
      71000; plain Thunder right in both);
    * an ``index_add`` whose source is computed from a stepped slice of a trace input
      (:func:`_added_from_a_stepped_input`; soak seed 104000, plain Thunder wrong too)::

        before (torch_compile_ex may fuse)          after
        t20 = ltorch.index_copy(t1, 0, idx, t1)     t20 = eager_index_copy(t1, 0, idx, t1)

    On the final trace they become the torch executor's again, where reinplacing may put them
    back in place (:func:`torch_forms_of_eager_scatters`).
    """
    out = list(out)
    scatters = [
        k for k, b in enumerate(out)
        if str(b.sym.name) in _SCATTER_NAMES and tensor_args(b) and not has_tags(b, {BoundSymbolTag.BACKWARD})
    ]  # fmt: skip
    if not scatters:
        return out, 0
    forward = [b for b in out if not has_tags(b, {BoundSymbolTag.BACKWARD})]
    # Once per trace; each scatter then walks it once.
    reduced = _read_by_reductions(forward) | _computed_from_reductions(forward)
    inputs = set(input_names(trace)) if trace is not None else set()
    made: dict[str, BoundSymbol] = {}
    viewed: dict[str, BoundSymbol] = {}
    if inputs and any("index_add" in str(out[k].sym.name) for k in scatters):
        made = {o.name: b for b in forward for o in tensor_outs(b)}
        viewed = _through_views(forward)
    moved = 0
    for k in scatters:
        b = out[k]
        args = tensor_args(b)
        if not (
            any(a.name == args[0].name for a in args[1:])
            or _read_beside(b, forward, reduced)
            or _added_from_a_stepped_input(b, made, viewed, inputs)
        ):
            continue
        eager = eager_scatter(b, prim=True)
        if eager is not None:
            out[k] = eager
            moved += 1
    return out, moved


def eager_overlapping_copies(out: list[BoundSymbol], inputs: set[str]) -> tuple[list[BoundSymbol], int]:
    """``out`` with each ``copy_`` whose source overlaps what it writes, at other positions, run by
    PyTorch's own kernel outside every ``torch_compile_ex`` region, and how many.

    Eager's copy reads such a source as it goes, and so reads elements it has already written
    (``a[:, 1:] = a[:, :2]``, kept in place for it: :data:`thunder_ext.overlap.KEPT_IN_PLACE`).
    Inductor's loop reads and writes in an order of its own, which depends on the vector width
    of the machine it compiles for (on AVX2 it read the old values where eager reads the new)::

        before (torch_compile_ex may fuse)          after
        t0 = ltorch.getitem(a, (:, :2))             t0 = ltorch.getitem(a, (:, :2))
        t6 = ltorch.getitem(a, (:, 1:))             t6 = ltorch.getitem(a, (:, 1:))
        t7 = ltorch.copy_(t6, t0)                   t7 = eager_copy_(t0, t6)
    """
    from thunder_ext.alias_analysis import storage_groups
    from thunder_ext.barriers import strip_barriers
    from thunder_ext.eager_ops import eager_copy
    from thunder_ext.overlap import find_overlaps, is_plain_copy

    copies = [
        k for k, b in enumerate(out)
        if (is_copy(b) or is_copy_composite(b)) and len(tensor_args(b)) == 2 and len(tensor_outs(b)) == 1
    ]  # fmt: skip
    if not copies:
        return out, 0
    stripped = strip_barriers(out)[0]  # names of outputs are kept
    overlapping = {
        o.name for ov in find_overlaps(stripped, storage_groups(stripped, inputs)) if is_plain_copy(ov.bsym)
        for o in tensor_outs(ov.bsym)
    }  # fmt: skip
    out, moved = list(out), 0
    for k in copies:
        b = out[k]
        if tensor_outs(b)[0].name not in overlapping:
            continue
        dst = effect_of(b).writes[0]
        src = next(a for a in tensor_args(b) if a.name != dst.name)
        out[k] = eager_copy().bind(src, dst, output=b.output).from_bsym(
            header=b.header, source_filename=b.source_filename, source_positions=b.source_positions
        )
        moved += 1
    return out, moved


def eager_scatter(b: BoundSymbol, *, prim: bool = False) -> BoundSymbol | None:
    """``b``, an ``index_copy``/``index_add`` (ltorch's, the torch executor's, or with ``prim`` the
    prim autodiff leaves; positional arguments only), bound as the transform's own eager symbol;
    None for anything else."""
    import thunder.executors.torchex as torchex_module
    import thunder.torch as ltorch

    if not _EAGER_SCATTERS:
        _EAGER_SCATTERS.update(_eager_scatters())
    name = str(b.sym.name)
    sym = _EAGER_SCATTERS.get(name)
    if sym is None or b.kwargs or len(b.flat_proxy_outs) != 1:
        return None
    # ltorch's symbol or the torch executor's, in torch's argument order (self, dim, index,
    # source); or the prim autodiff leaves, in its own (self, index, source, dim).
    if b.sym.id in (getattr(ltorch, name).id, getattr(torchex_module, name).id):
        args = b.args
    elif prim and b.sym.id == getattr(prims.PrimIDs, name.upper(), None) and len(b.args) == 4:
        a, index, source, dim = b.args
        args = (a, dim, index, source)
    else:
        return None
    return sym.bind(*args, output=b.output).from_bsym(
        header=b.header, source_filename=b.source_filename, source_positions=b.source_positions
    )


def torch_forms_of_eager_scatters(bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
    """The eager scatters (:func:`eager_scatter`) bound as the torch executor's own symbols again:
    on a final trace no fusion follows, so the two run the same kernel, and the torch executor's
    is the form reinplacing knows (``index_copy(x, ..., out=x)``)."""
    import thunder.executors.torchex as torchex_module

    by_name = {sym.name: getattr(torchex_module, name) for name, sym in _EAGER_SCATTERS.items()}
    out = []
    for b in bsyms:
        torch_sym = by_name.get(b.sym.name)
        out.append(b if torch_sym is None else torch_sym.bind(*b.args, output=b.output).from_bsym(
            header=b.header, source_filename=b.source_filename, source_positions=b.source_positions
        ))
    return out


def _pin_all(out: list[BoundSymbol], pending: list[int], pin) -> None:
    """Bind the barriers at ``pending`` as ``pin`` (unfused), and forget them."""
    for j in pending:
        b = out[j]
        if b.sym is not pin:
            out[j] = pin.bind(*b.args, output=b.output).from_bsym(
                header=b.header, source_filename=b.source_filename, source_positions=b.source_positions
            )
    pending.clear()


# The torch executor's own forms of SLICE_WRITES (Thunder claims a setitem as this at the fusion stage).
TORCH_SLICE_WRITES = frozenset({"copy_with_setitem_impl", "index_copy"})


def through_barriers(bsyms: list[BoundSymbol]) -> dict[str, str]:
    """Barrier output -> the name it renames, followed to the first name (an epilogue may write
    through one)."""
    through: dict[str, str] = {}
    for b in bsyms:
        if is_barrier(b):
            for o, i in zip(tensor_outs(b), tensor_args(b)):
                through[o.name] = through.get(i.name, i.name)
    return through


def dying_slice_write(out: list[BoundSymbol], k: int, x: str, through: dict[str, str]) -> bool:
    """Whether ``out[k]`` is a partial write of the input ``x`` as a value (``kc[:, pos] = k``: a
    setitem or a slice scatter, fusible or already the torch executor's) whose old value nothing
    reads afterwards: on the final trace it can then write ``x`` in place
    (``reinplace.reinplace_inputs``) instead of copying the whole input on every call."""
    p = out[k]
    args = tensor_args(p)
    if str(p.sym.name) not in SLICE_WRITES | TORCH_SLICE_WRITES or has_tags(p, {BoundSymbolTag.BACKWARD}) or not args:
        return False
    if through.get(args[0].name, args[0].name) != x:
        return False
    for b in out[k + 1 :]:
        writes = effect_of(b).writes
        if is_barrier(b) or (writes and through.get(writes[0].name, writes[0].name) == x):
            continue
        names = returned_data(b) if is_return(b) else {a.name for a in tensor_args(b)}
        if any(through.get(n, n) == x for n in names):
            return False
    return True


def claim_for_torch(out: list[BoundSymbol], k: int, trace: TraceCtx) -> bool:
    """``out[k]`` bound to the torch executor in place (already bound: nothing to do); False, and
    ``out`` unchanged, when the torch executor does not take it whole."""
    from thunder.executors.torchex import ex as torchex

    p = out[k]
    if p.sym.executor is torchex:
        return True
    claimed = _claim(trace, [p], [torchex])
    if not claimed or any(c.sym.executor is not torchex for c in claimed):
        return False
    out[k : k + 1] = [c.from_bsym(source_filename=p.source_filename, source_positions=p.source_positions) for c in claimed]
    return True


def _unfuse_dying_slice_writes(out: list[BoundSymbol], sources: dict[str, str], through: dict[str, str], trace) -> list[BoundSymbol]:
    """An epilogue's value made by a dying slice write (:func:`dying_slice_write`): that op is
    claimed by the torch executor too, outside every ``torch_compile_ex`` region, so that on the
    final trace it can write the input in place."""
    for src, x in sources.items():
        k = next((j for j, b in enumerate(out) if any(p.name == src for p in b.flat_proxy_outs)), None)
        if k is None or not dying_slice_write(out, k, x, through):
            continue
        # ``torch_compile_ex`` fuses whatever the torch executor runs, index_copy included (a
        # KV-cache ``k_cache.index_copy_(2, pos, k)``): that one runs as the transform's own.
        eager = eager_scatter(out[k])
        if eager is not None:
            out[k] = eager
        else:
            claim_for_torch(out, k, trace)
    return out
