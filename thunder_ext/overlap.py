"""Overlapping sources: an in-place op that reads elements it also writes, elsewhere.

Eager runs an in-place op as one kernel over the destination.  When a source operand shares
elements with the destination *at other positions*, the result depends on the order the kernel
visits them: the CPU kernels see their own earlier writes.  Eager refuses the cases its overlap
check can see (two dense tensors: "some elements of the input tensor and the written-to tensor
refer to a single memory location"), and computes the rest.  Thunder, plain or with the
transform, reads every source before it writes, as if the source were cloned::

    t0 = a[::2]                      # rows 0 and 2 of a
    a[1:].index_copy_(0, idx, t0)    # idx = [1, 0]: writes row 2, then reads it as t0[1]

Eager gives rows 1 and 2 of ``a`` the old row 0; Thunder gives row 1 the old row 2.  No
trace order can reproduce the visiting order inside one op, so :func:`refuse_overlapping_sources`
refuses such a write, and says to clone the source.  (An ``index_copy_`` or ``index_add_``,
whose kernel visits one index entry after another, is first split into one write per entry by
:mod:`thunder_ext.index_order`; each entry is then checked here as the kind 'entry'.)  It runs on the trace before autodiff,
with Thunder's own barriers stripped, and decides on the elements themselves: each proxy's
elements are found by replaying its view chain on ``arange`` over its base (the same replay the
functionalization pass does for scatters), with PyTorch's own view functions, found through
Thunder's table of them.

* :data:`ORDER_DEPENDENT`: ops whose visiting order follows an index or a mask; any element
  shared between a source and the destination is a hazard, even at the same position
  (``index_copy_`` with source ``self`` moves rows it has already overwritten).
* An elementwise op (whose decomposition has no matmul, reduction or shape prim besides
  broadcasts) reads element *i* of its sources only to write element *i*: a source that
  shares elements at the *same* positions (``a.add_(a)``) is safe.
* Any other op (``addmm_``, ``baddbmm_``) computes its result whole before writing it, in eager
  too: not checked.

Where the elements cannot be found (a view chain with a tensor index, two aliasing inputs, a
base over :data:`MAX_REPLAY_NUMEL` elements), a source in the destination's storage group is
refused too: the transform never guesses an order.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import AliasInfo

if TYPE_CHECKING:
    from thunder_ext.index_order import SplitReport
from thunder_ext.errors import OverlappingSourceError
from thunder_ext.op_kinds import effect_of, is_copy, is_copy_composite, is_return, origin_ids, returned_data, tensor_args

# In-place ops whose kernel visits the destination in the order an index (or a mask) gives.
ORDER_DEPENDENT = frozenset(
    {
        "index_copy_", "index_add_", "index_put_", "index_reduce_", "index_fill_",
        "scatter_", "scatter_add_", "scatter_reduce_", "masked_scatter_", "put_",
    }
)  # fmt: skip
# Index ops whose CPU kernel visits the index entries one after another, with the names of their
# (dim, index, source) parameters: one with a single entry is checked as an elementwise copy of
# its source row into each row the index may name (thunder_ext.index_order splits the others).
SPLIT_BY_ENTRY = {
    "index_copy_": ("dim", "index", "source"),
    "index_add_": ("dim", "index", "source"),
}
# Prim tags that make an op other than elementwise (its result is computed whole first).
_NOT_ELEMENTWISE_TAGS = frozenset({prims.OpTags.MATMUL_OP, prims.OpTags.REDUCTION_OP, prims.OpTags.SHAPE_OP})
# Prims an elementwise op may contain besides elementwise ones.
_ELEMENTWISE_GLUE = frozenset({prims.PrimIDs.BROADCAST_IN_DIM, prims.PrimIDs.CONVERT_ELEMENT_TYPE, prims.PrimIDs.COPY_})
# Replaying a view chain allocates its base's element ids; above this, the elements are unknown.
MAX_REPLAY_NUMEL = 1 << 22


@dataclass
class OverlapReport:
    """What :func:`refuse_overlapping_sources` looked at (for tests and logs)."""

    checked: int = 0  # (write, source) pairs sharing a storage group
    disjoint: int = 0  # of which the elements were shown apart (or at the same positions)
    refused: list[str] = field(default_factory=list)
    # Index writes split into one write per entry before the check (thunder_ext.index_order.SplitReport).
    split: "SplitReport | None" = None


@functools.cache
def _torch_view_fns() -> dict:
    """Thunder symbol id -> the PyTorch functions that compute it, from Thunder's own table
    (``torch.reshape`` and ``Tensor.reshape`` take their shapes differently: each is tried)."""
    table: dict = {}
    for torch_fn, sym in ltorch._torch_to_thunder_function_map.items():
        table.setdefault(getattr(sym, "id", None), []).append(torch_fn)
    return table


def _op_name(bsym: BoundSymbol) -> str:
    return str(bsym.sym.name)


def index_operands(bsym: BoundSymbol) -> tuple[TensorProxy, int, TensorProxy, TensorProxy] | None:
    """(destination, dim, index, source) of an op in :data:`SPLIT_BY_ENTRY`, bound by parameter name."""
    names = SPLIT_BY_ENTRY.get(_op_name(bsym))
    if names is None:
        return None
    try:
        bound = inspect.signature(bsym.sym.meta).bind(*bsym.args, **bsym.kwargs).arguments
    except (TypeError, ValueError):
        return None
    dst = next(iter(bound.values()), None)
    dim, index, source = (bound.get(n) for n in names)
    if not all(isinstance(p, TensorProxy) for p in (dst, index, source)) or not isinstance(dim, int):
        return None
    return dst, dim % max(dst.ndim, 1), index, source


def _single_entry(bsym: BoundSymbol) -> bool:
    operands = index_operands(bsym)
    return operands is not None and tuple(int(n) for n in operands[2].shape) == (1,)


def _kind(bsym: BoundSymbol) -> str | None:
    """'entry' (one index entry of :data:`SPLIT_BY_ENTRY`), 'order' (:data:`ORDER_DEPENDENT`),
    'elementwise', or None (computed whole, or unknown)."""
    if _single_entry(bsym):
        return "entry"
    if _op_name(bsym) in ORDER_DEPENDENT:
        return "order"
    ids = origin_ids(bsym)
    if ltorch.setitem_.id in ids or (prims.PrimIDs.COPY_ in ids and not bsym.subsymbols):
        return "elementwise"  # a copy into the selected elements
    leaves, stack = [], list(bsym.subsymbols)
    while stack:
        s = stack.pop()
        if s.subsymbols:
            stack.extend(s.subsymbols)
        else:
            leaves.append(s)
    if not leaves:
        return None
    for s in leaves:
        if s.sym.id not in _ELEMENTWISE_GLUE and set(s.sym.tags or ()) & _NOT_ELEMENTWISE_TAGS:
            return None
    return "elementwise"


class _Elements:
    """Which elements of its base each proxy covers: ``(base name, tensor of element ids)`` or None."""

    def __init__(self, bsyms: list[BoundSymbol]) -> None:
        self.producer: dict[str, BoundSymbol] = {}
        for b in bsyms:
            for p in b.flat_proxy_outs:
                if isinstance(p, TensorProxy):
                    self.producer.setdefault(p.name, b)
        self.memo: dict[str, tuple[str, torch.Tensor] | None] = {}

    def of(self, p: TensorProxy) -> tuple[str, torch.Tensor] | None:
        if p.name not in self.memo:
            self.memo[p.name] = None  # a cycle (never in a trace) reads as unknown
            self.memo[p.name] = self._compute(p)
        return self.memo[p.name]

    def _compute(self, p: TensorProxy) -> tuple[str, torch.Tensor] | None:
        b = self.producer.get(p.name)
        aliased = None if b is None else next((a for o, a in effect_of(b).aliases if o.name == p.name), None)
        if aliased is None:  # an input, or new storage: a base of its own
            numel = 1
            for s in p.shape:
                numel *= int(s)
            if numel > MAX_REPLAY_NUMEL:
                return None
            return p.name, torch.arange(numel).reshape(tuple(int(s) for s in p.shape))
        if effect_of(b).writes or origin_ids(b) & {prims.PrimIDs.SHALLOW_COPY}:
            return self.of(aliased)  # a write's output is its destination; shallow_copy is the same elements
        # Thunder's table maps some torch functions to plain wrappers (``reshape``), not to the
        # symbol: those are found by the name the symbol shares with its torch function.
        fns = _torch_view_fns().get(b.sym.id) or [
            f for f in (getattr(torch.Tensor, str(b.sym.name), None), getattr(torch, str(b.sym.name), None)) if f
        ]
        base = self.of(aliased)
        if not fns or base is None:
            return None
        unknown = object()

        def swap(x):
            if isinstance(x, TensorProxy):
                return base[1] if x.name == aliased.name else unknown
            return x

        args, kwargs = tree_map(swap, (b.args, b.kwargs))
        if any(x is unknown for x in tree_flatten((args, kwargs))[0]):
            return None
        out = None
        for fn in fns:
            try:
                out = fn(*args, **kwargs)
                break
            except Exception:  # this spelling does not take these arguments; try the next
                continue
        if out is None:  # a view the replay does not cover: unknown, hence refused
            return None
        outs = [o for o in b.flat_proxy_outs if isinstance(o, TensorProxy)]
        results = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if len(results) != len(outs):
            return None
        result = results[next(k for k, o in enumerate(outs) if o.name == p.name)]
        if tuple(result.shape) != tuple(int(x) for x in p.shape):
            return None  # not the view the trace made: unknown
        return base[0], result


def _destination(bsym: BoundSymbol, elements: _Elements, dst: TensorProxy):
    """The elements ``bsym`` writes: its destination's, or the part a ``setitem_`` key selects."""
    whole = elements.of(dst)
    if whole is None or ltorch.setitem_.id not in origin_ids(bsym):
        return whole
    key = bsym.args[1] if len(bsym.args) > 1 else None
    if any(isinstance(k, TensorProxy) for k in tree_flatten(key)[0]):
        return None
    try:
        return whole[0], whole[1][key]
    except Exception:
        return None


def _hazard(dst: torch.Tensor, src: torch.Tensor, *, same_position_safe: bool) -> bool:
    src, dst = src.contiguous(), dst.contiguous()
    shared = torch.isin(src, dst)
    if not shared.any():
        return False
    if not same_position_safe:
        return True
    try:
        src = src.expand(dst.shape)
    except RuntimeError:
        return True
    return bool((torch.isin(src, dst) & (src != dst)).any())


def _hazards(bsym: BoundSymbol, kind: str, dst: torch.Tensor, src: torch.Tensor) -> bool:
    if kind != "entry":
        return _hazard(dst, src, same_position_safe=kind == "elementwise")
    # One entry copies (or adds) its source row into the row its index names, known only at run
    # time: elementwise against every row the index may name.
    dim = index_operands(bsym)[1]
    row = src.select(dim, 0)
    return any(_hazard(dst.select(dim, r), row, same_position_safe=True) for r in range(dst.shape[dim]))


def _dense_and_meeting(a: torch.Tensor, b: torch.Tensor) -> bool:
    """What eager's ``assert_no_overlap`` sees (elements as offsets in a contiguous base): both
    tensors cover a contiguous range of memory, and the two ranges meet.  Anything else is
    "too hard" for it, and eager computes in its kernel's order."""

    def dense(t: torch.Tensor) -> bool:
        ids = t.reshape(-1)
        return ids.numel() > 0 and int(ids.max()) - int(ids.min()) + 1 == ids.numel() == int(ids.unique().numel())

    if not (dense(a) and dense(b)):
        return False
    return int(a.min()) <= int(b.max()) and int(b.min()) <= int(a.max())


@dataclass(frozen=True)
class Overlap:
    """An in-place op ``bsym`` writing ``dst`` while reading ``src``, which may share its elements."""

    bsym: BoundSymbol
    dst: TensorProxy
    src: TensorProxy
    certain: bool  # the elements were replayed and do overlap (else: could not be told apart)
    # Eager's own overlap check sees it and raises: both are dense and their memory ranges meet.
    eager_refuses: bool = False


def find_overlaps(bsyms: list[BoundSymbol], info: AliasInfo, report: OverlapReport | None = None) -> list[Overlap]:
    """Every write whose source may share elements with what it writes, at other positions."""
    report = report if report is not None else OverlapReport()
    elements, found = None, []
    for bsym in bsyms:
        effect = effect_of(bsym)
        if not effect.writes or is_return(bsym):
            continue
        kind = _kind(bsym)
        if kind is None:
            continue
        for dst in effect.writes:
            sources = tensor_args(bsym)
            if kind == "entry":
                sources = [index_operands(bsym)[3]]
            elif kind == "order":
                # the destination is ``self``; the same tensor passed again is a source
                sources = sources[1:] if sources and sources[0].name == dst.name else sources
            else:
                # an elementwise op reads each element of its destination where it writes it
                sources = [p for p in sources if p.name != dst.name]
            written = None
            for src in sources:
                if info.group_of(src) != info.group_of(dst):
                    continue
                report.checked += 1
                elements = elements or _Elements(bsyms)
                written = written or _destination(bsym, elements, dst)
                read = elements.of(src)
                known = written is not None and read is not None and written[0] == read[0]
                if known and not _hazards(bsym, kind, written[1], read[1]):
                    report.disjoint += 1
                    continue
                found.append(Overlap(bsym, dst, src, certain=known, eager_refuses=known and _dense_and_meeting(written[1], read[1])))
    return found


def _copy_kind(bsym: BoundSymbol) -> str | None:
    if is_copy_composite(bsym) or (is_copy(bsym) and not bsym.subsymbols):
        return "copy_"
    if ltorch.setitem_.id in origin_ids(bsym):
        return "setitem_"
    return None


def is_plain_copy(bsym: BoundSymbol) -> bool:
    """A ``copy_`` or ``setitem_``: kept in place, it may read its source as eager's kernel does."""
    return _copy_kind(bsym) is not None


# (copy kind, storage is an input's, torch_compile_ex claims the trace) -> kept in place, where
# the copy then reads the source as eager's does: a ``copy_`` runs by PyTorch's own kernel (under
# ``torch_compile_ex`` too, outside its regions: inductor_regions.eager_overlapping_copies).  A
# ``setitem_`` left whole (a tensor key: ``index_put_``) is not: Inductor's order is its own, and
# depends on the machine's vector width.  Measured in tests/test_overlap.py; a combination not
# listed is refused.
KEPT_IN_PLACE = {
    ("copy_", True, False): True,
    ("copy_", True, True): True,
    ("copy_", False, False): True,
    ("copy_", False, True): True,
}


def _never_read_again(o: Overlap, bsyms: list[BoundSymbol], info: AliasInfo) -> bool:
    """The overlapping write goes to private storage that no later bsym (the return included)
    reads under any name."""
    g = info.group_of(o.dst)
    if g in info.input_groups:
        return False
    at = next((i for i, b in enumerate(bsyms) if b is o.bsym), None)
    if at is None:
        return False
    for b in bsyms[at + 1 :]:
        names = returned_data(b) if is_return(b) else {p.name for p in b.flat_proxy_args}
        if any(n in info.groups and info.group_of(n) == g for n in names):
            return False
    return True


_BROADCASTING_VIEWS = frozenset({"expand", "expand_as", "broadcast_to", "broadcast_in_dim"})


def _broadcast_in_view_chain(p: TensorProxy, producer: dict[str, BoundSymbol]) -> bool:
    """Whether ``p`` is a view, through any number of views, of a broadcast (``t.expand(2, 3)``),
    which repeats elements of its base: checked first, so that the element replay runs only there."""
    for _ in range(256):
        b = producer.get(p.name)
        effect = effect_of(b) if b is not None else None
        aliased = None if b is None else next((a for o, a in effect.aliases if o.name == p.name), None)
        if aliased is None:
            return False
        if effect.writes:  # an in-place op's output is its destination; its operands' broadcasts are no view
            p = aliased
            continue
        stack = [b]
        while stack:
            s = stack.pop()
            if str(s.sym.name) in _BROADCASTING_VIEWS:
                return True
            stack.extend(s.subsymbols)
        p = aliased
    return False


def _writes_one_constant(bsym: BoundSymbol) -> bool:
    """``zero_``, ``fill_``, or a ``setitem_`` of a number: one value everywhere, which eager
    writes into a broadcast without complaint."""
    name = _op_name(bsym)
    if name in ("zero_", "fill_"):
        return True
    return name == "setitem_" and len(bsym.args) > 2 and not isinstance(bsym.args[2], TensorProxy)


def refuse_internally_overlapping_writes(bsyms: list[BoundSymbol]) -> None:
    """Raise :class:`OverlappingSourceError` for an elementwise in-place op (a ``copy_``, a
    ``setitem_``) whose destination holds one memory location at several positions: a view of a
    broadcast (``t3 = t0.expand(2, 3); t3[:, 1].sub_(1)``).  Eager refuses it ("more than one
    element of the written-to tensor refers to a single memory location"); a value written at
    each position would have no single answer, and the transform made one (soak seed 45000).
    Only where the element replay tells: it never refuses on a guess here, as eager decides on
    the elements too."""
    elements = None  # built at the first write: its producer map serves the pre-check too
    for bsym in bsyms:
        effect = effect_of(bsym)
        if not effect.writes or is_return(bsym):
            continue
        if _writes_one_constant(bsym):
            continue  # the same value at every position: eager allows it (``zero_``, ``fill_``)
        elements = elements or _Elements(bsyms)
        for dst in effect.writes:
            if not _broadcast_in_view_chain(dst, elements.producer) or _kind(bsym) != "elementwise":
                continue
            written = _destination(bsym, elements, dst)
            if written is None or int(written[1].unique().numel()) == written[1].numel():
                continue
            raise OverlappingSourceError(
                f"`{_op_name(bsym)}` writes `{dst.name}`, a view of a broadcast (`expand`) in which several "
                "positions are one memory location. Eager refuses it too (\"more than one element of the "
                "written-to tensor refers to a single memory location\"). Clone before writing "
                f"(`{dst.name}.clone()`), or write out of place",
                bsym,
            )


def _layout_decides(bsyms: list[BoundSymbol], info: AliasInfo, o: Overlap) -> bool:
    """Whether eager's own overlap check on ``o`` depends on the caller's strides (both tensors
    are made from trace inputs by ops that lay their output out by their inputs)."""
    from thunder_ext.overlap_guard import guard_arguments  # it imports the functionalizer, which imports this

    return guard_arguments(bsyms, info, o.bsym, o.dst, o.src) is not None


def refuse_overlapping_sources(
    trace: TraceCtx,
    *,
    inductor: bool = False,
    stripped: tuple[list[BoundSymbol], AliasInfo] | None = None,
    report: OverlapReport | None = None,
) -> OverlapReport:
    """Raise :class:`OverlappingSourceError` for an in-place op whose source overlaps what it writes.

    A ``copy_`` or ``setitem_`` is kept in place by the functionalization pass
    (:func:`thunder_ext.functionalize.functionalize`), and is not refused where
    :data:`KEPT_IN_PLACE` says the executor's copy then reads its source as eager's does;
    ``inductor`` says ``torch_compile_ex`` claims the trace; ``stripped`` is
    :func:`thunder_ext.refusals.stripped_storage` of ``trace``, where the caller has it already.
    """
    if stripped is None:
        from thunder_ext.refusals import stripped_storage  # it imports the barrier pass, which imports this

        stripped = stripped_storage(trace)
    report = report if report is not None else OverlapReport()
    bsyms, info = stripped
    refuse_internally_overlapping_writes(bsyms)
    observable = info.input_groups
    for o in find_overlaps(bsyms, info, report):
        if KEPT_IN_PLACE.get((_copy_kind(o.bsym), info.group_of(o.dst) in observable, inductor), False):
            continue
        if _never_read_again(o, bsyms, info):
            continue  # a dead write: nothing sees its result, so the order of its reads does not matter
        why = (
            "shares elements with what it writes, at other positions"
            if o.certain
            else "may share elements with what it writes (the transform cannot tell which)"
        )
        report.refused.append(_op_name(o.bsym))
        in_order = (
            "Eager's result then depends on the order its kernel visits the elements (on CPU it reads "
            "its own earlier writes), and no compiled order reproduces it: Thunder reads the source whole "
            "before writing"
        )
        refuses = (
            "Eager refuses it too (\"some elements of the input tensor and the written-to tensor refer "
            "to a single memory location\")"
        )
        if o.eager_refuses and _layout_decides(bsyms, info, o):
            eager = f"{refuses} where both are dense in memory, as for contiguous inputs; for other strides, e{in_order[1:]}"
        else:
            eager = refuses if o.eager_refuses else in_order
        raise OverlappingSourceError(
            f"`{_op_name(o.bsym)}` writes `{o.dst.name}` while reading `{o.src.name}`, which {why}. {eager}. "
            f"Clone the source first (`{o.src.name}.clone()`), or write out of place",
            o.bsym,
        )
    return report
