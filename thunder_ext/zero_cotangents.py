"""Which reads of a joint forward-backward trace change what it returns.

Thunder's autodiff gives an output that nothing uses a cotangent of zeros and still runs the
backward of the op that made it, when the op cannot go (``batch_norm`` also writes its running
statistics).  Such a backward reads what the forward saved, multiplies it by zeros, and adds
nothing to any gradient.  Eager never runs it: no output reaches the node.  A forward write into
what it saved then changes no result, and refusing it (class 6) would refuse a program that eager
and plain Thunder answer.

:func:`reads_that_matter` is liveness from the return, as Thunder's ``dce`` computes it, except
that a product with a tensor known to be zero needs only that zero (:func:`known_zeros`).

Before (the backward of an unused ``batch_norm`` output, ``t271`` the old value of ``a``)::

    t315 = torch.zeros(4, 3)                # the unused output's cotangent
    t325 = torch.mul(t286, t315)
    t328 = torch.sum(t325, (0,))
    t353 = torch.mul(2, torch.unsqueeze(t328, 0))
    t354 = torch.sub(t271, t352)            # reads a
    t355 = torch.mul(t353, t354)
    t358 = torch.add(t168, t355)
    return {'output': (t358,), ...}

``t315``, ``t325``, ``t328`` and ``t353`` are known zeros, so ``t355`` is one too, and ``t354``
is not among the reads that matter: the value of ``a`` it reads changes nothing returned.

Invariant: a name is a known zero only when every element is ``0`` for any finite input: a
``zeros``/``full(0)`` factory, or an op that maps zeros to zeros (a product with one, a sum, a
view, a choice between zeros).  A non-finite value times zero is not zero, which the rule
ignores as Thunder's own backward does (it computes those products too): where a write made the
saved value infinite, the gradient the zero product is added to is NaN, where eager's is finite
(``docs/limits.md``).
Writes, and bsyms Thunder's ``dce`` must keep, are roots: what they read always matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Number

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, has_tags

from thunder_ext.op_kinds import effect_of, is_return, origin_ids, tensor_args

PrimIDs = prims.PrimIDs

# Factories of zeros whatever their arguments, and those whose fill value (argument 1) may be 0.
_ZEROS = frozenset({ltorch.zeros.id, ltorch.zeros_like.id, ltorch.new_zeros.id})
_FILLED = frozenset({ltorch.full.id, ltorch.full_like.id, PrimIDs.FULL})
# Zero when their first tensor argument is: sums and views keep every zero a zero.
_KEEP_ZEROS = frozenset({
    ltorch.neg.id, ltorch.sum.id, ltorch.unsqueeze.id, ltorch.squeeze.id, ltorch.expand.id, ltorch.reshape.id,
    ltorch.view.id, ltorch.transpose.id, ltorch.permute.id, ltorch.clone.id, ltorch.contiguous.id, ltorch.to.id,
    PrimIDs.NEG, PrimIDs.SUM, PrimIDs.RESHAPE, PrimIDs.BROADCAST_IN_DIM, PrimIDs.SQUEEZE, PrimIDs.TRANSPOSE,
    PrimIDs.SHALLOW_COPY, PrimIDs.CONVERT_ELEMENT_TYPE, PrimIDs.CLONE, PrimIDs.STRIDE_ORDER,
})  # fmt: skip
# Zero when every argument is (a number must be 0 too).
_SUMS = frozenset({ltorch.add.id, ltorch.sub.id, PrimIDs.ADD, PrimIDs.SUB})
# Zero when any tensor argument is, or when the first is (a quotient).
_PRODUCTS = frozenset({ltorch.mul.id, PrimIDs.MUL})
_QUOTIENTS = frozenset({ltorch.true_divide.id, ltorch.div.id, PrimIDs.DIV})
# Zero when both values it chooses from (arguments 1 and 2) are, whatever the condition: the
# backward of a functional ``copy_`` (``where(True, src, dst)``) routes a zero cotangent so.
_CHOICES = frozenset({ltorch.where.id, PrimIDs.WHERE})


def _is_zero_number(x) -> bool:
    return isinstance(x, Number) and not isinstance(x, bool) and x == 0


def _ids(b: BoundSymbol) -> frozenset:
    """The symbol's ids, and those of the one symbol it stands for (an executor's ``zeros`` is
    ``ltorch.zeros`` underneath)."""
    ids = origin_ids(b)
    return ids | origin_ids(b.subsymbols[0]) if len(b.subsymbols) == 1 else ids


def known_zeros(bsyms: Sequence[BoundSymbol]) -> set[str]:
    """Names of the tensors in ``bsyms`` that are all zeros (see the module's invariant)."""
    zeros: set[str] = set()

    def zero(x) -> bool:
        return (isinstance(x, TensorProxy) and x.name in zeros) or _is_zero_number(x)

    for b in bsyms:
        ids = _ids(b)
        tensors = tensor_args(b)
        if effect_of(b).writes:
            continue
        if ids & _ZEROS:
            made = True
        elif ids & _FILLED:
            made = len(b.args) > 1 and _is_zero_number(b.args[1])
        elif ids & _KEEP_ZEROS:
            made = bool(tensors) and zero(tensors[0])
        elif ids & _SUMS:
            made = all(zero(a) for a in b.args if isinstance(a, (TensorProxy, Number)))
        elif ids & _PRODUCTS:
            made = any(zero(a) for a in b.args)
        elif ids & _QUOTIENTS:
            made = bool(b.args) and zero(b.args[0])
        elif ids & _CHOICES:
            made = len(b.args) == 3 and zero(b.args[1]) and zero(b.args[2])
        else:
            made = False
        if made:
            zeros.update(p.name for p in b.flat_proxy_outs if isinstance(p, TensorProxy))
    return zeros


def reads_that_matter(bsyms: Sequence[BoundSymbol]) -> set[str]:
    """Names whose value can change what the return hands back, or what a write stores."""
    zeros = known_zeros(bsyms)
    needed: set[str] = set()
    for b in reversed(bsyms):
        root = is_return(b) or bool(effect_of(b).writes) or has_tags(b, {prims.OpTags.DONT_DCE})
        if not root and not any(p.name in needed for p in b.flat_proxy_outs):
            continue
        if not root and any(p.name in zeros for p in b.flat_proxy_outs):
            continue  # all zeros whatever it reads
        needed.update(p.name for p in b.flat_proxy_args)
    return needed
