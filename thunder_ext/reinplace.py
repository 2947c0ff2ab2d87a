"""Re-inplacing after fusion: an out-of-place elementwise op may write into a dying private buffer.

Functionalization (:mod:`thunder_ext.functionalize`) rewrites writes to private storage out of
place, which is what lets autodiff and the fusion passes see plain data flow.  Once the final
trace exists nothing reorders it any more, so an out-of-place op whose input buffer dies at
that op can write its result into that buffer instead of allocating a new one: the
reinplacing that ExecuTorch's MLX reinplace pass and its in-place memory planner describe.

:func:`reinplace` rewrites a top-level torch-executor op ``out = op(..., buf, ...)`` into the
same torch-executor symbol bound in its in-place form, keeping ``out`` as the output name:

* ``torch.nn.functional.relu(buf, False)`` (and ``silu``, ``leaky_relu``, ``hardtanh``, ``elu``,
  ``relu6``) becomes the call with ``inplace=True``, which returns ``buf``;
* an elementwise op with an ``out=`` argument (``torch.add``, ``torch.where``, ``torch.exp``,
  ...) gets ``out=buf``, which also returns ``buf``;
* then ``index_copy(buf, d, arange(a, b, c), src, out=buf)`` (functionalize's scatter through
  a slice, now in place) becomes ``buf[..., a:b:c].copy_(src)`` and the ``arange`` goes, when
  nothing else reads it (:func:`_index_copies_as_slice_copies`); ``update_aliases`` barriers
  around that ``copy_`` order it after every earlier read of ``buf`` and before every later
  one by data edges, so :func:`thunder_ext.verify` accepts the final trace.

Worked example (the final trace of ``a.exp().sin().cos()`` with the default executors)::

    before                              after
    t6 = torch.exp(a)                   t6 = torch.exp(a)
    t7 = torch.sin(t6)                  t7 = torch.sin(t6, out=t6)
    del t6                              del t6
    t8 = torch.cos(t7)                  t8 = torch.cos(t7, out=t7)
    del t7                              del t7
    return (t8,)                        return (t8,)

One buffer instead of three: ``t6``, ``t7`` and ``t8`` are the same tensor at run time.

The ``out=`` and ``inplace=True`` forms are not writes to :mod:`thunder_ext.op_kinds` (nor to
the checker): they are ordered by program order only, which is why the pass runs last.

:func:`runtime_aliases` says which outputs of a final-trace bsym are, at run time, the very
same tensor object as one of its arguments (these forms, ``copy_`` and ``update_aliases``).

Invariants it relies on:

* it runs on a final trace (after fusion, the forward/backward split and ``del`` insertion),
  and only where no later transform of the compilation has a post-optimization hook
  (``InplaceBarrierTransform`` checks), so nothing reorders the trace afterwards; the trace
  runs under ``torch.no_grad``; a ``python_del`` only drops a name, so keeping ``out`` as a
  separate name that is the same object as ``buf`` needs no change to the ``del``s;
* ``buf`` is *fresh private storage*: it is the output of a bsym in :data:`_FRESH` (a torch
  executor op that always returns a newly allocated tensor) or of an op this pass rewrote,
  whose own buffer died there; so it is no trace input and no view of one;
* ``buf``'s storage group (:mod:`thunder_ext.alias_analysis`: ``buf`` and the views and
  barrier outputs made from it) has ``buf`` as its only base, and every reader of a member
  other than the op itself comes before the op and is either a :data:`_FRESH` op (it makes no
  alias) or one the alias analysis classifies (a view, a barrier, a write), whose outputs are
  members checked in turn; nothing reads a member at or after the op, the return included,
  so ``buf`` is neither returned nor saved for backward, and no view of it outlives the op;
* ``buf`` has the output's shape, dtype and device, so the in-place result is the
  out-of-place result element for element (a full overlap of input and output, which every
  PyTorch elementwise kernel supports, unlike a partial one); no other argument of the op
  shares memory with ``buf``; for ``index_copy`` (not elementwise) ``buf`` is its ``self``,
  which its ``out`` kernel updates in place exactly as ``index_copy_`` does;
* the in-place form is tried on meta tensors first (:func:`_probe`): an overload that does
  not exist or a cast PyTorch refuses leaves the op as it is;
* anything else, including bsyms inside fusion regions, is left as it is.

The input trace is never mutated.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable

import torch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.core.utils import consumers, producers
from thunder.executors.torchex import ex as torchex

from thunder_ext.alias_analysis import input_names, storage_groups
from thunder_ext.meta_calls import call_on_meta, call_signature, memoized, position, torch_function
from thunder_ext.op_kinds import and_what_may_be_them, returned_data, returned_to_caller

# torch.nn.functional ops whose ``inplace=True`` form writes into their first argument.
_INPLACE_FLAG: dict[str, Callable] = {
    name: getattr(torch.nn.functional, name) for name in ("relu", "silu", "leaky_relu", "hardtanh", "elu", "relu6")
}
# Elementwise torch ops (module ``torch``) that accept ``out=``; a full overlap of ``out`` with
# an input is how PyTorch's own in-place variants run these kernels.
_OUT_ARG = frozenset(
    {
        "abs", "neg", "exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "sigmoid", "reciprocal",
        "rsqrt", "sqrt", "erf", "add", "sub", "mul", "div", "where", "maximum", "minimum", "clamp",
        "index_copy",
    }
)  # fmt: skip
# Of those, the ones that are not elementwise: ``out`` may only be their ``self`` (first) argument,
# which ``index_copy``'s out kernel then updates in place, as ``index_copy_`` does.
_OUT_SELF_ONLY = frozenset({"index_copy"})
# Torch executor ops that give a tensor another shape: a view where the strides allow.
_RESHAPES = frozenset({"reshape", "view", "torch_prims_reshape_impl"})
# Torch executor ops whose output is always a new allocation and never an alias of an input
# (in their out-of-place form): possible producers of a buffer, and harmless earlier readers.
_FRESH = (
    _OUT_ARG
    | frozenset(_INPLACE_FLAG)
    | frozenset({"linear", "matmul", "mm", "bmm", "conv1d", "conv2d", "conv3d", "convolution"})
    | frozenset({"gt", "ge", "lt", "le", "eq", "ne", "sum", "amax", "amin", "mean", "cat"})
    # The torch executor's setitem out of place: it clones its input first.
    | frozenset({"copy_with_setitem_impl"})
)


def _torchex_name(bsym: BoundSymbol) -> str | None:
    sym = bsym.sym
    if getattr(sym, "executor", None) is not torchex:
        return None
    return sym.name


def _inplace_flag_arguments(bsym: BoundSymbol) -> inspect.BoundArguments | None:
    fn = _INPLACE_FLAG[bsym.sym.name]
    try:
        bound = inspect.signature(fn).bind(*bsym.args, **bsym.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound


def is_inplace_form(bsym: BoundSymbol) -> bool:
    """The bsym is a torch executor op bound in its in-place form (``inplace=True`` or ``out=``)."""
    name = _torchex_name(bsym)
    if name in _OUT_ARG and bsym.kwargs.get("out") is not None:
        return True
    if name in _INPLACE_FLAG:
        bound = _inplace_flag_arguments(bsym)
        return bound is None or bool(bound.arguments.get("inplace"))  # unreadable: assume it may write
    return False


def _is_fresh(bsym: BoundSymbol) -> bool:
    return _torchex_name(bsym) in _FRESH and not is_inplace_form(bsym)


def runtime_aliases(bsym: BoundSymbol) -> list[tuple[TensorProxy, TensorProxy]]:
    """(output, argument) pairs of a final-trace bsym that are the same tensor object at run time.

    ``update_aliases`` returns its arguments, ``copy_`` returns its destination, and the
    in-place forms this pass emits return the buffer they write.
    """
    outs = [o for o in bsym.flat_proxy_outs if isinstance(o, TensorProxy)]
    sym_id = bsym.sym.id
    if sym_id in (prims.PrimIDs.UPDATE_ALIASES, "update_aliases"):
        args = [a for a in bsym.flat_proxy_args if isinstance(a, TensorProxy)]
        return list(zip(outs, args)) if len(outs) == len(args) else []
    if sym_id in (prims.PrimIDs.COPY_, "copy_"):
        dst = bsym.args[1] if len(bsym.args) > 1 else bsym.kwargs.get("copy_to")
        return [(outs[0], dst)] if len(outs) == 1 and isinstance(dst, TensorProxy) else []
    name = _torchex_name(bsym)
    if len(outs) == 1 and name in _OUT_ARG and isinstance(bsym.kwargs.get("out"), TensorProxy):
        return [(outs[0], bsym.kwargs["out"])]
    if len(outs) == 1 and name in _INPLACE_FLAG and is_inplace_form(bsym) and isinstance(bsym.args[0], TensorProxy):
        return [(outs[0], bsym.args[0])]
    return []


def _same_layout_class(a: TensorProxy, b: TensorProxy) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and a.device == b.device


def _inplace_form(bsym: BoundSymbol, buf: TensorProxy) -> BoundSymbol | None:
    """``bsym`` bound so that it writes its result into ``buf``; None when it cannot."""
    name = bsym.sym.name
    if name in _INPLACE_FLAG:
        bound = _inplace_flag_arguments(bsym)
        if bound is None or "inplace" not in bound.arguments or bound.args[0] is not buf:
            return None
        bound.arguments["inplace"] = True
        # The out-of-place decomposition stays as the subsymbols: without them op_kinds would
        # classify the symbol by its in-place capability (relu is one) as a write, and the
        # checker would ask data edges to order it, where program order does (module docstring).
        return bsym.from_bsym(args=tuple(bound.args), kwargs=dict(bound.kwargs))
    if "out" in bsym.kwargs:
        return None
    return bsym.from_bsym(kwargs={**bsym.kwargs, "out": buf}, subsymbols=())


# Probe answers by signature: a loop's ops repeat the same few (a meta call each made the
# final-trace hook a third of the transform's time on scripts/bench.py's loop).
_PROBED: dict[tuple, bool] = {}


def _probe(new: BoundSymbol, buf: TensorProxy, out: TensorProxy) -> bool:
    """The in-place form runs and returns ``buf`` itself, tried on meta tensors.

    Catches what the signature cannot tell: an overload without ``out=`` (``torch.where`` with
    a scalar), or a result type that cannot be cast into ``buf``.
    """
    return memoized(_PROBED, _probe_key(new, buf, out), lambda: _probe_on_meta(new, buf, out))


def _probe_key(new: BoundSymbol, buf: TensorProxy, out: TensorProxy) -> tuple | None:
    """The call's signature, which argument is ``buf``, and what ``out`` must be."""
    return call_signature(new, position(new, buf), tuple(out.shape), out.dtype)


def _probe_on_meta(new: BoundSymbol, buf: TensorProxy, out: TensorProxy) -> bool:
    fn = torch_function(new)
    if fn is None:
        return False
    try:
        with torch.no_grad():
            metas, result = call_on_meta(new, fn)
    except Exception:  # no such overload, or a cast it refuses: leave the op as it is
        return False
    return result is metas[buf.name] and tuple(result.shape) == tuple(out.shape) and result.dtype == metas[buf.name].dtype


def _candidates(bsym: BoundSymbol) -> list[TensorProxy]:
    name = bsym.sym.name
    if name in _INPLACE_FLAG or name in _OUT_SELF_ONLY:
        if not bsym.args or not isinstance(bsym.args[0], TensorProxy):
            return []
        buf = bsym.args[0]
        if name in _OUT_SELF_ONLY and any(isinstance(a, TensorProxy) and a.name == buf.name for a in bsym.args[1:]):
            # Not elementwise: ``index_copy(t, 0, idx, t, out=t)`` reads its source as it writes it,
            # and PyTorch refuses the overlap (soak seed 44000: ``t0.copy_(t1); t0.index_copy_(0, idx, t1)``).
            return []
        return [buf]
    if name == "where" and len(bsym.args) == 3 and all(isinstance(a, TensorProxy) for a in bsym.args):
        if bsym.args[1].name == bsym.args[2].name:
            # ``where(flag, s, s)`` is how the functionalizer lays a copy out like its destination
            # (the flag's layout): written into ``s``, it would take ``s``'s, and a later ``view``
            # eager allows would fail (soak seed 104000).
            return []
    # Positional tensor arguments only: a tensor keyword (a weight, ``out``) is not the data.
    seen: list[TensorProxy] = []
    for a in bsym.args:
        if isinstance(a, TensorProxy) and all(a is not s for s in seen):
            seen.append(a)
    return seen


def _dies_here(
    buf: TensorProxy, bsym: BoundSymbol, i: int, info, groups: dict[str, list[str]], bases: dict, position: dict,
    cons, rewritten_outs: set[str]
) -> bool:
    """``buf`` is fresh private storage that nothing reads after bsym ``i`` (see the invariants).

    ``groups`` is ``info.groups.members()``, computed once per pass (per call it made the pass
    quadratic in trace length)."""
    group = info.group_of(buf)
    members = groups.get(group, [buf.name]) if buf.name in info.groups else [buf.name]
    # One base, buf itself; every other member is a view or barrier output of it.
    if bases.get(group, {buf.name}) != {buf.name} or any(m in info.inputs for m in members):
        return False
    others = {m for m in members if m != buf.name}
    if any(isinstance(a, TensorProxy) and a.name in others for a in bsym.flat_proxy_args):
        return False  # a view of buf read by the op itself: a partial overlap
    for m in members:
        try:
            readers = cons.get_by_name(m)  # ProxyDict.get takes a proxy, and answers [] for a name
        except KeyError:
            readers = []
        for c in readers:
            if c is bsym and m == buf.name or c.sym.id == prims.PrimIDs.DEL:
                continue
            if position[id(c)] >= i:
                return False  # read later, returned or saved for backward
            # An earlier reader: a fresh op, or one the alias analysis classifies (a view, a
            # barrier, a write), whose outputs are then members checked here too.
            e = info.effects[position[id(c)]]
            if not (_is_fresh(c) or e.aliases or e.writes or e.is_view or e.is_barrier):
                return False
    return True


def reinplace(trace: TraceCtx) -> tuple[TraceCtx, list[BoundSymbol]]:
    """Rewrite unfused out-of-place elementwise ops on dying fresh private buffers in place.

    Returns the new trace (the input trace itself when nothing changed) and the rewritten
    bsyms as they are in the new trace.
    """
    start = time.perf_counter_ns()
    bsyms = list(trace.bound_symbols)
    position = {id(b): i for i, b in enumerate(bsyms)}
    cons = consumers(bsyms)
    prods = producers(bsyms)
    info = storage_groups(bsyms, input_names(trace))
    alias_outs = {o.name for e in info.effects for o, _ in e.aliases}
    # Per storage group, its members that are no alias output: where its memory was allocated.
    bases: dict[str, set[str]] = {}
    for b in bsyms:
        for o in b.flat_proxy_outs:
            if isinstance(o, TensorProxy) and o.name not in alias_outs:
                bases.setdefault(info.group_of(o), set()).add(o.name)
    for n in info.inputs:
        if n in info.groups:
            bases.setdefault(info.group_of(n), set()).add(n)
    groups = info.groups.members()
    # Outputs of ops rewritten here: fresh in effect, since the buffer they reuse died there.
    rewritten_outs: set[str] = set()
    rewritten: list[BoundSymbol] = []

    for i, bsym in enumerate(bsyms):
        name = _torchex_name(bsym)
        if name not in _OUT_ARG and name not in _INPLACE_FLAG or is_inplace_form(bsym):
            continue
        outs = list(bsym.flat_proxy_outs)
        if len(outs) != 1 or not isinstance(outs[0], TensorProxy):
            continue
        out = outs[0]
        for buf in _candidates(bsym):
            if not _same_layout_class(buf, out):
                continue
            producer = prods.get(buf, None)
            if producer is None or not (_is_fresh(producer) or buf.name in rewritten_outs):
                continue
            if not _dies_here(buf, bsym, i, info, groups, bases, position, cons, rewritten_outs):
                continue
            new = _inplace_form(bsym, buf)
            if new is None or not _probe(new, buf, out):
                continue
            bsyms[i] = new
            rewritten_outs.add(out.name)
            rewritten.append(new)
            break

    if not rewritten:
        return trace, []
    new_trace = from_trace(trace)
    bsyms = _index_copies_as_slice_copies(bsyms, new_trace)
    new_trace.bound_symbols = bsyms
    elapsed_ms = (time.perf_counter_ns() - start) / 1e6
    new_trace.set_provenance(TraceProvenance(f"thunder_ext reinplace ({len(rewritten)} ops, took {elapsed_ms:.2f} ms)"))
    return new_trace, rewritten


def _arange_range(bsym: BoundSymbol | None) -> range | None:
    """The values of a torch-executor ``arange`` with int start, end and step; else None."""
    if bsym is None or _torchex_name(bsym) != "arange" or bsym.args:
        return None
    kw = bsym.kwargs
    start, end, step = kw.get("start", 0), kw.get("end"), kw.get("step", 1)
    if not all(type(v) is int for v in (start, end, step)) or step <= 0:
        return None
    return range(start, end, step)


def _earlier_reads(names, i: int, cons, position: dict, info) -> list[TensorProxy] | None:
    """One tensor output of every bsym before ``i`` that reads storage ``names`` (a view made of it
    is no read, but its readers are); None where such a reader has no tensor output."""
    out: list[TensorProxy] = []
    seen: set[int] = set()
    for n in names:
        try:
            readers = cons.get_by_name(n)
        except KeyError:
            continue
        for c in readers:
            k = position[id(c)]
            if k >= i or id(c) in seen or c.sym.id == prims.PrimIDs.DEL:
                continue
            seen.add(id(c))
            e = info.effects[k]
            if e.is_view or e.is_barrier:
                continue
            outs = [o for o in c.flat_proxy_outs if isinstance(o, TensorProxy)]
            if not outs:
                return None
            out.append(outs[0])
    return out


def _index_copies_as_slice_copies(bsyms: list[BoundSymbol], new_trace: TraceCtx) -> list[BoundSymbol]:
    """``index_copy(buf, d, arange(a, b, c), src, out=buf)`` as ``buf[..., a:b:c, ...].copy_(src)``.

    Functionalizing a write through a slice of a private buffer scatters with an ``arange``
    index; once the scatter writes into the buffer in place, the index is the only extra
    allocation left, and a slice copy needs none.  Only where the index is a fresh ``arange``
    read by nothing else, of int64 values inside the dimension (``index_copy`` raises on an
    index out of range where slicing would clamp), and ``src`` has the slice's shape.
    """
    from thunder.core import dtypes
    from thunder.executors.torchex import copy_ as torch_copy_
    from thunder.executors.torchex import getitem as torch_getitem
    from thunder.executors.torchex import update_aliases as torch_update_aliases

    scatters = [i for i, b in enumerate(bsyms) if _torchex_name(b) == "index_copy" and is_inplace_form(b)]
    if not scatters:
        return bsyms
    cons = consumers(bsyms)
    prods = producers(bsyms)
    info = storage_groups(bsyms)
    members = info.groups.members()
    position = {id(b): i for i, b in enumerate(bsyms)}
    deleted_at = {p.name: k for k, b in enumerate(bsyms) if b.sym.id == prims.PrimIDs.DEL for p in b.flat_proxy_args}
    drop: set[int] = set()  # ids of bsyms to remove (the aranges)
    replace: dict[int, list[BoundSymbol]] = {}
    dropped_names: set[str] = set()
    for i in scatters:
        b = bsyms[i]
        if len(b.args) != 4:
            continue
        buf, d, idx, src = b.args
        out = b.flat_proxy_outs[0] if len(b.flat_proxy_outs) == 1 else None
        if b.kwargs.get("out") is not buf or type(d) is not int or not isinstance(idx, TensorProxy) or out is None:
            continue
        if not isinstance(src, TensorProxy) or not 0 <= d < len(buf.shape):
            continue
        arange = prods.get(idx, None)
        r = _arange_range(arange)
        if r is None or idx.dtype != dtypes.int64 or len(r) == 0 or r[0] < 0 or r[-1] >= buf.shape[d]:
            continue
        if [c for c in cons.get(idx, []) if c.sym.id != prims.PrimIDs.DEL] != [b]:
            continue
        view_shape = tuple(len(r) if k == d else n for k, n in enumerate(buf.shape))
        if tuple(src.shape) != view_shape or src.dtype != buf.dtype or src.device != buf.device:
            continue
        # Earlier readers of the buffer's storage: the copy_ must depend on them by data edges
        # (as every write does in this project's traces: thunder_ext.checker), through a barrier.
        witnesses = _earlier_reads(members.get(info.group_of(buf), [buf.name]), i, cons, position, info)
        # A witness already deleted cannot be read here (keeping it alive would cost memory):
        # then the index_copy stays.
        if witnesses is None or any(deleted_at.get(w.name, i) < i for w in witnesses):
            continue
        key = (slice(None),) * d + (slice(r.start, r.stop, r.step),)
        with tracectx(new_trace):
            ordered = [TensorProxy(like=p) for p in (buf, *witnesses)]
            view = TensorProxy(like=src)
            copied = TensorProxy(like=src)
            copied_out = TensorProxy(like=src)
        # Barriers are identities at run time (the torch executor's update_aliases): ``out``
        # stays the name of the whole buffer, and the write is ordered after every earlier read
        # and before every later one by data edges.
        replace[id(b)] = [
            torch_update_aliases.bind((buf, *witnesses), output=tuple(ordered)),
            torch_getitem.bind(ordered[0], key, output=view),
            torch_copy_.bind(src, view, grad_enabled=False, output=copied),
            torch_update_aliases.bind((ordered[0], copied), output=(out, copied_out)),
            prims.python_del.bind(*ordered, view, copied, copied_out, output=None),
        ]
        drop.add(id(arange))
        dropped_names.add(idx.name)
    if not replace:
        return bsyms
    result: list[BoundSymbol] = []
    for b in bsyms:
        if id(b) in drop:
            continue
        if id(b) in replace:
            result.extend(replace[id(b)])
            continue
        if b.sym.id == prims.PrimIDs.DEL and any(p.name in dropped_names for p in b.flat_proxy_args):
            kept = [p for p in b.flat_proxy_args if p.name not in dropped_names]
            if kept:
                result.append(prims.python_del.bind(*kept, output=None))
            continue
        result.append(b)
    return result


def fold_copies(trace: TraceCtx, aliased_inputs=()) -> tuple[TraceCtx, int]:
    """``t = op(..); ...; c = copy_(t, dst)`` as ``c = op(.., out=dst)`` where nothing else can tell.

    Every in-place op on observable storage reaches the final trace as an out-of-place op and
    a ``copy_`` (``x.mul_(0.9)`` is ``t = torch.mul(x, 0.9); c = copy_(t, x)``): two calls and a
    temporary where eager makes one call.  Once program order is final (no barrier left, see
    :mod:`thunder_ext.final_barriers`), the op can write ``dst`` itself when

    * the op is an unfused elementwise torch-executor op with ``out=`` (:data:`_OUT_ARG`, not
      ``index_copy``), ``t`` has ``dst``'s shape, dtype and device, and nothing but the
      ``copy_`` reads ``t`` (not the return, not the backward);
    * ``dst`` does not require grad (``copy_`` then raises on a leaf, as eager does), and no
      argument of the op is another view of ``dst``'s storage (a partial overlap);
    * no bsym between the op and the ``copy_`` reads, writes or makes an alias of ``dst``'s
      storage (inputs that share storage at this call included), and none is a fusion region;
    * the ``out=`` form runs on meta tensors (:func:`_probe`).

    The write then happens at the op instead of at the ``copy_``, with nothing in between that
    could see the difference.  Before (an EMA step on the input ``e``)::

        t74 = torch.mul(e, 0.9)
        t75 = copy_(t74, e, grad_enabled=True)
        del t74, e
        t77 = torch.add(t75, p, alpha=0.1)
        t78 = copy_(t77, t75, grad_enabled=True)
        del t77, t75

    After::

        t75 = torch.mul(e, 0.9, out=e)
        del e
        t78 = torch.add(t75, p, alpha=0.1, out=t75)
        del t75

    Returns the new trace (the input itself when nothing was folded) and the number of folds.
    The ``del``s are recomputed with Thunder's ``del_last_used``.
    """
    from thunder_ext.final_barriers import is_del_or_clear, recompute_dels
    from thunder_ext.op_kinds import is_copy, is_fusion

    start = time.perf_counter_ns()
    bsyms = list(trace.bound_symbols)
    live = [b for b in bsyms if not is_del_or_clear(b)]
    position = {id(b): i for i, b in enumerate(live)}
    cons = consumers(live)
    prods = producers(live)
    info = storage_groups(live, input_names(trace), aliased_inputs)
    members = info.groups.members()
    replace: dict[int, BoundSymbol] = {}
    drop: set[int] = set()
    for j, c in enumerate(live):
        if _torchex_name(c) != "copy_" or not is_copy(c) or len(c.args) < 2:
            continue
        t, dst = c.args[0], c.args[1]
        outs = [o for o in c.flat_proxy_outs if isinstance(o, TensorProxy)]
        if not isinstance(t, TensorProxy) or not isinstance(dst, TensorProxy) or len(outs) != 1:
            continue
        if dst.requires_grad or not _same_layout_class(t, dst):
            continue
        op = prods.get(t, None)
        if op is None or id(op) in replace or id(op) in drop:
            continue
        name = _torchex_name(op)
        if name not in _OUT_ARG or name in _OUT_SELF_ONLY or is_inplace_form(op) or len(op.flat_proxy_outs) != 1:
            continue
        if [r for r in cons.get(t, []) if r is not c] or t.name in info.inputs:
            continue
        group = set(members.get(info.group_of(dst), [dst.name])) if dst.name in info.groups else {dst.name}
        if any(isinstance(a, TensorProxy) and a.name in group and a.name != dst.name for a in op.flat_proxy_args):
            continue  # another view of dst: a partial overlap
        i = position[id(op)]
        between = live[i + 1 : j]
        if any(
            is_fusion(b) or any(isinstance(p, TensorProxy) and p.name in group for p in (*b.flat_proxy_args, *b.flat_proxy_outs))
            for b in between
        ):
            continue
        new = op.from_bsym(kwargs={**op.kwargs, "out": dst}, output=outs[0], subsymbols=())
        if not _probe(new, dst, outs[0]):
            continue
        replace[id(op)] = new
        drop.add(id(c))
    if not replace:
        return trace, 0
    folded = [replace.get(id(b), b) for b in live if id(b) not in drop]
    new_trace = recompute_dels(trace, folded)
    elapsed_ms = (time.perf_counter_ns() - start) / 1e6
    new_trace.set_provenance(TraceProvenance(f"thunder_ext fold copies ({len(replace)} copy_ folded, took {elapsed_ms:.2f} ms)"))
    return new_trace, len(replace)


def _basic_key(key) -> bool:
    """An indexing key whose ``getitem`` is a view: ints, int slices, None and Ellipsis only."""
    parts = key if isinstance(key, tuple) else (key,)
    for k in parts:
        if k is None or k is Ellipsis or type(k) is int:
            continue
        if isinstance(k, slice) and all(v is None or type(v) is int for v in (k.start, k.stop, k.step)):
            continue
        return False
    return True


def _as_slice_write(p: BoundSymbol, x: TensorProxy, prods, cons) -> tuple | None:
    """``p`` as a write of ``value`` into the view ``x[key]``: the torch executor's out-of-place
    setitem with a basic key and a tensor value of the view's shape, or ``index_copy`` along one
    dimension with an index that is a fresh int ``arange`` nothing else reads (functionalize's
    scatter through a slice).  Returns (key, value, the arange or None), or None."""
    from thunder.core import dtypes

    name = _torchex_name(p)
    if name == "copy_with_setitem_impl" and len(p.args) == 3:
        a, key, value = p.args
        arange = None
    elif name == "index_copy" and len(p.args) == 4 and not p.kwargs:
        a, d, idx, value = p.args
        arange = prods.get(idx, None) if isinstance(idx, TensorProxy) else None
        r = _arange_range(arange)
        if type(d) is not int or not 0 <= d < len(x.shape) or r is None or idx.dtype != dtypes.int64:
            return None
        if len(r) == 0 or r[0] < 0 or r[-1] >= x.shape[d]:
            return None  # index_copy raises out of range where a slice would clamp
        if [c for c in cons.get(idx, []) if c.sym.id != prims.PrimIDs.DEL] != [p]:
            return None
        key = (slice(None),) * d + (slice(r.start, r.stop, r.step),)
    else:
        return None
    if not isinstance(a, TensorProxy) or a.name != x.name or not isinstance(value, TensorProxy):
        return None
    if value.dtype != x.dtype or not _basic_key(key):
        return None
    try:
        shape = tuple(torch.empty(tuple(x.shape), device="meta")[key].shape)
    except Exception:
        return None
    return (key, value, arange) if shape == tuple(value.shape) else None


def _written_after(t0: TensorProxy, j: int, bsyms: list[BoundSymbol]) -> bool:
    """Whether a bsym after position ``j`` writes ``t0``'s buffer in place (``out=``): once ``t0``'s
    op writes the input, that would write the input after its epilogue.  (:func:`reinplace`
    reuses a buffer that dies at the epilogue for a later result.)"""
    same = {t0.name}
    for k, b in enumerate(bsyms):
        for o, a in runtime_aliases(b):
            if a.name in same:
                if k > j and is_inplace_form(b):
                    return True
                same.add(o.name)
    return False


def _reshaped_back(p: BoundSymbol, x: TensorProxy, prods) -> tuple | None:
    """For an epilogue source made by ``p = reshape(w, x.shape)``, where ``w`` is a slice write
    (:func:`_as_slice_write`) on ``a``, a reshape of ``x`` itself to another shape: (``p``, the
    write, ``a``); else None.

    Invariant: the transform makes this chain only in ``functionalize.direct_scatter``, for a
    write through the user's own ``view`` (``view_as``, ``unflatten``) of ``x`` before any other
    write to it (a user's ``reshape`` that may copy keeps its writes in place; a user's own
    chain into ``x.copy_`` ends in a ``clone``).  Under grad Thunder's autodiff has decomposed
    that ``view`` into a reshape, so the name does not tell; the invariant does."""
    if _torchex_name(p) not in _RESHAPES or not p.args or len(p.flat_proxy_outs) != 1:
        return None
    if tuple(p.flat_proxy_outs[0].shape) != tuple(x.shape) or not isinstance(p.args[0], TensorProxy):
        return None
    write = prods.get(p.args[0], None)
    if write is None or _torchex_name(write) not in ("index_copy", "copy_with_setitem_impl") or not write.args:
        return None
    a = write.args[0]
    made = prods.get(a, None) if isinstance(a, TensorProxy) else None
    if made is None or _torchex_name(made) not in _RESHAPES or not made.args:
        return None
    if not isinstance(made.args[0], TensorProxy) or made.args[0].name != x.name:
        return None  # (a reshape keeps the element count: no numel to compare, symbolic or not)
    return p, write, a


def _epilogue_chain(c: BoundSymbol, prods) -> tuple[BoundSymbol, TensorProxy, set[str]] | None:
    """For an epilogue ``c = copy_(t, x)``: the op that first computed ``t``'s buffer, following
    back ops already writing in place (their output is their ``out=`` buffer), that buffer, and
    the names of every version of it up to ``t``."""
    t = c.args[0]
    names: set[str] = set()
    while isinstance(t, TensorProxy) and len(names) < 10_000:
        names.add(t.name)
        p = prods.get(t, None)
        if p is None:
            return None
        same = runtime_aliases(p)
        if not same:
            return p, t, names
        t = same[0][1]
    return None




def reinplace_inputs(trace: TraceCtx, aliased_inputs=()) -> tuple[TraceCtx, int]:
    """Writes to an input made functional go back in place where the input's old value dies.

    An input ``x`` whose writes became values (:mod:`thunder_ext.functionalize`) gets its final
    value back in one epilogue ``copy_``: ``t = index_copy(x, ...); ...; c = copy_(t, x)``.
    When nothing reads ``x``'s storage after the op ``P`` that first computed ``t``'s buffer
    from it (only the epilogue does), ``P`` can write ``x`` itself (``out=x``, ``inplace=True``;
    for the torch executor's out-of-place setitem with a basic key, or an ``index_copy`` with a
    fresh ``arange`` index, ``x[key].copy_(value)``; for ``clone(s)``, the value of a whole
    ``x.copy_(s)``, ``x.copy_(s)``); every later version of ``t`` is then ``x`` at run time, and
    the epilogue is a copy of ``x`` onto itself, which goes.  That is the slice write a KV-cache
    update was in eager, with no copy of the cache.  A scatter through the user's ``view`` of
    ``x`` (``x.view(-1)[::2].mul_(2)``: ``reshape(index_copy(reshape(x, s), ...), x.shape)``)
    goes back as ``x.view(s)[key].copy_(value)`` (:func:`_reshaped_back`).  Conditions, besides
    :func:`reinplace`'s for the op itself:

    * the trace is final and has no top-level barrier left (``remove_final_barriers`` ran), so
      program order is final; ``x`` is a trace input that does not require grad, shares no
      storage with another input, and the epilogue is a top-level torch-executor ``copy_``;
    * every reader of ``x`` or a view of it, except ``P`` and the epilogue, comes before
      ``P`` (so ``x`` is not returned nor saved for backward under its own name), and ``P``
      reads no view of ``x`` (a partial overlap);
    * the return does not hand back the new value itself, or a view of it, to the caller (it
      does so only when the value carries a gradient that the caller's tensor cannot,
      ``_Functionalizer.return_values`` and ``write_back`` in :mod:`thunder_ext.functionalize`).  Saved for the
      backward, it may be ``x``: eager saves ``x`` there too, and so does plain Thunder.

    Before (a KV-cache step on the input ``cache``)::

        t46 = copy_with_setitem_impl(cache, (slice(None, None, None), 2), k)
        t51 = torch.mul(t46, 2)
        t60 = copy_(t46, cache, grad_enabled=True)

    After::

        t64 = getitem(cache, (slice(None, None, None), 2))
        t65 = copy_(k, t64, grad_enabled=False)
        t51 = torch.mul(cache, 2)

    Returns the new trace (the input itself when nothing changed) and how many epilogues went.
    The ``del``s are recomputed with Thunder's ``del_last_used``.
    """
    from thunder.core.proxies import variableify
    from thunder.executors.torchex import copy_ as torch_copy_
    from thunder.executors.torchex import getitem as torch_getitem
    from thunder.executors.torchex import view as torch_view

    from thunder_ext.final_barriers import is_del_or_clear, recompute_dels
    from thunder_ext.op_kinds import is_barrier, is_copy, is_return

    from thunder_ext.inductor_regions import torch_forms_of_eager_scatters

    bsyms = torch_forms_of_eager_scatters([b for b in trace.bound_symbols if not is_del_or_clear(b)])
    if any(is_barrier(b) for b in bsyms):
        return trace, 0
    inputs = input_names(trace)
    shared = {n for names in aliased_inputs for n in names}
    position = {id(b): i for i, b in enumerate(bsyms)}
    cons = consumers(bsyms)
    prods = producers(bsyms)
    info = storage_groups(bsyms, inputs)
    members = info.groups.members()
    replace: dict[int, list[BoundSymbol]] = {}
    drop: set[int] = set()
    swap: dict = {}
    removed = 0  # epilogue copies gone (``drop`` also holds the aranges no longer read)
    for j, c in enumerate(bsyms):
        if _torchex_name(c) != "copy_" or not is_copy(c) or len(c.args) < 2:
            continue
        x = c.args[1]
        if not isinstance(x, TensorProxy) or x.name not in inputs or x.name in shared or x.requires_grad:
            continue
        found = _epilogue_chain(c, prods)
        if found is None:
            continue
        p, t0, versions = found
        whole_view = None  # the scatter's base: a view of x in another shape (functionalize.direct_scatter)
        seen_through = _reshaped_back(p, x, prods)
        if seen_through is not None:
            _, p, whole_view = seen_through
            if _written_after(t0, j, bsyms):
                continue
            t0 = p.flat_proxy_outs[0]
            versions = versions | {t0.name}
        ret = bsyms[-1] if bsyms and is_return(bsyms[-1]) else None
        if ret is not None and and_what_may_be_them(bsyms, versions) & returned_to_caller(ret):
            # The value itself is returned (functionalize.return_values: it carries the write's
            # history, the caller's tensor cannot), or a ``contiguous`` of it, which may be it:
            # in place, the output would be the input.
            continue
        if ret is not None and t0.name in info.groups and set(members.get(info.group_of(t0), ())) & returned_to_caller(ret):
            # A view of the value is returned (functionalize.write_back: it carries the write's
            # history): in place, it would be a view of the input, which autograd then hands back
            # without any (``b.copy_(a); return b[:]``).
            continue
        i = position[id(p)]
        if id(p) in replace or len(p.flat_proxy_outs) != 1:
            continue
        if not _same_layout_class(whole_view if whole_view is not None else x, t0):
            continue
        group = members.get(info.group_of(x), [x.name]) if x.name in info.groups else [x.name]
        late = False
        for m in group:
            try:
                readers = cons.get_by_name(m)
            except KeyError:
                readers = []
            for r in readers:
                k = position[id(r)]
                if r is c or k < i or (is_return(r) and m not in returned_data(r)):
                    continue
                if r is p and m == (x.name if whole_view is None else whole_view.name):
                    continue
                late = True
        view_readers = []  # of x's old value seen in another shape, whether or not the alias
        if whole_view is not None:  # analysis counts the reshape as a member of x's group
            view_readers = [r for r in cons.get(whole_view, []) if r.sym.id != prims.PrimIDs.DEL]
            late = late or any(position[id(r)] > i for r in view_readers)
        if late or _written_after(t0, j, bsyms):
            continue
        name = _torchex_name(p)
        slice_write = _as_slice_write(p, x if whole_view is None else whole_view, prods, cons)
        if whole_view is not None and slice_write is None:
            continue
        where = {"source_filename": p.source_filename, "source_positions": p.source_positions}
        if slice_write is not None:
            key, value, arange = slice_write
            target, through = x, []
            if whole_view is not None:
                # Through ``Tensor.view``, not the trace's reshape: it raises where x cannot be
                # viewed so, as the user's ``view`` did in eager, where a reshape would copy and
                # the write would be lost.
                with tracectx(trace):
                    target = TensorProxy(like=whole_view)
                through = [torch_view.bind(x, tuple(whole_view.shape), output=target).from_bsym(**where)]
                if view_readers == [p]:
                    drop.add(id(prods[whole_view]))  # the trace's reshape of x, read by p alone
            with tracectx(trace):
                view, copied = TensorProxy(like=value), TensorProxy(like=value)
            replace[id(p)] = through + [
                torch_getitem.bind(target, key, output=view).from_bsym(**where),
                torch_copy_.bind(value, view, grad_enabled=False, output=copied).from_bsym(**where),
            ]
            if arange is not None:
                drop.add(id(arange))
            swap[variableify(t0)] = target
        elif name == "clone":
            # The functional value of a whole write (``x.copy_(s)``) is ``clone(s)``: the copy
            # into x itself is the same value, and x is the buffer from here on.
            source = p.args[0] if p.args else None
            if not isinstance(source, TensorProxy) or not _same_layout_class(source, t0):
                continue
            if set(p.kwargs) - {"memory_format"} or len(p.args) != 1:
                continue
            replace[id(p)] = [torch_copy_.bind(source, x, grad_enabled=False, output=t0).from_bsym(**where)]
        else:
            if (name not in _OUT_ARG and name not in _INPLACE_FLAG) or is_inplace_form(p):
                continue
            if not any(b.name == x.name for b in _candidates(p)):
                continue
            if any(isinstance(a, TensorProxy) and a.name in group and a.name != x.name for a in p.flat_proxy_args):
                continue
            new = _inplace_form(p, x)
            if new is None or not _probe(new, x, t0):
                continue
            replace[id(p)] = [new]
        drop.add(id(c))
        removed += 1
        # The epilogue returned x itself; through a reshape its source is only a view of x.
        swap[variableify(c.flat_proxy_outs[0])] = c.args[0] if whole_view is None else x
    if not drop:
        return trace, 0
    out: list[BoundSymbol] = []
    for b in bsyms:
        if id(b) in drop:
            continue
        for nb in replace.get(id(b), [b]):
            mine = {v: swap[v] for v in map(variableify, nb.flat_proxy_args) if v in swap}
            # A value renamed to another renamed one (the epilogue's source was the setitem's output).
            mine = {k: swap.get(variableify(v), v) for k, v in mine.items()}
            out.append(nb.from_bsym_swap_proxies(mine, skip_output=True) if mine else nb)
    new_trace = recompute_dels(trace, out)
    new_trace.set_provenance(TraceProvenance(f"thunder_ext reinplace inputs ({removed} epilogue copies removed)"))
    return new_trace, removed
