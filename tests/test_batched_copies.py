"""The copies left on a final trace run as one ``foreach_copy_`` per run of independent ones.

With ``torch_compile_ex`` the Inductor regions hold values only wherever the region computes
more than values (a clone, a scatter, a view: ``inductor_regions.epilogue_fits_a_region``), and
every written input gets its final value by one ``copy_`` after the region
(``inductor_regions.unfuse_epilogue``): one Python call per input on every step.
:mod:`thunder_ext.batched_copies` makes a run of them one call, keeping apart any two copies
where one could see the other's write.  A region of values only keeps its epilogue, and
Inductor writes the inputs itself.
"""

from __future__ import annotations

import pytest
import thunder
import torch
from thunder.executors.torch_compile import torch_compile_ex

from support import MATRIX, config_id, requires_cuda
from thunder_ext.testing.compare import Config, differential
from thunder_ext.transforms import InplaceBarrierTransform


def ema_three(e1, e2, e3, p):
    r = (e1 + e2 + e3).sum()
    with torch.no_grad():
        for e in (e1, e2, e3):
            e.mul_(0.9).add_(p, alpha=0.1)
    return r * p


def ema_three_with_snapshot(e1, e2, e3, p):
    r = (e1 + e2 + e3).sum()
    s = e1.clone()  # a clone of a written input: the epilogue stays out of the region
    with torch.no_grad():
        for e in (e1, e2, e3):
            e.mul_(0.9).add_(p, alpha=0.1)
    return r * p, s


def copy_then_scale(rm, rv):
    rm.copy_(rv)  # rm's new value is rv's old one: its copy must run before rv's
    rv.mul_(rm)
    return rv * 2


def _ema_args(grad: bool):
    g = torch.Generator().manual_seed(0)
    return (*(torch.randn(8, generator=g) for _ in range(3)), torch.randn(8, generator=g).requires_grad_(grad))


def _final(fn, args, fusion_type="dataflow"):
    jf = thunder.jit(fn, transforms=[InplaceBarrierTransform(check=True)], executors=[torch_compile_ex], fusion_type=fusion_type)
    jf(*args)
    return jf, thunder.last_traces(jf)[-1]


def _top(trace, name):
    return [b for b in trace.bound_symbols if b.sym.name == name]


@pytest.mark.parametrize("fn", [ema_three, ema_three_with_snapshot], ids=["values_only", "with_a_clone"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("config", MATRIX, ids=config_id)
def test_ema_matches_eager(config: Config, grad: bool, fn):
    verdict = differential(lambda: (fn, _ema_args(grad), {}), config)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"


@pytest.mark.parametrize("fusion_type", ["dataflow", "consecutive"])
def test_the_epilogue_of_three_inputs_is_one_call(fusion_type):
    import thunder_ext
    from thunder_ext import last_reports
    from thunder_ext.op_kinds import effect_of

    jf, final = _final(ema_three_with_snapshot, _ema_args(False), fusion_type)
    batched = _top(final, "foreach_copy_")
    assert len(batched) == 1 and not _top(final, "copy_"), str(final)
    assert sorted(d.name for d in batched[0].args[1]) == ["e1", "e2", "e3"]
    assert last_reports(jf)[0].final_forward.copies_batched == 3
    # The checker reads it as the three writes it is.
    assert [w.name for w in effect_of(batched[0]).writes] == [d.name for d in batched[0].args[1]]
    assert thunder_ext.verify(final) == []


@pytest.mark.parametrize("fusion_type", ["dataflow", "consecutive"])
def test_an_epilogue_of_values_stays_in_the_inductor_region(fusion_type):
    """The EMA computes values only: Inductor writes ``e1``, ``e2``, ``e3`` itself, as plain
    Thunder's region does, with no tensor returned per input and no copy after the region."""
    import thunder_ext
    from thunder_ext.inductor_regions import through_barriers

    from thunder_ext import last_reports

    jf, final = _final(ema_three, _ema_args(False), fusion_type)
    assert not _top(final, "foreach_copy_") and not _top(final, "copy_"), str(final)
    assert last_reports(jf)[0].fusion_stage.epilogues_in_region == 3
    regions = [b for b in final.bound_symbols if b.sym.name.startswith("TorchCompile")]
    through = {n: m for r in regions for n, m in through_barriers(r.subsymbols).items()}
    written = sorted(through.get(s.args[1].name, s.args[1].name) for r in regions for s in r.subsymbols if s.sym.name == "copy_")
    assert written == ["e1", "e2", "e3"], str(final)
    assert thunder_ext.verify(final) == []


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
def test_copy_of_an_input_into_another_then_a_write_matches_eager(config: Config):
    """``rm``'s final value is ``rv``'s old one (a clone the region makes), then ``rv`` is written."""
    verdict = differential(lambda: (copy_then_scale, (torch.randn(6), torch.randn(6)), {}), config)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"


def _copies(pairs, *, grad_enabled=(), requires_grad=()):
    """A final trace of torch-executor copies ``copy_(src, dst)`` of (src, dst) input names, then
    a return; names in ``requires_grad`` require grad, pairs at ``grad_enabled`` have it on."""
    from thunder.core import prims
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import TraceCtx, tracectx
    from thunder.executors.torchex import copy_ as torch_copy_

    trace = TraceCtx()
    with tracectx(trace):
        names = list(dict.fromkeys(n for pair in pairs for n in pair))
        p = {n: TensorProxy(n, shape=(4,), dtype=thunder.dtypes.float32, device=thunder.devices.cpu,
                            requires_grad=n in requires_grad) for n in names}  # fmt: skip
        trace.args = tuple(p.values())
        trace.bound_symbols = [
            *(torch_copy_.bind(p[s], p[d], grad_enabled=k in grad_enabled, output=TensorProxy(like=p[d])) for k, (s, d) in enumerate(pairs)),
            prims.python_return.bind(None, output=None),
        ]
    return trace


def _batched(trace, aliased=()):
    from thunder_ext.batched_copies import batch_copies

    new, n = batch_copies(trace, aliased)
    return n, [sorted(d.name for d in b.args[1]) for b in _top(new, "foreach_copy_")]


def test_independent_copies_are_one_call():
    assert _batched(_copies([("s", "a"), ("t", "b"), ("u", "c")])) == (3, [["a", "b", "c"]])


@pytest.mark.parametrize(
    "pairs",
    [
        [("rv", "rm"), ("t", "rv")],  # the first copy reads what the second writes
        [("t", "rv"), ("rv", "rm")],  # the second copy reads what the first wrote
        [("s", "a"), ("t", "a")],  # one destination twice: the last write wins
    ],
    ids=["reads_a_later_destination", "reads_an_earlier_destination", "same_destination"],
)
def test_copies_that_could_see_each_other_stay_apart(pairs):
    """On CUDA a ``foreach_copy_`` may run as one kernel, in no order: two copies where one reads
    or writes what the other writes must stay two calls."""
    assert _batched(_copies(pairs)) == (0, [])


def test_inputs_aliased_at_the_call_stay_apart():
    """``a`` and ``b`` are one tensor at this call (Thunder's aliased inputs)."""
    pairs = [("s", "a"), ("t", "b")]
    assert _batched(_copies(pairs)) == (2, [["a", "b"]])
    assert _batched(_copies(pairs), aliased=[{"a", "b"}]) == (0, [])


def test_a_copy_with_a_leaf_check_stays_one_copy():
    """A ``copy_`` with grad enabled into a tensor that requires grad raises at run time, as eager
    does; batching would skip that check."""
    pairs = [("s", "a"), ("t", "b")]
    assert _batched(_copies(pairs, grad_enabled={0}, requires_grad={"a"})) == (0, [])
    assert _batched(_copies(pairs, grad_enabled={0})) == (2, [["a", "b"]])
    assert _batched(_copies(pairs, requires_grad={"a"})) == (2, [["a", "b"]])


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("fusion_type", ["dataflow", "consecutive"])
def test_the_batched_epilogue_on_cuda_matches_eager(fusion_type):
    """On CUDA ``torch._foreach_copy_`` may run every copy as one kernel."""
    args = tuple(a.cuda() for a in _ema_args(False))
    expected = [a.clone() for a in args]
    out_expected = ema_three(*expected)
    got = [a.clone() for a in args]
    jf, final = _final(ema_three, [a.clone() for a in args], fusion_type)
    torch.testing.assert_close(jf(*got), out_expected)
    torch.testing.assert_close(got, expected)  # Inductor's Triton kernels may fuse a multiply-add
    assert len(_top(final, "foreach_copy_")) == 1, str(final)
