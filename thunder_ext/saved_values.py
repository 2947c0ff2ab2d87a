"""Old values of written inputs that the backward reads, kept by one ``clone`` each.

Before autodiff a write to an input becomes a value, and the input gets its final value back
from one epilogue ``copy_`` at the end of the forward (:mod:`thunder_ext.functionalize`).
Where a gradient flows through the value written, autodiff may save the input's *old* value
for the backward: ``a.mul_(b)`` is ``a1 = a * b``, and ``b``'s gradient is ``g * a``.  The
backward runs after the forward, so after the epilogue has overwritten ``a``.  At the fusion
stage, on the joint trace, this step gives each such backward read a copy of the old value,
taken as soon as the value exists, as AOT autograd does for a mutated input it saves::

    before                                      after
                                                t40 = torch.clone(a)
    t30 = torch.mul(a, b)                       t30 = torch.mul(a, b)
    t33 = torch.sum(t30, 0)                     t33 = torch.sum(t30, 0)
    t34 = copy_(t30, a, grad_enabled=False)     t34 = copy_(t30, a, grad_enabled=False)
    t16 = prims.get_grad(t33)                   t16 = prims.get_grad(t33)
    ...                                         ...
    t38 = torch.mul(a, t37)   # backward        t38 = torch.mul(t40, t37)

The barrier pass then orders the clone before the epilogue like any other read of ``a``; on
the final trace ``mul`` is then the last reader of the old ``a`` and writes it in place
(:func:`thunder_ext.reinplace.reinplace_inputs`), so the epilogue goes and the clone is the
only copy.
The copy is the price of eager's answer: without it the backward would read the new value
(class 6); each one is counted in ``BarrierReport.saved_old_values``.

Invariants: only forward ``copy_``s into ``config.epilogue_inputs`` are epilogues (one per
input, its last write); only proxies of the input's storage made before the epilogue are
cloned, and only reads by bsyms tagged ``BACKWARD`` are renamed.
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, has_tags
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import input_names, storage_groups
from thunder_ext.functionalize import _claim
from thunder_ext.op_kinds import effect_of, is_copy, tensor_args
from thunder_ext.recording import at_source_of, record
from thunder_ext.stage_config import StageConfig


def keep_old_values_for_backward(
    trace: TraceCtx, new_trace: TraceCtx, bsyms: list[BoundSymbol], config: StageConfig, effects: dict | None = None
) -> tuple[list[BoundSymbol], list[str]]:
    """``bsyms`` with a clone of each old value of an epilogue input that the backward reads,
    and the names of the values cloned.  ``new_trace`` names the clones."""
    if not config.epilogue_inputs or config.executors is None:
        return bsyms, []
    if not any(has_tags(b, {BoundSymbolTag.BACKWARD}) for b in bsyms):
        return bsyms, []  # no backward, nothing to save: no alias analysis either
    inputs = input_names(trace)
    info = storage_groups(bsyms, inputs, config.aliased_inputs, cache=effects)
    epilogue_at: dict[str, int] = {}  # group -> index of its epilogue copy_
    for i, b in enumerate(bsyms):
        if has_tags(b, {BoundSymbolTag.BACKWARD}) or not is_copy(b):
            continue
        writes = effect_of(b).writes
        if len(writes) == 1 and writes[0].name in config.epilogue_inputs:
            epilogue_at[info.group_of(writes[0])] = i
    if not epilogue_at:
        return bsyms, []
    made_at: dict[str, int] = {}
    for i, b in enumerate(bsyms):
        for p in b.flat_proxy_outs:
            made_at.setdefault(p.name, i)
    # Each clone goes right after its value is made (an input: at the start), not just before the
    # epilogue: the op computing the input's new value is then the last reader of its old one, so
    # on the final trace it writes the input in place and the epilogue goes (reinplace_inputs).
    needed: dict[int, dict[str, tuple[TensorProxy, int]]] = {}  # insertion index -> old values to clone there
    for b in bsyms:
        if not has_tags(b, {BoundSymbolTag.BACKWARD}):
            continue
        for p in tensor_args(b):
            k = epilogue_at.get(info.group_of(p)) if p.name in info.groups else None
            made = made_at.get(p.name, -1 if p.name in inputs else len(bsyms))
            if k is not None and made < k:
                needed.setdefault(made + 1, {})[p.name] = (p, k)
    if not needed:
        return bsyms, []
    swap: dict = {}
    clones: dict[int, list[BoundSymbol]] = {}
    for at, olds in needed.items():
        for p, k in olds.values():
            like = bsyms[k]  # the epilogue: the source line of the input's last write
            made, saved = record(new_trace, lambda: ltorch.clone(p))
            clones.setdefault(at, []).extend(at_source_of(_claim(trace, made, config.executors), like))
            swap[variableify(p)] = saved
    out: list[BoundSymbol] = []
    for i, b in enumerate(bsyms):
        out.extend(clones.get(i, ()))
        if has_tags(b, {BoundSymbolTag.BACKWARD}) and any(variableify(p) in swap for p in tensor_args(b)):
            b = b.from_bsym_swap_proxies({v: s for v, s in swap.items()}, skip_output=True)
        out.append(b)
    return out, sorted(name for olds in needed.values() for name in olds)
