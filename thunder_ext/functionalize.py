"""Functionalization: writes become out-of-place values, for private storage and for inputs.

Storage is *observable* when its group (:mod:`thunder_ext.alias_analysis`) contains a trace
input, and *private* when it was created inside the trace.  A write to private storage has no
effect a caller can see, except through later reads inside the trace, so
:func:`functionalize` rewrites it out of place and makes every later read see the new value:

* a whole-tensor write (``y.add_(1)``, ``copy_(src, y)``) becomes its out-of-place value; the
  write's output and every later use of ``y`` or of its aliases read that value;
* a write through a view of a private base (``y[1:].mul_(2)``) becomes a scatter of the new
  values into the base, out of place, with ``index_copy``: along one dimension for a slice or
  an index on it (also after a ``view`` of the whole base, ``y.view(-1)[::2]``, on the base's
  values in that shape); otherwise the view chain is replayed on ``arange(base.numel())`` to
  find which base elements it covers, and the values go there in the flattened base;
* a view of the base read after a write is re-derived from the new base (view replay): its
  view op is called again on the current value.

With :class:`InputPolicy` ``enabled`` (before autodiff), an input that does not require grad
(a buffer, a cache, a metric's state, or a tensor written with a value that carries a gradient),
and with ``grad_inputs`` one that does but is written with grad only (class 9), is treated the
same way, its base being the input itself, and gets its final value back from
one *epilogue* ``copy_`` just before the return, under the source line of its last write; the
return reads the copy's output (but an output that is the input itself after a write carrying
a gradient reads the value, which has the history: :meth:`_Functionalizer.return_values`).  Before
(``y = x.sum(); x.add_(1); return y + x.sum()``)::

    y = ltorch.sum(x)
    t4 = ltorch.add_(x, 1)
    t7 = ltorch.sum(x)
    t8 = ltorch.add(y, t7)
    return t8

After, with the barrier the barrier pass then places to order the copy after ``sum(x)``::

    y = ltorch.sum(x)
    t12 = ltorch.add(x, 1)
    t7 = ltorch.sum(t12)
    t8 = ltorch.add(y, t7)
    (t14, t15) = prims.update_aliases((x, y))
    t13 = prims.copy_(t12, t14, grad_enabled=False)
    return t8

On the final trace :func:`thunder_ext.reinplace.reinplace_inputs` puts the write back in place
where the old value dies.  After this pass the barrier pass (:mod:`thunder_ext.barriers`) runs
on what is left: the writes to inputs that carry gradients or share storage with another input
(class 7), and the groups that could not be functionalized.

Invariants this pass relies on:

* a write it rewrites is either a ``copy_(src, dst)`` or a composite whose last subsymbol is
  ``copy_(src, dst)`` with ``dst`` one of its arguments, its output the ``copy_``'s output,
  and no other write in it (every ``ltorch`` in-place op and ``inplace=True`` variant traces
  so); ``src`` has ``dst``'s shape, dtype and device;
* every alias edge of a rewritten group is such a write, a *pure selection view* (its output
  elements are elements of its only tensor argument, same dtype; see :data:`_NOT_REPLAYABLE`),
  an *identity op* (a composite of ``shallow_copy`` only: no-op ``to``/``type_as``, ``dropout``
  with ``p=0``; ``thunder_ext.identity_ops.shallow_copy_of_input``), or any alias that, with the
  aliases made from it, nothing reads at or after the group's next write (read as the value it
  has then, never replayed, so a ``contiguous`` or ``reshape`` that may copy is fine there:
  :meth:`_Functionalizer.read_before_next_write`); and the group has exactly one member not made
  by an alias edge: its base.
  Anything else (a ``reshape`` that may copy, read after a later write, ``detach`` before a write, a
  dtype view, ``as_strided``, a view with a tensor index, an unknown composite) leaves the
  whole group as it was, with its writes and today's barriers: the pass never guesses;
* a write through a view that repeats elements (``expand``, ``unfold``) is left as it is;
* so is a ``copy_`` or ``setitem_`` whose source shares elements with what it writes, at other
  positions (:mod:`thunder_ext.overlap`): run in place it reads its source as it goes, as
  eager's kernel does, where a value would read it all first;
* the value written is never an alias of storage that keeps an in-place write, since the
  rewritten group would then alias a tensor that still changes.

Guarantees:

* observable storage is untouched, except the inputs the policy admits: the writes and reads of
  every other input stay as they were;
* a group is rewritten whole or not at all, so no private group keeps part of its writes;
* the input trace is never mutated; at the fusion stage the bsyms it adds are claimed by the
  compilation's executors (:func:`_claim`), so they run wherever the replaced ones did, and a
  bsym replacing or read by a backward bsym is tagged backward.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field

import thunder.torch as ltorch
from thunder.core import dtypes, prims
from thunder.core.proxies import ProxyTag, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, Symbol
from thunder.core.trace import TraceCtx, from_trace
from thunder.extend import Executor

from thunder_ext.alias_analysis import proxy_named, storage_groups
from thunder_ext.identity_ops import shallow_copy_of_input
from thunder_ext.meta_calls import saves_input
from thunder_ext.overlap import find_overlaps, is_plain_copy
from thunder_ext.recording import at_source_of, call_again, record, record_again
from thunder_ext.op_kinds import (
    effect_of,
    in_backward,
    is_copy,
    is_detach,
    is_like_factory,
    is_return,
    may_be_its_input,
    origin_ids,
    returned_data,
    tensor_args,
    tensor_outs,
    whole_tensor_versions,
    writes_with_grad,
)

PrimIDs = prims.PrimIDs


def _ids(*names: str) -> frozenset:
    return frozenset(s.id for s in ltorch._syms_returning_views if s.name in names)


# Views whose output is not a plain selection of the input's elements (dtype or complex
# reinterpretation, raw strides, sparse parts) or that cut the autograd history (detach).
_NOT_REPLAYABLE = _ids("detach", "real", "imag", "view_as_real", "indices", "values", "as_strided", "adjoint") | {
    PrimIDs.BITCAST
}
# Views of their first tensor argument in the shape of their second (``v.view_as(v)``).
_SHAPE_FROM_SECOND = _ids("view_as", "expand_as")
# Views that keep every element of their input, in another shape.
_RESHAPING_VIEWS = _ids("view", "view_as", "unflatten")
# Views that repeat input elements: reading through them is fine, writing through them is not.
_READ_ONLY = _ids("expand", "expand_as", "unfold") | {PrimIDs.BROADCAST_IN_DIM, PrimIDs.UNFOLD}


@dataclass
class FunctionalizeReport:
    """What the pass did: the writes it rewrote (the original bsyms) and the groups it left alone."""

    rewritten: list[BoundSymbol] = field(default_factory=list)
    # (rewritten write, the new value of its storage it computes): where nothing reads that value,
    # dce removes the computation and the write was a dead in-place op.
    new_values: list[tuple[BoundSymbol, TensorProxy]] = field(default_factory=list)
    kept_private_groups: int = 0
    replayed_views: int = 0
    scatters: int = 0
    # Inputs whose writes became values, each written back once by an epilogue ``copy_``.
    functional_inputs: list[str] = field(default_factory=list)
    epilogues: int = 0
    # input name -> its epilogue copy_, under the source line of the input's last write
    epilogue_writes: dict[str, BoundSymbol] = field(default_factory=dict)
    # Written inputs left in place, with why (the barrier pass orders them: the fallback).
    kept_inputs: dict[str, str] = field(default_factory=dict)
    # Whole-tensor overwrites of storage gradients flow through, whose value keeps eager's zero
    # gradient to the overwritten tensor (:meth:`_Functionalizer.overwrites_gradient`).
    zero_gradient_links: int = 0
    # Inputs written with a value that carries a gradient: input name -> that value, which the
    # caller's tensor adopts the history of after the call (thunder_ext.input_histories).
    histories: dict[str, TensorProxy] = field(default_factory=dict)
    # Flat output positions where the return hands back such an input itself (as its value).
    returned_inputs: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InputPolicy:
    """Which written inputs become values, chosen once per compilation (before autodiff)."""

    enabled: bool = False
    # Inputs that require grad too, where every write is made with grad: the caller's tensor then
    # adopts the written value's history after the call (thunder_ext.input_histories).
    grad_inputs: bool = False


@dataclass(frozen=True)
class _Write:
    """A write this pass can rewrite: ``src`` becomes the new value of ``dst``, computed by ``pre``."""

    dst: TensorProxy
    src: TensorProxy
    out: TensorProxy | None
    pre: tuple[BoundSymbol, ...]


def _write_form(bsym: BoundSymbol) -> _Write | None:
    """Recognise a rewritable write (see the module's invariants), else None."""
    if is_copy(bsym):
        copy, pre = bsym, ()
    elif bsym.subsymbols and is_copy(bsym.subsymbols[-1]):
        copy, pre = bsym.subsymbols[-1], tuple(bsym.subsymbols[:-1])
        if any(effect_of(s).writes for s in pre):
            return None
    else:
        return None
    args = copy.flat_proxy_args
    if len(args) < 2 or not all(isinstance(a, TensorProxy) for a in args[:2]):
        return None
    src, dst = args[0], args[1]
    if not any(a.name == dst.name for a in tensor_args(bsym)):
        return None
    outs = tensor_outs(bsym)
    copy_outs = tensor_outs(copy)
    if len(outs) > 1 or (outs and (not copy_outs or outs[0].name != copy_outs[0].name)):
        return None
    if src.shape != dst.shape or src.dtype != dst.dtype or src.device != dst.device:
        return None
    if pre:
        made = {p.name for s in pre for p in s.flat_proxy_outs}
        if src.name in made:
            # The value must be fresh: made by a pre-subsymbol that aliases nothing.
            producer = next(s for s in reversed(pre) if any(p.name == src.name for p in s.flat_proxy_outs))
            if effect_of(producer).aliases:
                return None
    return _Write(dst=dst, src=src, out=outs[0] if outs else None, pre=pre)


def _view_form(bsym: BoundSymbol, effect) -> str | None:
    """'rw' for a pure selection view or an identity op, 'r' for a view that repeats elements, None otherwise."""
    if not effect.is_view:
        return "rw" if shallow_copy_of_input(bsym, effect) else None
    args = tensor_args(bsym)
    ids = origin_ids(bsym)
    if ids & _SHAPE_FROM_SECOND:
        args = args[:1]  # the second tensor gives the shape only: the replay reads its current value
    if len(args) != 1 or ids & _NOT_REPLAYABLE:
        return None
    if dtypes.is_complex_dtype(args[0].dtype) or any(o.dtype != args[0].dtype for o in tensor_outs(bsym)):
        return None
    return "r" if ids & _READ_ONLY else "rw"


_BASE = ("base",)
# Views that fail where the strides cannot be viewed (``reshape`` would copy instead).
_STRICT_VIEWS = frozenset({ltorch.view.id, ltorch.view_as.id})


class _Functionalizer:
    def __init__(
        self,
        trace: TraceCtx,
        new_trace: TraceCtx,
        bsyms: list[BoundSymbol],
        inputs: set[str],
        executors,
        effects,
        differentiable: frozenset[str] = frozenset(),
        functional_inputs: InputPolicy = InputPolicy(),
        aliased_inputs: tuple[frozenset[str], ...] = (),
        assumed_views: frozenset[str] = frozenset(),
    ):
        self.trace, self.new_trace, self.bsyms = trace, new_trace, bsyms
        # Outputs of ops that may be views, to be taken as views (thunder_ext.stride_choices).
        self.assumed_views = assumed_views
        self.last_strict_view: dict[str, int] | None = None  # storage group -> its last ``view``
        self.differentiable = differentiable
        self.grad_input_names = frozenset(a.name for a in trace.args if isinstance(a, TensorProxy) and a.requires_grad)
        self.executors = executors
        self.functional_inputs = functional_inputs
        self.aliased_inputs = frozenset(n for names in aliased_inputs for n in names)
        self.info = storage_groups(bsyms, inputs, cache=effects)
        self.input_of: dict[str, TensorProxy] = {}  # functional input group -> its input
        self.last_write_of: dict[str, BoundSymbol] = {}  # group -> its last write rewritten so far
        self.report = FunctionalizeReport()
        self.node: dict[str, tuple] = {}  # member name -> node (path position from the base)
        self.view_of: dict[tuple, tuple[int, int, tuple]] = {}  # view node -> (bsym index, out index, parent)
        self.writes: dict[int, _Write] = {}
        self.read_only: dict[tuple, bool] = {}  # view node -> it repeats elements (no writes through it)
        self.identities: set[tuple] = set()  # view nodes made by an identity op: they select everything
        # Groups whose input the return hands back itself after a write of a value that carries a
        # gradient: the return's outputs read the value, which has the write's history.
        self.returned_with_history: set[str] = set()
        # Groups written with a value that carries a gradient: the views the return reads are made
        # from that value, not from the caller's tensor after the epilogue, which has no history.
        self.written_with_history: set[str] = set()
        self.returned_values: dict[str, TensorProxy] = {}  # epilogue output -> the value it copied
        self._last_reads: dict[str, int] | None = None
        self.groups = self.plan()

    # -- which groups -------------------------------------------------------------------------

    def plan(self) -> set[str]:
        info = self.info
        mutated = info.mutated_groups
        candidates = mutated - info.input_groups
        bases: dict[str, int] = {}
        if self.functional_inputs.enabled:
            for g, x in self.functional_input_candidates().items():
                candidates.add(g)
                self.input_of[g] = x
                self.node[x.name] = _BASE
                bases[g] = 1
        if not candidates:
            return set()
        bad: set[str] = set()
        src_groups: dict[str, set[str]] = {}
        writes_at: dict[str, list[int]] = {}  # group -> indices of the bsyms that write it, in order
        for i, effect in enumerate(info.effects):
            for w in effect.writes:
                writes_at.setdefault(info.group_of(w), []).append(i)
        with_gradient: set[str] = set()  # groups a name gradients flow through has been a member of, so far
        for i, (bsym, effect) in enumerate(zip(self.bsyms, info.effects)):
            gs = {info.group_of(p) for p in (*tensor_args(bsym), *tensor_outs(bsym))} & candidates
            if not gs:
                continue
            aliased = {o.name for o, _ in effect.aliases}
            gradient_groups = self.groups_of_differentiable(bsym)
            if effect.writes:
                w = _write_form(bsym)
                g = info.group_of(effect.writes[0])
                if w is not None and g in with_gradient | gradient_groups and not writes_with_grad(bsym):
                    # A write made with grad disabled keeps the history of what it wrote (eager); its
                    # out-of-place value would not, so the write stays, behind a straight-through
                    # barrier (:meth:`thunder_ext.barriers._Placer.straight_through`).  Also through a
                    # view made before the storage got its gradient (``t0 = c[2:]; c.add_(a)``, then a
                    # no-grad ``t0.mul_(2)``), whose own name carries none.
                    bad.add(g)
                elif w is None or len(effect.writes) != 1 or w.dst.name not in self.node:
                    # Every group it writes keeps this write, so none of them can go functional;
                    # what else it makes is new storage all the same (batch_norm's output, next
                    # to its running-stat writes), so its outputs are still registered below.
                    bad.update(info.group_of(x) for x in effect.writes)
                elif not self.writable(self.node[w.dst.name]):
                    bad.add(g)
                else:
                    self.writes[i] = w
                    if w.out is not None:
                        self.node[w.out.name] = self.node[w.dst.name]
                    if w.src.name in info.groups and self.node[w.dst.name] != _BASE:
                        # A top-level proxy (not one made inside the composite) written through a
                        # view: the view then reads it as it is (a whole-tensor copy clones it).
                        src_groups.setdefault(g, set()).add(info.group_of(w.src))
            elif effect.aliases:
                form = _view_form(bsym, effect)
                args = tensor_args(bsym)
                arg = args[0] if args and all(a.name == args[0].name for _, a in effect.aliases) else None
                if form is None and arg is not None and self.read_before_next_write(i, writes_at.get(info.group_of(arg), ())):
                    # The alias and every alias made from it are read only before the storage's next
                    # write, if any (a ``contiguous``, ``reshape`` or ``detach`` after the last write,
                    # or read at once): read as the value it has now and never replayed, so whether it
                    # copies or aliases (which depends on strides no trace records) makes no difference.
                    form = "r"
                elif form is None and tensor_outs(bsym) and all(o.name in self.assumed_views for o in tensor_outs(bsym)):
                    # A view by assumption: replayed on new values as a view of the same elements.
                    form = "rw"
                if form is None or arg is None or arg.name not in self.node:
                    bad.update(info.group_of(o) for o, _ in effect.aliases)
                    continue
                for k, o in enumerate(tensor_outs(bsym)):
                    n = (i, k)
                    self.view_of[n] = (i, k, self.node[arg.name])
                    self.node[o.name] = n
                    self.read_only[n] = form == "r" or self.read_only.get(self.node[arg.name], False)
                    if not effect.is_view and form == "rw" and o.name not in self.assumed_views:
                        self.identities.add(n)
            with_gradient |= gradient_groups
            for o in tensor_outs(bsym):
                g = info.group_of(o)
                if g in candidates and o.name not in aliased and o.name not in self.node:
                    bases[g] = bases.get(g, 0) + 1
                    self.node[o.name] = _BASE
        bad |= {g for g, n in bases.items() if n != 1}
        # A copy_ whose source overlaps what it writes elsewhere reads its source as it goes, in
        # eager and in Thunder's copy_ alike; its value read up front would differ.
        overlapping = {info.group_of(o.dst) for o in find_overlaps(self.bsyms, info) if is_plain_copy(o.bsym)}
        for g, x in self.input_of.items():
            if g in overlapping - bad:
                self.report.kept_inputs[x.name] = "a copy_ whose source overlaps what it writes, at other positions"
            elif g in bad:
                self.report.kept_inputs[x.name] = "a write or view the pass cannot express as a value"
        bad |= overlapping & candidates
        # The value written must not alias storage that keeps a write.
        changed = True
        while changed:
            changed = False
            for g, srcs in src_groups.items():
                if g not in bad and any(s in mutated and (s in bad or s not in candidates) for s in srcs):
                    bad.add(g)
                    changed = True
                    if g in self.input_of:
                        self.report.kept_inputs[self.input_of[g].name] = (
                            "a write through a view of it reads storage that keeps its writes"
                        )
        self.report.kept_private_groups = len((candidates & bad) - self.input_of.keys())
        self.report.functional_inputs = sorted(x.name for g, x in self.input_of.items() if g not in bad)
        return candidates - bad

    def groups_of_differentiable(self, bsym: BoundSymbol) -> set[str]:
        """The storage groups of ``bsym``'s tensors (arguments and outputs) that gradients flow through."""
        info = self.info
        return {
            info.group_of(p)
            for p in (*tensor_args(bsym), *tensor_outs(bsym))
            if p.name in self.differentiable and p.name in info.groups
        }

    def read_before_next_write(self, i: int, writes: Sequence[int]) -> bool:
        """Nothing reads what alias bsym ``i`` makes, or an alias made from it, at or after the next
        of ``writes`` (bsym indices, in order) that follows ``i``: the return included.  Walks only
        up to that write (an alias made at or after it is such a read already)."""
        nxt = next((j for j in writes if j > i), None)
        return nxt is None or not aliases_read_from(i, nxt, self.bsyms, self.info.effects, self.last_reads())

    def last_reads(self) -> dict[str, int]:
        """Name -> the index of the last bsym that reads it (computed once)."""
        if self._last_reads is None:
            self._last_reads = {p.name: j for j, b in enumerate(self.bsyms) for p in tensor_args(b)}
        return self._last_reads

    def functional_input_candidates(self) -> dict[str, TensorProxy]:
        """Written input groups whose writes can become values (group -> its input); the others
        are noted in ``report.kept_inputs`` with the reason, and keep their writes and barriers.

        Not an input that requires grad, unless ``InputPolicy.grad_inputs`` and every write into
        it is made with grad (the caller's tensor then adopts the value's history, class 9:
        :mod:`thunder_ext.input_histories`); a no-grad write keeps the straight-through barrier.
        A value written that carries a gradient is fine: autodiff then sees values only, and an
        old value the backward reads is cloned at the fusion stage (:mod:`thunder_ext.saved_values`).
        When the return hands back the input itself after such a write, it returns the value
        instead of the caller's tensor (:meth:`return_values`), as only the value can carry the
        write's history.  Not when an op that is not a write reads the input for a gradient before
        a write, and eager's backward of it saves the input (:func:`thunder_ext.meta_calls.saves_input`:
        ``mul``, not ``add`` or ``exp``): that backward raises (its saved tensor was modified),
        and the in-place form is refused alike."""
        info = self.info
        members = info.groups.members()
        out: dict[str, TensorProxy] = {}
        writers: dict[str, list[int]] = {}
        for i, e in enumerate(info.effects):
            for w in e.writes:
                writers.setdefault(info.group_of(w), []).append(i)
        last_read: dict[str, int] = {}
        first_grad_read: dict[str, int] = {}  # written group -> first op (not a write, not a view) saving it for a gradient
        # A result only ``detach`` reads feeds no gradient: that backward never runs in eager.
        feeds_gradients = {p.name for b in self.bsyms if not is_detach(b) for p in tensor_args(b)}
        for i, (b, e) in enumerate(zip(self.bsyms, info.effects)):
            if not is_return(b):
                for p in tensor_args(b):
                    if p.name in info.groups:
                        last_read[info.group_of(p)] = i
                        g = info.group_of(p)
                        if (
                            g not in first_grad_read
                            and g in writers
                            and not (e.writes or e.aliases)
                            and any(o.name in self.differentiable and o.name in feeds_gradients for o in tensor_outs(b))
                            and saves_input(b, p, self.differentiable)
                        ):
                            first_grad_read[g] = i
        # Groups whose input the return hands back itself (the input, or an in-place op's output on it).
        # A ``contiguous`` of one may be the input object itself (``return a.contiguous()`` is ``a``).
        whole = whole_tensor_versions(self.bsyms, info.inputs, info.effects, and_what_may_be_them=True)
        returned_whole = {info.group_of(n) for b in self.bsyms if is_return(b) for n in returned_data(b) & whole}
        for g in sorted(info.mutated_groups & info.input_groups):
            names = members.get(g, ())
            ins = [n for n in names if n in info.inputs]
            why = None
            if len(ins) != 1 or ins[0] in self.aliased_inputs:
                why = "inputs that share storage (class 7)"
            elif ins[0] in self.differentiable and not (
                self.functional_inputs.grad_inputs and ins[0] in self.grad_input_names and all(writes_with_grad(self.bsyms[i]) for i in writers[g])
            ):
                # Written under no-grad too: eager keeps its history across those writes, which the
                # straight-through barrier reproduces in place; a value cannot.
                mixed = self.functional_inputs.grad_inputs and ins[0] in self.grad_input_names
                why = "written both with grad and under no-grad" if mixed else "gradients flow through it"
            elif g in first_grad_read and writers[g][-1] > first_grad_read[g]:
                # ``y = x * w; x.add_(1)``: eager saves ``x`` for ``w``'s gradient and refuses the
                # backward after the write; in place, the transform refuses it the same way (class 6).
                why = "read for a gradient before a later write (eager refuses that backward)"
            elif self.epilogue_form(g, writers[g], last_read):
                # Already one copy_ at the end: nothing to do, and applying the pass twice changes
                # nothing.  One made with grad, of a value that carries a gradient (a run-time
                # stride choice writes so, thunder_ext.stride_choices), still gives the caller's
                # tensor the value's history (thunder_ext.input_histories).
                copy = self.bsyms[writers[g][0]]
                value = tensor_args(copy)[0]
                if ins and ins[0] not in self.differentiable and writes_with_grad(copy) and value.name in self.differentiable:
                    self.report.histories[ins[0]] = value
                    self.report.epilogue_writes[ins[0]] = copy
                continue
            if why is not None:
                self.report.kept_inputs[ins[0] if ins else sorted(names)[0]] = why
                continue
            if any(
                writes_with_grad(self.bsyms[i]) and any(a.name in self.differentiable for a in tensor_args(self.bsyms[i]))
                for i in writers[g]
            ):
                self.written_with_history.add(g)
                if g in returned_whole:
                    self.returned_with_history.add(g)
            out[g] = proxy_named(self.bsyms, ins[0])
        return out

    def epilogue_form(self, g: str, writes: list[int], last_read: dict[str, int]) -> bool:
        """The group's one write is a whole-input ``copy_`` that nothing but the return reads after."""
        if len(writes) != 1:
            return False
        i = writes[0]
        writes = self.info.effects[i].writes
        whole = len(writes) == 1 and writes[0].name in self.info.inputs
        return is_copy(self.bsyms[i]) and whole and last_read.get(g, -1) <= i

    def writable(self, n: tuple) -> bool:
        return not self.read_only.get(n, False)

    # -- the walk -------------------------------------------------------------------------------

    def run(self) -> list[BoundSymbol]:
        if not self.groups:
            return list(self.bsyms)
        info = self.info
        self.out: list[BoundSymbol] = []
        self.cur: dict[str, dict[tuple, TensorProxy]] = {g: {} for g in self.groups}
        for g, x in self.input_of.items():
            if g in self.groups:
                self.cur[g][_BASE] = x
        for i, bsym in enumerate(self.bsyms):
            if is_return(bsym):
                self.write_back(bsym)
            write = self.writes.get(i)
            effect = info.effects[i]
            if write is not None and info.group_of(write.dst) in self.groups:
                self.rewrite(i, bsym, write)
                continue
            is_view = effect.aliases and tensor_args(bsym) and info.group_of(tensor_args(bsym)[0]) in self.groups
            swap = self.values_for(bsym, tensor_args(bsym))
            new = bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym
            if is_return(bsym) and self.returned_values:
                new = self.return_values(new)
            self.out.append(new)
            if is_view:
                g = info.group_of(tensor_args(bsym)[0])
                for k, o in enumerate(tensor_outs(bsym)):
                    self.cur[g][(i, k)] = o
            for o in tensor_outs(bsym):
                g = info.group_of(o)
                if g in self.groups and self.node.get(o.name) == _BASE:
                    self.cur[g][_BASE] = o
        return self.out

    def write_back(self, ret: BoundSymbol) -> None:
        """The epilogue: one ``copy_`` per functional input whose value changed, just before the
        return; the return (and any view it makes of the input) then reads the copy's output,
        the caller's own tensor, as plain Thunder returns it."""
        for g, x in sorted(self.input_of.items(), key=lambda kv: kv[1].name):
            if g not in self.groups:
                continue
            value = self.cur[g][_BASE]
            if value.name == x.name:
                continue  # every write was dead
            # The caller's tensor receives the value, not its history (functional_input_candidates):
            # the write-back is no autodiff edge, as a write under no_grad is not.
            kept = {}
            if g in self.written_with_history:
                # ``b.copy_(a); return b[:]``: eager's view has the write's history, which a view of
                # the caller's tensor made after the epilogue would lack; a view of the value has it.
                for p in tensor_args(ret):
                    n = self.node.get(p.name)
                    if n is not None and n != _BASE and self.info.group_of(p) == g:
                        kept[n] = self.value(g, n, ret)
            if g in self.written_with_history:
                self.report.histories[x.name] = value
            bsyms, out = self.record(lambda: prims.copy_(value, x, grad_enabled=False))
            # Under the user's source line of the input's last write: refusals and reports name it.
            self.emit(bsyms, self.last_write_of.get(g, ret))
            self.report.epilogue_writes[x.name] = self.out[-1]
            if g in self.returned_with_history:
                self.returned_values[out.name] = value
                # What may be the caller's tensor itself at run time keeps reading the value, as the
                # caller's tensor would lose the write's history (``return a.contiguous()``).
                kept.update({n: v for n, v in self.cur[g].items() if n != _BASE and self.may_be_the_base(n)})
            self.cur[g] = {_BASE: out, **kept}
            self.report.epilogues += 1

    def may_be_the_base(self, n: tuple) -> bool:
        """Node ``n`` is made from the base by ops that :func:`may_be_its_input` only."""
        while n != _BASE:
            i, _, n = self.view_of[n]
            if not may_be_its_input(self.bsyms[i]):
                return False
        return True

    def return_values(self, ret: BoundSymbol) -> BoundSymbol:
        """The return with each output that is the caller's tensor after a write carrying a
        gradient replaced by the value written: eager returns the caller's tensor with the write's
        history, which the caller's tensor cannot get from a compiled call (``b.mul_(a); return b``,
        ``a`` requiring grad).  The value has it, and is what the output becomes; the caller's
        ``b`` still receives the value from the epilogue.  ``flat_args`` keeps the caller's tensor:
        it names the inputs, not outputs."""
        if not ret.args or not isinstance(ret.args[0], dict):
            return ret
        swap = self.returned_values
        inputs = {o: x.name for o, x in ((self.cur[g][_BASE].name, x) for g, x in self.input_of.items() if g in self.cur)}
        flat, _ = tree_flatten(ret.args[0].get("output"))
        for k, p in enumerate(flat):
            if isinstance(p, TensorProxy) and p.name in swap and p.name in inputs:
                self.report.returned_inputs[k] = inputs[p.name]

        def value(p):
            return swap.get(p.name, p) if isinstance(p, TensorProxy) else p

        outs = {k: v if k == "flat_args" else tree_map(value, v) for k, v in ret.args[0].items()}
        return ret.from_bsym(args=(outs, *ret.args[1:]))

    def values_for(self, before: BoundSymbol, proxies: Sequence[TensorProxy]) -> dict:
        swap = {}
        for p in proxies:
            g = self.info.group_of(p)
            if g in self.groups:
                v = self.value(g, self.node[p.name], before)
                if v.name != p.name:
                    swap[variableify(p)] = v
        return swap

    def value(self, g: str, n: tuple, before: BoundSymbol) -> TensorProxy:
        """The current value of node ``n`` of group ``g``, replaying its view if a write made it stale."""
        cur = self.cur[g]
        if n in cur:
            return cur[n]
        i, k, parent = self.view_of[n]
        base = self.value(g, parent, before)
        outs = self.replay(self.bsyms[i], base, before)
        for k2, o in enumerate(outs):
            cur[(i, k2)] = o
        self.report.replayed_views += 1
        return cur[n]

    def replay(self, view: BoundSymbol, new_input: TensorProxy, like: BoundSymbol) -> list[TensorProxy]:
        """Call ``view``'s symbol again on ``new_input``; emit its bsyms before ``like``."""
        arg, *others = tensor_args(view)
        swap = self.values_for(like, others)  # type_as's second argument, read for its dtype
        swap[variableify(arg)] = new_input
        bsyms, outs = record_again(self.new_trace, view, swap)
        self.emit(bsyms, like)
        return outs

    def record(self, fn):
        return record(self.new_trace, fn)

    def emit(self, bsyms: list[BoundSymbol], like: BoundSymbol) -> None:
        if self.executors is not None:
            bsyms = _claim(self.trace, bsyms, self.executors)
        backward = in_backward(like)  # what get_grad reads is forward
        for b in at_source_of(bsyms, like):
            if backward:
                b.tags.add(BoundSymbolTag.BACKWARD)
            self.out.append(b)

    def rewrite(self, i: int, bsym: BoundSymbol, w: _Write) -> None:
        start = len(self.out)
        self._rewrite(i, bsym, w)
        if not writes_with_grad(bsym):
            # A write traced under no_grad: Thunder marks what such code computes as detached from
            # the autograd graph, and autodiff then needs no gradient rule for it (``lerp``
            # has none).  The out-of-place value computed in its place is marked the same way.
            for b in self.out[start:]:
                for o in b.flat_proxy_outs:
                    if isinstance(o, TensorProxy) and ProxyTag.DETACHED_AUTOGRAD_GRAPH not in o.tags:
                        o.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)

    def _rewrite(self, i: int, bsym: BoundSymbol, w: _Write) -> None:
        g = self.info.group_of(w.dst)
        n = self.node[w.dst.name]
        self.last_write_of[g] = bsym
        self.report.rewritten.append(bsym)
        zero_gradient = n == _BASE and self.overwrites_gradient(bsym, w, g)
        # The new value: the write's own computation, out of place, on current values.
        value, borrowed = None, False
        functional = self.functional_call(bsym, w)
        if functional is not None:
            # The op's out-of-place symbol rather than its decomposition: it keeps the op's own
            # grad rule (silu's backward saves its input, not exp and reciprocal intermediates)
            # and lets the torch executor claim it whole.
            bsyms, result = self.record(functional)
            if isinstance(result, TensorProxy) and _same_kind(result, w.out):
                self.emit(bsyms, bsym)
                value = result
            # else not the value the write stores (a dtype the in-place op casts to): decompose.
        if value is None and w.pre:
            swap = self.values_for(bsym, tensor_args(bsym))
            if w.out is not None:
                swap[variableify(w.src)] = w.out
            # At the fusion stage a composite's subsymbols are not yet claimed by an executor: emit claims them.
            self.emit([s.from_bsym_swap_proxies(swap) for s in w.pre], bsym)
            value = w.out if w.out is not None else w.src
            value = swap.get(variableify(value), value)
        elif value is None:
            value, borrowed = w.src, True
            gs = self.info.group_of(w.src)
            if gs in self.groups:
                value = self.value(gs, self.node[w.src.name], bsym)
            if n == _BASE and not zero_gradient:
                # A whole-tensor copy's value is its source; a fresh tensor keeps the two names
                # apart, or a function returning both returns one proxy twice, and Thunder's
                # autodiff keeps only one of their cotangents (`t1.copy_(t0); return t0, t1`).
                # (The ``where`` below is a fresh tensor too.)
                source = value
                # Eager's copy keeps the destination's strides, which a later ``view`` needs
                # (``t0 = batch_norm(a); t0.copy_(a); t0.view(2, 6)`` with ``a`` transposed, soak
                # seed 96000; ``b.copy_(a); b.view(-1)``, soak seed 103000); a clone has the
                # source's.  ``where`` lays its output out as its first operand, a flag made like
                # the destination (which it does not read): an input's own layout, the caller's.
                like = None
                if self.viewed_strictly_after(g, i):
                    like = self.input_of[g] if g in self.input_of else self.cur.get(g, {}).get(_BASE)
                if like is not None:
                    bsyms, value = self.record(
                        lambda: ltorch.where(ltorch.full_like(like, True, dtype=dtypes.bool8), source, source)
                    )
                else:
                    bsyms, value = self.record(lambda: ltorch.clone(source))
                self.emit(bsyms, bsym)
                borrowed = False
        if zero_gradient:
            old, new = self.value(g, _BASE, bsym), value
            bsyms, value = self.record(lambda: _with_zero_gradient_to(old, new))
            self.emit(bsyms, bsym)
            self.report.zero_gradient_links += 1
        if n == _BASE:
            self.cur[g] = {_BASE: value}
            if w.pre:
                self.report.new_values.append((bsym, value))
        else:
            base = self.value(g, _BASE, bsym)
            new_base = self.scatter(g, base, n, value, bsym)
            # A source read as it is stays an alias of its own storage, which may change later (an
            # input's epilogue copy_ writes it): later reads of the view make it again from the new
            # base instead (``t1 = t0[:2]; t1.copy_(c[:2]); c.mul_(2); return t1``, soak seed 92001).
            self.cur[g] = {_BASE: new_base} if borrowed else {_BASE: new_base, n: value}
            self.report.new_values.append((bsym, new_base))

    def viewed_strictly_after(self, g: str, i: int) -> bool:
        """A ``view`` (which needs strides it can view) of storage ``g`` comes after bsym ``i``.

        Not one made before the write and made again after it from the new value (``t0 =
        b.view(2, 6); b.copy_(a); t0.add_(0.5)``, soak seed 104000, still a crash): counting it
        put the ``where`` into ``torch_compile_ex`` regions with grad where Inductor's C++ code
        generation fails on it (``b[0]`` and ``b.view(2, 6)`` before ``b.copy_(a)``)."""
        if self.last_strict_view is None:  # one walk, at the first question
            self.last_strict_view = {
                self.info.group_of(tensor_args(b)[0]): k
                for k, b in enumerate(self.bsyms)
                if b.sym.id in _STRICT_VIEWS and tensor_args(b)
            }
        return self.last_strict_view.get(g, -1) > i

    def overwrites_gradient(self, bsym: BoundSymbol, w: _Write, g: str) -> bool:
        """A whole-tensor write with grad, into storage gradients flow through, of a value that does
        not read that storage (``h.copy_(y)``, ``h.zero_()``).  Eager's result still carries the
        overwritten tensor's history, which gets a zero gradient from it; a plain value would give
        no gradient (``None``, or an output that does not require grad)."""
        if not writes_with_grad(bsym) or w.dst.name not in self.differentiable:
            return False
        reads_old: set[str] = set()  # what the write's own computation derives from the storage
        for s in w.pre:
            if is_like_factory(s):
                continue
            if any(a.name in reads_old or self.info.group_of(a) == g for a in tensor_args(s)):
                reads_old.update(o.name for o in tensor_outs(s))
        return w.src.name not in reads_old and self.info.group_of(w.src) != g

    def functional_call(self, bsym: BoundSymbol, w: _Write):
        """For an ``ltorch`` in-place op with a registered out-of-place form (``relu_`` -> ``relu``,
        ``silu(x, inplace=True)`` -> ``silu(x, inplace=False)``) writing its first argument, a
        function calling that form on current values; else None (the decomposition is used)."""
        entry = ltorch._inplace_to_out_of_place.get(bsym.sym) if w.pre else None
        if entry is None or not bsym.args or not isinstance(bsym.args[0], TensorProxy):
            return None
        if bsym.args[0].name != w.dst.name or w.out is None:
            return None
        oop, index = entry
        args, kwargs = list(bsym.args), dict(bsym.kwargs)
        if index >= 0:
            # The same symbol with its ``inplace`` flag (positional ``index``) turned off.
            if len(args) > index:
                if args[index] is not True:
                    return None
                args[index] = False
            elif kwargs.get("inplace") is True:
                kwargs["inplace"] = False
            else:
                return None
        swap = self.values_for(bsym, tensor_args(bsym))
        swapped = bsym.from_bsym(args=tuple(args), kwargs=kwargs).from_bsym_swap_proxies(swap, skip_output=True)
        call = (swapped.args, swapped.kwargs) if index >= 0 else _arguments_for(bsym.sym, oop, swapped.args, swapped.kwargs)
        if call is None:
            return None
        return lambda: oop(*call[0], **call[1])

    def scatter(self, g: str, base: TensorProxy, n: tuple, value: TensorProxy, like: BoundSymbol) -> TensorProxy:
        """``base`` with the elements that node ``n``'s view selects replaced by ``value``, out of place."""
        path = []
        while n != _BASE:
            path.append(self.view_of[n])
            n = self.view_of[n][2]
        path.reverse()
        # An identity op selects every element: writing through it writes its input whole.
        path = [step for step in path if (step[0], step[1]) not in self.identities]
        if not path:
            return value
        direct = self.direct_scatter(base, path, value)
        if direct is not None:
            bsyms, result = self.record(direct)
            self.emit(bsyms, like)
            self.report.scatters += 1
            return result

        def build():
            numel = 1
            for s in base.shape:
                numel *= s
            idx = ltorch.reshape(ltorch.arange(numel, device=base.device), *base.shape)
            for i, k, _ in path:
                view = self.bsyms[i]
                idx = call_again(view, {variableify(tensor_args(view)[0]): idx})[k]
            flat = ltorch.reshape(base, numel)
            new = ltorch.index_copy(flat, 0, ltorch.reshape(idx, -1), ltorch.reshape(value, -1))
            return ltorch.reshape(new, *base.shape)

        bsyms, result = self.record(build)
        self.emit(bsyms, like)
        self.report.scatters += 1
        return result


    def direct_scatter(self, base: TensorProxy, path: list, value: TensorProxy):
        """For ``base[k]`` with ``k`` a slice or an int on one dimension (the common case), a function
        emitting the scatter along that dimension, with an index of that dimension's length (not the
        base's).  Also through a ``view`` of the whole base first (``x.view(-1)[::2]``): the scatter
        is then made on the base's values in the view's shape.  Else None."""
        shape = tuple(base.shape)
        viewed = False  # the user viewed ``base`` itself: eager checked that ``view`` exists
        if len(path) == 2 and origin_ids(self.bsyms[path[0][0]]) & _RESHAPING_VIEWS:
            user_view = self.bsyms[path[0][0]]
            shape = tuple(tensor_outs(user_view)[path[0][1]].shape)
            viewed = bool(user_view.args) and getattr(user_view.args[0], "name", None) == base.name
            path = path[1:]
        if len(path) != 1:
            return None
        view = self.bsyms[path[0][0]]
        if ltorch.getitem.id not in origin_ids(view) or len(view.args) < 2:
            return None
        key = view.args[1] if isinstance(view.args[1], tuple) else (view.args[1],)
        if len(key) > len(shape) or not all(type(k) in (int, slice) for k in key):
            return None
        if any(isinstance(k, slice) and not all(type(x) in (int, type(None)) for x in (k.start, k.stop, k.step))
               for k in key):
            return None
        picks = [(d, k) for d, k in enumerate(key) if k != slice(None)]
        if len(picks) > 1:
            return None
        if not picks:
            return lambda: value if shape == tuple(base.shape) else ltorch.reshape(value, base.shape)
        d, k = picks[0]
        size = shape[d]
        # index_copy along ``d`` with an index of that dimension's length only; (slice|select)_scatter
        # would be the obvious ops, but their backward breaks torch_compile_ex (Dynamo: "Unexpected
        # type in sourceless builder").
        if isinstance(k, int):
            index = k + size if k < 0 else k
            span, written = (index, index + 1, 1), lambda: ltorch.unsqueeze(value, d)
        else:
            start, stop, step = k.indices(size)
            if step <= 0 or start >= stop:
                return None
            span, written = (start, stop, step), lambda: value

        def build():
            # ``view`` where the user's own view of this very tensor succeeded in eager: it raises
            # nowhere eager does not, and tells reinplace_inputs that the scatter's base is the
            # input's storage at run time (a ``reshape`` may copy).
            reshaped = ltorch.view if viewed else ltorch.reshape
            seen = base if shape == tuple(base.shape) else reshaped(base, shape)
            new = ltorch.index_copy(seen, d, ltorch.arange(*span, device=base.device), written())
            return new if shape == tuple(base.shape) else ltorch.reshape(new, base.shape)

        return build


def aliases_read_from(i: int, at: int, bsyms: Sequence[BoundSymbol], effects: Sequence, last_read: dict[str, int]) -> bool:
    """Whether what alias bsym ``i`` makes, or an alias made from it before bsym ``at``, is read at
    or after ``at`` (``last_read``: name -> index of its last reader, the return included)."""
    made = {o.name for o in tensor_outs(bsyms[i])}
    for j in range(i + 1, at):
        made.update(o.name for o, a in effects[j].aliases if a.name in made)
    return any(last_read.get(n, -1) >= at for n in made)


def _with_zero_gradient_to(old: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``new``, selected over ``old`` everywhere: autodiff then gives ``old`` a zero gradient, as
    eager's overwrite does (``where``'s backward), and the values are ``new``'s exactly (no
    ``0 * old``, which is ``nan`` where ``old`` is not finite)."""
    everywhere = ltorch.full((), True, dtype=dtypes.bool8, device=old.device)
    return ltorch.where(everywhere, new, old)


def _arguments_for(inplace: Symbol, out_of_place: Symbol, args: tuple, kwargs: dict) -> tuple[list, dict] | None:
    """The arguments of ``inplace``'s call rearranged for ``out_of_place``, matched by parameter name
    (``polygamma_(a, n)`` -> ``polygamma(n, a)``); None when the two signatures do not correspond."""
    try:
        given = inspect.signature(inplace.meta).bind(*args, **kwargs).arguments
        target = inspect.signature(out_of_place.meta).parameters.values()
    except (TypeError, ValueError):
        return None
    given = dict(given)
    positional, named = [], {}
    for p in target:
        if p.name not in given:
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                return None
            if p.kind == p.POSITIONAL_ONLY:
                positional.append(p.default)  # holds the place of a later positional-only argument
            continue
        value = given.pop(p.name)
        if p.kind == p.POSITIONAL_ONLY:
            positional.append(value)
        elif p.kind == p.VAR_POSITIONAL:
            positional.extend(value)
        elif p.kind == p.VAR_KEYWORD:
            named.update(value)
        else:
            named[p.name] = value
    # An argument the out-of-place form has no parameter for: not the same operation.
    return None if given else (positional, named)


def _same_kind(a: TensorProxy, b: TensorProxy) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and a.device == b.device


def _flat(x):
    from thunder.core.pytree import tree_flatten

    return tree_flatten(x)[0]


def _claim(trace: TraceCtx, bsyms: list[BoundSymbol], executors: Sequence[Executor]) -> list[BoundSymbol]:
    """Bind new bsyms to the compilation's operator executors, as Thunder's claim step would."""
    from thunder.executors.passes import _transform_for_operator_executor_execution

    tmp = from_trace(trace)
    outs = tuple(p for b in bsyms for p in tensor_outs(b))
    # Thunder main's claim step reads the trace's output, so the list gets a return, dropped after.
    tmp.bound_symbols = [*bsyms, prims.python_return.bind(outs, output=None)]
    claimed = list(_transform_for_operator_executor_execution(tmp, executors).bound_symbols)
    # Claiming re-traces and may rename outputs; later bsyms know the original names.
    ret = claimed.pop() if claimed and claimed[-1].sym.id == PrimIDs.RETURN else None
    if ret is None:
        return claimed
    renamed = [p for p in _flat(ret.args) if isinstance(p, TensorProxy)]
    back = {variableify(n): o for n, o in zip(renamed, outs) if n.name != o.name}
    return [b.from_bsym_swap_proxies(back) for b in claimed] if back else claimed


def functionalize(
    trace: TraceCtx,
    new_trace: TraceCtx,
    bsyms: list[BoundSymbol],
    inputs: set[str],
    executors: Sequence[Executor] | None = None,
    effects: dict | None = None,
    differentiable: frozenset[str] = frozenset(),
    functional_inputs: InputPolicy = InputPolicy(),
    aliased_inputs: tuple[frozenset[str], ...] = (),
    assumed_views: frozenset[str] = frozenset(),
) -> tuple[list[BoundSymbol], FunctionalizeReport]:
    """Rewrite the writes to private storage in ``bsyms`` (barriers already stripped) out of place.

    ``new_trace`` names the new proxies.  ``executors`` is given at the fusion stage, where
    the bsyms the pass adds must be claimed by them.  Returns the new bsyms (not yet
    dead-code eliminated) and a report.  ``effects`` is a cache for
    :func:`thunder_ext.alias_analysis.storage_groups`.  ``differentiable`` (before autodiff) names
    the tensors gradients flow through: a write into one made with grad disabled stays in place.
    ``assumed_views``: outputs of ops that may be views, taken as views (:mod:`thunder_ext.stride_choices`).
    """
    f = _Functionalizer(
        trace, new_trace, bsyms, inputs, executors, effects, differentiable, functional_inputs, aliased_inputs, assumed_views
    )
    return f.run(), f.report
