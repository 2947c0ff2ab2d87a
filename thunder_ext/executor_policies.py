"""The executor policies of the barrier walk, chosen once per walk from the stage's configuration.

The walk (:class:`thunder_ext.barriers._Placer`) orders accesses to mutated storage; a policy
adds what one kind of executor needs besides, through the hooks of
:class:`thunder_ext.barrier_plan.WalkPolicy`:

=========================  ==========================================  ==============================
policy                     chosen when                                 adds
=========================  ==========================================  ==============================
:class:`RematPins`         the remat guard names writes to pin, or a   unfused barriers (pins) that
                           backward fusion region may recompute        keep a region from recomputing
                           forward values (``remat_backward``)         a write or a value it read
``InductorRegions``        ``torch_compile_ex`` claims the trace       region ends where Inductor
                                                                       mishandles writes into inputs
                                                                       (:mod:`thunder_ext.inductor_regions`)
:class:`WriteInputs`       nvFuser may run the trace                   a barrier making each write's
                           (``StageConfig.write_barriers``)            destination a region input,
                                                                       written once per region
=========================  ==========================================  ==============================

A walk with none of them places ordering barriers only (the CPU default executors).
"""

from __future__ import annotations

from thunder.core import prims
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, has_tags
from thunder.extend import OperatorExecutor

from thunder_ext.barrier_plan import Plan, WalkPolicy
from thunder_ext.inductor_regions import InductorRegions
from thunder_ext.op_kinds import describe, is_barrier, is_return, tensor_args


class RematPins(WalkPolicy):
    """Fusion executors rematerialize: a consumer region may recompute values of its producer
    region from the producer's inputs (:mod:`thunder_ext.remat_guard`).

    ``writes``: stripped indices of the forward writes the remat guard pins; ``backward``: pin
    the forward values a backward bsym reads (``BarrierSymbols.remat_backward``); ``regions``:
    under ``torch_compile_ex``, a pin is also a region cut.
    """

    def __init__(self, walk, writes: frozenset[int], backward: bool, regions: InductorRegions | None) -> None:
        super().__init__(walk)
        self.writes, self.backward, self.regions = writes, backward, regions
        self.pending: dict[str, object] = {}  # group -> its last forward write (the walk's last_write), not yet pinned
        self.backward_pinned = False  # the backward's reads of forward values are pinned (pin_backward_reads)

    def before(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        if self.backward and has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            self.pin_backward_reads(i, bsym)
        self.pin_pending_writes(i, bsym)

    def after(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        if i in self.writes and effect.writes and not has_tags(bsym, {BoundSymbolTag.BACKWARD}):
            for g in sorted(write_groups):  # sorted: the pin's operands do not depend on hash order
                self.pending[g] = self.walk.last_write[g]

    def pin_backward_reads(self, i: int, bsym: BoundSymbol) -> None:
        """In a joint trace that a fusion executor splits into regions, a backward region is a
        rematerialization consumer of the forward region: its min cut may recompute a forward
        value from the forward's inputs, re-running a write or reading an input after the write
        (an input written back by an epilogue ``copy_``).  So each forward value a backward bsym
        reads whose computation touched mutated storage goes through an unfused barrier first,
        at the start of the backward: one barrier, before the first backward bsym that reads a
        tensor (``get_grad`` aside), for every such read of the whole backward.

        The backward's input-free bsyms before it (the ``zeros`` a gradient sum starts from) move
        after it: left between the barrier and a ``get_grad``, both unfused, under consecutive
        fusion they are a region without inputs, which ``torch_compile_ex`` fails to build
        (``KeyError`` in Thunder's trace interpreter; soak seeds 38000 and 39000)."""
        walk = self.walk
        if bsym.sym.id == prims.PrimIDs.GET_GRAD or not tensor_args(bsym):
            return
        readers = [bsym]
        first = not self.backward_pinned
        if first:
            self.backward_pinned = True
            readers = [b for b in walk.bsyms[i:] if has_tags(b, {BoundSymbolTag.BACKWARD}) and b.sym.id != prims.PrimIDs.GET_GRAD]
        plan = Plan()
        for b in readers:
            for p in tensor_args(b):
                if p.name not in walk.defined:
                    continue  # made later in the backward
                v = walk.current(p)
                if v.name in walk.touched_forward and not walk.grad_taken_of(p.name):
                    plan.rename.setdefault(v.name, (v, None))
        if plan.rename:
            plan.reasons.append("remat: the backward reads forward values computed from mutated storage")
            walk.emit(plan, bsym, pin=True, cut=False)
            if first:
                self.move_input_free_backward_after_pin()

    def move_input_free_backward_after_pin(self) -> None:
        """Move the backward bsyms that read no tensor, emitted since the forward ended, after the
        pin just emitted (they read nothing, so where they run orders nothing)."""
        walk = self.walk
        k = len(walk.out) - 1  # the pin
        # Barriers placed before a get_grad are forward (op_kinds.in_backward) but stand among
        # the backward's first bsyms; none is moved (each reads a tensor).
        while k > 0 and (has_tags(walk.out[k - 1], {BoundSymbolTag.BACKWARD}) or is_barrier(walk.out[k - 1])):
            k -= 1
        moved = [j for j in range(k, len(walk.out) - 1)
                 if walk.out[j].sym.id != prims.PrimIDs.GET_GRAD and not tensor_args(walk.out[j])]
        if not moved:
            return
        gone = set(moved)
        order = [j for j in range(len(walk.out)) if j not in gone] + moved
        walk.out = [walk.out[j] for j in order]
        walk.origin = [walk.origin[j] for j in order]

    def pin_pending_writes(self, i: int, bsym: BoundSymbol) -> None:
        """Re-running a write is not idempotent.  So what is read after a guarded write goes
        through a barrier first: the write's output is then needed outside its region and no cut
        can move the write.  One barrier serves every write since the last read."""
        walk = self.walk
        if not self.pending:
            return
        # The return pins what it reads itself, but a stale name it reads gets a barrier first,
        # and that barrier must be the pin (a fused one would leave the write's output read
        # only inside a region, free to be recomputed).
        if not any(walk.info.group_of(p) in self.pending for p in tensor_args(bsym)):
            return
        plan = Plan()
        for g in self.pending:
            walk.stale_members(g, i, None, None, plan)
        if self.regions is not None:
            self.regions.leave_views_to_replay(plan)
        writes = {id(lw.bsym): lw for lw in self.pending.values()}
        plan.witnesses = [lw.witness for lw in writes.values() if lw.witness is not None]
        plan.reasons = [f"remat: {describe(lw.bsym)} runs once" for lw in writes.values()]
        self.pending.clear()
        if plan.rename and self.regions is not None and not (has_tags(bsym, {BoundSymbolTag.BACKWARD}) or is_return(bsym)):
            # The pin starts a new region: what crosses it goes through it, as at a region end,
            # or rematerialization could recompute it after the write (a fused ordering barrier
            # and its witness included).  No region follows the return: routed through a pin
            # there, a joint trace's backward values would reach the forward's ``flat_args``,
            # and the forward/backward split would pull the backward into the forward.
            self.regions.cross_cut(i, bsym, plan)
        elif plan.rename:
            walk.emit(plan, bsym, pin=True)


class WriteInputs(WalkPolicy):
    """nvFuser can only write to an input of its fusion region; a barrier makes the destination one.

    One region can also write an input only once: a second ``copy_`` into it reads the region's
    input, the value from before the first (Thunder refuses the region: "trying to use ... the
    'copy_to' argument of 'prims.copy_'").  A write that names the destination an earlier
    write wrote, with no barrier between them, gets one witnessed by the earlier write, which
    puts the two in different regions.  Composites that write without returning the new
    version do this: ``batch_norm`` twice on the same running stats.
    """

    def extend(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str], plan: Plan) -> None:
        walk = self.walk
        if isinstance(bsym.sym.executor, OperatorExecutor):
            return  # bound outside every region (nvfuser_forms): no region input needed
        for w in effect.writes:
            v = walk.current(w)
            if v.name not in walk.inputs and v.name not in walk.made_by_barrier and v.name not in plan.rename:
                plan.rename[v.name] = (v, bsym)
                plan.reasons.append(f"nvFuser: write to non-input {v.name} in {describe(bsym)}")
                continue
            lw = walk.last_write.get(walk.info.group_of(w))
            if (
                lw is not None
                and lw.bsym is not bsym
                and lw.witness is not None
                and walk.current(lw.dest).name == v.name
                and v.name not in plan.rename
            ):
                plan.rename[v.name] = (v, lw.bsym)
                if lw.witness not in plan.witnesses:
                    plan.witnesses.append(lw.witness)
                plan.reasons.append(f"nvFuser: {describe(lw.bsym)} and {describe(bsym)} write {v.name} in separate regions")
        if not plan.rename:
            return
        # The same barrier also serves the next write of every other group (a module's buffers
        # are updated one after another), so those need no barrier of their own.
        for g2 in walk.writes_at:
            k = walk.next_write(g2, i) if g2 not in write_groups else None
            if k is None:
                continue
            for w2 in walk.info.effects[k].writes:
                v2 = walk.current(w2)
                if (
                    walk.info.group_of(w2) == g2
                    and v2.name in walk.defined
                    and v2.name not in walk.inputs
                    and v2.name not in walk.made_by_barrier
                ):
                    plan.rename.setdefault(v2.name, (v2, None))


def policies_for(walk, remat_writes: frozenset[int]) -> tuple[WalkPolicy, ...]:
    """The policies of one walk, in the order its hooks run (pins before region ends)."""
    options = walk.options
    symbols = options.symbols
    regions = InductorRegions(walk) if symbols.inductor else None
    chosen: list[WalkPolicy] = []
    if remat_writes or symbols.remat_backward:
        chosen.append(RematPins(walk, remat_writes, symbols.remat_backward, regions))
    if regions is not None:
        chosen.append(regions)
    if options.config.write_barriers:
        chosen.append(WriteInputs(walk))
    return tuple(chosen)
