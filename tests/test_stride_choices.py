"""Ops that are a view or a copy by strides, read after a later write with grad: both answers
computed, the caller's strides choosing at run time (:mod:`thunder_ext.stride_choices`).

Each program is compared with eager on inputs of two layouts, one where the op is a view and one
where it copies, through every cell of the matrix (under ThunderFX, with grad, the refusal its
input write gets in any case).  Where eager's gradient structure differs
between the two (an output requires grad for one layout only), the layout the compiled program
cannot match is refused when a call brings it, in words that name the op.
"""

from __future__ import annotations

import operator

import pytest
import torch

from support import MATRIX, config_id
from thunder_ext import StrideDependentViewError, last_reports
from thunder_ext.stride_choices import _is_view_at_run_time
from thunder_ext.testing.compare import Builder, _assert_same, clone_args, compile_fn, differential, error_in_chain, execute

JIT = tuple(c for c in MATRIX if c.entry == "jit")
# Under ThunderFX these programs write a plain input with a value that carries a gradient, which
# is refused there for its own reason (Dynamo hands the caller its tensor back without history).
THUNDERFX = tuple(c for c in MATRIX if c.entry == "thunderfx")


def _contiguous(grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, requires_grad=grad), torch.randn(4, 3)


def _transposed(grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, requires_grad=grad), torch.randn(3, 4).t()


LAYOUTS = {"contiguous": _contiguous, "transposed": _transposed}


def reshape_read_with_its_source(a, v):
    w = v.reshape(-1)  # a view of v where v is contiguous, a copy otherwise
    v.add_(a)  # v's storage carries a's gradient from here
    return w * a.view(-1), v


def reshape_of_a_view_of_the_input(a, b):
    v = b[1:]  # contiguous where b is: the chain from b is made again at run time
    w = v.reshape(-1)
    v.add_(a[1:])
    return w * a[1:].flatten(), b


def contiguous_read_after_its_source_is_written(a, b):
    t = b.contiguous()  # b itself where b is contiguous
    b.add_(a)
    return t * a, b


def reshape_of_a_pointwise_result_then_written(a, b):
    t = b * 2  # private, laid out as b in eager: the flag makes it again on meta tensors
    w = t.reshape(-1)
    t.add_(a)
    return w * a.view(-1), t


def reshape_of_a_sum_of_two_layouts_then_written(a, b):
    t = (b + a).sin()  # eager lays b + a out by the strides of both
    w = t.transpose(0, 1).reshape(-1)  # a view where t is laid out as a transpose
    t.mul_(a)
    return w * 2, t.sum(0)


def contiguous_written_with_a_gradient_then_its_source(a, b):  # soak seed 112000
    t0 = b.contiguous()  # b itself where b is contiguous: b then carries a's gradient, else none
    t0.copy_(a)
    b.tanh_()
    return (t0,)


# These write the input ``b`` with a value that carries ``a``'s gradient (the last one for the
# view's layout only: the caller's ``b`` adopts the history only where the strides give a view).
WRITE_THE_INPUT = [
    reshape_read_with_its_source,
    reshape_of_a_view_of_the_input,
    contiguous_read_after_its_source_is_written,
    contiguous_written_with_a_gradient_then_its_source,
]
# These write private storage only.
WRITE_PRIVATE = [reshape_of_a_pointwise_result_then_written, reshape_of_a_sum_of_two_layouts_then_written]
# Every answer's outputs and new input values depend on ``a``: both layouts are eager's.
EXACT = [*WRITE_THE_INPUT, *WRITE_PRIVATE]


def reshape_written_after_its_source(a, c):  # soak seed 84002
    t0 = c.reshape(-1)
    c[1:] = a.sum(0)
    t0[1:] = 1.5
    return t0 * 1, c


def contiguous_written_after_its_source(a, b):  # soak seed 84002
    t1 = b.contiguous()
    b.copy_(a)
    t1[1:] = 0.5
    return t1 * 1, b


def _build(fn, make, grad: bool) -> Builder:
    return lambda: (fn, list(make(grad)), {})


def _assert_eager(fn, make, config, grad: bool) -> None:
    v = differential(_build(fn, make, grad), config)
    assert v.status == "correct", v.detail


@pytest.mark.parametrize("config", JIT, ids=config_id)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fn", EXACT, ids=lambda f: f.__name__)
def test_both_layouts_are_eager_s(fn, layout, config):
    """Both answers depend on the same inputs that require grad: every layout is answered, by
    both answers chosen at run time (the report says so)."""
    _assert_eager(fn, LAYOUTS[layout], config, False)
    v = differential(_build(fn, LAYOUTS[layout], True), config)
    assert v.status == "correct", v.detail
    report = last_reports(v.outcome.compiled)[0].before_autodiff
    assert report.stride_choices is not None and report.stride_choices.worlds == 2
    assert not report.stride_choices.refused_at_run_time


@pytest.mark.parametrize("fn", EXACT, ids=lambda f: f.__name__)
def test_one_compiled_function_answers_each_layout_of_its_calls(fn):
    """The choice is made at each call, from that call's strides: Thunder's cache does not look at
    strides, so the first layout compiled must not fix the answer for the second."""
    config = MATRIX[0]
    compiled = compile_fn(fn, config)
    for make in (_contiguous, _transposed, _contiguous):
        torch.manual_seed(0)
        args = make(True)
        expected = execute(fn, clone_args(args), {})
        got = execute(compiled, clone_args(args), {})
        assert got.error is None, got.error
        _assert_same(got, expected)
    # The two layouts give different numbers in eager, so the test tells the answers apart.
    torch.manual_seed(0)
    first = execute(fn, clone_args(_contiguous(True)), {})
    torch.manual_seed(0)
    second = execute(fn, clone_args(_transposed(True)), {})
    assert not all(torch.equal(x, y) for x, y in zip(first.outputs, second.outputs))


@pytest.mark.parametrize("config", JIT, ids=config_id)
@pytest.mark.parametrize("fn", [reshape_written_after_its_source, contiguous_written_after_its_source], ids=lambda f: f.__name__)
def test_the_soak_s_programs_are_answered_where_plain_thunder_matched(fn, config):
    """Soak seed 84002's needless refusals: on contiguous inputs, as the soak drew them, eager's
    answer is the view, and the program is answered with and without grad."""
    for grad in (False, True):
        _assert_eager(fn, _contiguous, config, grad)


@pytest.mark.parametrize("config", THUNDERFX, ids=config_id)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fn", WRITE_PRIVATE, ids=lambda f: f.__name__)
def test_under_thunderfx_private_storage_is_chosen_at_run_time_too(fn, layout, config):
    """Where the write goes to private storage, no input is written, and ThunderFX answers each
    layout as ``thunder.jit`` does."""
    _assert_eager(fn, LAYOUTS[layout], config, False)
    _assert_eager(fn, LAYOUTS[layout], config, True)


@pytest.mark.parametrize("config", THUNDERFX, ids=config_id)
@pytest.mark.parametrize(
    "fn", [*WRITE_THE_INPUT, reshape_written_after_its_source, contiguous_written_after_its_source], ids=lambda f: f.__name__
)
def test_under_thunderfx_a_gradient_written_into_a_plain_input_is_adopted(fn, config):
    """Under ThunderFX, Dynamo hands the caller its own plain input, written with a value that
    carries a gradient: with both answers written out, its write-back ``copy_`` now records the
    value whose history the caller's tensor adopts (it was refused, ``ViewGradientError``).  With
    and without grad, each is eager's, also for a loss read from the input after the call."""
    _assert_eager(fn, _contiguous, config, False)
    _assert_eager(fn, _contiguous, config, True)


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_input_takes_a_history_only_for_the_layout_that_gives_it_one(layout, config):
    """Soak seed 112000's needless refusal: eager's ``b`` gets ``a``'s history where ``contiguous``
    is ``b`` itself and none where it copies, and the copy's strides were refused at the call.
    The caller's ``b`` now adopts the history only where the strides give the view: each layout
    is eager's through both entries, also in whether ``b`` requires grad after the call, and the
    report says which input and answer."""
    fn = contiguous_written_with_a_gradient_then_its_source
    v = differential(_build(fn, LAYOUTS[layout], True), config)
    assert v.status == "correct", v.detail
    report = last_reports(v.outcome.compiled)[0].before_autodiff
    assert report.stride_choices is not None and not report.stride_choices.refused_at_run_time
    [(name, spec)] = report.stride_choices.histories_by_answer.items()
    assert name in ("b", "l_b_") and spec[-1] is True  # the view answer carries the gradient
    assert f"input `{name}` takes its new value's gradient history only where the strides make it a view" in str(
        last_reports(v.outcome.compiled)[0]
    )


@pytest.mark.parametrize("config", JIT, ids=config_id)
@pytest.mark.parametrize("fn", [reshape_written_after_its_source, contiguous_written_after_its_source], ids=lambda f: f.__name__)
def test_a_layout_whose_gradients_differ_is_refused_at_the_call(fn, config):
    """For a copy, eager's first output does not depend on ``a`` (it does not require grad); for a
    view it does.  A compiled function fixes its outputs' ``requires_grad``, so the copy's layout
    is refused when a call brings it, naming the op; without grad there is nothing to refuse."""
    _assert_eager(fn, _transposed, config, False)
    v = differential(_build(fn, _transposed, True), config)
    error = error_in_chain(v.outcome.error, StrideDependentViewError)
    assert v.status == "refused" and error is not None, v.detail
    assert "for the strides of this call it is a copy" in str(error), str(error)
    assert "reshape" in str(error) or "contiguous" in str(error), str(error)


def reshape_written_after_its_base_got_a_gradient(a, c):  # soak seed 94000, shortened
    t1 = c.reshape(3, 4)  # a view of c where c is contiguous, a copy otherwise
    c.copy_(a)  # c's storage carries a's gradient from here
    t1.div_(0.5)  # through the view, eager raises ("a leaf Variable that requires grad ...")
    return t1 * 1, c


@pytest.mark.parametrize("config", JIT, ids=config_id)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_write_eager_raises_on_only_for_a_view_is_refused_at_the_call(layout, config):
    """Was a missed refusal (soak seed 94000: numbers where eager raises): eager refuses the write
    through ``t1`` where ``reshape`` returned a view made before ``c`` got ``a``'s gradient, and
    computes where it copied.  The choice is made at the call: the view's strides are refused
    there, naming the ops, and the copy's are eager's."""
    _assert_eager(reshape_written_after_its_base_got_a_gradient, LAYOUTS[layout], config, False)
    v = differential(_build(reshape_written_after_its_base_got_a_gradient, LAYOUTS[layout], True), config)
    if layout == "transposed":
        assert v.status == "correct", v.detail
        return
    assert "a leaf Variable that requires grad" in str(v.eager_error), v.eager_error
    error = error_in_chain(v.outcome.error, StrideDependentViewError)
    assert v.status == "refused" and error is not None, v.detail
    assert "for the strides of this call it is a view, and eager raises" in str(error), str(error)
    assert "reshape" in str(error) and "div_" in str(error), str(error)


def contiguous_written_after_its_base_got_a_gradient(a, c):
    t1 = c.contiguous()  # c itself where c is contiguous: a write to it is a write to c
    c.copy_(a)
    t1.div_(0.5)
    return t1 * 1, c


@pytest.mark.parametrize("config", JIT, ids=config_id)
def test_a_write_through_contiguous_which_may_be_the_tensor_itself_is_answered(config):
    """``contiguous`` returns ``c`` itself, no view, where ``c`` is contiguous: eager accepts the
    write there, and so does the transform."""
    _assert_eager(contiguous_written_after_its_base_got_a_gradient, _contiguous, config, True)


def contiguous_of_a_matmul_then_written(a, c):  # soak seed 97000, shortened
    t1 = a @ a.t()  # laid out contiguously, whatever a's strides
    t3 = t1.contiguous()  # t1 itself
    t1.add_(1.5)
    t1[0] = -0.5
    return t3[:, :3] * c, t1


def reshape_of_a_transposed_matmul_then_written(a, c):
    v = (a.t() @ a).t()  # a transpose of a contiguous result
    r = v.reshape(-1)  # a copy, whatever a's strides
    v.mul_(2)
    return r * 2, v * c[:3, :3]


@pytest.mark.parametrize("config", JIT, ids=config_id)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fn", [contiguous_of_a_matmul_then_written, reshape_of_a_transposed_matmul_then_written], ids=lambda f: f.__name__)
def test_an_op_on_a_matmuls_result_is_answered_when_compiled(fn, layout, config):
    """Was a needless StrideDependentViewError (soak seed 97000, grad; plain Thunder right): a
    matmul's result is laid out contiguously whatever the inputs' strides, so the answer (a view,
    or a copy) is known when the function is compiled: one program, no flag."""
    _assert_eager(fn, LAYOUTS[layout], config, False)
    v = differential(_build(fn, LAYOUTS[layout], True), config)
    assert v.status == "correct", v.detail
    choices = last_reports(v.outcome.compiled)[0].before_autodiff.stride_choices
    assert choices is not None and choices.worlds == 1 and not choices.flags, choices


def contiguous_of_a_mean_then_written(a, b):  # soak seed 98000, shortened
    t0 = (a * b).mean(0)  # laid out contiguously, whatever b's strides
    t1 = t0.contiguous()  # t0 itself
    t0.sub_(-0.5)
    t0[1:] = 1.5
    return t1 * 2, t0


def reshape_of_a_kept_dim_sum_then_written(a, b):
    t = (a + b).sum(1, keepdim=True).t()  # a transpose of a contiguous (4, 1) result
    w = t.reshape(2, 2)  # a view, whatever b's strides
    t.mul_(a[:, :1].t())
    return w * 2, t


@pytest.mark.parametrize("config", JIT, ids=config_id)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fn", [contiguous_of_a_mean_then_written, reshape_of_a_kept_dim_sum_then_written], ids=lambda f: f.__name__)
def test_an_op_on_a_reductions_result_is_answered_when_compiled(fn, layout, config):
    """Was a needless StrideDependentViewError (soak seed 98000, grad; plain Thunder right): a
    reduction's result is laid out contiguously whatever its input's strides, as a matmul's is."""
    _assert_eager(fn, LAYOUTS[layout], config, False)
    v = differential(_build(fn, LAYOUTS[layout], True), config)
    assert v.status == "correct", v.detail
    choices = last_reports(v.outcome.compiled)[0].before_autodiff.stride_choices
    assert choices is not None and choices.worlds == 1 and not choices.flags, choices


def _reductions() -> list[str]:
    """ATen's ops tagged ``reduction`` that torch exposes as functions."""
    names = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        overloads = packet.overloads() if isinstance(packet, torch._ops.OpOverloadPacket) else []
        if overloads and torch.Tag.reduction in getattr(packet, overloads[0]).tags and hasattr(torch, name):
            names.append(name)
    return sorted(names)


def test_every_reduction_lays_its_result_out_contiguously():
    """The rule the recipe relies on, checked against eager on a permuted input, with and without
    kept dimensions, for every ATen reduction torch exposes."""
    from thunder_ext.stride_choices import _is_contiguous_result

    x = torch.randn(2, 3, 4, 5).permute(3, 1, 0, 2)
    seen = 0
    for name in _reductions():
        assert _is_contiguous_result(name), name
        for kwargs in ({}, {"dim": 1}, {"dim": 1, "keepdim": True}, {"dim": (0, 2)}, {"dim": (0, 2), "keepdim": True}):
            try:
                out = getattr(torch, name)(x, **kwargs)
            except (TypeError, RuntimeError):
                continue  # no such overload
            for t in out if isinstance(out, tuple) else (out,):
                seen += 1
                assert t.is_contiguous(), (name, kwargs, t.stride())
    assert seen > 40, seen


def _eager_is_view(t: torch.Tensor, kind: str, shape: tuple) -> bool:
    out = t.contiguous() if kind == "contiguous" else t.reshape(shape)
    return out is t if kind == "contiguous" else out.data_ptr() == t.data_ptr() and out._base is not None


def _recipe(*steps) -> tuple:
    """A recipe on the roots 0, 1, ...: each step ``(torch function's dotted name, arguments)``
    takes the values whose numbers ``refs`` gives (``None`` marks their places among the arguments)."""
    out, n = [], 0
    for step in steps:
        if isinstance(step, int):
            out.append((None, (step,), (), ()))
            continue
        sym_id, args, refs = step
        out.append((sym_id, args, (), refs))
    return tuple(out)


def _replay(roots, recipe) -> torch.Tensor:
    """The recipe run on the real tensors, as eager runs it."""
    values = []
    for sym_id, args, kwargs, refs in recipe:
        if sym_id is None:
            values.append(roots[args[0]])
            continue
        fn = torch if sym_id.startswith("torch.") else operator
        for part in sym_id.split(".")[1:]:
            fn = getattr(fn, part)
        args = list(args)
        for i, k in refs:
            args[i] = values[k]
        values.append(fn(*args, **dict(kwargs)))
    return values[-1]


_GETITEM = "torch.Tensor.__getitem__"


@pytest.mark.parametrize(
    "roots, recipe",
    [
        ((torch.randn(4, 6),), _recipe(0)),
        ((torch.randn(6, 4).t(),), _recipe(0)),
        ((torch.randn(4, 6),), _recipe(0, (_GETITEM, (None, (slice(None), slice(None, None, 2))), ((0, 0),)))),
        ((torch.randn(4, 6),), _recipe(0, (_GETITEM, (None, (slice(1, 3),)), ((0, 0),)))),
        ((torch.randn(4, 6),), _recipe(0, ("torch.transpose", (None, 0, 1), ((0, 0),)), (_GETITEM, (None, (slice(None, 3),)), ((0, 1),)))),
        ((torch.randn(2, 3, 4),), _recipe(0, ("torch.permute", (None, (2, 0, 1)), ((0, 0),)))),
        ((torch.randn(4, 6),), _recipe(0, ("torch.diagonal", (None, 0, 0, 1), ((0, 0),)))),
        ((torch.randn(6, 4).t(),), _recipe(0, ("torch.sub", (None, None), ((0, 0), (1, 0))))),
        ((torch.randn(4, 6), torch.randn(6, 4).t()), _recipe(0, 1, ("torch.add", (None, None), ((0, 0), (1, 1))))),
        ((torch.randn(6, 4).t(), torch.randn(4, 6)), _recipe(0, 1, ("torch.add", (None, None), ((0, 0), (1, 1))))),
        ((torch.randn(6, 4).t(), torch.randn(6)), _recipe(0, 1, ("torch.mul", (None, None), ((0, 0), (1, 1))))),
        ((torch.randn(6, 4).t(),), _recipe(0, ("torch.zeros_like", (None,), ((0, 0),)))),
        ((torch.randn(6, 4).t(),), _recipe(0, ("torch.nn.functional.silu", (None, False), ((0, 0),)), ("torch.t", (None,), ((0, 1),)))),
        ((torch.randn(6, 4),), _recipe(0, ("torch.split", (None, 2), ((0, 0),)), ("operator.getitem", (None, 1), ((0, 1),)))),
        ((torch.randn(4, 6).t(),), _recipe(0, ("torch.split", (None, 2), ((0, 0),)), ("operator.getitem", (None, 1), ((0, 1),)))),
        ((torch.randn(6, 4),), _recipe(0, ("torch.chunk", (None, 2, 1), ((0, 0),)), ("operator.getitem", (None, 0), ((0, 1),)))),
    ],
    ids=[
        "contiguous", "transposed", "strided-columns", "rows", "transposed-rows", "permuted", "diagonal",
        "pointwise-of-a-transpose", "sum-contiguous-first", "sum-transposed-first", "broadcast", "like-factory",
        "silu-then-t", "split-rows", "split-rows-of-a-transpose", "chunk-columns",
    ],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["reshape", "contiguous"])
def test_the_run_time_flag_is_eager_s_own_choice(roots, recipe, kind):
    """The flag makes the recipe again on meta tensors laid out as the inputs, and asks what
    eager's op would do: checked against the op itself on the real tensors, on layouts where it
    is a view and where it copies."""
    t = _replay(roots, recipe)
    shape = (t.numel(),)
    flag = _is_view_at_run_time(roots, recipe, kind, shape, (2,))
    assert flag.shape == (2,) and flag.dtype == torch.bool
    assert bool(flag[0]) == _eager_is_view(t, kind, shape)


def reshape_of_the_input_after_a_write_to_it(a, c):
    w = c.mul_(2).reshape(-1)  # the in-place op's output is c itself
    c.add_(a)
    return w * a.view(-1), c


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_in_place_op_s_output_is_its_input_for_the_choice(layout):
    config = JIT[0]
    v = differential(_build(reshape_of_the_input_after_a_write_to_it, LAYOUTS[layout], True), config)
    assert v.status == "correct", v.detail
    assert last_reports(v.outcome.compiled)[0].before_autodiff.stride_choices is not None


def reshape_read_under_no_grad_after_its_source_is_written(a, v):
    w = v.reshape(-1)
    v.add_(a)
    with torch.no_grad():
        o = w * 2  # no gradient in either answer
    return o, v


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_read_under_no_grad_depends_on_nothing_in_either_answer(layout):
    """Whether ``w`` depends on ``a`` differs by strides, but ``o`` is computed under no-grad, so
    no answer's output requires grad: both layouts are answered, none refused at the call."""
    config = JIT[0]
    v = differential(_build(reshape_read_under_no_grad_after_its_source_is_written, LAYOUTS[layout], True), config)
    assert v.status == "correct", v.detail
    choices = last_reports(v.outcome.compiled)[0].before_autodiff.stride_choices
    assert choices is not None and not choices.refused_at_run_time
