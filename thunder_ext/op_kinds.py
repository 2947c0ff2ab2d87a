"""What one bound symbol does to storage, at every stage of the Thunder 0.2.6 pipeline.

The same operation shows up in three forms (see ``docs/design.md``, *How an in-place op looks at each stage*):

* right after tracing, as an ``ltorch`` composite (``ltorch.mul_`` with subsymbols
  ``ltorch.mul`` and ``prims.copy_``);
* at the fusion stage with the default executors, as an executor symbol with a string id
  (``'copy_'``, ``'torch_slice_prim_impl'``, ``'update_aliases'``);
* with nvFuser, as prims.

Executor symbols are mapped back to the symbols they implement through the executors'
own ``implmap`` tables, and view-ness is then read from Thunder's tables
(``ltorch._syms_returning_views`` and friends).  A composite we do not recognise is
analysed through its subsymbols, so a ``copy_`` buried in the middle of a composite
(``batch_norm``'s running stats) is seen as a write of the composite's argument.

Invariants this module relies on:

* a ``copy_(src, dst)`` writes ``dst`` and its output aliases ``dst``;
* a bsym tagged ``IN_PLACE`` that has no subsymbols writes its first tensor argument and
  its tensor output aliases it;
* inside a composite, proxy names of the composite's arguments are the same objects in its
  subsymbols (Thunder binds subsymbols over the caller's proxies).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, BoundSymbolTag, has_tags
from thunder.extend import get_all_executors

from thunder_ext.meta_calls import copies_when_strided, output_storage_sources

PrimIDs = prims.PrimIDs

# Prims whose output always shares storage with their first input.
_PRIM_VIEWS = frozenset(
    {
        PrimIDs.BROADCAST_IN_DIM,
        PrimIDs.SLICE,
        PrimIDs.SQUEEZE,
        PrimIDs.TRANSPOSE,
        PrimIDs.UNFOLD,
        PrimIDs.VIEW,
        PrimIDs.SHALLOW_COPY,
        PrimIDs.BITCAST,
    }
)
# Prims whose output may or may not share storage (reshape copies when it must).
_PRIM_MAYBE_VIEWS = frozenset({PrimIDs.RESHAPE})


@functools.cache
def _implemented_ids() -> dict:
    """Executor symbol id -> ids of the symbols it implements, read from every executor's implmap."""
    table: dict = {}
    for ex in get_all_executors():
        for orig_id, impl in ex.implmap.items():
            sym = getattr(impl, "symbol", None)
            if sym is not None:
                table.setdefault(sym.id, set()).add(orig_id)
    return table


@functools.cache
def _view_ids() -> tuple[frozenset, frozenset]:
    views = frozenset(s.id for s in ltorch._syms_returning_views) | _PRIM_VIEWS
    maybe = frozenset(s.id for s in ltorch._syms_that_may_return_views) | _PRIM_MAYBE_VIEWS
    return views, maybe


@functools.cache
def _auto_registered_ids() -> frozenset:
    """Ids of the symbols Thunder registered automatically for PyTorch ops it has none of (an
    executor's symbol for one is found through :func:`origin_ids`)."""
    return frozenset(
        s.id for s in ltorch._torch_to_thunder_function_map.values() if prims.OpTags.AUTO_REGISTERED in (getattr(s, "tags", None) or ())
    )


@functools.cache
def _inplace_ids() -> frozenset:
    return frozenset(s.id for s in ltorch._inplace_to_out_of_place)


def origin_ids(bsym: BoundSymbol) -> frozenset:
    """The symbol's own id plus every id it implements on behalf of an executor."""
    sid = bsym.sym.id
    try:
        return frozenset({sid}) | frozenset(_implemented_ids().get(sid, ()))
    except TypeError:  # unhashable ids never occur in 0.2.6, but do not crash on one
        return frozenset()


@functools.cache
def _may_be_its_input_ids() -> frozenset:
    return frozenset(s.id for s in ltorch._syms_that_may_return_views if s.name == "contiguous")


def may_be_its_input(bsym: BoundSymbol) -> bool:
    """``bsym`` may hand back its input object itself, which no fold can take away: ``contiguous``
    is its input when the input's strides are contiguous, which Thunder does not trace."""
    return bool(origin_ids(bsym) & _may_be_its_input_ids())


def and_what_may_be_them(bsyms, names) -> set[str]:
    """``names`` and every name an op that :func:`may_be_its_input` makes of one, with its shape
    and dtype: at run time it may be that tensor object itself."""
    out = set(names)
    for b in bsyms:
        args = tensor_args(b)
        if args and args[0].name in out and may_be_its_input(b):
            out.update(o.name for o in tensor_outs(b) if o.shape == args[0].shape and o.dtype == args[0].dtype)
    return out


def is_return(bsym: BoundSymbol) -> bool:
    return bsym.sym.id == PrimIDs.RETURN


def returned_data(ret: BoundSymbol) -> set[str]:
    """Names a return hands back as data: all it reads except its ``flat_args`` entry, which
    names the inputs themselves (Thunder unwraps it, or collects gradients by those names)."""
    from thunder.core.pytree import tree_flatten

    def names(x) -> set[str]:
        return {p.name for p in tree_flatten(x)[0] if isinstance(p, TensorProxy)}

    out: set[str] = set()
    for a in ret.args:
        out |= names({k: v for k, v in a.items() if k != "flat_args"} if isinstance(a, dict) else a)
    return out


def returned_outputs(ret: BoundSymbol) -> list[TensorProxy]:
    """The tensors the return hands to the caller, in order: its ``output`` entry where it has one
    (not the ``flat_args`` Thunder lists beside it, nor a forward's saved values)."""
    from thunder.core.pytree import tree_flatten

    first = ret.args[0] if ret.args else None
    tree = first["output"] if isinstance(first, dict) and "output" in first else (ret.args, ret.kwargs)
    return [p for p in tree_flatten(tree)[0] if isinstance(p, TensorProxy)]


def returned_to_caller(ret: BoundSymbol) -> set[str]:
    """Names a return hands to the caller as data: :func:`returned_data` less what a forward
    trace saves for its backward (the second element of ``(outputs, saved_for_backward)``)."""
    args = ret.args
    if len(args) == 2 and isinstance(args[0], dict) and "output" in args[0]:
        return returned_data(ret.from_bsym(args=(args[0],)))
    return returned_data(ret)


def whole_tensor_versions(bsyms, names, effects=None, *, and_what_may_be_them: bool = False) -> set[str]:
    """``names`` and every name an in-place op on one of them returns for it: the same tensor
    after the write, not a view of it.  ``effects``: the bsyms' effects, where known already.

    With ``and_what_may_be_them``, also what an op that :func:`may_be_its_input` makes of one,
    with its shape and dtype, and the versions of that in turn, in trace order: ``t =
    a.contiguous(); t.mul_(2)`` returns what may be ``a`` itself.
    """
    whole = set(names)
    for k, b in enumerate(bsyms):
        effect = effects[k] if effects is not None else effect_of(b)
        maybe = and_what_may_be_them and may_be_its_input(b)
        for o, a in effect.aliases:
            if a.name not in whole:
                continue
            if any(a is w for w in effect.writes) or (maybe and o.shape == a.shape and o.dtype == a.dtype):
                whole.add(o.name)
    return whole


def in_backward(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` belongs to the joint trace's backward.

    ``get_grad`` is tagged backward but reads a forward output by name: what is placed before it
    (a barrier ordering that output after a write) belongs to the forward, which returns it."""
    return has_tags(bsym, {BoundSymbolTag.BACKWARD}) and bsym.sym.id != prims.PrimIDs.GET_GRAD


def is_barrier(bsym: BoundSymbol) -> bool:
    return PrimIDs.UPDATE_ALIASES in origin_ids(bsym)


def is_copy(bsym: BoundSymbol) -> bool:
    """``prims.copy_`` (or a symbol implementing it), or the transform's ``eager_copy_``, which
    takes the same arguments."""
    return PrimIDs.COPY_ in origin_ids(bsym) or _is_eager_symbol(bsym, "eager_copy_")


def is_copy_composite(bsym: BoundSymbol) -> bool:
    """``Tensor.copy_`` as traced: a composite around ``prims.copy_`` (it carries no IN_PLACE tag)."""
    return "torch.Tensor.copy_" in origin_ids(bsym)


def is_fusion(bsym: BoundSymbol) -> bool:
    return bool(bsym.sym.is_fusion)


def _tagged_inplace(bsym: BoundSymbol) -> bool:
    tags = bsym.sym.tags or ()
    return prims.OpTags.IN_PLACE in tags or bool(origin_ids(bsym) & _inplace_ids())


def _gathers(bsym: BoundSymbol, ids: frozenset) -> bool:
    """Indexing with a tensor (``x[idx]``) copies into new storage, although ``getitem`` is listed as a view."""
    return ltorch.getitem.id in ids and any(isinstance(p, TensorProxy) for p in bsym.flat_proxy_args[1:])


def view_kind(bsym: BoundSymbol) -> str | None:
    """'view' if the output always aliases the input, 'maybe' if it may, else None."""
    ids = origin_ids(bsym)
    if _gathers(bsym, ids):
        return None
    views, maybe = _view_ids()
    if ids & views:
        return "view"
    if ids & maybe:
        # Of these only ``to`` changes dtype or device, and then it always copies.
        return None if _changes_dtype_or_device(bsym) else "maybe"
    if _unlisted_view(bsym, ids):
        return "maybe" if copies_when_strided(bsym) else "view"
    return None


def _changes_dtype_or_device(bsym: BoundSymbol) -> bool:
    args, outs = tensor_args(bsym), tensor_outs(bsym)
    return bool(args and outs) and all(o.dtype != args[0].dtype or o.device != args[0].device for o in outs)


def is_auto_registered(bsym: BoundSymbol, ids: frozenset | None = None) -> bool:
    """A symbol Thunder registered automatically for a PyTorch op it has none of, or an
    executor's symbol for one (``ids``: :func:`origin_ids`, where the caller has them)."""
    return not bsym.subsymbols and bool((origin_ids(bsym) if ids is None else ids) & _auto_registered_ids())


def _unlisted_view(bsym: BoundSymbol, ids: frozenset | None = None) -> bool:
    """An op Thunder registered automatically (it has no symbol of its own), outside Thunder's
    table of such ops that return views, whose PyTorch op returns a view of its first tensor
    argument, or that argument itself: ``t.ravel()``, ``torch.linalg.diagonal(t)``,
    ``torch.positive(t)``.  Thunder takes the output for a new tensor; at run time a write
    through either name reaches the other."""
    sources = _unlisted_storage_sources(bsym, ids)
    return bool(sources) and all(s == 0 for s in sources)


def _unlisted_storage_sources(bsym: BoundSymbol, ids: frozenset | None = None) -> tuple:
    """For an op Thunder registered automatically, which distinct tensor argument each output
    shares storage with (:func:`thunder_ext.meta_calls.output_storage_sources`); () otherwise."""
    return output_storage_sources(bsym) if is_auto_registered(bsym, ids) else ()


def _unlisted_aliases(bsym: BoundSymbol) -> tuple:
    """(output, argument) pairs of an automatically registered op whose outputs share storage
    with arguments other than the first alone (``torch.meshgrid(a, b)``, ``torch.broadcast_tensors``)."""
    sources = _unlisted_storage_sources(bsym)
    if not any(s is not None for s in sources):
        return ()
    args = list({p.name: p for p in tensor_args(bsym)}.values())
    return tuple((o, args[s]) for o, s in zip(tensor_outs(bsym), sources) if s is not None)


def tensor_args(bsym: BoundSymbol) -> list[TensorProxy]:
    return [p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)]


def tensor_outs(bsym: BoundSymbol) -> list[TensorProxy]:
    return [p for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy)]


@dataclass(frozen=True)
class Effect:
    """The storage effect of one bound symbol.

    ``writes``: tensor arguments whose storage the bsym mutates.
    ``aliases``: (output, argument) pairs that share storage after the bsym runs.
    ``is_view``: the bsym only creates aliases and reads no data (not an access).
    """

    writes: tuple[TensorProxy, ...] = ()
    aliases: tuple[tuple[TensorProxy, TensorProxy], ...] = ()
    is_view: bool = False
    is_barrier: bool = False


_NO_EFFECT = Effect()


def effect_of(bsym: BoundSymbol) -> Effect:
    """Classify ``bsym``: which arguments it writes and which outputs alias which arguments."""
    if is_return(bsym):
        return _NO_EFFECT
    if is_barrier(bsym):
        ins, outs = tensor_args(bsym), tensor_outs(bsym)
        return Effect(aliases=tuple(zip(outs, ins)), is_barrier=True)
    if is_copy(bsym):
        dst = bsym.flat_proxy_args[1]
        outs = tensor_outs(bsym)
        return Effect(writes=(dst,), aliases=tuple((o, dst) for o in outs[:1]))
    if _is_foreach_copy(bsym):
        dsts = tuple(p for p in bsym.args[1] if isinstance(p, TensorProxy))
        return Effect(writes=dsts, aliases=tuple(zip(tensor_outs(bsym), dsts)))
    kind = view_kind(bsym)
    if kind is not None:
        args = tensor_args(bsym)
        if not args:
            return _NO_EFFECT
        return Effect(aliases=tuple((o, args[0]) for o in tensor_outs(bsym)), is_view=kind == "view")
    if bsym.subsymbols:
        return _composite_effect(bsym)
    unlisted = _unlisted_aliases(bsym)
    if unlisted:  # an access that leaves aliases the view replay cannot make again
        return Effect(aliases=unlisted)
    if _tagged_inplace(bsym):
        args = tensor_args(bsym)
        if not args:
            return _NO_EFFECT
        return Effect(writes=(args[0],), aliases=tuple((o, args[0]) for o in tensor_outs(bsym)[:1]))
    return _NO_EFFECT


def _is_foreach_copy(bsym: BoundSymbol) -> bool:
    """The transform's ``foreach_copy_(sources, destinations)`` (:mod:`thunder_ext.batched_copies`),
    which writes every destination and returns each."""
    return _is_eager_symbol(bsym, "foreach_copy_")


def _is_eager_symbol(bsym: BoundSymbol, name: str) -> bool:
    """The symbol ``name`` of the transform's own executor (:mod:`thunder_ext.eager_ops`)."""
    executor = getattr(bsym.sym, "executor", None)
    return bsym.sym.name == name and getattr(executor, "name", None) == "thunder_ext_eager"


def _leaves(bsym: BoundSymbol):
    """Subsymbols, descending into composites until a recognised or indivisible symbol."""
    for sub in bsym.subsymbols:
        if sub.subsymbols and not (is_copy(sub) or is_barrier(sub) or view_kind(sub)):
            yield from _leaves(sub)
        else:
            yield sub


def _composite_effect(bsym: BoundSymbol) -> Effect:
    """Writes and aliases of a composite, found by alias analysis over its subsymbols."""
    # Imported here: alias_analysis builds on this module.
    from thunder_ext.alias_analysis import StorageGroups

    groups = StorageGroups()
    root = groups.group
    aliased = False
    writes_roots: set[str] = set()
    for leaf in _leaves(bsym):
        e = effect_of(leaf)
        for out, arg in e.aliases:
            groups.union(out.name, arg.name)
            aliased = True
        for w in e.writes:
            writes_roots.add(root(w.name))
    if not writes_roots and not aliased:
        return _NO_EFFECT
    args = tensor_args(bsym)
    arg_roots = {}
    for a in args:
        arg_roots.setdefault(root(a.name), a)
    # In argument order, not set order: the pass's output must not depend on PYTHONHASHSEED.
    writes = tuple(a for r, a in arg_roots.items() if r in writes_roots)
    aliases = tuple((o, arg_roots[root(o.name)]) for o in tensor_outs(bsym) if root(o.name) in arg_roots)
    return Effect(writes=writes, aliases=aliases)


def is_like_factory(bsym: BoundSymbol) -> bool:
    """A factory shaped like its argument (``zeros_like``, ``full_like``): it reads the argument's
    metadata only, so its output is never computed from the argument's values."""
    return str(bsym.sym.id).endswith("_like")


def is_detach(bsym: BoundSymbol) -> bool:
    """``detach()``: an alias of its input's storage that carries none of its autograd history."""
    return bsym.sym.name == "detach"


def copies_without_grad(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` holds a ``copy_`` traced with grad disabled (``torch.no_grad()``, a function
    decorated with it, ``torch.set_grad_enabled(False)``): Thunder records the mode on the copy."""
    return any(
        (is_copy(sub) and sub.kwargs.get("grad_enabled") is False) or copies_without_grad(sub)
        for sub in bsym.subsymbols
    )


def writes_with_grad(bsym: BoundSymbol) -> bool:
    """Whether a write was traced with grad enabled (a write made under no-grad has no autograd history)."""
    if is_copy(bsym):
        return bsym.kwargs.get("grad_enabled") is not False
    return not copies_without_grad(bsym)


def source_line(bsym: BoundSymbol) -> str:
    """'file:line' of the user code that produced ``bsym``; where Thunder records none, 'the
    return', 'backward' (Thunder's gradient rules record no line), or '<unknown source>'."""
    line = _recorded_line(bsym)
    if line is not None:
        return line
    if is_return(bsym):
        return "the return"
    return "backward" if in_backward(bsym) else "<unknown source>"


def _recorded_line(bsym: BoundSymbol) -> str | None:
    """'file:line' Thunder recorded for ``bsym``, or else for its first subsymbol that has one."""
    pos, fname = getattr(bsym, "source_positions", None), getattr(bsym, "source_filename", None)
    if pos is not None and fname is not None:
        return f"{fname}:{pos.lineno}"
    return next((s for s in map(_recorded_line, bsym.subsymbols) if s is not None), None)


def is_unpack(bsym: BoundSymbol) -> bool:
    """One of the trace's header bsyms, which unpack its inputs."""
    return bsym.sym.id in (
        prims.PrimIDs.UNPACK_TRIVIAL, prims.PrimIDs.UNPACK_SEQUENCE, prims.PrimIDs.UNPACK_KEY,
        prims.PrimIDs.UNPACK_ATTR, prims.PrimIDs.UNPACK_EMPTY_DICT, prims.PrimIDs.UNPACK_DICT_KEY,
    )  # fmt: skip


def describe(bsym: BoundSymbol) -> str:
    """A one-line description of ``bsym`` for messages: its output, symbol name and source line."""
    outs = tensor_outs(bsym)
    lhs = f"{outs[0].name} = " if outs else ""
    return f"`{lhs}{bsym.sym.name}` ({source_line(bsym)})"
