"""Unit tests of the analysis modules on small hand-built traces (issue 10).

``op_kinds``, ``alias_analysis`` and ``dead_writes`` are exercised here without
``thunder.jit``: each trace is recorded by calling Thunder symbols on proxies under
``tracectx`` (a symbol called inside an active trace appends its bound symbol to the trace's
current scope), so every test sees exactly the bound symbols it names.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import thunder
import thunder.executors.torchex as torchex
import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.core.transform_common import dce

from thunder_ext.alias_analysis import accessed_groups, input_names, storage_groups
from thunder_ext.dead_writes import dead_inplace_ops, remove_bsyms
from thunder_ext.op_kinds import (
    Effect,
    PrimIDs,
    effect_of,
    is_barrier,
    is_copy,
    is_return,
    origin_ids,
    view_kind,
)

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def tensor(name: str, shape=(4, 3), dtype=thunder.dtypes.float32) -> TensorProxy:
    return TensorProxy(name=name, shape=shape, device=thunder.devices.cpu, dtype=dtype, requires_grad=False)


def build(fn: Callable, **shapes) -> TraceCtx:
    """Record ``fn`` over tensor proxies named and shaped by ``shapes``; its result is returned."""
    trace = TraceCtx(fn)
    with tracectx(trace):
        args = tuple(tensor(name, shape) for name, shape in shapes.items())
        trace.args, trace.kwargs = args, {}
        prims.python_return(fn(*args))
    return trace


def by_name(trace: TraceCtx, name: str) -> list[int]:
    """Positions of the top-level bound symbols whose symbol is called ``name``."""
    return [i for i, b in enumerate(trace.bound_symbols) if b.sym.name == name]


def only(trace: TraceCtx, name: str):
    (i,) = by_name(trace, name)
    return trace.bound_symbols[i]


def out_name(bsym) -> str:
    (o,) = [p for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy)]
    return o.name


def summary(e: Effect) -> tuple:
    """An Effect with proxies replaced by names: (writes, aliases, is_view, is_barrier)."""
    return (
        tuple(w.name for w in e.writes),
        tuple((o.name, a.name) for o, a in e.aliases),
        e.is_view,
        e.is_barrier,
    )


def copy(src, dst):
    return prims.copy_(src, dst, grad_enabled=False)


# --------------------------------------------------------------------------------------------
# op_kinds.effect_of and friends
# --------------------------------------------------------------------------------------------


def test_prim_copy_writes_its_destination_and_its_output_aliases_it():
    t = build(lambda x, y: copy(y, x), x=(4, 3), y=(4, 3))
    b = only(t, "copy_")
    assert is_copy(b) and not is_barrier(b) and view_kind(b) is None
    assert summary(effect_of(b)) == (("x",), ((out_name(b), "x"),), False, False)


def test_inplace_tagged_composite_writes_its_first_argument():
    t = build(lambda x, w: ltorch.add_(ltorch.mul(x, 2), w), x=(4, 3), w=(4, 3))
    mul, add_ = only(t, "mul"), only(t, "add_")
    assert prims.OpTags.IN_PLACE in add_.sym.tags
    y = out_name(mul)
    # Writes the tensor it is called on (not ``w``), and returns an alias of it.
    assert summary(effect_of(add_)) == ((y,), ((out_name(add_), y),), False, False)
    assert summary(effect_of(mul)) == ((), (), False, False)


def test_inplace_tag_alone_is_enough_without_subsymbols():
    # An IN_PLACE-tagged bsym with no decomposition (the ``_tagged_inplace`` path).
    t = build(lambda x, w: ltorch.add_(x, w), x=(4, 3), w=(4, 3))
    leaf = only(t, "add_").from_bsym(subsymbols=())
    assert summary(effect_of(leaf)) == (("x",), ((out_name(leaf), "x"),), False, False)
    # The same leaf shape for an untagged op has no effect.
    t2 = build(lambda x, w: ltorch.add(x, w), x=(4, 3), w=(4, 3))
    assert effect_of(only(t2, "add").from_bsym(subsymbols=())) == Effect()


def test_untagged_composite_with_a_copy_is_a_write():
    # relu(inplace=True) carries no IN_PLACE tag; its copy_ is found among its subsymbols.
    t = build(lambda x: ltorch.relu(ltorch.mul(x, 2), True), x=(4, 3))
    y, relu = out_name(only(t, "mul")), only(t, "relu")
    assert not relu.sym.tags
    assert summary(effect_of(relu)) == ((y,), ((out_name(relu), y),), False, False)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda x: ltorch.getitem(x, 0), "getitem"),
        (lambda x: ltorch.getitem(x, slice(1, 3)), "getitem"),
        (lambda x: prims.slice_prim(x, [0, 0], [2, 3], [1, 1]), "slice_prim"),
        (lambda x: ltorch.transpose(x, 0, 1), "transpose"),
        (lambda x: ltorch.view(x, (12,)), "view"),
    ],
    ids=["getitem-int", "getitem-slice", "slice_prim", "transpose", "view"],
)
def test_views_alias_their_base_and_write_nothing(make, name):
    t = build(make, x=(4, 3))
    b = only(t, name)
    assert view_kind(b) == "view"
    assert summary(effect_of(b)) == ((), ((out_name(b), "x"),), True, False)


def test_reshape_is_a_maybe_view_and_counts_as_an_access():
    t = build(lambda x: ltorch.reshape(x, (12,)), x=(4, 3))
    b = only(t, "reshape")
    assert view_kind(b) == "maybe"
    e = effect_of(b)
    assert summary(e) == ((), ((out_name(b), "x"),), False, False)
    info = storage_groups(t.bound_symbols, input_names(t))
    assert accessed_groups(info, b, e) == {info.group_of("x")}


def test_barrier_outputs_alias_its_inputs_in_order():
    t = build(lambda x, y: prims.update_aliases((x, y)), x=(4, 3), y=(4, 3))
    b = only(t, "update_aliases")
    o1, o2 = b.flat_proxy_outs
    assert is_barrier(b) and not is_copy(b)
    assert summary(effect_of(b)) == ((), ((o1.name, "x"), (o2.name, "y")), False, True)


def test_return_has_no_effect():
    t = build(lambda x: x, x=(4, 3))
    ret = t.bound_symbols[-1]
    assert is_return(ret)
    assert effect_of(ret) == Effect()


def _batch_norm(x, rm, rv, training):
    return ltorch.batch_norm(x, rm, rv, None, None, training, 0.1, 1e-5)


def test_batch_norm_training_writes_its_running_stats_from_the_middle_of_its_steps():
    t = build(lambda x, rm, rv: _batch_norm(x, rm, rv, True), x=(4, 3), rm=(3,), rv=(3,))
    bn = only(t, "batch_norm")
    # The copies are not the composite's last step: the write is in the middle.
    steps = [s.sym.id for s in bn.subsymbols]
    assert PrimIDs.COPY_ in steps and steps[-1] != PrimIDs.COPY_
    e = effect_of(bn)
    assert {w.name for w in e.writes} == {"rm", "rv"}
    assert len(e.writes) == 2
    assert e.aliases == () and not e.is_view and not e.is_barrier


def test_batch_norm_in_eval_writes_nothing():
    t = build(lambda x, rm, rv: _batch_norm(x, rm, rv, False), x=(4, 3), rm=(3,), rv=(3,))
    assert effect_of(only(t, "batch_norm")).writes == ()


def _torch_executor_symbol(prim_id):
    return torchex.ex.implmap[prim_id].symbol


def test_torch_executor_copy_is_recognised_as_a_copy():
    sym = _torch_executor_symbol(PrimIDs.COPY_)
    assert sym.id == "copy_"  # a string: comparing with PrimIDs.COPY_ alone would miss it
    t = build(lambda x, y: sym(y, x, grad_enabled=False), x=(4, 3), y=(4, 3))
    (b,) = [b for b in t.bound_symbols if not is_return(b)]
    assert b.sym.id == "copy_" and PrimIDs.COPY_ in origin_ids(b)
    assert is_copy(b)
    assert summary(effect_of(b)) == (("x",), ((out_name(b), "x"),), False, False)


def test_torch_executor_slice_and_barrier_are_recognised():
    slice_sym = _torch_executor_symbol(PrimIDs.SLICE)
    barrier_sym = _torch_executor_symbol(PrimIDs.UPDATE_ALIASES)

    def f(x, y):
        s = slice_sym(x, [0, 0], [2, 3], [1, 1])
        return barrier_sym((s, y))

    t = build(f, x=(4, 3), y=(4, 3))
    sl, bar = t.bound_symbols[0], t.bound_symbols[1]
    assert sl.sym.id == "torch_slice_prim_impl"
    assert summary(effect_of(sl)) == ((), ((out_name(sl), "x"),), True, False)
    assert is_barrier(bar)
    o1, o2 = bar.flat_proxy_outs
    assert summary(effect_of(bar)) == ((), ((o1.name, out_name(sl)), (o2.name, "y")), False, True)


def test_pure_ops_have_no_effect():
    t = build(lambda x, w: ltorch.exp(ltorch.mul(x, w)), x=(4, 3), w=(4, 3))
    assert effect_of(only(t, "mul")) == Effect()
    assert effect_of(only(t, "exp")) == Effect()


def test_advanced_indexing_is_not_a_view():
    """getitem with a tensor index gathers into new storage (ltorch lists every getitem as a view)."""
    def f(x):
        return ltorch.getitem(x, tensor("i", (2,), thunder.dtypes.int64))

    t = build(f, x=(4, 3))
    assert not effect_of(only(t, "getitem")).is_view


# --------------------------------------------------------------------------------------------
# alias_analysis
# --------------------------------------------------------------------------------------------


def _mixed(x, w):
    v = ltorch.getitem(x, 0)  # view of x
    tx = ltorch.transpose(x, 0, 1)  # view of x
    y = ltorch.mul(w, 2)  # new storage
    c = copy(y, x)  # writes x
    r = ltorch.reshape(y, (12,))  # maybe-view of y
    z = ltorch.exp(w)  # new storage
    return v, tx, c, r, z


def test_storage_groups_join_views_and_write_outputs_to_their_base():
    t = build(_mixed, x=(4, 3), w=(4, 3))
    info = storage_groups(t.bound_symbols, input_names(t))
    v, tx, y, c, r, z = (out_name(t.bound_symbols[i]) for i in range(6))
    g = info.group_of
    assert g("x") == g(v) == g(tx) == g(c)
    assert g(y) == g(r)
    # Unrelated tensors stay apart: an op's output does not join its inputs' group.
    assert len({g("x"), g("w"), g(y), g(z)}) == 4
    members = {frozenset(m) for m in info.groups.members().values()}
    assert frozenset({"x", v, tx, c}) in members
    assert frozenset({y, r}) in members


def test_storage_groups_input_mutated_groups_and_writes_of():
    t = build(_mixed, x=(4, 3), w=(4, 3))
    info = storage_groups(t.bound_symbols, input_names(t))
    assert info.inputs == {"x", "w"}
    assert info.input_groups == {info.group_of("x"), info.group_of("w")}
    assert info.mutated_groups == {info.group_of("x")}
    (ci,) = by_name(t, "copy_")
    assert [p.name for p in info.writes_of(ci)] == ["x"]
    assert all(info.writes_of(i) == () for i in range(len(t.bound_symbols)) if i != ci)
    assert len(info.effects) == len(t.bound_symbols)


def test_aliased_inputs_are_one_group():
    def f(a, b, c):
        return copy(ltorch.mul(c, 2), b)

    t = build(f, a=(4, 3), b=(4, 3), c=(4, 3))
    bsyms, inputs = t.bound_symbols, input_names(t)

    apart = storage_groups(bsyms, inputs)
    assert apart.group_of("a") != apart.group_of("b")
    assert apart.group_of("a") not in apart.mutated_groups

    joined = storage_groups(bsyms, inputs, aliased_inputs=[{"a", "b"}])
    assert joined.group_of("a") == joined.group_of("b") != joined.group_of("c")
    assert joined.group_of("a") in joined.mutated_groups
    assert len(joined.input_groups) == 2


def test_accessed_groups():
    def f(x, w):
        v = ltorch.getitem(x, 0)
        s = prims.slice_prim(x, [0, 0], [2, 3], [1, 1])
        (b,) = prims.update_aliases((w,))
        m = ltorch.mul(v, b)
        c = copy(m, v)
        return s, c

    t = build(f, x=(4, 3), w=(3,))
    info = storage_groups(t.bound_symbols, input_names(t))
    acc = {b.sym.name: accessed_groups(info, b, e) for b, e in zip(t.bound_symbols, info.effects)}
    gx, gw = info.group_of("x"), info.group_of("w")
    assert acc["getitem"] == set() and acc["slice_prim"] == set()  # pure view creation
    assert acc["update_aliases"] == set()
    assert acc["mul"] == {gx, gw}  # reads a view of x and a barrier output of w
    mul_out = out_name(only(t, "mul"))
    assert acc["copy_"] == {info.group_of(mul_out), gx}
    assert acc["python_return"] == {gx}


def test_input_names_from_trace_args():
    t = build(lambda x, w: ltorch.mul(x, w), x=(4, 3), w=(4, 3))
    assert input_names(t) == {"x", "w"}


def test_input_names_from_unpack_trivial_and_only_tensors():
    trace = TraceCtx(None)
    with tracectx(trace):
        x, y = tensor("x"), tensor("y")
        prims.unpack_trivial(x, name="x")
        prims.python_return(ltorch.mul(x, y))
    assert trace.args is None
    assert input_names(trace) == {"x"}  # y is used but never unpacked nor an argument

    t = TraceCtx(None)
    with tracectx(t):
        x = tensor("x")
        t.args, t.kwargs = (x, 3, "s"), {"k": tensor("k")}
        prims.python_return(x)
    assert input_names(t) == {"x", "k"}


# --------------------------------------------------------------------------------------------
# dead_writes
# --------------------------------------------------------------------------------------------


def test_write_to_an_intermediate_nobody_reads_is_dead():
    def f(x):
        y = ltorch.mul(x, 2)
        ltorch.add_(y, 1)
        return ltorch.sin(x)

    t = build(f, x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == by_name(t, "add_")


def test_write_to_an_input_is_never_dead():
    t = build(lambda x: (ltorch.add_(x, 1), ltorch.sin(x))[1], x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == []
    # The same list with no inputs declared: the write is then dead, so inputs are what keep it.
    assert dead_inplace_ops(t.bound_symbols, ()) == by_name(t, "add_")


def test_write_to_a_view_of_an_input_is_never_dead():
    def f(x):
        ltorch.mul_(ltorch.getitem(x, 0), 2)
        return ltorch.sin(x)

    t = build(f, x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == []
    assert dead_inplace_ops(t.bound_symbols, ()) == by_name(t, "mul_")


def test_write_whose_output_a_live_bsym_reads_is_live():
    def direct(x):
        return ltorch.exp(ltorch.add_(ltorch.mul(x, 2), 1))

    def through_barrier(x):
        w = ltorch.add_(ltorch.mul(x, 2), 1)
        (b,) = prims.update_aliases((w,))
        return ltorch.exp(b)

    for f in (direct, through_barrier):
        t = build(f, x=(4, 3))
        assert dead_inplace_ops(t.bound_symbols, input_names(t)) == [], f.__name__


def test_write_read_only_by_a_dead_op_is_dead():
    def f(x):
        w = ltorch.add_(ltorch.mul(x, 2), 1)
        ltorch.cos(w)  # nobody needs this
        return ltorch.sin(x)

    t = build(f, x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == by_name(t, "add_")


def test_chain_of_dead_writes():
    def dead_chain(x):
        y = ltorch.mul(x, 2)
        ltorch.mul_(ltorch.add_(y, 1), 3)
        return ltorch.sin(x)

    t = build(dead_chain, x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == by_name(t, "add_") + by_name(t, "mul_")

    def live_end(x):
        y = ltorch.mul(x, 2)
        return ltorch.mul_(ltorch.add_(y, 1), 3)

    t = build(live_end, x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == []


def test_only_the_dead_write_is_reported_beside_a_live_one():
    def f(x):
        y = ltorch.mul(x, 2)
        ltorch.add_(y, 1)  # dead
        ltorch.mul_(x, 3)  # input: kept
        return ltorch.sin(x)

    t = build(f, x=(4, 3))
    assert dead_inplace_ops(t.bound_symbols, input_names(t)) == by_name(t, "add_")


def _with_noop_step(bsym, x):
    """``bsym`` with a leading ``prims.shape`` step: a no-op subsymbol, which ``dce`` prunes in place."""
    noop = prims.shape.bind(x, output=tuple(x.shape))
    return bsym.from_bsym(subsymbols=[noop, *bsym.subsymbols])


def test_remove_bsyms_drops_the_dead_write_and_what_only_it_needed():
    def f(x):
        y = ltorch.mul(x, 2)
        ltorch.add_(y, 1)
        return ltorch.sin(x)

    t = build(f, x=(4, 3))
    (si,) = by_name(t, "sin")
    t.bound_symbols[si] = _with_noop_step(t.bound_symbols[si], t.args[0])
    bsyms = list(t.bound_symbols)
    before = [(b, list(b.subsymbols)) for b in bsyms]

    # Thunder's dce alone keeps the dead write (its copy_ is DONT_DCE) and the mul it reads.
    assert [b.sym.name for b in dce(t).bound_symbols] == ["mul", "add_", "sin", "python_return"]
    t.bound_symbols = list(bsyms)
    for b, subs in before:  # reset what that dce pruned in place
        b.subsymbols = list(subs)

    out = remove_bsyms(t, bsyms, set(dead_inplace_ops(bsyms, input_names(t))))
    assert [b.sym.name for b in out] == ["sin", "python_return"]
    # dce did prune the no-op step, but on a copy: the input list and its bsyms are untouched.
    assert [s.sym.id for s in out[0].subsymbols] == [s.sym.id for s in before[si][1][1:]]
    assert bsyms == [b for b, _ in before]
    assert all(b.subsymbols == subs for b, subs in before)
    assert PrimIDs.SHAPE in [s.sym.id for s in bsyms[si].subsymbols]
    assert out[0] is not bsyms[si]


# --------------------------------------------------------------------------------------------
# barriers: the driver's fixed-point loops
# --------------------------------------------------------------------------------------------


def test_fixed_point_loop_past_its_bound_is_an_internal_error():
    """A loop allowed one round per write raises, naming itself, on the round after the last."""
    from thunder_ext.barriers import _FixedPoint
    from thunder_ext.errors import InplaceOrderingError, PlacementDidNotConvergeError

    rounds = _FixedPoint("the remat guard", 2)
    rounds.next_round()
    rounds.next_round()
    with pytest.raises(PlacementDidNotConvergeError, match="the remat guard did not reach a fixed point") as e:
        rounds.next_round()
    assert not isinstance(e.value, InplaceOrderingError)  # a bug, never a refusal


_F = torch.nn.functional
_x, _v = (lambda: torch.randn(4, 3)), (lambda: torch.randn(3))
# (symbol name in the trace, function, argument makers): ops whose Thunder signature is eager's,
# and ops whose is not (relu's flag, reshape's and flip's varargs, `to`, topk's dim=None,
# batch_norm's argument order), which meta_calls calls in eager's own form
SAVES_CASES = [
    ("mul", lambda a, b: a * b, (_x, _x)),
    ("add", lambda a, b: a + b, (_x, _x)),
    ("exp", lambda a: a.exp(), (_x,)),
    ("index_select", lambda a, i: a.index_select(0, i), (_x, lambda: torch.tensor([0, 2]))),
    ("where", lambda c, a, b: torch.where(c, a, b), (lambda: torch.randn(4, 3) > 0, _x, _x)),
    ("relu", lambda a: torch.relu(a), (_x,)),
    ("reshape", lambda a: a.reshape(12), (_x,)),
    ("permute", lambda a: a.permute(1, 0), (_x,)),
    ("to", lambda a: a.to(torch.float64), (_x,)),
    ("topk", lambda a: a.topk(2)[0], (_x,)),
    ("sort", lambda a: a.sort(0)[0], (_x,)),
    ("torch_max", lambda a: a.max(), (_x,)),
    ("flip", lambda a: a.flip(0), (_x,)),
    ("tril", lambda a: a.tril(), (_x,)),
    ("batch_norm", lambda a, rm, rv, w, b: _F.batch_norm(a, rm, rv, w, b, training=True), (_x, _v, _v, _v, _v)),
    ("einsum", lambda a, b: torch.einsum("ij,kj->ik", a, b), (_x, _x)),  # eager saves reshaped copies
    ("matmul", lambda a, b: a @ b, (_x, lambda: torch.randn(3, 4))),
    # Thunder registers `Tensor.double` automatically; its id (`Tensor.double`) names no module
    ("double", lambda a: a.double() * 2, (_x,)),
]


_i = lambda: torch.arange(12, dtype=torch.int32).reshape(4, 3)  # noqa: E731
_x4 = lambda: torch.randn(2, 3, 4, 2)  # noqa: E731
# Eager answers some calls with the input object itself, others with a new tensor: both kinds
# of each op, all automatically registered by Thunder except `to`, `long` and `contiguous`.
RETURNS_INPUT_CASES = [
    ("positive", lambda a: torch.positive(a), (_x,)),
    ("conj", lambda a: a.conj(), (_x,)),
    ("resolve_neg", lambda a: a.resolve_neg(), (_x,)),
    ("conj_physical", lambda a: torch.conj_physical(a), (_x,)),
    ("alpha_dropout", lambda a: torch.nn.functional.alpha_dropout(a, 0.0, True), (_x,)),
    ("alpha_dropout", lambda a: torch.nn.functional.alpha_dropout(a, 0.5, True), (_x,)),
    ("feature_alpha_dropout", lambda a: torch.nn.functional.feature_alpha_dropout(a, 0.5, False), (_x4,)),
    ("dropout2d", lambda a: torch.nn.functional.dropout2d(a, 0.5, False), (_x4,)),
    ("sum_to_size", lambda a: a.sum_to_size(4, 3), (_x,)),
    ("sum_to_size", lambda a: a.sum_to_size(1, 3), (_x,)),
    ("int", lambda a: a.int(), (_i,)),
    ("int", lambda a: a.int(), (_x,)),
    ("double", lambda a: a.double(), (_x,)),
    ("double", lambda a: a.double(), (lambda: torch.randn(4, 3, dtype=torch.float64),)),
    ("cpu", lambda a: a.cpu(), (_x,)),
    ("long", lambda a: a.long(), (lambda: torch.arange(12).reshape(4, 3),)),
    ("long", lambda a: a.long(), (_i,)),
    ("to", lambda a: a.to(torch.float32), (_x,)),
    ("to", lambda a: a.to(torch.float64), (_x,)),
    ("contiguous", lambda a: a.contiguous(), (_x,)),
]


@pytest.mark.parametrize("name,fn,makers", RETURNS_INPUT_CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(RETURNS_INPUT_CASES)])
def test_identity_ops_are_those_eager_answers_with_their_input(name, fn, makers):
    """``is_identity`` against eager itself: an op is folded into its input exactly where eager,
    on real tensors, returns the input object (``contiguous`` excepted: eager's answer depends on
    strides, which Thunder does not trace, so it is never folded)."""
    from thunder_ext.identity_ops import is_identity

    args = [m() for m in makers]
    jf = thunder.jit(fn)
    jf(*args)
    (bsym,) = [b for b in thunder.last_traces(jf)[0].bound_symbols if b.sym.name == name]
    eager = fn(*args) is args[0]
    assert is_identity(bsym) == (eager and name != "contiguous"), f"{name}: eager returns its input: {eager}"


def _traced_op(name: str, fn, makers) -> tuple:
    """Real arguments from ``makers``, the bsym ``name`` of ``fn``'s trace, its tensor arguments,
    and ``fn``'s parameter names."""
    args = [m() for m in makers]
    jf = thunder.jit(fn)
    jf(*args)
    (bsym,) = [b for b in thunder.last_traces(jf)[0].bound_symbols if b.sym.name == name]
    params = [p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)]
    return args, bsym, params, list(fn.__code__.co_varnames[: fn.__code__.co_argcount])


@pytest.mark.parametrize("name,fn,makers", SAVES_CASES, ids=[c[0] for c in SAVES_CASES])
def test_saves_input_is_whether_eagers_backward_raises_after_a_write(name, fn, makers):
    """``saves_input(bsym, arg)`` against eager itself, on real tensors: the op on copies of the
    arguments (floating ones requiring grad, running stats excepted as eager has them), one
    in-place write to the argument, then ``backward()``: eager raises exactly where it says the
    backward saves that argument."""
    from thunder_ext.meta_calls import saves_input

    args, bsym, params, names = _traced_op(name, fn, makers)
    no_grad = {"rm", "rv"}
    checked = 0
    for k, pname in enumerate(names):
        proxy = next((p for p in params if p.name == pname), None)
        if proxy is None:
            continue
        ins = [
            (a.detach().requires_grad_() * 1) if a.is_floating_point() and n not in no_grad else a.clone()
            for a, n in zip(args, names)
        ]
        out = fn(*ins)
        ins[k].logical_not_() if ins[k].dtype == torch.bool else ins[k].add_(1)
        try:
            out.sum().backward()
            raised = False
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e), e
            raised = True
        assert saves_input(bsym, proxy) == raised, f"{name}: argument {pname}"
        checked += 1
    assert checked == len(params)


_GRAD_SUBSET_CASES = [c for c in SAVES_CASES if c[0] in ("mul", "add", "exp", "where", "einsum", "matmul")]


@pytest.mark.parametrize("name,fn,makers", _GRAD_SUBSET_CASES, ids=[c[0] for c in _GRAD_SUBSET_CASES])
def test_saves_input_asked_with_the_arguments_that_carry_a_gradient(name, fn, makers):
    """``saves_input(bsym, arg, differentiable)`` against eager with only the arguments named in
    ``differentiable`` requiring grad: ``a * b`` with only ``b`` requiring it saves ``a`` and not
    ``b``, so a write into ``b`` after it leaves eager's backward running.  None requiring grad:
    eager records no backward, and saves nothing."""
    from itertools import combinations

    from thunder_ext.meta_calls import saves_input

    args, bsym, params, names = _traced_op(name, fn, makers)
    floating = [n for n, a in zip(names, args) if a.is_floating_point()]
    for r in range(len(floating) + 1):
        for grads in combinations(floating, r):
            for k, pname in enumerate(names):
                proxy = next((p for p in params if p.name == pname), None)
                if proxy is None or not args[k].is_floating_point():
                    continue
                ins = [(a.detach().requires_grad_() * 1) if n in grads else a.clone() for a, n in zip(args, names)]
                out = fn(*ins)
                ins[k].add_(1)
                raised = False
                if out.requires_grad:
                    try:
                        out.sum().backward()
                    except RuntimeError as e:
                        assert "modified by an inplace operation" in str(e), e
                        raised = True
                assert saves_input(bsym, proxy, frozenset(grads)) == raised, f"{name}: {pname}, grad on {grads}"


# -- zero cotangents ---------------------------------------------------------------------------


def test_known_zeros_and_the_reads_that_matter():
    """Products with zeros and their sums and views are zeros; a read feeding only them matters
    to no result, while the same read also feeding a returned value does."""
    from thunder_ext.zero_cotangents import known_zeros, reads_that_matter

    names = {}

    def fn(x, w):
        z = ltorch.zeros(4, 3, device="cpu", dtype=thunder.dtypes.float32)
        old = ltorch.sub(x, 1.0)  # a backward's read of a saved value
        dead = ltorch.mul(ltorch.sum(ltorch.add(z, z), 0), ltorch.sum(old, 0))  # zero whatever old is
        shifted = ltorch.add(z, 1.0)  # not zero
        kept = ltorch.mul(w, 2.0)
        names.update(z=z.name, old=old.name, dead=dead.name, shifted=shifted.name, kept=kept.name)
        return ltorch.add(ltorch.add(kept, ltorch.unsqueeze(dead, 0)), shifted)

    t = build(fn, x=(4, 3), w=(4, 3))
    zeros = known_zeros(t.bound_symbols)
    assert {names["z"], names["dead"]} <= zeros
    assert not {names["old"], names["shifted"], names["kept"]} & zeros
    needed = reads_that_matter(t.bound_symbols)
    assert names["old"] not in needed and "x" not in needed
    assert {names["kept"], names["shifted"], "w"} <= needed

    t2 = build(lambda x: ltorch.add(ltorch.mul(ltorch.zeros(3, device="cpu", dtype=thunder.dtypes.float32), x), x), x=(3,))
    assert "x" in reads_that_matter(t2.bound_symbols)  # also read by the add


def test_a_choice_between_zeros_is_a_zero_and_a_choice_with_one_is_not():
    """``where(c, 0, zeros)`` is the backward of a functional ``copy_`` on a zero cotangent."""
    from thunder_ext.zero_cotangents import known_zeros

    names = {}

    def fn(x):
        z = ltorch.zeros(4, 3, device="cpu", dtype=thunder.dtypes.float32)
        c = ltorch.gt(x, 0.0)
        both = ltorch.where(c, 0, z)
        one = ltorch.where(c, x, z)
        names.update(both=both.name, one=one.name)
        return ltorch.add(both, one)

    t = build(fn, x=(4, 3))
    zeros = known_zeros(t.bound_symbols)
    assert names["both"] in zeros and names["one"] not in zeros
