"""Writes to inputs as values: one epilogue ``copy_`` per written input, then back in place.

Before autodiff, a write to an input that no gradient flows through becomes its out-of-place
value (:mod:`thunder_ext.functionalize`): every later read sees the new value, and the caller's
tensor gets the final one from one ``copy_`` just before the return.  In the final trace, where
the input's old value dies at the op that first computes its new one, that op writes the input
itself again and the epilogue goes (:func:`thunder_ext.reinplace.reinplace_inputs`), so a
KV-cache slice write stays a slice write.
"""

from __future__ import annotations

import pytest
import thunder
import torch
import torch.nn.functional as F

from support import MATRIX, PLAIN_HAZARD, config_id
from thunder_ext.testing.compare import Config, differential
from thunder_ext.transforms import InplaceBarrierTransform


def kv_cache_step(q, k, v, kc, vc):
    kc[:, 3] = k
    vc[:, 3] = v
    att = torch.softmax(q @ kc.transpose(-1, -2), dim=-1)
    return att @ vc


def read_before_and_after(x, w):
    y = x.sum()
    x.add_(1)
    return y * w + x.sum()


def strided_scale_then_matmul(x, w):
    x[:, ::2].mul_(2)
    return x @ w


def read_then_strided_scale(x, w):
    y = (x * 1) @ w  # saved for backward: x * 1, not x (eager computes this)
    x[:, ::2].mul_(2)
    return y, x @ w


def flat_strided_scale_then_matmul(x, w):
    x.view(-1)[::2].mul_(2)  # the scatter goes through the view: an index of 6 entries, not 12
    return x @ w


def row_of_a_view_written(x, w):
    x.view(2, 6)[1].add_(1.5)
    x.unflatten(1, (2, 2))[:, :, 1] = 0.5  # a slice (key has slice(None) first) of an unflatten
    return x @ w


def power_iteration_step(w, u, v):
    with torch.no_grad():
        v.copy_(w.t() @ u)  # a whole copy: clone(w.t() @ u) as a value, then v itself again
        u.copy_(F.normalize(w @ v, dim=0))
    return (u * (w @ v)).unsqueeze(1) * w


def metric_update_then_compute(pred, target, correct, total):
    loss = F.cross_entropy(pred, target)
    correct.add_((pred.argmax(1) == target).sum())
    total.add_(target.numel())
    return loss, correct / total


def several_writes_and_views(x, w):
    x.mul_(2)
    x[1:].add_(1)
    row = x[0]
    x.clamp_(max=1.5)
    return row * w, x[2]


def returns_written_input(x, w):
    x[0].mul_(3)
    return x, (x * w).sum()


def old_value_read_after(x, w):
    y = x + 1
    z = x * 2  # reads the old x after its new value y was computed
    x.copy_(y)
    return z * w


# Inputs that require no grad, written with values that carry one: the writes are values too,
# and autodiff sees only values (class 5 and class 6 on inputs, answered).
def scaled_by_a_gradient_value(x, w):
    x.mul_(w)  # w's gradient reads x's old value: cloned before the epilogue (thunder_ext.saved_values)
    return (x.t(),)


def view_read_after_a_gradient_write(x, w):
    v = x[0]
    x.copy_(w * 2)
    return v * 3


def slice_add_of_a_gradient_value(x, w):
    v = x[:2]
    v.add_(w[:2])
    return x * 2


def divided_by_a_gradient_value_twice(x, w):
    x.div_(w + 2)  # both backwards read x as it was before each write
    x[1:].div_(w[1:] + 3)
    return x.sum(0), w * 2


_GRADIENT_VALUES = ("scaled_by_a_gradient_value", "view_read_after_a_gradient_write", "slice_add_of_a_gradient_value",
                    "divided_by_a_gradient_value_twice")  # fmt: skip


def _randn(g, *shape, grad=False):
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)


def _build(name):
    def build():
        g = torch.Generator().manual_seed(0)
        if name == "kv_cache_step":
            args = (_randn(g, 2, 1, 4), _randn(g, 2, 4), _randn(g, 2, 4), _randn(g, 2, 6, 4), _randn(g, 2, 6, 4))
        elif name == "metric_update_then_compute":
            pred = _randn(g, 6, 3, grad=True)
            target = torch.randint(0, 3, (6,), generator=g)
            # float32 state: torch.compile (torch 2.11) loses writes into 0-dim float64 CPU inputs,
            # in place or not, plain torch.compile too (docs/limits.md).
            args = (pred, target, torch.zeros(()), torch.zeros(()))
        elif name == "power_iteration_step":
            args = (_randn(g, 4, 3, grad=True), _randn(g, 4), _randn(g, 3))
        elif name == "read_before_and_after":
            args = (_randn(g, 3, 4), _randn(g, 3, grad=True))
        elif name in _GRADIENT_VALUES:
            args = (_randn(g, 3, 4), _randn(g, 3, 4, grad=True))
        elif name in ("strided_scale_then_matmul", "read_then_strided_scale", "flat_strided_scale_then_matmul",
                      "row_of_a_view_written"):
            args = (_randn(g, 3, 4), _randn(g, 4, 2, grad=True))
        else:
            args = (_randn(g, 3, 4), _randn(g, 4, grad=True))
        return PROGRAMS[name], args, {}

    return build


PROGRAMS = {
    f.__name__: f
    for f in (
        kv_cache_step,
        read_before_and_after,
        strided_scale_then_matmul,
        read_then_strided_scale,
        flat_strided_scale_then_matmul,
        row_of_a_view_written,
        metric_update_then_compute,
        power_iteration_step,
        several_writes_and_views,
        returns_written_input,
        old_value_read_after,
        scaled_by_a_gradient_value,
        view_read_after_a_gradient_write,
        slice_add_of_a_gradient_value,
        divided_by_a_gradient_value_twice,
    )
}


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_functional_inputs_match_eager(name, config: Config):
    # Under ThunderFX too where a value that carries a gradient is written into a plain input:
    # Dynamo hands the input back itself, which adopts the write's history (input_histories.py).
    verdict = differential(_build(name), config)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"


def test_a_write_through_a_view_then_a_slice_scatters_with_an_index_of_the_slice():
    """``x.view(-1)[::2]``: the scatter is made on ``x``'s values seen flat, its index the slice's
    6 entries; it was an index over all 12 elements, replayed through the view (twice the bytes
    of ``x`` in int64)."""
    fn, args, _ = _build("flat_strided_scale_then_matmul")()
    jf = thunder.jit(fn, fusion_type="dataflow", transforms=[InplaceBarrierTransform()])
    jf(*args)
    functional = next(t for t in thunder.last_traces(jf) if "functional" in str(t.get_provenance()))
    aranges = [b for b in functional.bound_symbols if b.sym.name == "arange"]
    assert [tuple(b.flat_proxy_outs[0].shape) for b in aranges] == [(6,)], aranges


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_a_write_through_a_view_of_an_input_goes_back_in_place(grad):
    """The scatter on ``x`` seen flat goes back to a slice copy through ``x.view(12)``: no copy
    of ``x``, no index, no epilogue (``reinplace._reshaped_back``)."""
    from thunder_ext import last_reports

    fn, args, _ = _build("flat_strided_scale_then_matmul")()
    args = [a.detach().requires_grad_(a.requires_grad and grad) for a in args]
    expected = [a.detach().clone() for a in args]
    jf = _compile(fn, fusion_type="dataflow")
    torch.testing.assert_close(jf(*args), fn(*expected), rtol=0, atol=0)
    torch.testing.assert_close(args[0], expected[0], rtol=0, atol=0)
    final = thunder.last_traces(jf)[-1]
    names = [b.sym.name for b in final.bound_symbols]
    assert not {"index_copy", "arange", "clone"} & set(names), names
    copies = [b for b in final.bound_symbols if b.sym.name == "copy_"]
    assert [tuple(b.args[1].shape) for b in copies] == [(6,)], [str(b) for b in copies]
    assert last_reports(jf)[0].final_forward.epilogues_reinplaced == 1


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_a_write_through_a_view_of_a_non_contiguous_input_raises_as_eager(grad):
    """Eager's ``x.view(-1)`` raises on a transposed ``x``.  The write back in place goes through
    ``Tensor.view`` for that: through the trace's reshape (a copy here) the write would be lost
    without a word.  Plain Thunder, whose autodiff reads ``view`` as a reshape, loses it under grad."""
    fn, args, _ = _build("flat_strided_scale_then_matmul")()
    x = args[0].detach().t().contiguous().t()  # 3x4, strides (1, 3)
    w = args[1].detach().requires_grad_(grad)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        fn(x.clone(), w)
    jf = _compile(fn, fusion_type="dataflow")
    before = x.clone()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        jf(x, w)
    torch.testing.assert_close(x, before, rtol=0, atol=0)


def test_a_whole_copy_into_an_input_is_one_copy():
    """``v.copy_(s)`` is ``clone(s)`` as a value; on the final trace, the clone writes ``v``
    itself (one ``copy_``, where there were a clone and the epilogue), and what reads the new
    ``v``, the backward's saved tensors included, reads ``v``."""
    from thunder_ext import last_reports

    fn, args, _ = _build("power_iteration_step")()
    expected = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    jf = _compile(fn, fusion_type="dataflow")
    torch.testing.assert_close(jf(*args), fn(*expected), rtol=0, atol=0)
    torch.testing.assert_close(list(args), expected, rtol=0, atol=0)
    final = thunder.last_traces(jf)[-1]
    assert "clone" not in [b.sym.name for b in final.bound_symbols]
    copies = [b for b in final.bound_symbols if b.sym.name == "copy_"]
    assert sorted(b.args[1].name for b in copies) == ["u", "v"], [str(b) for b in copies]
    assert last_reports(jf)[0].final_forward.epilogues_reinplaced >= 1


def test_read_then_strided_scale_was_refused_where_plain_is_right():
    """Evidence for the case above: plain Thunder (default executors) computes it; the transform
    refused it before inputs became values (``SavedTensorMutationError``)."""
    verdict = differential(_build("read_then_strided_scale"), PLAIN_HAZARD)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"


@pytest.mark.parametrize("name", _GRADIENT_VALUES)
def test_gradient_values_into_plain_inputs_were_refused_and_plain_thunder_is_wrong(name):
    """Evidence for the four cases above: plain Thunder gets them wrong or fails, and the
    transform refused them (ViewGradientError, SavedTensorMutationError) while such inputs kept
    their writes in place."""
    verdict = differential(_build(name), PLAIN_HAZARD)
    assert verdict.status in ("wrong", "crash"), f"{verdict.status}: {verdict.detail}"


def test_old_values_the_backward_reads_are_cloned_once_and_reported():
    """``a.mul_(b)`` as a value: ``b``'s gradient reads ``a`` as it was, and the epilogue
    overwrites ``a`` before the backward runs; the fusion stage clones it first, and says so."""
    from thunder_ext import last_reports

    fn, args, _ = _build("scaled_by_a_gradient_value")()
    jf = _compile(fn)
    jf(*args)
    reports = last_reports(jf)[0]
    assert reports.before_autodiff.functional_inputs == ["x"]
    assert reports.fusion_stage.saved_old_values == ["x"]
    fn, args, _ = _build("view_read_after_a_gradient_write")()
    jf = _compile(fn)
    jf(*args)
    assert last_reports(jf)[0].fusion_stage.saved_old_values == []  # nothing saved reads x's old value


def _compile(fn, **kw):
    return thunder.jit(fn, transforms=[InplaceBarrierTransform(check=True)], **kw)


def _kv_args(n=64):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 1, 8, generator=g), torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g),
            torch.zeros(2, n, 8), torch.zeros(2, n, 8))  # fmt: skip


def test_written_inputs_get_one_epilogue_copy_each_before_autodiff():
    """Before autodiff: no write stays mid-trace; each written input has one ``copy_`` whose
    destination is the input, and nothing but the return follows the last of them."""
    from thunder_ext.op_kinds import effect_of, is_return

    jf = _compile(kv_cache_step)
    jf(*_kv_args())
    trace = next(t for t in thunder.last_traces(jf) if "functional" in str(t.get_provenance()))
    writes = [(i, b) for i, b in enumerate(trace.bound_symbols) if effect_of(b).writes]
    dests = sorted(w.name for _, b in writes for w in effect_of(b).writes)
    assert dests == ["kc", "vc"], dests
    last = max(i for i, _ in writes)
    assert all(is_return(b) or b.sym.name == "update_aliases" for b in trace.bound_symbols[last + 1 :])
    from thunder_ext import last_reports

    assert last_reports(jf)[0].before_autodiff.functional_inputs == ["kc", "vc"]


@pytest.mark.parametrize("executors", ["default", "torch_compile"])
def test_kv_cache_slice_write_goes_back_in_place(executors):
    """The final trace writes the cache slice in place: no copy of the whole cache, no epilogue.
    With torch_compile_ex the slice write is kept out of the region for that (inductor_regions.unfuse_epilogue)."""
    from thunder_ext import last_reports

    kw = {}
    if executors == "torch_compile":
        from thunder.executors.torch_compile import torch_compile_ex

        kw["executors"] = [torch_compile_ex]
    jf = _compile(kv_cache_step, **kw)
    args = _kv_args()
    expected_args = [a.clone() for a in args]
    torch.testing.assert_close(jf(*args), kv_cache_step(*expected_args))
    torch.testing.assert_close(list(args), expected_args)
    final = thunder.last_traces(jf)[-1]
    from thunder_ext.checker import flatten_for_check

    names = [b.sym.name for b in flatten_for_check(final.bound_symbols)]  # inside regions too
    assert not {"copy_with_setitem_impl", "copy_with_setitem", "setitem", "index_copy"} & set(names), names
    # Two slice copies, one per cache, and no other copy.
    copies = [b for b in final.bound_symbols if b.sym.name == "copy_"]
    assert [tuple(b.args[1].shape) for b in copies] == [(2, 8), (2, 8)]
    assert last_reports(jf)[0].final_forward.epilogues_reinplaced == 2


def test_old_value_read_after_keeps_the_epilogue():
    """``x``'s old value is read after the op that computes its new one: that op cannot write
    ``x``, so one ``copy_`` into ``x`` stays, after the read (the values are checked against
    eager over MATRIX above).  It is the whole copy's clone written into ``x``, not a clone and
    then the epilogue."""
    jf = _compile(old_value_read_after)
    x, w = torch.arange(12.0).reshape(3, 4), torch.ones(4)
    jf(x, w)
    final = thunder.last_traces(jf)[-1].bound_symbols
    adds = [b for b in final if b.sym.name == "add"]
    assert len(adds) == 1 and "out" not in adds[0].kwargs, [str(b) for b in adds]
    copies = [i for i, b in enumerate(final) if b.sym.name == "copy_"]
    assert [final[i].args[1].name for i in copies] == ["x"], [str(final[i]) for i in copies]
    reads = [i for i, b in enumerate(final) if b.sym.name == "mul" and b.args[0].name == "x"]
    assert reads and max(reads) < copies[0]
    assert "clone" not in [b.sym.name for b in final]


def test_write_into_0dim_float64_cpu_input_is_refused_under_torch_compile():
    """torch.compile loses such a write (plain torch.compile too): refused, never silently wrong."""
    from thunder_ext.errors import LostScalarWriteError
    from thunder_ext.testing.compare import error_in_chain

    def f(x, c):
        c.add_(x.sum())
        return c * 2

    eager_c = torch.zeros((), dtype=torch.float64)
    f(torch.ones(3, dtype=torch.float64), eager_c)
    torch._dynamo.reset()
    lost = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        torch.compile(f)(torch.ones(3, dtype=torch.float64), lost)
    assert lost.item() != eager_c.item(), "torch.compile got it right: the refusal is no longer needed"

    from thunder.executors.torch_compile import torch_compile_ex

    jf = _compile(f, executors=[torch_compile_ex])
    with pytest.raises(Exception) as e:
        jf(torch.ones(3, dtype=torch.float64), torch.zeros((), dtype=torch.float64))
    assert error_in_chain(e.value, LostScalarWriteError) is not None


def kv_cache_index_copy_step(q, k, v, kc, vc, pos):
    kc.index_copy_(1, pos, k.unsqueeze(1))  # the write of Hugging Face's static cache
    vc.index_copy_(1, pos, v.unsqueeze(1))
    return torch.softmax(q @ kc.transpose(-1, -2), dim=-1) @ vc


@pytest.mark.parametrize("fusion_type", ["dataflow", "consecutive"])
@pytest.mark.parametrize("executors", ["default", "torch_compile"])
def test_kv_cache_index_copy_goes_back_in_place(executors, fusion_type):
    """``kc.index_copy_(1, pos, k)`` with a tensor index: the final trace runs ``index_copy`` with
    ``out=kc``, no region copies a whole cache, no epilogue.  torch_compile_ex fuses the torch
    executor's index_copy, so the dying write runs as the transform's own eager symbol there
    (inductor_regions.eager_scatter), made the torch executor's again on the final trace."""
    from thunder_ext import last_reports
    from thunder_ext.checker import flatten_for_check

    kw = {} if fusion_type == "consecutive" else {"fusion_type": "dataflow"}
    if executors == "torch_compile":
        from thunder.executors.torch_compile import torch_compile_ex

        kw["executors"] = [torch_compile_ex]
    jf = _compile(kv_cache_index_copy_step, **kw)
    args = (*_kv_args(), torch.tensor([5]))
    expected_args = [a.clone() for a in args]
    torch.testing.assert_close(jf(*args), kv_cache_index_copy_step(*expected_args))
    torch.testing.assert_close(list(args), expected_args)
    final = thunder.last_traces(jf)[-1]
    writes = [b for b in flatten_for_check(final.bound_symbols) if b.sym.name == "index_copy"]
    assert len(writes) == 2 and all(b.kwargs.get("out") is not None and b.kwargs["out"].name == b.args[0].name for b in writes), [str(b) for b in writes]
    assert not [b for b in final.bound_symbols if b.sym.name == "copy_"]
    assert last_reports(jf)[0].final_forward.epilogues_reinplaced == 2


def einsum_then_write(a, w):
    s = torch.einsum("ij,kj->ik", a, w)  # eager's bmm saves a view of ``a`` for ``w``'s gradient
    a.add_(1)
    return s


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
def test_a_write_after_a_composite_that_saves_the_input_is_refused_as_eager(config):
    """Eager's ``einsum`` is a chain of views into ``bmm``, which saves a view of ``a``: after
    ``a.add_(1)`` eager's backward raises.  The probe of what eager saves once lost track of its
    walk through that chain (a dropped autograd node's ``id`` came back for the next one), said
    ``a`` is not saved, made the write a value, and the call returned numbers eager refuses."""
    from thunder_ext import SavedTensorMutationError
    from thunder_ext.testing.compare import error_in_chain

    def build(grad):
        def make():
            g = torch.Generator().manual_seed(0)
            return einsum_then_write, (torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g).requires_grad_(grad)), {}

        return make

    refused = differential(build(True), config)
    assert refused.status == "refused" and error_in_chain(refused.outcome.error, SavedTensorMutationError), refused.detail
    answered = differential(build(False), config)
    assert answered.status == "correct", answered.detail


def bf16_cache_written_then_read_as_float(q, k, kc):
    kc[:, 3] = k.to(kc.dtype)  # a bf16 cache, written in part
    scores = q @ kc.to(torch.float32).transpose(-1, -2)  # another dtype: a copy, never kc itself
    kc[:, 4] = (k * 2).to(kc.dtype)  # written again after the cast was read
    return scores.softmax(-1)


def old_view_cast_after_its_base_is_written(a, b):
    v = b[::2]
    b.add_(a)
    w = v.to(torch.float64)  # another dtype: a copy of v's new value
    v.mul_(2)
    return (a * 2, w)


def test_a_cast_to_another_dtype_is_a_copy_and_the_input_stays_functional():
    """``to`` is among Thunder's ops that may return their input, so a cast of written storage
    used to be read as an alias the pass cannot express: the input fell back to in-place writes and
    barriers.  A ``to`` that changes dtype or device always copies, so the input is now written as a
    value with one epilogue ``copy_``, no barrier, and eager's results."""
    from thunder_ext import last_reports

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 1, 8, generator=g), torch.randn(2, 8, generator=g), torch.zeros(2, 16, 8, dtype=torch.bfloat16))
    expected_kc = args[2].clone()
    expected = bf16_cache_written_then_read_as_float(args[0], args[1], expected_kc)
    for fusion_type in ("consecutive", "dataflow"):
        kc = args[2].clone()
        jf = _compile(bf16_cache_written_then_read_as_float, fusion_type=fusion_type)
        torch.testing.assert_close(jf(args[0], args[1], kc), expected, rtol=0, atol=0)
        assert torch.equal(kc, expected_kc)
        report = last_reports(jf)[0].before_autodiff
        assert report.functional_inputs == ["kc"] and not report.kept_inputs, report


def test_a_cast_of_an_old_view_after_its_base_is_written_is_answered():
    """Was class 5 (``ViewGradientError``) with grad, plain Thunder wrong or crashing: the cast was
    taken for a possible alias of ``b``, so ``b`` stayed in place and the read of ``v`` after the
    write was refused.  Every cell is eager's now, under ThunderFX too (``b`` adopts the
    write's history after the call)."""
    from dataclasses import replace

    from thunder_ext.testing.fuzzing import judge_function

    make = lambda g: (torch.randn(4, 3).requires_grad_(g), torch.randn(4, 3))  # noqa: E731
    configs = [Config(fusion_type=f, executors=e, check=True) for f in ("consecutive", "dataflow") for e in ("default", "torch_compile")]
    cells = judge_function(old_view_cast_after_its_base_is_written, make, configs=configs).cells
    assert cells and all(c.status == "correct" for c in cells), "\n".join(map(str, cells))
    fx = judge_function(old_view_cast_after_its_base_is_written, make, configs=[replace(c, entry="thunderfx") for c in configs]).cells
    assert fx and all(c.status == "correct" for c in fx), "\n".join(map(str, fx))
