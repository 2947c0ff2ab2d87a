"""Ops that hand back their input itself, folded away before any analysis reads the trace.

In eager PyTorch a no-op ``to``/``type``/``type_as``/``float``, and ``dropout`` with ``p=0`` or in
eval mode return *the same tensor object*: a later
write to either name is a write to both, a read of either sees it, and after a write that carries
a gradient both names carry its history.  Thunder traces them as a new proxy made by
``prims.shallow_copy``, which the alias analysis sees as a second name for the same storage.
Every later step then has to prove that a read of the second name after a write to the first is
the same read; where it cannot, it refuses or barriers (a read "through a view" after a write),
and autodiff treats the second name as a tensor of its own, whose history the write never reaches
(``t0 = rm.to(torch.float32); rm.copy_(a.sum(0)); return t0``: eager's ``t0`` is ``rm`` with
``copy_``'s history, plain Thunder's has none).

:func:`fold_identity_ops` makes the trace say what eager does: every use of such an op's output
reads its input, and the op goes.

Before (``rm`` a buffer, ``a`` requires grad)::

    t0 = ltorch.to(rm, None, None, device=None, dtype=float32, ...)   # t0 is rm in eager
    t2 = ltorch.sum(a, 0, False, dtype=None)
    t3 = ltorch.copy_(rm, t2, grad_enabled=True)
    return (t0,)

After::

    t2 = ltorch.sum(a, 0, False, dtype=None)
    t3 = ltorch.copy_(rm, t2, grad_enabled=True)
    return (rm,)

The functional-input pass then returns the value written, with its history, as it does for
``return rm``.

Invariant: an op is folded only when eager returns its input object when it has nothing to do
(the table :data:`RETURNS_ITS_INPUT`), Thunder says its output aliases its first tensor argument
(the alias analysis' ``aliases``), with the same shape and dtype, and every indivisible subsymbol
is a ``shallow_copy``: the op computes nothing, so no value is lost.  Or the op is one Thunder
registered automatically (it has no symbol of its own: ``torch.positive``, ``t.cpu()``,
``F.alpha_dropout``), and eager, called on meta tensors with the same arguments, returns its
input object, with the same shape, dtype and device: at run time the PyTorch op hands back its
input, which Thunder, taking the output for a new tensor, never sees.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from thunder.core import prims
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.pytree import tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.meta_calls import returns_its_input
from thunder_ext.op_kinds import (
    effect_of,
    is_auto_registered,
    is_return,
    origin_ids,
    returned_outputs,
    tensor_args,
    tensor_outs,
)
from thunder_ext.recording import at_source_of, record


# The symbols whose eager op returns its input object itself when it has nothing to do.  Not the
# views that Thunder also traces as a bare ``shallow_copy`` when their shape does not change
# (``reshape``, ``view``, ``x[:]``): eager returns a new tensor there, which, made under no-grad,
# does not require grad where its base does.  Not ``contiguous`` either: eager's answer depends on
# the input's strides, which Thunder does not trace (its ``stride_order`` may alias or copy).
RETURNS_ITS_INPUT = frozenset({
    "to", "torch_type", "type_as", "float", "double", "half", "bfloat16", "long",
    "dropout", "flatten", "atleast_1d", "atleast_2d", "atleast_3d", "real",
})  # fmt: skip


def is_identity(bsym: BoundSymbol, effect=None) -> bool:
    """``bsym`` hands back its first tensor argument itself: one of :data:`RETURNS_ITS_INPUT`,
    here a :func:`shallow_copy_of_input`; or a symbol Thunder registered automatically for a
    PyTorch op it has none of, which eager, called with these arguments, answers with its input
    object (:func:`thunder_ext.meta_calls.returns_its_input`)."""
    if bsym.sym.name in RETURNS_ITS_INPUT and shallow_copy_of_input(bsym, effect):
        return True
    return _auto_registered_identity(bsym)


def _auto_registered_identity(bsym: BoundSymbol) -> bool:
    # Thunder takes such an op's output for a new tensor (only the views it lists are aliases),
    # but at run time the PyTorch op hands back its input object: ``torch.positive``, ``t.cpu()``
    # on the CPU, ``t.int()`` of an int32 tensor, ``F.alpha_dropout`` with ``p=0``.  A write to
    # either name is then a write to both, which no later step would see.
    if not is_auto_registered(bsym):
        return False
    args, outs = tensor_args(bsym), tensor_outs(bsym)
    if not args or len(outs) != 1:
        return False
    a, o = args[0], outs[0]
    if tuple(o.shape) != tuple(a.shape) or o.dtype != a.dtype or o.device != a.device:
        return False
    return returns_its_input(bsym)


def shallow_copy_of_input(bsym: BoundSymbol, effect=None) -> bool:
    """``bsym`` is a composite whose every leaf is ``shallow_copy``, its output aliasing its first
    tensor argument with that argument's shape and dtype: called again on a new value, it gives
    that value."""
    # Cheapest tests first: this runs on every bsym of the trace.
    if not bsym.subsymbols:
        return False
    args, outs = tensor_args(bsym), tensor_outs(bsym)
    if not args or len(outs) != 1 or tuple(outs[0].shape) != tuple(args[0].shape) or outs[0].dtype != args[0].dtype:
        return False
    if not all(prims.PrimIDs.SHALLOW_COPY in origin_ids(leaf) for leaf in prims_of(bsym)):
        return False
    effect = effect_of(bsym) if effect is None else effect
    return not effect.writes and [(o.name, a.name) for o, a in effect.aliases] == [(outs[0].name, args[0].name)]


def prims_of(bsym: BoundSymbol):
    """The indivisible subsymbols of a composite, however deeply nested (``type_as`` -> ``to`` -> prims)."""
    for sub in bsym.subsymbols:
        if sub.subsymbols:
            yield from prims_of(sub)
        else:
            yield sub


@dataclass
class IdentityFoldReport:
    folded: list[str] = field(default_factory=list)  # "t0 = to(rm)": each op folded, in trace order

    def __bool__(self) -> bool:
        return bool(self.folded)


def fold_identity_ops(trace: TraceCtx) -> tuple[TraceCtx, IdentityFoldReport]:
    """``trace`` with every identity op (:func:`is_identity`) removed and its output's uses reading
    its input; ``trace`` itself when there is none.  The input trace is never mutated.  Two
    outputs may then be one proxy, as they are one tensor in eager: see
    :func:`separate_repeated_outputs`."""
    start = time.perf_counter()
    report = IdentityFoldReport()
    swap: dict = {}
    out: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        if swap:
            bsym = bsym.from_bsym_swap_proxies(swap, skip_output=True)
        if is_identity(bsym):
            (o,), a = tensor_outs(bsym), tensor_args(bsym)[0]
            swap[variableify(o)] = a
            report.folded.append(f"{o.name} = {bsym.sym.name}({a.name})")
            continue
        out.append(bsym)
    if not report:
        return trace, report
    new = from_trace(trace)
    new.bound_symbols = out
    new.set_provenance(
        TraceProvenance(
            f"thunder_ext fold identity ops ({len(report.folded)} folded, took {(time.perf_counter() - start) * 1e3:.1f} ms)"
        )
    )
    return new, report


def separate_repeated_outputs(trace: TraceCtx, differentiable: frozenset[str]) -> tuple[TraceCtx, list[str]]:
    """``trace`` with each output the return hands back more than once, and that gradients flow
    through, handed back again as a ``shallow_copy`` of it after its first place; ``trace`` itself
    when there is none.

    Folded identity ops can make two outputs one proxy (``t1 = t0.type_as(t0)``, then ``return
    t0, t1``: one tensor in eager), and so can a returned input whose writes became values
    (``a0 = a; a += b; return a0, a``: both are the value written).  Thunder's autodiff gives a
    repeated output one cotangent, so the second output's gradient would be lost; a
    ``shallow_copy`` is the same values under another name, whose gradient is the identity.

    Before::

        return {'output': (t8, t8), 'flat_args': [a]}

    After::

        t9 = prims.shallow_copy(t8)
        return {'output': (t8, t9), 'flat_args': [a]}
    """
    ret = trace.bound_symbols[-1] if trace.bound_symbols else None
    if ret is None or not is_return(ret) or not differentiable:
        return trace, []
    outputs = returned_outputs(ret)
    seen: set[str] = set()
    repeated: list[TensorProxy] = []
    for p in outputs:
        if p.name in seen and p.name in differentiable:
            repeated.append(p)
        seen.add(p.name)
    if not repeated:
        return trace, []
    new = from_trace(trace)
    made, copies = record(new, lambda: [prims.shallow_copy(p) for p in repeated])
    pending = {p.name: [] for p in repeated}
    for p, c in zip(repeated, copies):
        pending[p.name].append(c)
    first: set[str] = set()

    def again(x):
        if isinstance(x, TensorProxy) and x.name in pending:
            if x.name in first:
                return pending[x.name].pop(0)
            first.add(x.name)
        return x

    first_arg = ret.args[0]
    if isinstance(first_arg, dict) and "output" in first_arg:
        args = ({**first_arg, "output": tree_map(again, first_arg["output"])}, *ret.args[1:])
    else:
        args = tree_map(again, ret.args)
    new.bound_symbols = [*trace.bound_symbols[:-1], *at_source_of(made, ret), ret.from_bsym(args=args)]
    new.set_provenance(TraceProvenance(f"thunder_ext repeated outputs ({len(repeated)} handed back as a shallow_copy)"))
    return new, [p.name for p in repeated]
