"""A bound symbol called as eager PyTorch would call it, on meta tensors: what eager does with it.

Two passes ask eager a question Thunder's symbols cannot answer: whether an op's in-place
form exists for these arguments (:mod:`thunder_ext.reinplace`), and whether eager's backward
of an op saves one of its inputs (:func:`saves_input`, for :mod:`thunder_ext.functionalize`).
Each answer is the same for every call with the same symbol, argument structure, shapes,
dtypes and constants, so answers are kept by that signature (:func:`call_signature`): a loop
repeats the same few ops, and a meta call each is measurable.

Meta tensors have shapes and dtypes but no data, so a call costs no memory and no compute;
an op eager cannot run on meta (or a constant Thunder represents its own way) makes the probe
fail, and each caller then takes the conservative answer.  Where Thunder's symbol takes other
arguments than the PyTorch callable it is named after, :data:`_EAGER_FORMS` holds the eager call
that takes Thunder's (tested against eager's own behaviour in ``tests/test_analysis_units.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from collections.abc import Set as AbstractSet

import thunder.torch as ltorch
import torch
from thunder.core import dtypes
from thunder.core.dtypes import to_torch_dtype
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol

_MEMO_MAX = 4096


def torch_function(bsym: BoundSymbol) -> Callable | None:
    """The PyTorch callable ``bsym`` stands for: an executor's symbol (``torch.add`` in a final
    trace) by its module and name; a Thunder ``torch`` symbol (``ltorch.add``) by its id, which
    is the PyTorch callable's qualified name (``torch.add``, ``torch.nn.functional.relu``); a
    symbol Thunder registered automatically for a PyTorch op it has none of (``Tensor.cpu``,
    ``torch.positive``) by the callable it wraps."""
    # Thunder keeps the wrapped callable on the auto-registered symbol's meta; its id names
    # ``torch.Tensor`` by its ``__name__`` alone (``Tensor.cpu``), so the id cannot find it.
    wrapped = getattr(bsym.sym.meta, "__torchfn", None)
    if callable(wrapped):
        return wrapped
    module = getattr(bsym.sym, "module", None)
    if module is not ltorch:
        return getattr(module, bsym.sym.name, None) if module is not None else None
    sid = bsym.sym.id
    if not isinstance(sid, str) or not sid.startswith("torch."):
        return None
    fn = torch
    for part in sid.split(".")[1:]:
        fn = getattr(fn, part, None)
        if fn is None:
            return None
    return fn if callable(fn) else None


def _eager_to(a, first=None, second=None, /, *, device=None, dtype=None, copy=False, memory_format=None):
    # Thunder's `to` takes (a, dtype-or-device-or-tensor, dtype) and keywords; eager's has no
    # slot for a None.  Devices are dropped: on meta every tensor stays on meta, and a device
    # move's backward saves no tensor.
    dtypes_ = [x for x in (first, second, dtype) if isinstance(x, (torch.dtype, torch.Tensor))]
    return a.to(*dtypes_[:1], copy=copy, memory_format=memory_format or torch.preserve_format)


# Thunder symbols whose arguments are not those of the PyTorch callable of the same name: the
# eager call that takes Thunder's arguments as they are.  Without one, the call fails and each
# caller takes its conservative answer.
_EAGER_FORMS: dict[str, Callable] = {
    "torch.relu": lambda a, inplace=False: torch.nn.functional.relu(a, inplace),  # (a, inplace)
    "torch.reshape": lambda a, *shape: torch.reshape(a, _dims(shape)),  # (a, *shape)
    "torch.permute": lambda a, *dims: torch.permute(a, _dims(dims)),  # (a, *dims)
    "torch.Tensor.to": _eager_to,
    # A device move cannot run on meta.  Called on a tensor already on that device it is that
    # tensor, and its backward saves nothing; a caller that asks whether it *returns* its input
    # compares the devices itself (:func:`returns_its_input`).
    "Tensor.cpu": lambda a, memory_format=torch.preserve_format: a,
    # Thunder's dim=None (the last dimension, or the whole tensor); eager's keyword-only `stable`
    "torch.topk": lambda a, k, dim=None, largest=True, sorted=True: torch.topk(a, k, -1 if dim is None else dim, largest, sorted),
    "torch.sort": lambda a, dim=None, descending=False, stable=False: torch.sort(
        a, dim=-1 if dim is None else dim, descending=descending, stable=stable
    ),
    "torch.max": lambda a, dim=None, keepdim=False: torch.max(a) if dim is None else torch.max(a, dim, keepdim),
    "torch.flip": lambda a, *dims: torch.flip(a, _dims(dims)),  # (a, *dims)
    # Thunder's fill_value is its own; without it these are eager's
    "torch.tril": lambda a, diagonal=0, *, fill_value=None: torch.tril(a, diagonal) if fill_value is None else _no_form(),
    "torch.triu": lambda a, diagonal=0, *, fill_value=None: torch.triu(a, diagonal) if fill_value is None else _no_form(),
    # Thunder takes the functional forms' argument order (running stats first); torch.batch_norm
    # and torch.instance_norm put the weight first and need cudnn_enabled.  Running stats never
    # take a gradient (eager raises if they ask for one); detached, they keep their storage.
    "torch.batch_norm": lambda a, rm=None, rv=None, *rest, **kw: torch.nn.functional.batch_norm(
        a, _nograd(rm), _nograd(rv), *rest, **kw
    ),
    "torch.instance_norm": lambda a, rm=None, rv=None, *rest, **kw: torch.nn.functional.instance_norm(
        a, _nograd(rm), _nograd(rv), *rest, **kw
    ),
}


def _nograd(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


def _dims(dims: tuple) -> tuple:
    return tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims


def _no_form():
    raise TypeError("no eager form for these arguments")


def eager_form(bsym: BoundSymbol) -> Callable | None:
    """The eager callable to call with ``bsym``'s own arguments: :data:`_EAGER_FORMS` where
    Thunder's signature differs from PyTorch's (or eager cannot run the op on meta), else
    :func:`torch_function`."""
    if getattr(bsym.sym, "module", None) is ltorch and bsym.sym.id in _EAGER_FORMS:
        return _EAGER_FORMS[bsym.sym.id]
    return torch_function(bsym)


def call_signature(bsym: BoundSymbol, *extra: Hashable) -> tuple | None:
    """What decides a meta call's outcome: the symbol, the arguments' structure, each tensor's
    shape, dtype and which earlier argument it repeats, every other leaf by type and value, and
    ``extra``; None where a leaf is unhashable or a number proxy (it compares symbolically)."""
    leaves, spec = tree_flatten((bsym.args, bsym.kwargs))
    seen: dict[str, int] = {}
    parts: list = []
    for x in leaves:
        if isinstance(x, TensorProxy):
            parts.append(("T", tuple(x.shape), x.dtype, seen.setdefault(x.name, len(seen))))
        elif isinstance(x, Proxy):
            return None
        else:
            parts.append((type(x), x))
    key = (bsym.sym.id, bsym.sym.name, spec, tuple(parts), extra)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def memoized(memo: dict, key: tuple | None, ask: Callable[[], bool]) -> bool:
    """``ask()``, kept in ``memo`` under ``key`` (never when ``key`` is None, or ``memo`` is full)."""
    if key is not None and key in memo:
        return memo[key]
    answer = ask()
    if key is not None and len(memo) < _MEMO_MAX:
        memo[key] = answer
    return answer


def call_on_meta(
    bsym: BoundSymbol, fn: Callable, *, grad: bool | AbstractSet[str] = False, strided: bool = False
) -> tuple[dict[str, torch.Tensor], object]:
    """``fn`` called with ``bsym``'s arguments, each tensor a meta tensor of its shape and dtype
    (one per name: a repeated argument is the same tensor); with ``grad``, every floating one
    requires grad (a set of names: the floating ones among them); with ``strided``, each is laid
    out with a gap after every element (strides twice a contiguous tensor's), as a strided view
    of an input may be at run time.  Returns the tensors by name and the result; raises what the
    call raises."""
    metas: dict[str, torch.Tensor] = {}

    def meta(x):
        if isinstance(x, TensorProxy):
            if x.name not in metas:
                shape = tuple(x.shape)
                t = torch.empty(shape, dtype=to_torch_dtype(x.dtype), device="meta")
                if strided and shape:
                    t = torch.empty_strided(shape, tuple(2 * s for s in t.stride()), dtype=t.dtype, device="meta")
                wanted = grad if isinstance(grad, bool) else x.name in grad
                metas[x.name] = t.requires_grad_(wanted and dtypes.is_inexact_dtype(x.dtype))
            return metas[x.name]
        if isinstance(x, dtypes.dtype):
            return to_torch_dtype(x)
        return x

    args, kwargs = tree_map(meta, (bsym.args, bsym.kwargs))
    return metas, fn(*args, **kwargs)


# -- what eager's backward saves ---------------------------------------------------------------

_SAVES: dict[tuple, bool] = {}


def _saved_tensors(node) -> list[torch.Tensor]:
    """The tensors ``node`` (an autograd node) saved for its backward."""
    out: list[torch.Tensor] = []
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            value = getattr(node, name)
        except Exception:  # a saved value already freed, or one with no Python form
            continue
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, torch.Tensor):
                out.append(v)
    return out


def _probe_saves(bsym: BoundSymbol, arg: TensorProxy, grad: bool | AbstractSet[str]) -> bool:
    fn = eager_form(bsym)
    if fn is None:
        return True
    try:
        metas, result = call_on_meta(bsym, fn, grad=grad)
        storage = metas[arg.name].untyped_storage()._cdata
        inputs = {id(t) for t in metas.values()}
        leaves = torch.utils._pytree.tree_leaves(result)
        nodes = [t.grad_fn for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        # Node objects are made afresh on each access and die when dropped, so an ``id`` alone
        # could be reused by the next one: ``seen`` keeps each node alive with its id.
        seen: dict[int, object] = {}
        while nodes:
            node = nodes.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            for saved in _saved_tensors(node):
                if saved.untyped_storage()._cdata == storage:
                    return True
            # The graph this call built, down to its own inputs (never into the caller's graph:
            # the inputs are leaves here).
            nodes.extend(n for n, _ in node.next_functions if n is not None and id(getattr(n, "variable", None)) not in inputs)
    except Exception:  # eager cannot run it on meta: assume it saves everything
        return True
    return False


def saves_input(bsym: BoundSymbol, arg: TensorProxy, differentiable: AbstractSet[str] | None = None) -> bool:
    """Whether eager's backward of ``bsym`` saves ``arg`` (or a view of it), so that a later
    in-place write to ``arg`` makes that backward raise (its version counter moved).  True
    where the probe cannot tell.

    ``differentiable``: the names that carry a gradient (intermediate proxies carry no
    ``requires_grad`` before autodiff); eager saves only what the gradients it computes read
    (``x * w`` with only ``w`` requiring grad saves ``x``, not ``w``).  None: every floating
    argument requires grad, the most eager can save."""
    if differentiable is None:
        grad: bool | frozenset[str] = True
        which: tuple = ()
    else:
        grad = frozenset(p.name for p in bsym.flat_proxy_args if isinstance(p, TensorProxy) and p.name in differentiable)
        which = tuple(sorted(position(bsym, p) for p in bsym.flat_proxy_args if isinstance(p, TensorProxy) and p.name in grad))
        if not grad:
            return False  # no gradient is computed: eager records no backward
    key = call_signature(bsym, position(bsym, arg), differentiable is None, which)
    return memoized(_SAVES, key, lambda: _probe_saves(bsym, arg, grad))


def position(bsym: BoundSymbol, p: TensorProxy) -> int:
    """Where ``p`` first is among ``bsym``'s argument leaves (-1: not there)."""
    leaves = tree_flatten((bsym.args, bsym.kwargs))[0]
    return next((k for k, x in enumerate(leaves) if isinstance(x, TensorProxy) and x.name == p.name), -1)


# -- which argument's storage each output shares ---------------------------------------------

_OUTPUTS: dict[tuple, tuple] = {}


def _probe_outputs(bsym: BoundSymbol, strided: bool = False) -> tuple:
    fn = eager_form(bsym)
    if fn is None:
        return ()
    try:
        metas, result = call_on_meta(bsym, fn, strided=strided)
    except Exception:  # eager cannot run it on meta: nothing known
        return ()
    names = [p.name for p in tree_flatten((bsym.args, bsym.kwargs))[0] if isinstance(p, TensorProxy)]
    args = [metas[n] for n in dict.fromkeys(names)]
    storages = [a.untyped_storage()._cdata for a in args]
    out = []
    for t in torch.utils._pytree.tree_leaves(result):
        if isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                return ()
            cdata = t.untyped_storage()._cdata
            k = next((k for k, c in enumerate(storages) if c == cdata), None)
            out.append((k, k is not None and t is args[k]))
    return tuple(out)


def _outputs_on_meta(bsym: BoundSymbol) -> tuple:
    """For each tensor eager's call with ``bsym``'s arguments returns: the position (among the
    distinct tensor arguments, in order) of the argument whose storage it shares, or None, and
    whether it is that argument object itself.  Empty where the probe cannot tell."""
    return memoized(_OUTPUTS, call_signature(bsym), lambda: _probe_outputs(bsym))


_COPIES_WHEN_STRIDED: dict[tuple, bool] = {}


def copies_when_strided(bsym: BoundSymbol) -> bool:
    """Whether eager's call, which returns a view of its first tensor argument for contiguous
    arguments, returns storage of its own for strided ones: ``t.ravel()`` (``contiguous()``
    then ``view``).  Its output is then a view or a copy by the strides of its argument at run
    time, which no trace records.  True where the strided call raises nothing but the probe
    cannot tell."""
    return memoized(_COPIES_WHEN_STRIDED, call_signature(bsym), lambda: _probe_copies_when_strided(bsym))


def _probe_copies_when_strided(bsym: BoundSymbol) -> bool:
    strided = _probe_outputs(bsym, strided=True)
    if strided:
        return tuple(k for k, _ in strided) != output_storage_sources(bsym)
    return _strided_call_runs(bsym)  # the probe cannot tell: a copy, unless eager refuses strides


def _strided_call_runs(bsym: BoundSymbol) -> bool:
    """Whether eager accepts strided arguments at all (an op that ``view``s them raises, as it
    does at run time: then the contiguous answer is the only one)."""
    fn = eager_form(bsym)
    try:
        call_on_meta(bsym, fn, strided=True)
    except Exception:
        return False
    return True


def output_storage_sources(bsym: BoundSymbol) -> tuple:
    """For each tensor eager's call with ``bsym``'s arguments returns, the position (among the
    distinct tensor arguments, in order) of the argument whose storage it shares, or None where it
    has storage of its own: ``(0,)`` for ``t.ravel()`` of a contiguous tensor, ``(None,)`` for
    ``t.exp()``.  Empty where the probe cannot tell."""
    return tuple(k for k, _ in _outputs_on_meta(bsym))


def returns_its_input(bsym: BoundSymbol) -> bool:
    """Whether eager, called with ``bsym``'s arguments, returns its first tensor argument itself,
    the same object: ``torch.positive(t)``, ``t.int()`` of an int32 tensor, ``F.alpha_dropout``
    with ``p=0``.  False where the probe cannot tell.  The devices are not compared (every meta
    tensor is on meta): the caller compares them."""
    return _outputs_on_meta(bsym) == ((0, True),)
