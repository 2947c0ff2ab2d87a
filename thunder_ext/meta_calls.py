"""A bound symbol called as eager PyTorch would call it, on meta tensors: what eager does with it.

Two passes ask eager a question Thunder's symbols cannot answer: whether an op's in-place
form exists for these arguments (:mod:`thunder_ext.reinplace`), and whether eager's backward
of an op saves one of its inputs (:func:`saves_input`, for :mod:`thunder_ext.functionalize`).
Each answer is the same for every call with the same symbol, argument structure, shapes,
dtypes and constants, so answers are kept by that signature (:func:`call_signature`): a loop
repeats the same few ops, and a meta call each is measurable.

Meta tensors have shapes and dtypes but no data, so a call costs no memory and no compute;
an op eager cannot run on meta (or a constant Thunder represents its own way) makes the probe
fail, and each caller then takes the conservative answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

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
    is the PyTorch callable's qualified name (``torch.add``, ``torch.nn.functional.relu``)."""
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


def call_on_meta(bsym: BoundSymbol, fn: Callable, *, grad: bool = False) -> tuple[dict[str, torch.Tensor], object]:
    """``fn`` called with ``bsym``'s arguments, each tensor a meta tensor of its shape and dtype
    (one per name: a repeated argument is the same tensor); with ``grad``, every floating one
    requires grad.  Returns the tensors by name and the result; raises what the call raises."""
    metas: dict[str, torch.Tensor] = {}

    def meta(x):
        if isinstance(x, TensorProxy):
            if x.name not in metas:
                t = torch.empty(tuple(x.shape), dtype=to_torch_dtype(x.dtype), device="meta")
                metas[x.name] = t.requires_grad_(grad and dtypes.is_inexact_dtype(x.dtype))
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


def _probe_saves(bsym: BoundSymbol, arg: TensorProxy) -> bool:
    fn = torch_function(bsym)
    if fn is None:
        return True
    try:
        metas, result = call_on_meta(bsym, fn, grad=True)
        storage = metas[arg.name].untyped_storage()._cdata
        inputs = {id(t) for t in metas.values()}
        leaves = torch.utils._pytree.tree_leaves(result)
        nodes = [t.grad_fn for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: set[int] = set()
        while nodes:
            node = nodes.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for saved in _saved_tensors(node):
                if saved.untyped_storage()._cdata == storage:
                    return True
            # The graph this call built, down to its own inputs (never into the caller's graph:
            # the inputs are leaves here).
            nodes.extend(n for n, _ in node.next_functions if n is not None and id(getattr(n, "variable", None)) not in inputs)
    except Exception:  # eager cannot run it on meta: assume it saves everything
        return True
    return False


def saves_input(bsym: BoundSymbol, arg: TensorProxy) -> bool:
    """Whether eager's backward of ``bsym`` saves ``arg`` (or a view of it), so that a later
    in-place write to ``arg`` makes that backward raise (its version counter moved).  True
    where the probe cannot tell."""
    return memoized(_SAVES, call_signature(bsym, position(bsym, arg)), lambda: _probe_saves(bsym, arg))


def position(bsym: BoundSymbol, p: TensorProxy) -> int:
    """Where ``p`` first is among ``bsym``'s argument leaves (-1: not there)."""
    leaves = tree_flatten((bsym.args, bsym.kwargs))[0]
    return next((k for k, x in enumerate(leaves) if isinstance(x, TensorProxy) and x.name == p.name), -1)
