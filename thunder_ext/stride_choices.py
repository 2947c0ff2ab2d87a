"""Ops that are a view or a copy by their input's strides: both programs, chosen at run time.

``reshape``, ``reshape_as``, a ``flatten`` that changes the rank, and ``contiguous`` return a view
of their input (or the input itself) when its strides allow, and a copy otherwise.  Where such an
op's output is read after a later write to the storage (``w = v.reshape(-1); v.mul_(2); return
w``), eager's values and gradients depend on those strides, which no trace records.  Without
gradients the write can stay in place, behind barriers, and the run-time op decides as eager's
does; with gradients autodiff needs values, and the transform refused (class 5).

:func:`choose_at_run_time` answers it where eager lays the op's input out by the strides of
trace inputs alone: an input, views of it, pointwise ops and factories shaped like their argument
on such tensors (eager's TensorIterator lays a pointwise output out by its inputs' strides).  The
flag makes those steps again on meta tensors laid out as the caller's, so the strides decide at
run time, with no data read.  It writes the program once per answer (a *world*):
in the view world the op is taken as a view, which the functionalizer replays like any other
(:meth:`thunder_ext.functionalize._Functionalizer.plan`, ``assumed_views``), and in the copy
world its output is cloned.  Each world works on clones of the inputs the program writes.  A
flag computed from the caller's tensor (:data:`is_view_at_run_time`, a metadata check, no data
read) selects each output and each input's final value with ``where``; each written input gets
that value in one ``copy_`` before the return.  Autodiff then sees values only, and ``where``
routes each gradient to the world that ran as eager would.

Before (``c`` a plain input, ``a`` requires grad)::

    t0 = ltorch.reshape(c, -1)
    t1 = ltorch.sum(a, 0)
    t2 = ltorch.setitem_(c, slice(1, None), t1)
    t3 = ltorch.setitem_(t0, slice(1, None), 1.5)
    return (t0, c)

After (abbreviated; each flag is made in the shape of what it selects)::

    f0 = is_view_at_run_time((c,), ((None, (0,), (), ()),), 'reshape', (12,), (12,), None, '')
    f1 = is_view_at_run_time((c,), ((None, (0,), (), ()),), 'reshape', (12,), (4, 3), None, '')
    t4 = ltorch.clone(c)                        # the view answer, on a clone of c
    t5 = ltorch.reshape(t4, -1)                 # a view, by assumption
    ...                                          # the body on t4 and t5
    t9 = ltorch.clone(c)                        # the copy answer
    t10 = ltorch.reshape(t9, -1)
    t11 = ltorch.clone(t10)                     # a copy, by assumption
    ...                                          # the body on t9 and t11
    t14 = ltorch.where(f1, t7, t12)             # c's new value in each answer
    t15 = prims.copy_(t14, c, grad_enabled=True)
    t16 = ltorch.where(f0, t6, t13)             # the returned t0 in each answer
    return (t16, t14)

Where no input's strides decide (the op's input is a matmul's result, or a view of one, which
eager lays out contiguously), the answer is known when the function is compiled: one world, no
flag (``StrideChoice.fixed``).

The barrier pass then makes both worlds values.  It is used only where the plain pipeline
refused for this reason, and kept only where every write of both worlds became a value: a
world left in place would write with the op's run-time behaviour, not its assumption.

Counted: the ops chosen at run time, and the worlds written (``StrideChoiceReport``).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import thunder.torch as ltorch
from thunder.core import dtypes, prims
from thunder.core.proxies import Proxy, ProxyTag, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.extend import OperatorExecutor

from thunder_ext.alias_analysis import AliasInfo, proxy_named, tensor_written_as
from thunder_ext.functionalize import aliases_read_from
from thunder_ext.op_kinds import (
    describe,
    is_copy,
    is_like_factory,
    is_return,
    is_unpack,
    returned_outputs,
    tensor_args,
    tensor_outs,
    view_kind,
    whole_tensor_versions,
    writes_with_grad,
)
from thunder_ext.recording import at_source_of, record

# More choices would write the program 2**k times.
MAX_CHOICES = 2

# The view ops a recipe may hold, by Thunder's name.
_CHAIN_OPS = frozenset(
    {
        "getitem", "transpose", "permute", "t", "view", "unsqueeze", "squeeze", "narrow", "select",
        "diagonal", "expand", "movedim", "unflatten", "swapaxes",
    }
)  # fmt: skip
# Ops whose result eager lays out contiguously, whatever their inputs' strides (ATen allocates it
# so): a recipe makes it as ``torch.empty`` of its shape.  Reductions (ATen's ``reduction`` tag:
# ``sum``, ``mean``, ``amax``, ``var`` ...) are among them: ATen allocates the kept-dims result
# contiguously and squeezes it.
_CONTIGUOUS_RESULTS = frozenset({"matmul", "mm", "bmm"})
_CONTIGUOUS_RESULT_TAGS = (torch.Tag.reduction,)
# View ops with several outputs, one of which the recipe takes (a step of ``operator.getitem``).
_SPLIT_OPS = frozenset({"split", "chunk", "unbind", "tensor_split"})
# A recipe's length past which the program is left as it was (each step runs on every call).
MAX_RECIPE = 32


def _torch_callable(sym_id: str):
    """The torch function a Thunder symbol's id names (``torch.sub``, ``torch.Tensor.__getitem__``,
    ``torch.nn.functional.silu``), or None.  ``operator.getitem`` takes one output of a split."""
    if sym_id == "operator.getitem":
        return operator.getitem
    if not isinstance(sym_id, str) or not sym_id.startswith("torch."):
        return None
    fn = torch
    for part in sym_id.split(".")[1:]:
        fn = getattr(fn, part, None)
    return fn if callable(fn) else None


@functools.cache
def _aten_tags(name: str) -> tuple:
    """The tags of ATen's op of that name (its first overload), or none."""
    packet = getattr(torch.ops.aten, name, None)
    overloads = packet.overloads() if packet is not None else []
    return tuple(getattr(packet, overloads[0]).tags) if overloads else ()


def _is_pointwise(name: str) -> bool:
    """Whether ATen's op of that name is pointwise: eager lays its output out by its inputs'
    strides (TensorIterator), as the op does on meta tensors."""
    return torch.Tag.pointwise in _aten_tags(name)


def _is_contiguous_result(name: str) -> bool:
    """Whether eager lays the op's result out contiguously whatever its inputs' strides."""
    return name in _CONTIGUOUS_RESULTS or any(t in _aten_tags(name) for t in _CONTIGUOUS_RESULT_TAGS)


def meta_like(p: TensorProxy) -> torch.Tensor:
    """A contiguous meta tensor of ``p``'s shape and dtype: a recipe's trial root."""
    return torch.empty(tuple(p.shape), dtype=dtypes.to_torch_dtype(p.dtype), device="meta")


def run_recipe(roots: Sequence[torch.Tensor], recipe: tuple) -> torch.Tensor:
    """The last value of ``recipe`` on meta tensors laid out as ``roots``: strides only, no data.

    Each step makes a value, numbered in order: ``(None, (k,), (), ())`` is the root ``k``;
    ``(torch function's dotted name, arguments, keyword arguments, refs)`` calls it, with the value
    numbered ``j`` at argument position ``i`` for each ``(i, j)`` of ``refs``."""
    metas = [torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device="meta") for r in roots]
    values: list[torch.Tensor] = []
    for sym_id, args, kwargs, refs in recipe:
        if sym_id is None:
            values.append(metas[args[0]])
            continue
        args = list(args)
        for i, k in refs:
            args[i] = values[k]
        values.append(_torch_callable(sym_id)(*args, **dict(kwargs)))
    return values[-1]


def _is_view(t: torch.Tensor, kind: str, shape: tuple) -> bool:
    """Whether ``reshape`` of ``t`` to ``shape`` is a view (``view`` accepts the same strides), or
    ``contiguous`` returns ``t`` itself."""
    if kind == "contiguous":
        return t.is_contiguous()
    try:
        t.view(shape)
        return True
    except RuntimeError:
        return False


# Each answer, by recipe and the roots' shapes, strides and dtypes: the meta ops of a recipe cost
# far more than the lookup, and every call (and every flag of one choice) asks again.
_ANSWERS: dict[tuple, bool] = {}


def view_answer(roots: Sequence[torch.Tensor], recipe: tuple, kind: str, shape: tuple) -> bool:
    """Eager's choice for the caller's tensors ``roots``: ``recipe`` made again from them on meta
    tensors, then whether ``reshape`` to ``shape`` would be a view or ``contiguous`` would return
    it itself.  Metadata only."""
    layouts = tuple((tuple(r.shape), r.stride(), r.dtype) for r in roots)
    key = (repr(recipe), kind, tuple(shape), layouts)
    answer = _ANSWERS.get(key)
    if answer is None:
        answer = _is_view(run_recipe(roots, recipe), kind, shape)
        if len(_ANSWERS) >= 4096:
            _ANSWERS.clear()
        _ANSWERS[key] = answer
    return answer


def _is_view_at_run_time(
    roots: tuple, recipe: tuple, kind: str, shape: tuple, like: tuple, refuse: bool | None = None, why: str = ""
) -> torch.Tensor:
    """Eager's choice, from the strides of ``roots`` (trace inputs): ``recipe`` made again from
    them on meta tensors, then whether ``reshape`` to ``shape`` would be a view (``view`` accepts
    the same strides) or ``contiguous`` would return it itself.  Metadata only; a bool tensor of
    shape ``like`` on the first root's device, the predicate of a ``where`` of that shape (not a
    0-d one: Inductor's C++ code generation fails on a 0-d bool predicate broadcast into an int64
    loop, torch 2.11).  Raises where the answer is ``refuse``: the compiled program cannot give
    eager's gradients for it (``why``)."""
    answer = view_answer(roots, recipe, kind, shape)
    if answer is refuse:
        from thunder_ext.errors import StrideDependentViewError

        raise StrideDependentViewError(why)
    return torch.full(like, answer, dtype=torch.bool, device=roots[0].device)


def _is_view_meta(
    roots: tuple, recipe: tuple, kind: str, shape: tuple, like: tuple, refuse: bool | None = None, why: str = ""
) -> TensorProxy:
    out = TensorProxy(shape=like, device=roots[0].device, dtype=dtypes.bool8, requires_grad=False)
    # A flag from metadata: no gradient flows through it (autodiff takes it as a constant).
    out.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
    return out


_STRIDES = OperatorExecutor("thunder_ext_strides")
is_view_at_run_time = _STRIDES.register_operator("is_view_at_run_time", meta=_is_view_meta, fn=_is_view_at_run_time)
# The same check where no selection reads it: kept for its refusal.
refuse_view_at_run_time = _STRIDES.register_operator(
    "refuse_view_at_run_time", meta=_is_view_meta, fn=_is_view_at_run_time, tags=[prims.OpTags.DONT_DCE]
)


@dataclass(frozen=True)
class StrideChoice:
    """One op whose answer the run-time strides choose."""

    index: int  # in the bsyms
    roots: tuple[TensorProxy, ...]  # the trace inputs whose strides decide
    recipe: tuple  # the views and pointwise ops from ``roots`` to the op's input (:func:`run_recipe`)
    kind: str  # 'reshape' or 'contiguous'
    shape: tuple[int, ...]  # the output's shape
    # The answer where no input's strides decide (the op's input laid out by an op of fixed
    # layout, a matmul's result): known when the function is compiled, and no flag is made.
    fixed: bool | None = None


@dataclass
class StrideChoiceReport:
    chosen: list[str] = field(default_factory=list)  # the ops, as 'name (file:line)'
    worlds: int = 0
    assumed_views: frozenset[str] = frozenset()  # the ops' outputs in the view worlds
    differentiable: frozenset[str] = frozenset()  # the names gradients flow through, carried over
    flags: frozenset[str] = frozenset()  # the flags' names
    selections: dict[str, str] = field(default_factory=dict)  # a selection's name -> what it is, in words
    not_chosen: str = ""  # why the program was left as it was
    refused_at_run_time: str = ""  # 'view' or 'copy': the answer whose strides a call is refused for
    input_values: dict[str, str] = field(default_factory=dict)  # a written input -> its new value's selection
    # A plain input whose new value carries a gradient in one answer only -> (roots, recipe, kind,
    # shape, that answer): the caller's tensor adopts the history only where the strides give it.
    histories_by_answer: dict[str, tuple] = field(default_factory=dict)


def _read_after_next_write(i: int, info: AliasInfo, bsyms: Sequence[BoundSymbol], last_read: dict[str, int]) -> bool:
    """What alias bsym ``i`` makes, or an alias made from it, is read at or after its storage's
    next write: eager's answer then depends on whether it is a view."""
    g = info.group_of(tensor_outs(bsyms[i])[0])
    nxt = next((j for j in range(i + 1, len(bsyms)) if any(info.group_of(w) == g for w in info.effects[j].writes)), None)
    return nxt is not None and aliases_read_from(i, nxt, bsyms, info.effects, last_read)


def find_stride_choices(bsyms: Sequence[BoundSymbol], info: AliasInfo) -> tuple[list[StrideChoice], str]:
    """The ops whose view-or-copy answer a later write makes observable, each with the input
    whose strides decide it; ([], why) where one cannot be decided so."""
    last_read = {p.name: j for j, b in enumerate(bsyms) for p in tensor_args(b)}
    made_at, whole = recipe_context(bsyms, info)
    choices: list[StrideChoice] = []
    for i, b in enumerate(bsyms):
        e = info.effects[i]
        if view_kind(b) != "maybe" or not e.aliases or e.writes or not tensor_outs(b):
            continue
        if not _read_after_next_write(i, info, bsyms, last_read):
            continue
        name = b.sym.name
        x = tensor_args(b)[0]
        if name == "contiguous":
            fmt = b.kwargs.get("memory_format", torch.contiguous_format)
            if fmt not in (torch.contiguous_format, torch.preserve_format):
                return [], f"`{tensor_outs(b)[0].name} = contiguous` with memory format {fmt}"
            kind = "contiguous"
        elif name in ("reshape", "reshape_as", "flatten"):
            kind = "reshape"
        else:
            return [], f"`{tensor_outs(b)[0].name} = {name}`"
        shape = tuple(tensor_outs(b)[0].shape)
        if not all(isinstance(s, int) for s in shape):
            return [], "a symbolic shape"
        try:
            roots, recipe = layout_recipe(x.name, bsyms, info, made_at, whole)
        except NoRecipe as e:
            return [], f"`{x.name}`, the input of `{name}`, is not laid out by the strides of trace inputs alone: {e}"
        # Tried once now, on contiguous inputs: a step whose torch function takes Thunder's
        # arguments otherwise would fail on every call.
        try:
            tried = run_recipe([meta_like(proxy_named(bsyms, r)) for r in roots], recipe)
        except Exception as e:
            return [], f"the steps that make `{x.name}` do not run on meta tensors ({type(e).__name__}: {e})"
        if tuple(tried.shape) != tuple(x.shape):
            return [], f"the steps that make `{x.name}` give the shape {tuple(tried.shape)} on meta tensors"
        fixed = None if roots else _is_view(tried, kind, shape)  # no input's strides decide: the answer is now
        choices.append(StrideChoice(i, tuple(proxy_named(bsyms, r) for r in roots), recipe, kind, shape, fixed))
    if len(choices) > MAX_CHOICES:
        return [], f"{len(choices)} such ops (at most {MAX_CHOICES})"
    return choices, ""


class NoRecipe(Exception):
    pass


def recipe_context(bsyms: Sequence[BoundSymbol], info: AliasInfo) -> tuple[dict[str, int], dict[str, str]]:
    """What :func:`layout_recipe` reads: each name's bsym, and each name that is a trace input
    whole (the input itself, or an in-place op's output on it) -> that input."""
    made_at = {p.name: j for j, b in enumerate(bsyms) for p in b.flat_proxy_outs}
    whole = {n: x for x in info.inputs for n in whole_tensor_versions(bsyms, {x}, info.effects)}
    return made_at, whole


def layout_recipe(
    name: str, bsyms: Sequence[BoundSymbol], info: AliasInfo, made_at: dict[str, int], whole: dict[str, str]
) -> tuple[list[str], tuple]:
    """The trace inputs whose strides lay ``name`` out in eager, and the steps that make it from
    them (for :func:`run_recipe`): views of :data:`_CHAIN_OPS` (or one output of a
    :data:`_SPLIT_OPS`), pointwise ops (whose output eager
    lays out by their inputs' strides) and factories shaped like their argument, through in-place
    ops (whose output is the tensor they wrote), from a matmul's or a reduction's result (laid out
    contiguously).
    No roots where no trace input's strides matter.  Raises :class:`NoRecipe` with the reason
    where another op stands between (a scan, a reshape that may copy)."""
    roots: list[str] = []
    steps: list[tuple] = []
    number: dict[str, int] = {}  # a name already made -> its value's number
    split_at: dict[int, int] = {}  # a split's bsym -> the number of its tuple of outputs

    def value(n: str) -> int:
        while n not in whole and n in made_at:
            written = tensor_written_as(n, info.effects[made_at[n]])
            if written is None:
                break
            n = written.name
        if n in whole:
            n = whole[n]
            if n not in number:
                roots.append(n)
                steps.append((None, (len(roots) - 1,), (), ()))
                number[n] = len(steps) - 1
            return number[n]
        if n in number:
            return number[n]
        k = made_at.get(n)
        if k is None:
            raise NoRecipe(f"`{n}` is made outside the trace's body")
        b = bsyms[k]
        outs = tensor_outs(b)
        if _is_contiguous_result(b.sym.name) and len(outs) == 1 and not info.effects[k].writes:
            # A new tensor laid out contiguously whatever its inputs' strides: a step of its own.
            o = outs[0]
            shape = tuple(int(d) for d in o.shape)
            steps.append(("torch.empty", (shape,), (("dtype", dtypes.to_torch_dtype(o.dtype)), ("device", "meta")), ()))
            number[n] = len(steps) - 1
            return number[n]
        fn = _torch_callable(b.sym.id)
        split = b.sym.name in _SPLIT_OPS
        layout_op = split or b.sym.name in _CHAIN_OPS or _is_pointwise(b.sym.name) or is_like_factory(b)
        if not layout_op or fn is None or (len(outs) != 1 and not split) or info.effects[k].writes:
            raise NoRecipe(f"`{outs[0].name if outs else n} = {b.sym.name}`")
        if split and [p.name for p in b.flat_proxy_outs] != [o.name for o in outs]:
            raise NoRecipe(f"`{n} = {b.sym.name}`, whose outputs are not all tensors")
        if is_like_factory(b) and b.kwargs.get("memory_format") not in (None, torch.preserve_format):
            raise NoRecipe(f"`{outs[0].name} = {b.sym.name}` with a memory format")
        if any(isinstance(v, Proxy) for v in tree_flatten(b.kwargs)[0]):
            raise NoRecipe(f"`{outs[0].name} = {b.sym.name}`, a proxy among its keyword arguments")
        refs, args = [], []
        for i, a in enumerate(b.args):
            if isinstance(a, TensorProxy):
                refs.append((i, a.name))
                args.append(None)
            elif any(isinstance(v, Proxy) for v in tree_flatten(a)[0]):
                raise NoRecipe(f"`{outs[0].name} = {b.sym.name}`, a proxy inside its arguments")
            else:
                args.append(a)
        kwargs = tuple((k2, v) for k2, v in b.kwargs.items() if not (is_like_factory(b) and k2 in ("dtype", "device")))
        if any(isinstance(v, dtypes.dtype) for v in tree_flatten((args, kwargs))[0]):
            raise NoRecipe(f"`{outs[0].name} = {b.sym.name}`, a Thunder dtype among its arguments")
        resolved = tuple((i, value(r)) for i, r in refs)
        if len(steps) >= MAX_RECIPE:
            raise NoRecipe(f"more than {MAX_RECIPE} steps")
        if k not in split_at:
            steps.append((b.sym.id, tuple(args), kwargs, resolved))
        if split:  # the output asked for, taken from the op's tuple (made once for all of them)
            split_at.setdefault(k, len(steps) - 1)
            steps.append(("operator.getitem", (None, [o.name for o in outs].index(n)), (), ((0, split_at[k]),)))
        number[n] = len(steps) - 1
        return number[n]

    value(name)
    return roots, tuple(steps)  # no roots: a layout the trace fixes


def _defined(bsym: BoundSymbol) -> list[Proxy]:
    """Every proxy ``bsym`` and its subsymbols make, outer first."""
    out = list(bsym.flat_proxy_outs)
    for s in bsym.subsymbols:
        out.extend(_defined(s))
    return out


def _fresh(p: Proxy) -> Proxy:
    """``p`` under a new name of the current trace."""
    return p.replace(name=None)


def choose_at_run_time(
    trace: TraceCtx,
    bsyms: Sequence[BoundSymbol],
    info: AliasInfo,
    choices: Sequence[StrideChoice],
    differentiable: frozenset[str] = frozenset(),
    *,
    refuse_views: str = "",
) -> tuple[TraceCtx | None, StrideChoiceReport]:
    """The program once per answer of ``choices``, selected by flags computed at run time
    (see the module's docstring).  ``bsyms``: the trace's, Thunder's barriers stripped, and
    ``info`` their analysis.  (None, report) where the program is not of a form this handles.

    ``differentiable``: the names gradients flow through in ``trace``; the report's
    ``differentiable`` carries them over to the new names, with the selections of any.

    ``refuse_views``: the copy answer only, each op's flag raising with this message where the
    strides make it a view (eager raises there: the view answer is no program to select)."""
    report = StrideChoiceReport()
    ret_at = [k for k, b in enumerate(bsyms) if is_return(b)]
    if len(ret_at) != 1 or ret_at[0] != len(bsyms) - 1:
        report.not_chosen = "the return is not the last bsym"
        return None, report
    ret = bsyms[-1]
    header = [b for b in bsyms if is_unpack(b)]
    body = [(k, b) for k, b in enumerate(bsyms[:-1]) if not is_unpack(b)]
    # The inputs written: each world writes clones of them, and the caller's get the chosen value.
    written: dict[str, TensorProxy] = {}
    members = info.groups.members()
    with_grad: set[str] = set()  # inputs written with grad enabled
    carries: set[str] = set()  # inputs written, so, with a value that carries a gradient
    last_writes: dict[str, BoundSymbol] = {}  # input -> its last write: the final copy's source line
    for k, e in enumerate(info.effects):
        for w in e.writes:
            ins = [n for n in members.get(info.group_of(w), ()) if n in info.inputs]
            if not ins:
                continue  # private storage: each world makes its own
            if len(ins) != 1:
                report.not_chosen = "a write to storage that is more than one input's"
                return None, report
            written[ins[0]] = proxy_named(bsyms, ins[0])
            if writes_with_grad(bsyms[k]):
                with_grad.add(ins[0])
                if any(p.name in differentiable for p in (*tensor_args(bsyms[k]), *tensor_outs(bsyms[k]))):
                    carries.add(ins[0])
            last_writes[ins[0]] = bsyms[k]
    new = from_trace(trace)
    by_index = {c.index: c for c in choices}
    out: list[BoundSymbol] = list(header)
    assumed: set[str] = set()
    with tracectx(new):
        # (choice, shape) -> its flag in that shape; computed first, before any write to its input.
        flag_of: dict[tuple, TensorProxy] = {}
        flag_bsyms: list[BoundSymbol] = []

        def flag(k: int, shape: tuple) -> TensorProxy:
            if (k, shape) not in flag_of:
                c = choices[k]
                made, flag_of[k, shape] = record(new, lambda: is_view_at_run_time(c.roots, c.recipe, c.kind, c.shape, shape))
                flag_bsyms.extend(at_source_of(made, bsyms[c.index]))
            return flag_of[k, shape]

        # True: the op is a view; a fixed answer is the only one of its op.
        worlds = list(itertools.product(*(((c.fixed,) if c.fixed is not None else (True, False)) for c in choices)))
        if refuse_views:
            worlds = [tuple(False for _ in choices)]
            for c in choices:  # kept though nothing reads them: their effect is the refusal
                made, _ = record(new, lambda c=c: refuse_view_at_run_time(c.roots, c.recipe, c.kind, c.shape, (), True, refuse_views))
                flag_bsyms.extend(at_source_of(made, bsyms[c.index]))
            report.refused_at_run_time = "view"
        results: list[dict[str, Proxy]] = []
        for world in worlds:
            swap: dict = {}
            for name, x in written.items():
                made, clone = record(new, lambda x=x: ltorch.clone(x))
                out.extend(at_source_of(made, bsyms[choices[0].index]))
                swap[variableify(x)] = clone
            for k, b in body:
                # New names for what the bsym makes; a name it hands back that exists already
                # (an input, or an earlier bsym's) keeps this world's.
                inner = {
                    variableify(p): _fresh(p) for p in _defined(b) if p.name not in info.inputs and variableify(p) not in swap
                }
                copy = b.from_bsym_swap_proxies({**swap, **inner})
                out.append(copy)
                swap.update(inner)
                c = by_index.get(k)
                if c is None:
                    continue
                o = tensor_outs(copy)[0]
                if world[choices.index(c)]:
                    assumed.add(o.name)
                else:
                    made, clone = record(new, lambda o=o: ltorch.clone(o))
                    out.extend(at_source_of(made, b))
                    swap[variableify(tensor_outs(b)[0])] = clone
            results.append(swap)

        # Names gradients flow through, in every world (a clone of an input included).
        diff = {n for n in differentiable if n in info.inputs}
        for swap in results:
            for v, p in swap.items():
                if v.proxy.name in differentiable:
                    diff.add(p.name)

        def select(p: Proxy, what: str) -> Proxy:
            versions = [s.get(variableify(p), p) for s in results]
            if all(v is versions[0] for v in versions):
                return versions[0]
            if not isinstance(p, TensorProxy):
                raise _NotOneAnswer(p.name)
            flags = [flag(k, tuple(p.shape)) for k, c in enumerate(choices) if c.fixed is None]
            made, value = record(new, lambda: _where_all(flags, versions))
            made = at_source_of(made, bsyms[choices[0].index])
            out.extend(made)
            if any(v.name in diff for v in versions):
                diff.update(o.name for b in made for o in tensor_outs(b))
            report.selections[value.name] = what
            return value

        def last_version(x: TensorProxy) -> TensorProxy:
            """The last name the trace gives the caller's tensor ``x`` (an in-place op's output on
            it): the name autodiff's analysis reads its gradient through."""
            whole = whole_tensor_versions(bsyms, {x.name}, info.effects)
            return next((o for b in reversed(bsyms) for o in tensor_outs(b) if o.name in whole), x)

        finals: dict = {}
        values: dict[str, TensorProxy] = {}
        try:
            for name, x in written.items():
                values[name] = value = select(last_version(x), f"the new value of `{name}`")
                report.input_values[name] = value.name
                made, copied = record(new, lambda x=x, value=value: prims.copy_(value, x, grad_enabled=name in with_grad))
                out.extend(at_source_of(made, last_writes[name]))
                if value.name in diff or name in carries:  # a write through a view names no version of x
                    diff.update((value.name, copied.name))
                finals[variableify(x)] = copied
            # The caller's tensor after its writes (the input, or an in-place op's output on it) is
            # the final copy's output; but as an output, after a write that carries a gradient, it
            # is the value, which has the history (as functionalize returns it).  Anything else
            # returned is chosen.
            as_input, as_output = {}, {}
            for name, x in written.items():
                for n in whole_tensor_versions(bsyms, {name}, info.effects):
                    as_input[n] = finals[variableify(x)]
                    as_output[n] = values[name] if name in carries else finals[variableify(x)]
            for k, p in enumerate(returned_outputs(ret)):
                if p.name not in as_output:
                    as_output[p.name] = as_input[p.name] = select(p, f"output {k}")
            for p in ret.flat_proxy_args:
                if p.name not in as_output:
                    as_output[p.name] = as_input[p.name] = select(p, f"`{p.name}`")
        except _NotOneAnswer as e:
            report.not_chosen = f"`{e}`, which is not a tensor, differs between the answers"
            return None, report
    out.append(_return_of(ret, as_output, as_input))
    new.bound_symbols = out[: len(header)] + flag_bsyms + out[len(header) :]
    new.set_provenance(TraceProvenance("Ops that are a view or a copy by strides, chosen at run time (thunder_ext)"))
    report.worlds = len(worlds)
    report.chosen = [describe(bsyms[c.index]) for c in choices]
    report.assumed_views = frozenset(assumed)
    report.differentiable = frozenset(diff)
    report.flags = frozenset(p.name for p in flag_of.values())
    return new, report


def _return_of(ret: BoundSymbol, as_output: dict, as_input: dict) -> BoundSymbol:
    """``ret`` returning the chosen values (original name -> proxy); its ``flat_args`` entry, which
    names the inputs themselves, reads ``as_input``."""

    def swap(x, to):
        return tree_map(lambda p: to.get(p.name, p) if isinstance(p, Proxy) else p, x)

    args = tuple(
        {k: swap(v, as_input if k == "flat_args" else as_output) for k, v in a.items()} if isinstance(a, dict) else swap(a, as_output)
        for a in ret.args
    )
    return ret.from_bsym(args=args)


def histories_by_answer(trace: TraceCtx, report: StrideChoiceReport, adopted: dict[str, TensorProxy]) -> dict[str, tuple]:
    """The inputs among ``adopted`` (input -> the value whose history it adopts after the call,
    :func:`thunder_ext.input_histories.written_values`) that should adopt it for one answer only:
    inputs that do not require grad, whose new value is a selection of one flag that nothing
    returns, and carries a gradient in one answer only (``t0 = a.contiguous(); t0.copy_(c);
    a.tanh_()``: eager's ``a`` has ``c``'s history where ``contiguous`` is ``a`` itself, none
    where it copies).  Input -> (roots, recipe, kind, shape, the answer that carries); ``trace``:
    the barrier pass's output, values only."""
    plain = {a.name for a in trace.args if isinstance(a, TensorProxy) and not a.requires_grad}
    grad_inputs = [a.name for a in trace.args if isinstance(a, TensorProxy) and a.requires_grad]
    feeds = {x: _fed_with_grad(trace, x) for x in grad_inputs}
    returned = {p.name for b in trace.bound_symbols if is_return(b) for p in b.flat_proxy_args}
    made = {o.name: b for b in trace.bound_symbols for o in tensor_outs(b)}
    out: dict[str, tuple] = {}
    for name, value in adopted.items():
        if name not in plain or report.input_values.get(name) != value.name or value.name in returned:
            continue
        where = made.get(value.name)
        args = tensor_args(where) if where is not None and where.sym.name == "where" else ()
        flag = made.get(args[0].name) if len(args) == 3 and args[0].name in report.flags else None
        if flag is None or flag.sym is not is_view_at_run_time:
            continue
        as_view, as_copy = (any(args[k].name in names for names in feeds.values()) for k in (1, 2))
        if as_view != as_copy and len(report.chosen) == 1:  # with two ops, the branches are selections too
            out[name] = (*flag.args[:4], as_view)
    return out


def answers_eager_differs_on(
    trace: TraceCtx, report: StrideChoiceReport, adopted_by_answer: frozenset[str] = frozenset()
) -> tuple[set[bool], str]:
    """The answers of a single choice on which the compiled program cannot be eager's, and why in
    words; ``trace``: the barrier pass's output, values only.

    An answer is exact where every selection depends on at least the inputs that require grad
    that the other answer's does: its outputs' ``requires_grad``, fixed when the function is
    compiled, and each input's ``grad`` (None or a tensor) are then eager's.  For the other
    answer eager's outputs would not require grad, or an input's ``grad`` would stay None, where
    a ``where`` passes a zero gradient to the answer not taken.  With more than one choice,
    every answer must select values that depend on the same such inputs.

    ``adopted_by_answer``: selections whose history the caller's input adopts only for the answer
    in which they carry a gradient (:func:`histories_by_answer`): exact in both.
    """
    grad_inputs = [a.name for a in trace.args if isinstance(a, TensorProxy) and a.requires_grad]
    feeds = {x: _fed_with_grad(trace, x) for x in grad_inputs}
    inexact: set[bool] = set()
    why = ""
    for b in trace.bound_symbols:
        args = tensor_args(b)
        if b.sym.name != "where" or len(args) != 3 or args[0].name not in report.flags:
            continue
        if tensor_outs(b)[0].name in adopted_by_answer:
            continue
        for x, names in feeds.items():
            as_view, as_copy = args[1].name in names, args[2].name in names
            if as_view == as_copy:
                continue
            inexact.add(as_copy)  # the answer whose selection depends on less
            what = report.selections.get(tensor_outs(b)[0].name, f"`{tensor_outs(b)[0].name}`")
            why = why or f"whether {what} depends on `{x}`, which requires grad, depends on it"
    if len(report.chosen) > 1 and inexact:
        inexact = {True, False}
    return inexact, why


def _fed_with_grad(trace: TraceCtx, x: str) -> set[str]:
    """The tensors autodiff makes depend on input ``x``: not through what an op computed under
    no-grad (Thunder tags its outputs), a ``copy_`` made so, or a factory shaped like ``x``."""
    names = {x}
    for b in trace.bound_symbols:
        if is_like_factory(b) or (is_copy(b) and b.kwargs.get("grad_enabled") is False):
            continue
        if any(p.name in names for p in b.flat_proxy_args):
            names.update(
                o.name
                for o in tensor_outs(b)
                if dtypes.is_inexact_dtype(o.dtype) and ProxyTag.DETACHED_AUTOGRAD_GRAPH not in o.tags
            )
    return names


def refusal_message(answer: bool, why: str, *, eager_raises: bool = False) -> str:
    """What a flag says where the strides give ``answer`` and the call is refused: eager's
    gradients differ from the program's there (``why`` says how), or eager raises on a write
    (``eager_raises``, ``why`` says which)."""
    it_is = f"for the strides of this call it is {'a view' if answer else 'a copy'}"
    if eager_raises:
        return (
            f"{why}: {it_is}, and eager raises on that write (\"a leaf Variable that requires grad is being used "
            "in an in-place operation\"). Clone where a copy is meant"
        )
    return (
        f"{why}: {it_is}, and eager's gradients then differ from those of the program compiled (which "
        "requires grad where eager would not, or gives a zero gradient where eager gives None). "
        + ("Clone where a copy is meant" if answer else "Make the input contiguous where a view is meant, or clone where a copy is")
    )


def refuse_at_run_time(trace: TraceCtx, report: StrideChoiceReport, answer: bool, why: str) -> TraceCtx:
    """``trace`` with each flag raising, at run time, where the strides give ``answer``: eager's
    gradients differ from the program's there (``why`` says how)."""
    report.refused_at_run_time = "view" if answer else "copy"
    message = refusal_message(answer, why)
    new = from_trace(trace)
    new.bound_symbols = [
        b.from_bsym(args=(*b.args[:5], answer, message)) if b.sym is is_view_at_run_time else b
        for b in trace.bound_symbols
    ]
    new.set_provenance(TraceProvenance("Refuse the strides eager's gradients differ on, at run time (thunder_ext)"))
    return new


class _NotOneAnswer(Exception):
    pass


def _where_all(flags: Sequence[TensorProxy], versions: Sequence[TensorProxy]) -> TensorProxy:
    """``versions`` ordered as ``itertools.product((True, False), ...)`` over ``flags``: the one
    the flags pick."""
    if not flags:
        return versions[0]
    half = len(versions) // 2
    return ltorch.where(flags[0], _where_all(flags[1:], versions[:half]), _where_all(flags[1:], versions[half:]))
