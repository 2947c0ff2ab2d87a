"""The forms of the trace nvFuser needs (thunder_ext.nvfuser_forms), each step on its own.

nvFuser runs only on CUDA, so these tests hand each step an executor list that names
nvFuser (a stand-in with its name) and check the trace it returns, then run what can run
here.  tests/test_gpu.py runs the same programs through nvFuser itself, against eager.
"""

from __future__ import annotations

import pytest
import thunder
import torch
from thunder.executors.torchex import ex as torchex
from thunder.extend import FusionExecutor

from thunder_ext.alias_analysis import input_names
from thunder_ext.nvfuser_forms import bump_written_versions, copy_clones, unfuse_squeezing_views
from thunder_ext.op_kinds import effect_of, is_fusion


class _NamedNvFuser(FusionExecutor):
    """An executor list with this in it is one where nvFuser may run (the steps read the name)."""

    def __init__(self) -> None:
        super().__init__("nvfuser")


NVFUSER_EXECUTORS = [_NamedNvFuser(), torchex]


def _first_trace(fn, *args):
    jf = thunder.jit(fn)
    jf(*args)
    return thunder.last_traces(jf)[0]


def _clone_then_write(x, y):
    kept = x.clone()  # x is written below: nvFuser's `set` would alias this to x
    free = y.clone()  # y is never written: may stay fusible
    x.add_(1)
    return kept, free


def test_a_clone_of_written_storage_is_bound_to_the_torch_executor():
    trace = _first_trace(_clone_then_write, torch.randn(3), torch.randn(3))
    bsyms = list(trace.bound_symbols)
    out, n = copy_clones(trace, bsyms, input_names(trace), NVFUSER_EXECUTORS)
    assert n == 1
    (kept,) = [b for b in out if b.flat_proxy_args and b.flat_proxy_args[0].name == "x" and "clone" in b.sym.name]
    (free,) = [b for b in out if b.flat_proxy_args and b.flat_proxy_args[0].name == "y" and "clone" in b.sym.name]
    assert kept.sym.executor is torchex and not kept.subsymbols, kept  # nothing left to fuse
    assert free.sym.executor is None, free  # still ltorch.clone, fusible
    before = {b.output.name for b in bsyms if "clone" in b.sym.name}
    assert {b.output.name for b in out if "clone" in b.sym.name} == before  # proxies unchanged


def test_clones_stay_fusible_without_nvfuser():
    trace = _first_trace(_clone_then_write, torch.randn(3), torch.randn(3))
    bsyms = list(trace.bound_symbols)
    assert copy_clones(trace, bsyms, input_names(trace), [torchex]) == (bsyms, 0)


def _index_then_read_whole(a):
    return a[0].cos(), a[:, 1].sin(), a.exp()


def test_squeezing_views_are_bound_to_the_torch_executor():
    trace = _first_trace(_index_then_read_whole, torch.randn(4, 3))
    bsyms = list(trace.bound_symbols)
    out, n = unfuse_squeezing_views(trace, bsyms, NVFUSER_EXECUTORS)
    assert n == 2
    views = [b for b in out if "getitem" in b.sym.name]
    assert len(views) == 2 and all(b.sym.executor is torchex and not b.subsymbols for b in views), views
    assert all(effect_of(b).is_view for b in views)  # still views to the alias analysis
    assert [b.output.name for b in views] == [b.output.name for b in bsyms if "getitem" in b.sym.name]
    assert unfuse_squeezing_views(trace, bsyms, [torchex]) == (bsyms, 0)


def _no_grad_write(a):
    with torch.no_grad():
        a.add_(a)
    return a


def test_inputs_a_region_writes_get_one_version_bump_before_the_return():
    from thunder.executors.torch_compile import torch_compile_ex

    jf = thunder.jit(_no_grad_write, executors=[torch_compile_ex])
    a = torch.randn(4, 3)
    jf(a.clone())
    final = thunder.last_traces(jf)[-1]
    assert any(is_fusion(b) for b in final.bound_symbols)
    # Inductor's region bumps the version itself (the default predicate leaves it alone); the
    # test treats it as a region that does not, to see the step work.
    assert bump_written_versions(final, input_names(final)) == (final, 0)
    bumped, n = bump_written_versions(final, input_names(final), writes_behind_autograd=is_fusion)
    assert n == 1
    names = [b.sym.name for b in bumped.bound_symbols if b.sym.name != "python_del"]
    assert names[-2:] == ["bump_versions", "python_return"], names
    x, y = a.clone(), a.clone()
    v0 = x._version
    final.python_callable()(x)
    v1 = x._version
    bumped.python_callable()(y)
    assert y._version - v0 == (v1 - v0) + 1  # exactly one more bump
    torch.testing.assert_close(y, x)  # and no other change


def _batch_norm_twice(x, rm, rv):
    t0 = torch.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.1)
    t1 = torch.nn.functional.batch_norm(t0, rm, rv, training=True, momentum=0.1)
    return t1


def test_two_writes_to_one_input_are_kept_apart_where_nvfuser_may_run():
    """executor_policies.WriteInputs: nvFuser reads a region's input as it was when the region
    started, so the second batch_norm's update of the running stats needs its own region: a
    barrier witnessed by the first, which the second reads the stats through."""
    from thunder_ext import insert_barriers, verify

    trace = _first_trace(_batch_norm_twice, torch.randn(4, 3), torch.zeros(3), torch.ones(3))
    first, second = [b for b in trace.bound_symbols if "batch_norm" in b.sym.name]
    placed = insert_barriers(trace)  # executors unknown: nvFuser may run
    bns = [b for b in placed.bound_symbols if "batch_norm" in b.sym.name]
    barriers = [b for b in placed.bound_symbols if b.sym.name == "update_aliases"]
    (between,) = [b for b in barriers if "separate regions" in str(b.header)]
    assert first.output.name in {p.name for p in between.flat_proxy_args}  # witnessed by the first
    renamed = {o.name for o in between.flat_proxy_outs}
    assert {p.name for p in bns[1].flat_proxy_args} & renamed  # the second reads the stats through it
    assert not verify(placed)
    # With the CPU's executors nothing fuses both, and no such barrier is placed.
    cpu = insert_barriers(trace, executors=list(thunder.get_default_executors()) + [torchex])
    assert not [b for b in cpu.bound_symbols if "separate regions" in str(b.header)]


class _FusingNvFuser(_NamedNvFuser):
    """As above, and it fuses every bsym but barriers and the return (nvFuser takes all of these)."""

    def can_fuse(self, bsym) -> bool:
        from thunder_ext.op_kinds import is_barrier, is_return

        return not is_barrier(bsym) and not is_return(bsym)


def _written_back(b, c):
    h = b * 0.5  # the new value of b
    t = c + h  # read by a later region: rematerialization may recompute h from b there
    s = h.sin()
    b.copy_(h)  # the epilogue, as functionalization leaves it
    return t, s


def _written_back_read_by_nobody(b):
    h = b * 0.5
    b.copy_(h)
    return h


def _barrier_maker(trace):
    from thunder.core import prims
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import tracectx

    def barrier(members, witnesses, before):
        ins = tuple(members) + tuple(witnesses)
        with tracectx(trace):
            outs = tuple(TensorProxy(like=p) for p in ins)
        return prims.update_aliases.bind(ins, output=outs), outs[: len(members)]

    return barrier


def _flat_prims(fn, *args):
    """The trace's bsyms with every composite opened to its prims (what nvFuser's regions hold)."""
    trace = _first_trace(fn, *args)
    from thunder_ext.nvfuser_forms import _leaves

    return trace, list(_leaves(trace.bound_symbols))


def test_the_epilogue_waits_for_values_a_region_could_recompute_from_its_destination():
    """nvfuser_forms.epilogues_after_derived_reads: under dataflow fusion the copy into b joins
    the region making h; a later region reading t or s could recompute h from b after the copy
    (a soak program's running stats came out wrong).  One barrier takes the copy's value and
    destination and the last values read from b; the copy reads the barrier's outputs."""
    from thunder_ext.nvfuser_forms import epilogues_after_derived_reads
    from thunder_ext.op_kinds import is_barrier, is_copy

    trace, bsyms = _flat_prims(_written_back, torch.randn(4), torch.randn(4))
    out, n = epilogues_after_derived_reads(bsyms, frozenset({"b"}), [_FusingNvFuser(), torchex], _barrier_maker(trace))
    assert n == 1
    (barrier,) = [b for b in out if is_barrier(b)]
    (copy,) = [b for b in out if is_copy(b)]
    assert out.index(barrier) == out.index(copy) - 1
    t, s = (p.name for p in trace.bound_symbols[-1].flat_proxy_args[:2])
    assert {t, s} <= {p.name for p in barrier.flat_proxy_args}  # both readers are witnesses
    assert {p.name for p in copy.flat_proxy_args[:2]} <= {p.name for p in barrier.flat_proxy_outs}
    # Nothing else changed.
    assert [b for b in out if b is not barrier and b is not copy] == [b for b in bsyms if not is_copy(b)]


def test_the_epilogue_is_left_alone_where_nothing_could_recompute_a_read_after_it():
    from thunder_ext.nvfuser_forms import epilogues_after_derived_reads

    trace, bsyms = _flat_prims(_written_back_read_by_nobody, torch.randn(4))
    maker = _barrier_maker(trace)
    assert epilogues_after_derived_reads(bsyms, frozenset({"b"}), [_FusingNvFuser(), torchex], maker) == (bsyms, 0)
    # Readers nvFuser does not take hand their consumers values no region recomputes.
    trace, bsyms = _flat_prims(_written_back, torch.randn(4), torch.randn(4))
    assert epilogues_after_derived_reads(bsyms, frozenset({"b"}), NVFUSER_EXECUTORS, maker) == (bsyms, 0)
    # Without nvFuser, or for an input with no epilogue, nothing changes.
    assert epilogues_after_derived_reads(bsyms, frozenset({"b"}), [torchex], maker) == (bsyms, 0)
    assert epilogues_after_derived_reads(bsyms, frozenset({"c"}), [_FusingNvFuser(), torchex], maker) == (bsyms, 0)


def _write_strided_view(a):
    v = a[::2]  # not dense: nvFuser would write it as if it were
    v.exp_()
    w = a.view(-1)  # dense: its writes stay in the region
    w.mul_(2)
    return a


def test_a_write_into_a_strided_view_copies_outside_nvfuser():
    """nvfuser_forms.copy_strided_writes_outside_nvfuser: exp_ into a[::2] becomes exp, fusible,
    and a copy_ on the torch executor; the write through the dense view(-1) is left alone."""
    from thunder_ext.nvfuser_forms import copy_strided_writes_outside_nvfuser
    from thunder_ext.op_kinds import is_copy

    trace = _first_trace(_write_strided_view, torch.randn(4, 3))
    bsyms = list(trace.bound_symbols)
    out, n = copy_strided_writes_outside_nvfuser(trace, bsyms, NVFUSER_EXECUTORS)
    assert n == 1
    (exp_,) = [b for b in bsyms if b.sym.name == "exp_"]
    at = next(i for i, b in enumerate(out) if b.sym.name == "exp")
    value, copy = out[at], out[at + 1]
    assert value.flat_proxy_args[0].name == exp_.flat_proxy_args[0].name
    assert is_copy(copy) and copy.sym.executor is torchex and not copy.subsymbols
    assert [p.name for p in copy.flat_proxy_args[:2]] == [value.output.name, exp_.flat_proxy_args[0].name]
    assert copy.output.name == exp_.output.name  # later readers name the same proxy
    assert [b.sym.name for b in out].count("mul_") == 1  # the dense view's write is untouched
    # The trace still runs on the torch executor, and computes what eager does.
    from thunder.core.trace import from_trace
    from thunder.executors.passes import transform_for_execution

    t = from_trace(trace)
    t.bound_symbols = out
    a = torch.randn(4, 3)
    expected = _write_strided_view(a.clone())
    got = a.clone()
    transform_for_execution(t, executors_list=[torchex]).python_callable()(got)
    torch.testing.assert_close(got, expected)
    assert copy_strided_writes_outside_nvfuser(trace, bsyms, [torchex]) == (bsyms, 0)


class _UnfusingNvFuser(_FusingNvFuser):
    """As above, but its fusion pass leaves the trace as it is: the whole program then runs on the
    torch executor here, through every step the transform takes where nvFuser runs."""

    def fusion_pass(self, trace):
        return trace


def _kv_setitem(q, kc, vc, k, v):
    kc[:, 5] = k
    vc[:, 5] = v
    return torch.softmax(q @ kc.transpose(-1, -2), dim=-1) @ vc


def _kv_index_copy(q, kc, vc, k, v, pos):
    kc.index_copy_(1, pos, k.unsqueeze(1))
    vc.index_copy_(1, pos, v.unsqueeze(1))
    return torch.softmax(q @ kc.transpose(-1, -2), dim=-1) @ vc


def _ema(e, p):
    e.mul_(0.9).add_(p, alpha=0.1)
    return e.sum()


def _nv_jit(fn, fusion_type):
    from thunder_ext.transforms import InplaceBarrierTransform

    return thunder.jit(fn, fusion_type=fusion_type, executors=[_UnfusingNvFuser(), torchex], transforms=[InplaceBarrierTransform()])


@pytest.mark.parametrize("fusion_type", ["dataflow", None])
@pytest.mark.parametrize("program", ["setitem", "index_copy"])
def test_a_dying_slice_write_of_an_input_leaves_nvfuser_and_goes_back_in_place(program, fusion_type):
    """nvfuser_forms.slice_epilogues_outside_nvfuser: a KV-cache write (a slice of an input whose
    old value nothing reads afterwards) and its epilogue copy_ go to the torch executor, and the
    final trace writes the slice in place: no copy of the whole cache (on the H200, the step
    cloned each cache and nvFuser copied it back)."""
    from thunder_ext import final_traces, last_reports

    g = torch.Generator().manual_seed(0)
    q, kc, vc, k, v = (torch.randn(*s, generator=g) for s in ((2, 1, 4), (2, 8, 4), (2, 8, 4), (2, 4), (2, 4)))
    fn, extra = (_kv_setitem, ()) if program == "setitem" else (_kv_index_copy, (torch.tensor([5]),))
    ekc, evc = kc.clone(), vc.clone()
    expected = fn(q, ekc, evc, k, v, *extra)
    jf = _nv_jit(fn, fusion_type)
    torch.testing.assert_close(jf(q, kc, vc, k, v, *extra), expected, rtol=0, atol=0)
    assert torch.equal(kc, ekc) and torch.equal(vc, evc)
    (report,) = last_reports(jf)
    assert report.fusion_stage.slice_epilogues_unfused == 2
    ((final, _),) = final_traces(jf)
    names = [b.sym.name for b in final.bound_symbols]
    assert "copy_with_setitem_impl" not in names
    # Every write left writes the caches in place: a slice copy_, or index_copy with out= the cache.
    for b in final.bound_symbols:
        if b.sym.name == "copy_":
            assert tuple(b.args[1].shape) != tuple(kc.shape), b
        if b.sym.name == "index_copy":
            assert b.kwargs.get("out") is not None and b.kwargs["out"].name == b.args[0].name, b
    # A second call on the new state is still eager's.
    torch.testing.assert_close(jf(q, kc, vc, k, v, *extra), fn(q, ekc, evc, k, v, *extra), rtol=0, atol=0)
    assert torch.equal(kc, ekc) and torch.equal(vc, evc)


def test_an_elementwise_epilogue_stays_in_its_nvfuser_region():
    """The EMA update's epilogue is no slice write: nvFuser writes it into the input from its
    region, with no copy, so it stays fusible."""
    from thunder_ext import fusion_stage_traces, last_reports
    from thunder_ext.op_kinds import is_copy

    e, p = torch.randn(4), torch.randn(4)
    ee = e.clone()
    jf = _nv_jit(_ema, "dataflow")
    torch.testing.assert_close(jf(e, p), _ema(ee, p), rtol=0, atol=0)
    assert torch.equal(e, ee)
    (report,) = last_reports(jf)
    assert report.fusion_stage.slice_epilogues_unfused == 0
    (copy,) = [b for b in fusion_stage_traces(jf)[-1].bound_symbols if is_copy(b)]
    assert copy.sym.executor is None  # prims.copy_, which nvFuser fuses
