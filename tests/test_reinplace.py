"""Re-inplacing after fusion (:mod:`thunder_ext.reinplace`) and what it saves.

* programs whose final traces get reinplaced ops match eager PyTorch (outputs, final inputs,
  gradients), with inputs requiring grad and without, and the pass's output trace gives
  bit-for-bit the numbers of its input trace;
* the pass leaves an op alone when its buffer is an input, a view of an input, returned,
  read later (itself or through a view), or saved for backward;
* ``relu_`` on a matmul output: the final trace's memory estimate is not above plain
  Thunder's, and below the same trace before re-inplacing;
* an in-place activation rewritten out of place keeps its own symbol (silu's backward saves
  its input, not the exp and reciprocal of its decomposition).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import thunder
from torch.utils._pytree import tree_flatten

from thunder_ext.reinplace import is_inplace_form, reinplace
from thunder_ext.testing.compare import Config, clone_args, compile_fn, differential, execute
from thunder_ext.testing.gallery import relu_on_matmul, residual
from thunder_ext.testing.gallery import by_name

DATAFLOW = Config(transform=True, fusion_type="dataflow", executors="default", entry="jit", check=True)


def _t(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


# -- programs that get reinplaced ops -------------------------------------------------------------


def activation_chain(x, w1, w2, w3):
    h = torch.nn.ReLU(inplace=True)(x @ w1)
    h = torch.nn.SiLU(inplace=True)(h @ w2)
    h = torch.nn.LeakyReLU(0.2, inplace=True)(h @ w3)
    h = torch.nn.Hardtanh(-0.5, 0.5, inplace=True)(h * 3)
    return h.exp() + 1


def pointwise_chain(a, b):
    y = a @ b
    y.mul_(2).add_(1)
    y = y.exp()
    return torch.where(y > 2, y, torch.zeros_like(y))


def _build(fn, *shapes):
    def build(grad: bool):
        def make():
            torch.manual_seed(0)
            return fn, tuple(_t(*s, grad=grad) for s in shapes), {}

        return make

    return build


POSITIVE = {
    "relu_on_matmul": _build(relu_on_matmul, (6, 4), (4, 5)),
    "residual": _build(residual, (6, 4), (4, 4)),
    "activation_chain": _build(activation_chain, (5, 4), (4, 6), (6, 6), (6, 3)),
    "pointwise_chain": _build(pointwise_chain, (6, 4), (4, 5)),
}


def _gallery(name):
    prog = by_name(name)

    def build(grad: bool):
        def make():
            torch.manual_seed(0)
            fn, args, state = prog.build()
            if not grad:
                args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
            return fn, args, state

        return make

    return build


for _name in ("view_after_write", "setitem_on_view", "mlp_inplace_activations", "groupnorm_silu_block"):
    POSITIVE[_name] = _gallery(_name)


def _final_traces(compiled) -> list:
    fw = thunder.last_traces(compiled)
    bw = thunder.last_backward_traces(compiled)
    return [fw[-1]] + ([bw[-1]] if bw else [])


def _reinplaced(traces) -> list:
    return [b for t in traces for b in t.bound_symbols if is_inplace_form(b)]


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_reinplaced_programs_match_eager(name, grad):
    build = POSITIVE[name](grad)
    verdict = differential(build, DATAFLOW)
    assert verdict.status == "correct", verdict.detail
    # The test is about the pass: it must have rewritten something here (with grad, relu's
    # backward keeps the matmul output, so relu_on_matmul has nothing to reinplace).
    if not (grad and name == "relu_on_matmul"):
        assert _reinplaced(_final_traces(verdict.outcome.compiled)), "nothing was reinplaced"


def _unpacked_inputs(trace) -> set[str]:
    """Names a trace receives: its arguments and what its unpacking bsyms make of them."""
    from thunder.core.prims import PrimIDs
    from thunder.core.proxies import TensorProxy

    names = {p.name for p in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(p, TensorProxy)}
    for b in trace.bound_symbols:
        if b.sym.id in (PrimIDs.UNPACK_TRIVIAL, PrimIDs.UNPACK_SEQUENCE):
            names.update(p.name for p in b.flat_proxy_outs if isinstance(p, TensorProxy))
    return names


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_written_buffers_are_private_and_dead(name, grad):
    """An independent check of the final traces: every buffer an in-place form writes is made by
    the trace itself (no input, saved tensor or cotangent) and read by nothing after the write."""
    from thunder.core.prims import PrimIDs

    from thunder_ext.reinplace import runtime_aliases

    fn, args, state = POSITIVE[name](grad)()
    jfn = compile_fn(fn, DATAFLOW)
    execute(jfn, clone_args(args), state)
    for trace in _final_traces(jfn):
        inputs = _unpacked_inputs(trace)
        bsyms = trace.bound_symbols
        for i, b in enumerate(bsyms):
            if not is_inplace_form(b):
                continue
            ((_, buf),) = runtime_aliases(b)
            assert buf.name not in inputs, f"{b} writes a trace input"
            later = [c for c in bsyms[i + 1 :] if c.sym.id != PrimIDs.DEL]
            assert not any(buf.name in {p.name for p in c.flat_proxy_args} for c in later), f"{buf.name} read after {b}"


def _pass_input_and_output(compiled):
    """(input, output) of the reinplace pass, for the forward and backward traces it rewrote."""
    from thunder_ext import last_reports

    pairs = []
    (rep,) = last_reports(compiled)
    for traces, removal in (
        (thunder.last_traces(compiled), rep.final_forward),
        (thunder.last_backward_traces(compiled) or [], rep.final_backward),
    ):
        # The hook records one trace (after barrier removal and copy folding); the reinplace
        # pass's own output is the trace the removal started from.
        out = removal.trace_with_barriers if removal is not None else None
        if out is None or "thunder_ext reinplace" not in str(out.get_provenance()):
            continue
        hook = max(k for k, t in enumerate(traces) if "thunder_ext" in str(t.get_provenance()))
        pairs.append((traces[hook - 1], out))
    return pairs


@pytest.mark.parametrize("name", ["relu_on_matmul", "activation_chain", "pointwise_chain", "view_after_write"])
def test_reinplaced_trace_gives_the_same_bits(name):
    """Run the pass's input and output forward traces on the same inputs: identical results."""
    fn, args, state = POSITIVE[name](False)()
    jfn = compile_fn(fn, DATAFLOW)
    execute(jfn, clone_args(args), state)
    pairs = _pass_input_and_output(jfn)
    assert pairs, "the pass rewrote no trace"
    before, after = pairs[0]
    got_before = before.python_callable()(*clone_args(args))
    got_after = after.python_callable()(*clone_args(args))
    flat_b = [t for t in tree_flatten(got_before)[0] if isinstance(t, torch.Tensor)]
    flat_a = [t for t in tree_flatten(got_after)[0] if isinstance(t, torch.Tensor)]
    assert len(flat_a) == len(flat_b)
    for x, y in zip(flat_a, flat_b):
        assert torch.equal(x, y)


def test_pass_leaves_its_input_trace_untouched():
    fn, args, state = POSITIVE["pointwise_chain"](False)()
    jfn = compile_fn(fn, DATAFLOW)
    execute(jfn, clone_args(args), state)
    before, after = _pass_input_and_output(jfn)[0]
    assert not _reinplaced([before]) and _reinplaced([after])
    again, rewritten = reinplace(after)  # nothing left to do: the very same trace back
    assert again is after and rewritten == []


def test_scatter_into_dying_buffer_needs_no_index():
    """A write through a slice of a private buffer: the scatter writes into the buffer, as a slice
    copy, and its ``arange`` index is gone."""
    fn, args, state = POSITIVE["view_after_write"](False)()
    jfn = compile_fn(fn, DATAFLOW)
    execute(jfn, clone_args(args), state)
    before, after = _pass_input_and_output(jfn)[0]
    names = lambda t: [b.sym.name for b in t.bound_symbols]  # noqa: E731
    assert "arange" in names(before) and "index_copy" in names(before)
    assert "arange" not in names(after) and "index_copy" not in names(after) and "copy_" in names(after)


class _LaterHook(thunder.Transform):
    """A transform after ours that may still rewrite the final trace."""

    def transform_trace_post_optimization(self, computation_trace, **kwargs):
        return computation_trace


def test_no_reinplacing_when_a_later_transform_rewrites_final_traces():
    fn, args, state = POSITIVE["pointwise_chain"](False)()
    jfn = compile_fn(fn, DATAFLOW, transforms_extra=[_LaterHook()])
    got = execute(jfn, clone_args(args), state)
    assert got.error is None
    assert not _reinplaced(_final_traces(jfn))


# -- where the pass must not write ---------------------------------------------------------------


def exp_of_input(x):
    return torch.exp(x) * 2


def exp_of_input_view(x):
    return torch.exp(x[1:]) * 2


def exp_of_returned(a, b):
    y = a @ b
    return y, torch.exp(y)


def exp_then_read_buffer(a, b):
    y = a @ b
    z = torch.exp(y)
    return z + y  # y is read after exp


def exp_then_read_view(a, b):
    y = a @ b
    v = y[0]
    z = torch.exp(y)
    return z + v  # a view of y is read after exp


def sin_saved_for_backward(a, b):
    y = a @ b
    return torch.sin(y)  # sin's backward needs y


NEGATIVE = [
    (exp_of_input, [((4, 3), False)], "exp"),
    (exp_of_input_view, [((4, 3), False)], "exp"),
    (exp_of_returned, [((4, 3), False), ((3, 5), False)], "exp"),
    (exp_then_read_buffer, [((4, 3), False), ((3, 5), False)], "exp"),
    (exp_then_read_view, [((4, 3), False), ((3, 5), False)], "exp"),
    (sin_saved_for_backward, [((4, 3), True), ((3, 5), True)], "sin"),
]


@pytest.mark.parametrize("fn,shapes,op", NEGATIVE, ids=[n[0].__name__ for n in NEGATIVE])
def test_not_reinplaced(fn, shapes, op):
    def build():
        torch.manual_seed(0)
        return fn, tuple(_t(*s, grad=g) for s, g in shapes), {}

    verdict = differential(build, DATAFLOW)
    assert verdict.status == "correct", verdict.detail
    traces = _final_traces(verdict.outcome.compiled)
    ops = [b for b in traces[0].bound_symbols if b.sym.name == op]
    assert ops, f"no {op} in the final forward trace"
    assert not any(is_inplace_form(b) for b in ops), f"{op} was reinplaced:\n{traces[0]}"


# -- memory ----------------------------------------------------------------------------------


def _memory_script():
    spec = importlib.util.spec_from_file_location(
        "thunder_ext_memory_script", Path(__file__).resolve().parents[1] / "scripts" / "memory.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_relu_on_matmul_memory_not_above_plain(grad):
    memory = _memory_script()

    def build():
        return relu_on_matmul, (_t(512, 64, grad=grad), _t(64, 512, grad=grad)), {}

    plain_fw, _, plain_status = memory.peaks(build, transform=False)
    fw, _, status = memory.peaks(build, transform=True)
    assert (plain_status, status) == ("correct", "correct")
    assert fw <= plain_fw
    if grad:
        return  # relu's backward keeps the matmul output: nothing to reinplace
    # Without grad, the pass is what brings it there: the trace before it allocates one more buffer.
    fn, args, state = build()
    jfn = compile_fn(fn, DATAFLOW)
    execute(jfn, args, state)
    before, after = _pass_input_and_output(jfn)[0]
    assert memory.peak_of(after) == fw
    assert memory.peak_of(after) <= memory.peak_of(before) - 512 * 512 * 4


# -- the functional form of an in-place activation -------------------------------------------------


def silu_inplace_on_linear(x, w):
    return torch.nn.SiLU(inplace=True)(x @ w) * 2


def test_functionalized_silu_keeps_its_symbol():
    """``silu(h, inplace=True)`` rewritten out of place is ``silu``, not its decomposition: the
    forward saves no exp or reciprocal for the backward."""

    def build():
        torch.manual_seed(0)
        return silu_inplace_on_linear, (_t(4, 3), _t(3, 5, grad=True)), {}

    verdict = differential(build, DATAFLOW)
    assert verdict.status == "correct", verdict.detail
    fw = thunder.last_traces(verdict.outcome.compiled)[-1]
    names = {b.sym.name for b in fw.bound_symbols}
    assert "silu" in names
    assert not names & {"exp", "reciprocal"}, str(fw)


def test_probe_answers_by_signature_what_the_meta_call_answers():
    """The probe's memo (one meta call per signature) keeps apart what the meta call tells
    apart: a float product written into a float buffer runs, into an int64 buffer it cannot
    (PyTorch refuses the cast), and which argument is the buffer is part of the signature."""
    from thunder.core import dtypes
    from thunder.core.devices import Device
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import TraceCtx, tracectx
    from thunder.executors.torchex import mul as torch_mul

    from thunder_ext import reinplace as rp

    cpu = Device("cpu")
    with tracectx(TraceCtx()):
        f = TensorProxy(shape=(4, 3), dtype=dtypes.float32, device=cpu)
        g = TensorProxy(shape=(4, 3), dtype=dtypes.float32, device=cpu)
        i = TensorProxy(shape=(4, 3), dtype=dtypes.int64, device=cpu)
        out_f = TensorProxy(shape=(4, 3), dtype=dtypes.float32, device=cpu)
        into_float = torch_mul.bind(f, g, output=out_f).from_bsym(kwargs={"out": f})
        into_int = torch_mul.bind(i, 0.5, output=out_f).from_bsym(kwargs={"out": i})
        into_second = torch_mul.bind(f, g, output=out_f).from_bsym(kwargs={"out": g})
    cases = [(into_float, f), (into_int, i), (into_second, g)]
    keys = [rp._probe_key(b, buf, out_f) for b, buf in cases]
    assert None not in keys and len(set(keys)) == 3
    rp._PROBED.clear()
    for _ in range(2):  # the second round is answered from the memo
        assert [rp._probe(b, buf, out_f) for b, buf in cases] == [True, False, True]
    assert [rp._probe_on_meta(b, buf, out_f) for b, buf in cases] == [True, False, True]
