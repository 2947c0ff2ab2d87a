"""Index writes whose source overlaps their destination, split into one write per index entry.

Eager's CPU kernels for ``index_copy_`` and ``index_add_`` visit the index entries in order:
entry *i* reads row *i* of the source after the entries before it have written.  When the
source shares rows with the destination, that order is the answer.  Thunder reads the whole
source first, so the op as one write cannot be compiled (:mod:`thunder_ext.overlap` refuses
it).  The same op written one entry at a time can: each entry is a write of one row, and the
source row it reads is taken after the writes before it, which the functionalization pass
orders by data edges like any other read of written storage::

    before                                      after (idx has 2 entries)
    t0 = a[::2]                                 t0 = a[::2]
    t1 = a[1:]                                  t1 = a[1:]
    t2 = ltorch.index_add_(t1, 0, idx, t0)      i0 = ltorch.getitem(idx, slice(0, 1, None))
    return (t2,)                                s0 = ltorch.getitem(t0, slice(0, 1, None))
                                                t3 = ltorch.index_add_(t1, 0, i0, s0)
                                                i1 = ltorch.getitem(idx, slice(1, 2, None))
                                                s1 = ltorch.getitem(t0, slice(1, 2, None))
                                                t2 = ltorch.index_add_(t1, 0, i1, s1)
                                                return (t2,)

Each entry is then checked by :mod:`thunder_ext.overlap` like an elementwise op against every
row the index may name: a source row that overlaps a destination row at other positions is
still refused.

A ``setitem_`` with a basic key (ints, slices, ``None``, ``...``) is, in eager, a ``copy_`` into
the view its key selects, which reads its source as the kernel goes.  Thunder's ``setitem_``
reads the whole source first, so one whose source overlaps what it writes is written as that
view and that ``copy_``, which Thunder runs in place, as eager does (soak seed 46000)::

    before                                      after
    t1 = ltorch.getitem(a, (slice(None), 1))    t1 = ltorch.getitem(a, (slice(None), 1))
    t2 = ltorch.reshape(a, 3, 4)                t2 = ltorch.reshape(a, 3, 4)
    t4 = ltorch.setitem_(t2, 0, t1)             t5 = ltorch.getitem(t2, 0)
    return (t4,)                                t6 = ltorch.copy_(t5, t1)
                                                return (t2,)

(a later read of the ``setitem_``'s result reads its destination, the storage the ``copy_`` wrote).

A write that carries gradients is split too.  Eager's forward reads rows as its kernel goes, but
its backward routes each gradient to the source as it was before the op: the gradient of the op
computed whole.  So the op is first computed whole and copied in with grad, which gives the
destination that history; its old values are put back, and the split runs with grad disabled,
which writes eager's values and keeps the history it finds (as a write under ``torch.no_grad()``
does)::

    before                                      after (idx has 2 entries; † made without grad)
    t1 = ltorch.sub(a, 0.5)                     t1 = ltorch.sub(a, 0.5)
    t2 = ltorch.getitem(t1, slice(None, None, 2))
                                                t2 = ltorch.getitem(t1, slice(None, None, 2))
    t3 = ltorch.index_copy_(t1, 0, idx, t2)     t13 = ltorch.clone(t1)                     †
    t5 = ltorch.mul(t3, 2)                      t11 = ltorch.index_copy(t1, 0, idx, t2)
                                                t12 = ltorch.copy_(t1, t11)
                                                t14 = ltorch.copy_(t1, t13)                †
                                                t15 = ltorch.getitem(idx, slice(0, 1))     †
                                                t16 = ltorch.getitem(t2, (slice(0, 1),))   †
                                                t18 = ltorch.index_copy_(t1, 0, t15, t16)  †
                                                t19 = ltorch.getitem(idx, slice(1, 2))     †
                                                t20 = ltorch.getitem(t2, (slice(1, 2),))   †
                                                t22 = ltorch.index_copy_(t1, 0, t19, t20)  †
                                                t5 = ltorch.mul(t22, 2)

Not split (left to the overlap refusal):

* an op not in :data:`SPLIT_BY_ENTRY`: the other index and mask kernels (``scatter_``,
  ``index_put_``, ``masked_scatter_``) do not visit their entries in a documented order;
* an index of more than :data:`MAX_SPLIT_ENTRIES` entries (the trace grows with it);
* a source whose elements the overlap check could not tell apart from the destination's;
* a source and destination eager's own overlap check sees (both dense, their memory meeting),
  where the trace fixes their strides (their base made by a factory or a matmul): eager raises,
  and so does the overlap check.  Where the caller's strides decide (both made from inputs by
  views and pointwise ops), the op is split, and a check before the body raises at each call
  where eager's would (:mod:`thunder_ext.overlap_guard`);
* a ``setitem_`` with a tensor (advanced) key, which eager runs as ``index_put_``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import thunder.torch as ltorch
from thunder.core.proxies import ProxyTag, TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.alias_analysis import AliasInfo
from thunder_ext.op_kinds import describe, is_copy, is_unpack, tensor_args, tensor_outs, writes_with_grad
from thunder_ext.overlap import SPLIT_BY_ENTRY, find_overlaps, index_operands
from thunder_ext.overlap_guard import guard_arguments, refuse_if_eager_sees_overlap
from thunder_ext.recording import at_source_of, record

# Above this many index entries the op is not split (each entry is three bsyms, and more once
# functionalized), and the overlap check refuses it as before.
MAX_SPLIT_ENTRIES = 64


@dataclass
class SplitReport:
    """What :func:`split_overlapping_index_writes` did: the ops split and the ones left whole, and why."""

    split: list[str] = field(default_factory=list)  # "index_copy_ of t1 into 2 entries"
    left: dict[str, str] = field(default_factory=dict)  # output name -> why it stays one write
    # Ops split although eager refuses them for contiguous inputs: a run-time check refuses where
    # the caller's strides make eager's check see the overlap (thunder_ext.overlap_guard).
    guarded: list[str] = field(default_factory=list)
    # Ops split although they write with gradients: the op computed whole first gives the
    # destination eager's history, and the split, with grad disabled, eager's values.
    gradient_kept: list[str] = field(default_factory=list)


def _basic_key(key) -> bool:
    """Whether a ``setitem_`` key selects a view (ints, slices, ``None``, ``...``, or a tuple of them)."""
    parts = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, slice) or (isinstance(k, int) and not isinstance(k, bool)) for k in parts) and all(
        not isinstance(x, TensorProxy) for k in parts if isinstance(k, slice) for x in (k.start, k.stop, k.step)
    )


def _why_not_a_copy(bsym: BoundSymbol, eager_refuses: bool) -> str | None:
    """Why a ``setitem_`` (an overlapping write) stays one write; None when it becomes a view and a ``copy_``."""
    if eager_refuses:
        return "eager refuses it (both are dense, and their memory meets)"
    if len(bsym.args) != 3 or not isinstance(bsym.args[0], TensorProxy) or not isinstance(bsym.args[2], TensorProxy):
        return "its arguments are not (destination, key, tensor value)"
    if not _basic_key(bsym.args[1]):
        return "its key is not basic indexing (eager runs index_put_)"
    return None


def _why_not(bsym: BoundSymbol, certain: bool, eager_refuses: bool) -> str | None:
    """Why ``bsym`` (an overlapping write) stays one write; None when it can be split."""
    if str(bsym.sym.name) not in SPLIT_BY_ENTRY:
        return "its kernel's visiting order is not one entry after another"
    if not certain:
        return "the transform cannot tell which elements the source shares"
    if eager_refuses:
        return "eager refuses it (both are dense, and their memory meets)"
    operands = index_operands(bsym)
    if operands is None:
        return "its arguments are not (destination, dim, index, source) tensors"
    dst, _, index, source = operands
    if index.ndim != 1:
        return "its index is a scalar"
    if int(index.shape[0]) > MAX_SPLIT_ENTRIES:
        return f"its index has more than {MAX_SPLIT_ENTRIES} entries"
    return None


def _carries_gradients(bsym: BoundSymbol, differentiable: frozenset[str]) -> bool:
    """Whether ``bsym`` (an index write or a ``setitem_``) writes with grad, and its destination or
    its source carries a gradient."""
    operands = index_operands(bsym)
    dst, source = (operands[0], operands[3]) if operands is not None else (bsym.args[0], bsym.args[-1])
    return writes_with_grad(bsym) and any(isinstance(p, TensorProxy) and p.name in differentiable for p in (dst, source))


def split_overlapping_index_writes(
    trace: TraceCtx,
    stripped: tuple[list[BoundSymbol], AliasInfo],
    differentiable: frozenset[str] = frozenset(),
) -> tuple[TraceCtx, SplitReport]:
    """Split each index write whose source overlaps its destination into one write per entry.

    ``stripped`` is :func:`thunder_ext.refusals.stripped_storage` of ``trace``; the new trace is
    built from its bsyms (Thunder's barriers stripped; the barrier pass places its own).
    ``differentiable`` names the tensors gradients flow through.  Returns ``trace`` itself when
    nothing is split.
    """
    bsyms, info = stripped
    report = SplitReport()
    targets: set[int] = set()
    guards: list[tuple[BoundSymbol, tuple]] = []  # (the op, its run-time overlap check's arguments)
    for o in find_overlaps(bsyms, info):
        setitem = o.bsym.sym.id == ltorch.setitem_.id
        eager_refuses, guard = o.eager_refuses, None
        if eager_refuses and o.certain:
            # Eager's check saw the overlap for contiguous inputs; the caller's strides decide.
            key = o.bsym.args[1] if setitem and len(o.bsym.args) > 1 else None
            guard = guard_arguments(bsyms, info, o.bsym, o.dst, o.src, key)
            eager_refuses = guard is None
        if setitem:
            why = _why_not_a_copy(o.bsym, eager_refuses)
        else:
            why = _why_not(o.bsym, o.certain, eager_refuses)
        if why is None:
            targets.add(id(o.bsym))
            if guard is not None:
                guards.append((o.bsym, guard))
        else:
            report.left[tensor_outs(o.bsym)[0].name if tensor_outs(o.bsym) else str(o.bsym.sym.name)] = why
    if not targets:
        return trace, report

    new = from_trace(trace)
    out: list[BoundSymbol] = []
    swap: dict = {}  # the original op's output -> the last entry's
    for bsym in bsyms:
        split = id(bsym) in targets
        mine = {v: swap[v] for v in map(variableify, bsym.flat_proxy_args) if v in swap} if swap else None
        bsym = bsym.from_bsym_swap_proxies(mine) if mine else bsym
        if not split:
            out.append(bsym)
            continue
        gradient = _carries_gradients(bsym, differentiable)
        if gradient:
            out += _eager_gradient_kept(new, bsym)
            report.gradient_kept.append(describe(bsym))
        if bsym.sym.id == ltorch.setitem_.id:
            out += _view_and_copy(new, bsym, grad_enabled=not gradient and writes_with_grad(bsym))
            # Its result is its destination, written: a later read of it reads the destination,
            # which the storage groups order after the copy_ like any read of written storage.
            swap[variableify(tensor_outs(bsym)[0])] = bsym.args[0]
            report.split.append(f"setitem_ of {bsym.args[0].name} into a view and a copy_")
            continue
        entries, last, n = _entries(new, bsym, grad_enabled=not gradient and writes_with_grad(bsym))
        out += entries
        swap[variableify(tensor_outs(bsym)[0])] = last
        report.split.append(f"{bsym.sym.name} of {tensor_args(bsym)[0].name} into {n} entries")
    if guards:  # before the body, where the roots are the caller's tensors
        at = next((k for k, b in enumerate(out) if not is_unpack(b)), len(out))
        for op, args in reversed(guards):
            made, _ = record(new, lambda args=args: refuse_if_eager_sees_overlap(*args))
            out[at:at] = at_source_of(made, op)
        report.guarded = [describe(op) for op, _ in guards]
    new.bound_symbols = out
    new.set_provenance(TraceProvenance("Split overlapping index writes into one write per entry (thunder_ext)"))
    return new, report


def _view_and_copy(new: TraceCtx, bsym: BoundSymbol, *, grad_enabled: bool) -> list[BoundSymbol]:
    """``setitem_(dst, key, value)`` as ``dst[key].copy_(value)``, recorded in ``new``."""
    dst, key, value = bsym.args

    def view_and_copy():
        view = ltorch.getitem(dst, key)
        # setitem broadcasts its value (``a[1:] = a.diagonal()``); Thunder's copy_ wants one shape.
        v = value if tuple(value.shape) == tuple(view.shape) else ltorch.expand(value, view.shape)
        ltorch.copy_(view, v)

    recorded, _ = record(new, view_and_copy)
    return _placed(recorded, bsym, grad_enabled)


def _placed(recorded: list[BoundSymbol], bsym: BoundSymbol, grad_enabled: bool) -> list[BoundSymbol]:
    # Each keeps the user's line (for messages), and the grad mode its copy_ is traced in:
    # Thunder reads it from the compilation, which is no longer tracing the user's function.
    # What is computed with grad disabled is tagged as Thunder tags a no-grad block's values.
    if not grad_enabled:
        for b in recorded:
            for o in b.flat_proxy_outs:
                if isinstance(o, TensorProxy):
                    o.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
    return at_source_of((_with_grad_mode(b, grad_enabled) for b in recorded), bsym)


# The out-of-place op whose gradient is eager's for each op split (eager's backward reads the
# source as it was before the op, as these read it whole).
_WHOLE_FORM = {"index_copy_": ltorch.index_copy, "index_add_": ltorch.index_add, "setitem_": ltorch.setitem}


def _eager_gradient_kept(new: TraceCtx, bsym: BoundSymbol) -> list[BoundSymbol]:
    """Before the split of ``bsym`` that writes with gradients: the destination given the history
    of the op computed whole, its values left as they were, so that the split (made with grad
    disabled, which keeps the history it finds) writes eager's values over eager's history."""
    operands = index_operands(bsym)
    if operands is not None:
        dst, dim, index, source = operands
        whole = lambda: _WHOLE_FORM[bsym.sym.name](dst, dim, index, source)  # noqa: E731
    else:
        dst, key, value = bsym.args
        whole = lambda: _WHOLE_FORM[bsym.sym.name](dst, key, value)  # noqa: E731

    with_history, _ = record(new, lambda: ltorch.copy_(dst, whole()))
    kept, old = record(new, lambda: ltorch.clone(dst))
    restored, _ = record(new, lambda: ltorch.copy_(dst, old))
    # The clone reads the destination before the copy that gives it the history.
    return [*_placed(kept, bsym, False), *_placed(with_history, bsym, True), *_placed(restored, bsym, False)]


def _entries(new: TraceCtx, bsym: BoundSymbol, *, grad_enabled: bool) -> tuple[list[BoundSymbol], TensorProxy, int]:
    """``bsym`` as one write per index entry, recorded in ``new``: (bsyms, last output, entries)."""
    dst, dim, index, source = index_operands(bsym)
    n = int(index.shape[0])
    lead = (slice(None),) * dim

    def one_write_per_entry():
        last = None
        for i in range(n):
            entry = ltorch.getitem(index, slice(i, i + 1))
            row = ltorch.getitem(source, (*lead, slice(i, i + 1)))
            last = bsym.sym(dst, dim, entry, row)
        return last

    recorded, last = record(new, one_write_per_entry)
    return _placed(recorded, bsym, grad_enabled), last, n


def _with_grad_mode(bsym: BoundSymbol, grad_enabled: bool) -> BoundSymbol:
    """``bsym`` with every ``copy_`` in it recorded as traced with ``grad_enabled``."""
    if is_copy(bsym):
        return bsym.from_bsym(kwargs={**bsym.kwargs, "grad_enabled": grad_enabled})
    if not bsym.subsymbols:
        return bsym
    return bsym.from_bsym(subsymbols=[_with_grad_mode(s, grad_enabled) for s in bsym.subsymbols])
