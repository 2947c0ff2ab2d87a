"""The caller's input gets the autograd history of a value written into it, as in eager.

Also for an input that requires grad and is no leaf (class 9: what a model hands a submodule,
or one ThunderFX piece the next), where every write into it is made with grad: eager rebases
its history on the write, which :func:`_adopt_history` gives it the same way; on a leaf it
raises eager's own error, after the call.

A write into an input that does not require grad, of a value that does (``x.mul_(w)``, only
``w`` requiring grad), becomes a value before autodiff, and the caller's tensor receives it in
one epilogue ``copy_`` (:mod:`thunder_ext.functionalize`).  That copy runs inside Thunder's
``autograd.Function``, under ``no_grad``: the caller's ``x`` gets the data, not eager's
history (eager's ``x`` requires grad afterwards, and a loss computed from it later reaches
``w``).  Under ThunderFX that was refused, since code after the graph reads ``x``.

Thunder's own epilogue trace runs after the computation's outputs are connected to autograd.
:func:`route_histories` hands each such value out of the computation as one more output (one
the return already hands back, where the function returns ``x`` itself), and the caller's
tensor to the epilogue from the prologue.  There :data:`adopt_history` gives the tensor the
value's history without a copy: an ``autograd.Function`` that marks it dirty (its data is the
value's already) and passes the gradient to the value, as ``copy_``'s backward does.  The
output that was ``x`` in eager is ``x`` again.  AOT autograd treats a mutated input the same
way: the data inside the graph, the history outside it.

Before (``y = x * 2; x.mul_(w); return {"a": (x, 1), "b": [y]}``)::

    prologue:     return ((x, w), ())
    computation:  t5 = ltorch.mul(x, w)
                  (t9, t10) = prims.update_aliases((x, y))
                  t6 = prims.copy_(t5, t9, grad_enabled=False)
                  return {'output': (t5, y), 'flat_args': [t6, w]}
    epilogue(x, y):
                  return {'a': (x, 1), 'b': [y]}

After::

    prologue:     return ((x, w), (x,))
    computation:  (unchanged)
    epilogue(x_1, x, y):
                  t0 = adopt_history(x_1, x)
                  return {'a': (t0, 1), 'b': [y]}

Invariants:

* Only inputs the functionalizer wrote back with history move (``report.histories``); their
  epilogue ``copy_`` stays in the computation, so the data, the barriers and the old values
  the backward reads are as before.
* Nothing moves unless the three traces have the shapes this pass rewrites (a flat ``output``
  tuple that the epilogue takes one argument per slot of, after the prologue's hand-over);
  :func:`can_route` says so before the refusals run, which then keep their ThunderFX refusal.
* Nor where eager's backward through the value would raise: :func:`written_values` leaves out
  a value whose gradient path saves storage that a write kept in place changes later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from thunder.core import prims
from thunder.core.codeutils import SigInfo
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.core.utils import producers
from thunder.extend import OperatorExecutor

from thunder_ext.alias_analysis import input_names, storage_groups
from thunder_ext.copied_views import is_detached
from thunder_ext.meta_calls import saves_input
from thunder_ext.op_kinds import is_barrier, is_return, writes_with_grad
from thunder_ext.refusals import differentiable_names
from thunder_ext.stride_choices import view_answer


class _Adopt(torch.autograd.Function):
    """``x`` (holding ``value``'s data already) takes ``value``'s history: ``copy_``'s backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, grad


def _adopt_history(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    if not value.requires_grad or x.is_inference():
        return x  # nothing to adopt (a value computed without grad)
    if x.requires_grad and x.is_leaf:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    if x._base is not None:
        # A view: its base's history must be rebased too (eager's CopySlices), which marking the
        # view dirty in a custom Function gets wrong outside the view's elements. Eager's own
        # in-place copy does it, for one more copy of data ``x`` holds already.
        with torch.enable_grad():
            return x.copy_(value)
    with torch.enable_grad():  # Thunder's epilogue runs under no_grad
        return _Adopt.apply(x, value)


def _adopt_history_by_strides(
    x: torch.Tensor, value: torch.Tensor, roots: tuple, recipe: tuple, kind: str, shape: tuple, when: bool
) -> torch.Tensor:
    """``x`` adopts ``value``'s history only where the strides of ``roots`` give the answer
    ``when`` (:func:`thunder_ext.stride_choices.view_answer`): in the other, eager's ``x`` has no
    history, and ``value`` (a ``where`` of both answers) carries one only through the branch not
    taken."""
    if view_answer(roots, recipe, kind, shape) is not when:
        return x
    return _adopt_history(x, value)


_HISTORIES = OperatorExecutor("thunder_ext_input_histories")
adopt_history = _HISTORIES.register_operator(
    "adopt_history", meta=lambda x, value: TensorProxy(like=x), fn=_adopt_history, tags=[prims.OpTags.DONT_DCE]
)
adopt_history_by_strides = _HISTORIES.register_operator(
    "adopt_history_by_strides",
    meta=lambda x, value, *_: TensorProxy(like=x),
    fn=_adopt_history_by_strides,
    tags=[prims.OpTags.DONT_DCE],
)


@dataclass
class HistoryReport:
    adopted: list[str] = field(default_factory=list)  # inputs that take their write's history
    extra_outputs: int = 0  # values handed out of the computation for it


def can_route(prologue: TraceCtx | None, computation: TraceCtx, epilogue: TraceCtx | None) -> bool:
    """The traces have the shapes :func:`route_histories` rewrites."""
    if prologue is None or epilogue is None or not prologue.bound_symbols or not computation.bound_symbols:
        return False
    pret, ret = prologue.bound_symbols[-1], computation.bound_symbols[-1]
    if not (is_return(pret) and is_return(ret)) or not ret.args or not isinstance(ret.args[0], dict):
        return False
    out = ret.args[0].get("output")
    handed = pret.args[0] if pret.args else None
    if not isinstance(out, tuple) or any(isinstance(o, (tuple, list, dict)) for o in out):
        return False
    if not (isinstance(handed, tuple) and len(handed) == 2 and isinstance(handed[1], tuple)):
        return False
    return len(epilogue.args) == len(handed[1]) + len(out)


def written_values(computation: TraceCtx, histories: dict, epilogue_writes: dict) -> dict[str, TensorProxy]:
    """Input name -> the value its epilogue ``copy_`` writes, in ``computation`` (names may have
    changed since the functionalizer recorded them: the barrier pass renames what it orders).

    Left out, where eager's backward through the value would raise: an op on its gradient path
    that eager's backward saves storage of, which a write kept in place changes later
    (``b.addcmul_(a, a)``, then a no-grad ``a.mul_(1.5)`` into ``a`` requiring grad: soak seeds
    86000/86001).  Adopting would make that backward reachable, and refused (Thunder's reads the
    new ``a``) where eager only raises if the caller differentiates through ``b``.  The caller's
    tensor then gets the value without its history (under ThunderFX, the refusal).  A kept write
    *before* the op is one eager saw too (``with torch.no_grad(): b.mul_(a)``, then
    ``c.copy_(b)``): adopted.

    Every other value is adopted, also one that no returned output is computed from
    (``b.copy_(w * 2); return (x.cos(),)``): the caller may differentiate through ``b`` after
    the call, as eager allows.  Where it never does, Thunder's one backward node gives ``w`` a
    zero gradient where eager leaves it ``None`` (``torch.compile`` the same; docs/limits.md).
    Leaving such a value without its history instead dropped every gradient through ``b``,
    silently, for a caller who reads it.
    """
    copies = {b.flat_proxy_outs[0].name: b for b in computation.bound_symbols if b.sym.id == prims.PrimIDs.COPY_ and b.flat_proxy_outs}
    found = {}
    for name in histories:
        copy = epilogue_writes.get(name)
        mine = copies.get(copy.flat_proxy_outs[0].name) if copy is not None and copy.flat_proxy_outs else None
        if mine is not None and isinstance(mine.args[0], TensorProxy):
            found[name] = mine.args[0]
    if not found:
        return found
    bsyms = computation.bound_symbols
    made_by = producers(bsyms)
    info = storage_groups(bsyms, input_names(computation))
    named = (c.flat_proxy_outs[0].name for c in epilogue_writes.values() if c.flat_proxy_outs)
    epilogue = {id(copies[n]) for n in named if n in copies}
    last_kept: dict[str, int] = {}  # storage group -> position of its last write kept in place
    for i, (b, e) in enumerate(zip(bsyms, info.effects)):
        if id(b) not in epilogue:
            for w in e.writes:
                last_kept[info.group_of(w)] = i
    position = {id(b): i for i, b in enumerate(bsyms)}
    diff = frozenset(differentiable_names(computation))
    return {
        name: value
        for name, value in found.items()
        if not _saves_storage_a_kept_write_changes_later(made_by, position, info, last_kept, diff, value)
    }


def _saves_storage_a_kept_write_changes_later(made_by, position, info, last_kept, diff, value: TensorProxy) -> bool:
    """Whether an op on ``value``'s gradient path saves, in eager, storage that a write kept in
    place changes at or after that op: eager's backward through the value would then raise.

    Only eager's saves count (:func:`thunder_ext.meta_calls.saves_input`).  Where eager's backward
    would not raise, the value is adopted, and Thunder's backward reading the changed storage is
    refused at the fusion stage (``refuse_saved_tensor_mutation``), never silently wrong; leaving
    such a value out loses its gradient silently for a caller who reads the input after the call.
    The path stops at what a no-grad block made (a constant to autodiff).  A barrier and a write
    made without grad save nothing: the gradient passes through them to what they write.
    Invariant: program order is the order of every access to written storage (the barriers
    make it so), so a kept write before the op is one the op saw, as in eager.
    """
    seen: set[str] = set()
    todo = [value]
    while todo:
        p = todo.pop()
        if p.name in seen:
            continue
        seen.add(p.name)
        b = made_by.get(p, None)
        if b is None or is_detached(b):
            continue
        args = [a for a in b.flat_proxy_args if isinstance(a, TensorProxy)]
        at = position[id(b)]
        if not is_barrier(b) and (writes_with_grad(b) or not info.effects[at].writes):
            if any(last_kept.get(info.group_of(a), -1) >= at and saves_input(b, a, diff) for a in args):
                return True
        todo.extend(args)
    return False


def route_histories(
    prologue: TraceCtx,
    computation: TraceCtx,
    epilogue: TraceCtx,
    values: dict[str, TensorProxy],
    returned_inputs: dict[int, str],
    *,
    by_answer: dict[str, tuple] | None = None,
) -> tuple[TraceCtx, TraceCtx, TraceCtx, HistoryReport]:
    """The three traces with each input of ``values`` adopting its value's history in the epilogue.

    ``values``: :func:`written_values`; ``returned_inputs``: the flat output positions that are
    the input itself in eager (``FunctionalizeReport.returned_inputs``).  ``by_answer``: inputs
    that adopt it only for one answer of a run-time stride choice
    (:func:`thunder_ext.stride_choices.histories_by_answer`); the inputs whose strides decide are
    handed to the epilogue too.
    """
    by_answer = by_answer or {}
    report = HistoryReport()
    if not values:
        return prologue, computation, epilogue, report
    ret = computation.bound_symbols[-1]
    out = list(ret.args[0]["output"])
    pret = prologue.bound_symbols[-1]
    handed_in, handed_epi = pret.args[0]
    by_name = {p.name: p for p in handed_in if isinstance(p, TensorProxy)}
    names = [n for n in sorted(values) if n in by_name]
    if not names:
        return prologue, computation, epilogue, report

    # The computation: each value not returned already becomes one more output.
    slot: dict[str, int] = {}
    for k, n in returned_inputs.items():
        if n in names and k < len(out) and isinstance(out[k], TensorProxy) and out[k].name == values[n].name:
            slot.setdefault(n, k)
    # A value returned already (a run-time stride choice returns it for the input) is taken from
    # its slot: the same tensor handed out twice would reach autograd as two outputs of one node.
    returned_at = {o.name: k for k, o in reversed(list(enumerate(out))) if isinstance(o, TensorProxy)}
    for n in names:
        if n not in slot and values[n].name in returned_at:
            slot[n] = returned_at[values[n].name]
    extras: list[TensorProxy] = []
    for n in names:
        if n not in slot:
            slot[n] = len(out) + len(extras)
            extras.append(values[n])
    new_computation = computation
    if extras:
        new_computation = from_trace(computation)
        new_ret = ret.from_bsym(args=({**ret.args[0], "output": (*out, *extras)}, *ret.args[1:]))
        new_computation.bound_symbols = [*computation.bound_symbols[:-1], new_ret]
        new_computation.set_provenance(TraceProvenance(f"thunder_ext input histories ({len(extras)} values handed to the epilogue)"))

    # The prologue hands the caller's tensors to the epilogue, and those whose strides decide.
    roots = [r.name for n in names if n in by_answer for r in by_answer[n][0]]
    handed = list(dict.fromkeys([*names, *roots]))
    if any(n not in by_name for n in handed):
        by_answer, handed = {}, names  # a root the prologue does not hand in: adopt in both answers
    new_prologue = from_trace(prologue)
    new_prologue.bound_symbols = [
        *prologue.bound_symbols[:-1],
        pret.from_bsym(args=((handed_in, (*handed_epi, *(by_name[n] for n in handed))), *pret.args[1:])),
    ]
    new_prologue.set_provenance(TraceProvenance("thunder_ext input histories (inputs handed to the epilogue)"))

    # The epilogue: each tensor adopts its value's history, and stands for itself where returned.
    n_handed = len(handed_epi)
    new_epilogue = from_trace(epilogue)
    # The epilogue's arguments are named by the computation, not by this trace: the new proxies
    # must not take those names (``def epilogue(t1, t2, t1, ...)``).
    new_epilogue.names.update(p.name for p in epilogue.args if isinstance(p, TensorProxy))
    new_epilogue.names.update(p.name for b in epilogue.bound_symbols for p in (*b.flat_proxy_args, *b.flat_proxy_outs))
    new_epilogue.names.update(v.name for v in extras)
    with tracectx(new_epilogue):
        tensors = {n: TensorProxy(like=by_name[n]) for n in handed}
        extra_args = [TensorProxy(like=v) for v in extras]
        args = [*epilogue.args[:n_handed], *tensors.values(), *epilogue.args[n_handed:], *extra_args]
        outputs = list(epilogue.args[n_handed:]) + extra_args
        adopts, swap = [], {}
        for n in names:
            t, adopted = tensors[n], TensorProxy(like=tensors[n])
            if n in by_answer:
                rs, recipe, kind, shape, when = by_answer[n]
                epi_roots = tuple(tensors[r.name] for r in rs)
                adopts.append(
                    adopt_history_by_strides.bind(t, outputs[slot[n]], epi_roots, recipe, kind, shape, when, output=adopted)
                )
            else:
                adopts.append(adopt_history.bind(t, outputs[slot[n]], output=adopted))
            for k, m in returned_inputs.items():
                if m == n and k < len(out):
                    swap[variableify(outputs[k])] = adopted
    eret = epilogue.bound_symbols[-1]
    new_epilogue.args = args
    new_epilogue.bound_symbols = [*epilogue.bound_symbols[:-1], *adopts, eret.from_bsym_swap_proxies(swap) if swap else eret]
    sig = SigInfo("epilogue")
    sig.args = [(a.name, None) for a in args]
    new_epilogue._siginfo = sig
    new_epilogue.set_provenance(TraceProvenance(f"thunder_ext input histories ({len(names)} inputs adopt their write's history)"))
    report.adopted, report.extra_outputs = names, len(extras)
    return new_prologue, new_computation, new_epilogue, report
