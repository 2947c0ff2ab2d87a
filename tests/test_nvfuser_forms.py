"""The forms of the trace nvFuser needs (thunder_ext.nvfuser_forms), each step on its own.

nvFuser runs only on CUDA, so these tests hand each step an executor list that names
nvFuser (a stand-in with its name) and check the trace it returns, then run what can run
here.  tests/test_gpu.py runs the same programs through nvFuser itself, against eager.
"""

from __future__ import annotations

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
