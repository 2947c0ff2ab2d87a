"""Eager's own overlap check, made at run time on the caller's strides.

Eager refuses an in-place op whose source and destination are both dense in memory and whose
memory ranges meet (``assert_no_overlap``: "some elements of the input tensor and the written-to
tensor refer to a single memory location"); for any other layout its overlap status is "too
hard", and it computes, in its kernel's order.  Which one a call gets depends on the strides of
the inputs the two tensors are made from, which no trace records::

    t0 = b.split(2)[1]                 # rows 2 and 3 of b
    b.index_copy_(0, idx, t0)          # b contiguous: eager raises; b transposed: eager computes

:mod:`thunder_ext.index_order` writes such an op one entry at a time, which is eager's answer
wherever eager computes one, and puts this guard before the body::

    refuse_if_eager_sees_overlap((b,), <recipe of b>, <recipe of t0>, False, '...')
    t0 = ltorch.getitem(...)
    ...                                # the entries

The guard makes both tensors again from the caller's strides on meta tensors
(:func:`thunder_ext.stride_choices.run_recipe`, no data read) and raises
:class:`~thunder_ext.errors.OverlappingSourceError` where eager's check would.  Its answer is
kept by recipe and the roots' layouts, so a call pays a dict lookup.

Only where both tensors are made from the same trace inputs by views and ops that lay their
output out by their inputs (a :func:`~thunder_ext.stride_choices.layout_recipe`); anywhere else
(a base from a factory or a matmul, whose layout the trace fixes) the check made when the
function is compiled stands.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from thunder.core import dtypes, prims
from thunder.core.proxies import ProxyTag, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.extend import OperatorExecutor

from thunder_ext.alias_analysis import AliasInfo, proxy_named
from thunder_ext.op_kinds import describe
from thunder_ext.stride_choices import NoRecipe, layout_recipe, meta_like, recipe_context, run_recipe


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t`` covers a contiguous range of memory once each (c10's non-overlapping and
    dense: size-1 dimensions aside, the strides sorted are the running products of the sizes)."""
    need = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != need:
            return False
        need *= size
    return True


def overlap_status(a: torch.Tensor, b: torch.Tensor, *, same: bool = False) -> str:
    """Eager's ``get_overlap_status`` of two tensors of one storage (offsets are compared as
    they are, so both must be made from the same roots): 'full', 'partial', 'no' or 'too hard'.
    ``same``: the two are one tensor in the program."""
    if same:
        return "full"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if not (_dense(a) and _dense(b)):
        return "too hard"
    a0, b0 = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if (a0, a1) == (b0, b1):
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


# What eager refuses: index kernels any overlap (``assert_no_overlap``), a copy a partial one.
_REFUSED = {False: frozenset({"full", "partial"}), True: frozenset({"partial"})}
# Each answer, by recipes and the roots' shapes, strides and dtypes.
_ANSWERS: dict[tuple, bool] = {}


def _refuse_if_eager_sees_overlap(
    roots: tuple, dst_recipe: tuple, src_recipe: tuple, partial_only: bool, same: bool, message: str
) -> torch.Tensor:
    """Raise where eager's check sees the overlap; else a 0-d ``True``, which the barrier pass
    orders the writes into the roots after (it reads the roots' strides, and no data)."""
    layouts = tuple((tuple(r.shape), r.stride(), r.dtype) for r in roots)
    key = (repr(dst_recipe), repr(src_recipe), partial_only, same, layouts)
    refused = _ANSWERS.get(key)
    if refused is None:
        status = overlap_status(run_recipe(roots, dst_recipe), run_recipe(roots, src_recipe), same=same)
        refused = status in _REFUSED[partial_only]
        if len(_ANSWERS) >= 4096:
            _ANSWERS.clear()
        _ANSWERS[key] = refused
    if refused:
        from thunder_ext.errors import OverlappingSourceError

        raise OverlappingSourceError(message)
    return torch.ones((), dtype=torch.bool, device=roots[0].device)


def _guard_meta(roots: tuple, *args) -> TensorProxy:
    out = TensorProxy(shape=(), device=roots[0].device, dtype=dtypes.bool8, requires_grad=False)
    out.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)  # from metadata: no gradient flows through it
    return out


_GUARDS = OperatorExecutor("thunder_ext_overlap_guards")
# Never dead code: nothing reads its output, and its effect is the refusal.
refuse_if_eager_sees_overlap = _GUARDS.register_operator(
    "refuse_if_eager_sees_overlap", meta=_guard_meta, fn=_refuse_if_eager_sees_overlap, tags=[prims.OpTags.DONT_DCE]
)


def guard_arguments(
    bsyms: Sequence[BoundSymbol], info: AliasInfo, bsym: BoundSymbol, dst: TensorProxy, src: TensorProxy, key=None
) -> tuple | None:
    """The arguments of :data:`refuse_if_eager_sees_overlap` for ``bsym`` writing ``dst`` (or
    ``dst[key]``, a ``setitem_``) while reading ``src``; None where the two are not both made
    from the same trace inputs by a layout recipe (the compile-time answer then stands)."""
    made_at, whole = recipe_context(bsyms, info)
    try:
        dst_roots, dst_recipe = layout_recipe(dst.name, bsyms, info, made_at, whole)
        src_roots, src_recipe = layout_recipe(src.name, bsyms, info, made_at, whole)
    except NoRecipe:
        return None
    if not dst_roots or dst_roots != src_roots:
        return None  # no input's strides decide (the check made now stands), or two inputs
    if key is not None:  # eager's copy goes into the part the key selects
        dst_recipe = (*dst_recipe, ("torch.Tensor.__getitem__", (None, key), (), ((0, len(dst_recipe) - 1),)))
    roots = tuple(proxy_named(bsyms, r) for r in dst_roots)
    try:  # tried once now, on contiguous roots: a recipe that cannot run would fail every call
        metas = [meta_like(r) for r in roots]
        run_recipe(metas, dst_recipe), run_recipe(metas, src_recipe)
    except Exception:
        return None
    partial_only = key is not None
    message = (
        f"`{bsym.sym.name}` writes `{dst.name}` while reading `{src.name}`, and for the strides of this call "
        "both are dense in memory and meet. Eager refuses it too (\"some elements of the input tensor and "
        f"the written-to tensor refer to a single memory location\"). Clone the source first (`{src.name}.clone()`), "
        f"or write out of place\n  involved: {describe(bsym)}"
    )
    return roots, dst_recipe, src_recipe, partial_only, dst.name == src.name, message
