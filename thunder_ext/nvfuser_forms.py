"""Four forms of the trace that nvFuser needs, and which the CPU executors never showed.

All were found on a GPU (``scripts/gpu/checks.sh``, nvFuser 0.2.36 with Thunder ``main``):
the first two are silent wrong answers without their step, the third a crash; the fourth,
an epilogue ordered after what a region could recompute from its destination
(:func:`epilogues_after_derived_reads`), is a silent wrong answer too, and its docstring shows it.

**A clone of storage that is written later is a real copy** (:func:`copy_clones`, at the
fusion stage).  Thunder hands ``prims.clone`` to nvFuser as ``set``, and nvFuser may return
the output of a ``set`` of a fusion input as an alias of that input: no kernel, no copy.
When the input is written afterwards (an epilogue ``copy_``, a write the pass kept in place),
the "clone" changes with it.  The old values the backward reads (:mod:`thunder_ext.saved_values`),
the value of a whole-tensor ``copy_`` (``b.copy_(a)`` then a write to ``a``) and the user's own
``x.clone()`` before a write to ``x`` all came back with the new value.  Such a clone is
bound to an operator executor's clone instead, which no fusion executor takes::

    before (nvFuser may run)                 after
    t30 = ltorch.clone(a)                    t30 = clone(a)         # torch executor: a copy
    t18 = ltorch.mul(a, t13)                 t18 = ltorch.mul(a, t13)
    t22 = prims.copy_(t18, a)                t22 = prims.copy_(t18, a)
    ... backward reads t30                   ... backward reads t30

A clone of storage nothing writes stays fusible: whether it aliases changes no value.

**An input written inside an nvFuser region gets its autograd version bumped**
(:func:`bump_written_versions`, on the final forward trace).  nvFuser writes a region's
input through an aliased output, which PyTorch's version counter never sees.  In eager the
caller's tensor is at a new version after the call, and autograd uses that: a non-leaf the
caller differentiates through afterwards, or a tensor saved for its own backward, behaves as
written.  Without the bump the caller's graph silently uses the stale version (the caller's
gradient of ``with torch.no_grad(): a.add_(a)`` on a non-leaf ``a`` was the output's alone).
One call before the return bumps every input some region wrote::

    before                                   after
    [t1] = nvFusion0(a)                      [t1] = nvFusion0(a)
      # t1 = prims.copy_(t0, a)                # t1 = prims.copy_(t0, a)
    return (t1,)                             bump_versions(a)
                                             return (t1,)

**A squeezing view runs outside nvFuser's regions** (:func:`unfuse_squeezing_views`, at
the fusion stage).  A region that slices a tensor to one row or column and squeezes it
(``t[0]``, ``t[:, 1]``), beside another consumer of the whole tensor, fails to compile in
nvFuser 0.2.36 (``INTERNAL ASSERT FAILED at .../id_model/loop_promotion.cpp:1308``).  Plain
Thunder meets it less often only because its barriers leave such a view alone between them;
functional writes put the view in the middle of a region (``a[0] = rv; return a[0].cos().sin()``
with the epilogue ``copy_`` of ``a``).  The view is bound to the torch executor, which runs it
as a view, no copy::

    before (nvFuser may run)                 after
    t3 = ltorch.getitem(t18, 0)              t3 = Tensor.__getitem__(t18, 0)   # torch executor
    t4 = ltorch.cos(t3)                      t4 = ltorch.cos(t3)

Invariants: only top-level ``clone``s are rebound, and only of storage some bsym writes; a
rebound clone keeps its input and output proxies, so no data edge changes.  A version is
bumped only for tensors a region's ``copy_`` writes; bumping a version never changes a value.
A view rebound to an operator executor keeps its proxies and is still a view (op_kinds).
An epilogue is ordered only by a barrier whose outputs its copy reads; no other bsym changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import thunder.torch as ltorch
import torch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.core.utils import producers
from thunder.extend import Executor, OperatorExecutor

from thunder_ext.alias_analysis import storage_groups
from thunder_ext.op_kinds import (
    PrimIDs,
    effect_of,
    is_barrier,
    is_copy,
    is_fusion,
    is_return,
    origin_ids,
    tensor_args,
    tensor_outs,
    view_kind,
)
from thunder_ext.remat_guard import _fuses, has_nvfuser

_CLONES = (ltorch.clone.id, PrimIDs.CLONE)


def _is_clone(bsym: BoundSymbol) -> bool:
    return bsym.sym.id in _CLONES


def _unfused(trace: TraceCtx, bsym: BoundSymbol, executors: Sequence[Executor]) -> BoundSymbol | None:
    """``bsym`` as the compilation's operator executors claim it, with no subsymbols (a fusion
    executor fuses a bsym whose subsymbols it can all run), or None when none claims it whole."""
    from thunder_ext.functionalize import _claim

    claimed = _claim(trace, [bsym], [ex for ex in executors if isinstance(ex, OperatorExecutor)])
    if len(claimed) != 1 or not isinstance(claimed[0].sym.executor, OperatorExecutor):
        return None
    return claimed[0].from_bsym(
        subsymbols=[], header=bsym.header, source_filename=bsym.source_filename, source_positions=bsym.source_positions
    )


def copy_clones(
    trace: TraceCtx, bsyms: list[BoundSymbol], inputs: set[str], executors: Sequence[Executor] | None,
    aliased_inputs: Sequence[frozenset[str]] = (), effects: dict | None = None,
) -> tuple[list[BoundSymbol], int]:
    """``bsyms`` with every clone of written storage bound to an operator executor's clone, and
    how many were rebound.  Only where nvFuser is among ``executors``."""
    if not has_nvfuser(executors) or not any(_is_clone(b) for b in bsyms):
        return bsyms, 0
    info = storage_groups(bsyms, inputs, aliased_inputs, cache=effects)
    written = {info.group_of(w) for i in range(len(bsyms)) for w in info.writes_of(i)}
    out: list[BoundSymbol] = []
    rebound = 0
    for b in bsyms:
        args = tensor_args(b)
        copy = _unfused(trace, b, executors) if _is_clone(b) and args and info.group_of(args[0]) in written else None
        rebound += copy is not None
        out.append(copy or b)
    return out, rebound


def _squeezes(bsym: BoundSymbol) -> bool:
    """A squeeze, or a composite view with one inside (``t[0]``, ``t[:, 1]``: slice, then squeeze)."""
    if bsym.sym.id in (PrimIDs.SQUEEZE, ltorch.squeeze.id):
        return True
    return bsym.sym.id == ltorch.getitem.id and any(s.sym.id == PrimIDs.SQUEEZE for s in bsym.subsymbols)


def unfuse_squeezing_views(
    trace: TraceCtx, bsyms: list[BoundSymbol], executors: Sequence[Executor] | None
) -> tuple[list[BoundSymbol], int]:
    """``bsyms`` with every squeezing view (and the slice it squeezes) bound to an operator
    executor, and how many were rebound.  Only where nvFuser is among ``executors``."""
    if not has_nvfuser(executors):
        return bsyms, 0
    squeezed = {tensor_args(b)[0].name for b in bsyms if _squeezes(b) and tensor_args(b)}
    out: list[BoundSymbol] = []
    rebound = 0
    for b in bsyms:
        slices_for_squeeze = b.sym.id == PrimIDs.SLICE and any(p.name in squeezed for p in b.flat_proxy_outs)
        view = _unfused(trace, b, executors) if _squeezes(b) or slices_for_squeeze else None
        rebound += view is not None
        out.append(view or b)
    return out, rebound


# Views that keep a dense tensor dense: a write into one is a write into a dense tensor.
_DENSE_VIEWS = frozenset(
    {
        *(getattr(ltorch, n).id for n in ("reshape", "view", "unsqueeze", "squeeze", "flatten", "unflatten", "view_as", "reshape_as")),
        PrimIDs.RESHAPE,
        PrimIDs.SQUEEZE,
    }
)


def _may_be_strided(name: str, made_by: dict[str, BoundSymbol]) -> bool:
    """Whether the tensor ``name`` is a view the trace makes that may not be dense: a view chain
    back to its base with any view other than a reshape, squeeze or unsqueeze (a slice, ``t[::2]``,
    a transpose).  Trace inputs count as dense: their strides are the caller's (see the docstring)."""
    seen = set()
    while name in made_by and name not in seen:
        seen.add(name)
        b = made_by[name]
        if view_kind(b) is None:
            return False
        if not origin_ids(b) <= _DENSE_VIEWS:
            return True
        args = tensor_args(b)
        if not args:
            return False
        name = args[0].name
    return False


def _with_copies_unfused(trace: TraceCtx, bsym: BoundSymbol, dest: str, executors: Sequence[Executor]) -> list[BoundSymbol] | None:
    """``bsym`` opened down to its ``copy_`` into ``dest``, that copy bound to an operator
    executor; None when an operator executor does not take it."""
    if bsym.sym.id == PrimIDs.COPY_:
        copy = _unfused(trace, bsym, executors)
        return None if copy is None else [copy]
    if not bsym.subsymbols or not any(w.name == dest for w in effect_of(bsym).writes):
        return [bsym]
    out: list[BoundSymbol] = []
    for s in bsym.subsymbols:
        opened = _with_copies_unfused(trace, s, dest, executors)
        if opened is None:
            return None
        out += opened
    return out


def copy_strided_writes_outside_nvfuser(
    trace: TraceCtx, bsyms: list[BoundSymbol], executors: Sequence[Executor] | None
) -> tuple[list[BoundSymbol], int]:
    """``bsyms`` with every write into a view that may not be dense opened to its value and its
    ``copy_``, the copy bound to an operator executor, and how many writes that is.  Only where
    nvFuser is among ``executors``.

    nvFuser 0.2.36 writes a region's aliased output into a strided input as if the input were
    dense: ``v = base[::2]; v.exp_()`` wrote ``exp`` of ``base[0]`` and ``base[2]`` into
    ``base[0]`` and ``base[1]`` (plain Thunder too).  The value stays fusible; torch's
    ``copy_`` writes it through the view's strides::

        before (nvFuser may run)                 after
        t1 = ltorch.getitem(t0, slice(None, None, 2))   t1 = ltorch.getitem(t0, slice(None, None, 2))
        t4 = ltorch.exp_(t1)                     t3 = ltorch.exp(t1)
                                                 t4 = copy_(t3, t1)     # torch executor

    A trace input that is itself strided at run time is not seen here: its writes stay in the
    region, as in plain Thunder (docs/limits.md).
    """
    if not has_nvfuser(executors):
        return bsyms, 0
    made_by = {p.name: b for b in bsyms for p in b.flat_proxy_outs}
    out: list[BoundSymbol] = []
    opened_writes = 0
    for b in bsyms:
        strided = [w.name for w in effect_of(b).writes if _may_be_strided(w.name, made_by)]
        opened = _with_copies_unfused(trace, b, strided[0], executors) if len(strided) == 1 else None
        if opened is not None and not any(o.sym.id != PrimIDs.COPY_ and is_copy(o) for o in opened):
            opened = None  # no copy_ left the region (the write is another prim): keep the bsym whole
        opened_writes += opened is not None
        out += opened if opened is not None else [b]
    return out, opened_writes


def slice_epilogues_outside_nvfuser(
    bsyms: list[BoundSymbol], epilogue_inputs: frozenset[str], executors: Sequence[Executor] | None, trace: TraceCtx
) -> tuple[list[BoundSymbol], int]:
    """``bsyms`` with each epilogue ``copy_`` whose value is a dying slice write of its input
    (``kc[:, :, pos] = k`` as a value, whose old value nothing reads afterwards) bound to the
    torch executor, the slice write too, and how many epilogues that is.  Only where nvFuser is
    among ``executors``.

    In a region, the epilogue copies the whole input: the KV-cache step cloned each 64 MiB
    cache (the torch executor's setitem) and nvFuser copied it back, on every call.  Outside
    every region, ``reinplace.reinplace_inputs`` writes the slice in place on the final trace,
    as eager does, and the epilogue goes::

        before (nvFuser may run)                 after (fusion stage)
        t37 = copy_with_setitem_impl(kc, key, k) t37 = copy_with_setitem_impl(kc, key, k)
        t4 = ltorch.transpose(t37, -1, -2)       t4 = ltorch.transpose(t37, -1, -2)
        ...                                      ...
        t31 = prims.copy_(t37, kc)               t31 = copy_(t37, kc)       # torch executor

        final trace: t64 = getitem(kc, key); t65 = copy_(k, t64); t4 = ... transpose(kc)

    An epilogue whose value is elementwise (the EMA update) stays in its region: nvFuser writes
    it into the input with no extra copy.
    """
    from thunder.executors.torchex import copy_ as torch_copy_

    from thunder_ext.inductor_regions import claim_for_torch, dying_slice_write, through_barriers

    if not has_nvfuser(executors) or not epilogue_inputs:
        return bsyms, 0
    out = list(bsyms)
    through = through_barriers(out)
    copies = [c.output.name for c in out if c.sym.id == PrimIDs.COPY_ and isinstance(c.output, TensorProxy)]
    moved = 0
    for name in copies:  # by name: claiming a slice write may change the positions after it
        j = next(i for i, b in enumerate(out) if b.output is not None and getattr(b.output, "name", None) == name)
        c = out[j]
        if len(c.args) < 2 or not all(isinstance(a, TensorProxy) for a in c.args[:2]):
            continue
        src, dst = c.args[0], c.args[1]
        x = through.get(dst.name, dst.name)
        k = next((i for i, b in enumerate(out[:j]) if any(p.name == src.name for p in b.flat_proxy_outs)), None)
        if x not in epilogue_inputs or k is None or src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
            continue
        if not dying_slice_write(out, k, x, through) or not claim_for_torch(out, k, trace):
            continue
        j = next(i for i, b in enumerate(out) if b is c)
        out[j] = torch_copy_.bind(src, dst, grad_enabled=False, output=c.output).from_bsym(
            header=c.header, source_filename=c.source_filename, source_positions=c.source_positions
        )
        moved += 1
    return out, moved


def _bump_versions(*tensors: torch.Tensor) -> None:
    torch.autograd.graph.increment_version([t for t in tensors if not t.is_inference()])


_VERSIONS = OperatorExecutor("thunder_ext_versions")
bump_versions = _VERSIONS.register_operator(
    "bump_versions", meta=lambda *tensors: None, fn=_bump_versions, tags=[prims.OpTags.DONT_DCE]
)


def _leaves(bsyms: Sequence[BoundSymbol]):
    """``bsyms`` with composites opened, down to the copies, barriers and other prims."""
    for b in bsyms:
        if b.subsymbols and not is_barrier(b):
            yield from _leaves(b.subsymbols)
        else:
            yield b


def _follow_barrier(b: BoundSymbol, root: dict[str, TensorProxy]) -> None:
    """Record that each output of barrier ``b`` is, at run time, the tensor its argument is."""
    for o, a in zip(b.flat_proxy_outs, b.flat_proxy_args):
        if isinstance(o, TensorProxy) and isinstance(a, TensorProxy):
            root[o.name] = root.get(a.name, a)


def _nvfuser_region(bsym: BoundSymbol) -> bool:
    # Only nvFuser writes behind autograd's back: Inductor's regions run aten's copy_, which
    # bumps the version itself.
    return is_fusion(bsym) and getattr(bsym.sym.executor, "name", None) == "nvfuser"


def bump_written_versions(
    trace: TraceCtx, inputs: set[str], writes_behind_autograd: Callable[[BoundSymbol], bool] = _nvfuser_region
) -> tuple[TraceCtx, int]:
    """``trace`` with one ``bump_versions`` before its return, of every input an nvFuser region
    writes, and how many inputs that is (0: ``trace`` itself, unchanged).

    ``writes_behind_autograd`` says which top-level bsyms write without a version bump (nvFuser's
    regions; a test hands it other regions)."""
    from thunder_ext.final_barriers import recompute_dels

    # A name a barrier gave an input (top-level, or inside the region) is the same tensor.
    root: dict[str, TensorProxy] = {}
    written: dict[str, TensorProxy] = {}
    for b in trace.bound_symbols:
        if is_barrier(b) and not is_fusion(b):
            _follow_barrier(b, root)
        elif writes_behind_autograd(b):
            for leaf in _leaves(b.subsymbols):
                if is_barrier(leaf):
                    _follow_barrier(leaf, root)
                elif is_copy(leaf) and isinstance(leaf.flat_proxy_args[1], TensorProxy):
                    dst = leaf.flat_proxy_args[1]
                    dst = root.get(dst.name, dst)
                    if dst.name in inputs:
                        written.setdefault(dst.name, dst)
    if not written:
        return trace, 0
    bsyms = list(trace.bound_symbols)
    at = next((i for i in range(len(bsyms) - 1, -1, -1) if is_return(bsyms[i])), len(bsyms))
    bsyms.insert(at, bump_versions.bind(*written.values(), output=None))
    return recompute_dels(trace, bsyms), len(written)


def _root_names(bsyms: Sequence[BoundSymbol]) -> dict[str, str]:
    """Each name a top-level barrier gave a tensor, mapped to the name it had first."""
    root: dict[str, TensorProxy] = {}
    for b in bsyms:
        if is_barrier(b) and not is_fusion(b):
            _follow_barrier(b, root)
    return {k: v.name for k, v in root.items()}


def _ancestors(bsyms: Sequence[BoundSymbol], made_at, of: TensorProxy) -> set[int]:
    """Indices of the bsyms ``of`` is computed from (``made_at``: Thunder's ``producers``, by index)."""
    seen: set[int] = set()
    todo = [made_at[of]] if of in made_at else []
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo += [made_at[p] for p in bsyms[i].flat_proxy_args if p in made_at]
    return seen


def derived_readers(
    bsyms: Sequence[BoundSymbol], at: int, fusible: Callable[[BoundSymbol], bool], epilogues: set[int], made_at=None
) -> list[int]:
    """The fusible bsyms that read a value a fusion region may recompute from the storage the
    copy ``bsyms[at]`` writes, other than those its own value is made from.

    Thunder's rematerialization lets a consumer region recompute values of its producer region
    from the producer's inputs.  When the producer also holds the copy into ``x``, a consumer
    that receives a value computed from ``x`` may read ``x`` itself, after the copy.  Such
    values are those computed from ``x`` (any of its names before the copy) by fusible bsyms,
    one after another: a bsym no region holds (a barrier, an op nvFuser does not take) hands
    its consumers a value no region recomputes.

    ``made_at``: ``thunder.core.utils.producers(bsyms, _map_to_numbers=True)``, where the caller has it.
    """
    if made_at is None:
        made_at = producers(list(bsyms), _map_to_numbers=True)
    copy = bsyms[at]
    value, dest = copy.flat_proxy_args[0], copy.flat_proxy_args[1]
    root = _root_names(bsyms[:at])
    x = root.get(dest.name, dest.name)
    derived = {n for n in [x, *root] if root.get(n, n) == x}
    after_copy = {p.name for p in copy.flat_proxy_outs}
    made_from_value = _ancestors(bsyms, made_at, value)
    readers = []
    for i, b in enumerate(bsyms):
        if i == at or is_return(b):
            continue
        names = {p.name for p in b.flat_proxy_args}
        if names & after_copy:
            after_copy |= {p.name for p in b.flat_proxy_outs}
            continue
        if is_barrier(b) or not fusible(b) or not names & derived:
            continue
        derived |= {p.name for p in tensor_outs(b)}
        if i not in made_from_value and i not in epilogues:
            readers.append(i)
    return readers


def epilogues_after_derived_reads(
    bsyms: list[BoundSymbol],
    epilogue_inputs: frozenset[str],
    executors: Sequence[Executor] | None,
    barrier: Callable[[list[TensorProxy], list[TensorProxy], BoundSymbol], tuple[BoundSymbol, Sequence[TensorProxy]]],
) -> tuple[list[BoundSymbol], int]:
    """``bsyms`` with one barrier before the epilogue ``copy_``s where a fusion region could
    otherwise recompute a read of a written input after its copy (:func:`derived_readers`),
    and how many epilogue copies it orders (0: ``bsyms`` unchanged).  Only where nvFuser is
    among ``executors``; its caller applies it under dataflow fusion only, where an epilogue
    copy joins the region of its value's producers (consecutive fusion keeps it in the last).

    The barrier takes every epilogue's value and destination, and the last values computed
    from a written input; the copies read its outputs.  So the copies run after every such
    reader, in regions of their own, which receive only barrier outputs and so recompute
    nothing::

        before (dataflow, nvFuser)               after
        t72 = ltorch.mul(b, 0.5)                 t72 = ltorch.mul(b, 0.5)
        t28 = ltorch.add(c, t72)                 t28 = ltorch.add(c, t72)
        t64 = ltorch.batch_norm(t72, ...)        t64 = ltorch.batch_norm(t72, ...)
        t73 = prims.copy_(t72, b)                (t80, t81, t82, t83) = update_aliases((t72, b, t28, t64))
                                                 t73 = prims.copy_(t80, t81)

    Without it, nvFuser fused the copy with ``t72``'s region, and the batch_norm's region
    recomputed ``t72 = b * 0.5`` from ``b`` after ``b`` was written.
    """
    nv = next((ex for ex in executors or () if getattr(ex, "name", None) == "nvfuser"), None)
    if nv is None or not epilogue_inputs:
        return bsyms, 0

    root = _root_names(bsyms)
    epilogues = [
        i for i, b in enumerate(bsyms)
        if is_copy(b) and isinstance(b.flat_proxy_args[1], TensorProxy)
        and root.get(b.flat_proxy_args[1].name, b.flat_proxy_args[1].name) in epilogue_inputs
    ]  # fmt: skip
    if not epilogues:
        return bsyms, 0
    fusible = lambda b: _fuses(nv, b, when_unknown=True)  # noqa: E731 - doubt means more order, never less
    made_at = producers(bsyms, _map_to_numbers=True)
    readers = sorted({r for e in epilogues for r in derived_readers(bsyms, e, fusible, set(epilogues), made_at)})
    first = epilogues[0]
    if not readers or readers[-1] > first:
        return bsyms, 0  # nothing to order, or a reader after the epilogue: leave it to the checker
    consumed = {p.name for r in readers for p in bsyms[r].flat_proxy_args}
    witnesses = [o for r in readers for o in tensor_outs(bsyms[r]) if o.name not in consumed]
    members: list[TensorProxy] = []
    for e in epilogues:
        for p in bsyms[e].flat_proxy_args[:2]:
            if all(p.name != m.name for m in members):
                members.append(p)
    made_later = {p.name for b in bsyms[first:] for p in b.flat_proxy_outs}
    if any(p.name in made_later for p in members):
        return bsyms, 0  # a later epilogue's value or name is made after the first one: leave it to the checker
    b, outs = barrier(members, witnesses, bsyms[first])
    renamed = {m.name: o for m, o in zip(members, outs)}
    out = list(bsyms)
    for e in epilogues:
        c = bsyms[e]
        out[e] = c.from_bsym(args=tuple(renamed.get(getattr(a, "name", None), a) for a in c.args))
    out.insert(first, b)
    return out, len(epilogues)
