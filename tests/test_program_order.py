"""Hazards are named in the user's program order, whatever order fusion emitted.

``a = x * z; x.add_(1); return a`` reads ``x`` and then writes it: a write after a read
(WAR).  Dataflow fusion emits the short write first, so in the final trace the write comes
before the read; the checker, ``check()`` and the picture must still call it WAR, with the
read first, as consecutive fusion (which keeps program order) does.
"""

from __future__ import annotations

import pytest
import torch
import thunder

import thunder_ext
from thunder_ext.checker import verify
from thunder_ext.graph import trace_graph


def write_after_read(x, z):
    for _ in range(4):
        z = z.exp().sin()
    a = x * z
    x.add_(1)
    return a


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3), torch.randn(3)


def _plain_final_trace(fusion_type: str):
    x, z = _inputs()
    jf = thunder.jit(write_after_read, fusion_type=fusion_type)
    out = jf(x.clone(), z)
    return thunder.last_traces(jf)[-1], out


def _order(trace, op: str) -> int:
    return next(i for i, b in enumerate(trace.bound_symbols) if b.sym.name == op)


@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
def test_verify_names_the_write_after_read_as_written(fusion_type):
    trace, out = _plain_final_trace(fusion_type)
    x, z = _inputs()
    eager = write_after_read(x.clone(), z)
    (v,) = verify(trace)
    assert v.kind == "WAR"
    assert v.first.sym.name == "mul" and v.second.sym.name == "copy_"
    assert str(v).startswith("[WAR] write after read is not ordered") and "= mul` " in str(v).split("->")[0]
    if fusion_type == "dataflow":
        # the case this is about: fusion put the write first, and plain Thunder is wrong for it
        assert _order(trace, "copy_") < _order(trace, "mul")
        assert not torch.allclose(out, eager)
    else:
        assert _order(trace, "mul") < _order(trace, "copy_")
        torch.testing.assert_close(out, eager)


def test_check_counts_one_war_under_both_fusion_types():
    x, z = _inputs()
    report = thunder_ext.check(write_after_read, x, z)
    summaries = {r.name: r.violation_summary for r in report.plain_rows}
    assert summaries == {
        "plain-consecutive-default-jit": "1 (1 WAR)",
        "plain-dataflow-default-jit": "1 (1 WAR)",
    }
    assert report.row("plain-dataflow-default-jit").result == "wrong"
    assert report.safe


def test_picture_draws_the_missing_order_from_read_to_write():
    trace, _ = _plain_final_trace("dataflow")
    g = trace_graph(trace)
    ((a, b, data),) = [(a, b, d) for a, b, d in g.edges(data=True) if d["kind"] == "missing"]
    assert data["hazards"] == ["WAR"]
    assert g.nodes[a]["label"].endswith("= mul") and g.nodes[b]["label"].endswith("= copy_")


# -- a read that rematerialization recomputes in a later region (soak seed 35000) -------------


def recomputed_read_before_epilogue(a, b, rm, rv):
    t0 = b + b
    b.sub_(t0)
    with torch.no_grad():
        rv.mul_(0.9).add_(b.mean(0), alpha=0.1)
    rm[1:] = 1.5  # unfused with torch_compile_ex: the region after it recomputes t0 from b
    return (a, b, t0.reshape(3, 4))


def test_a_recomputed_read_before_the_write_is_no_hazard_and_after_it_is_one():
    """``torch_compile_ex``, consecutive fusion: the region after the setitem recomputes ``b + b``
    from ``b``, before ``b``'s epilogue ``copy_`` but with no data edge to it. The final trace runs
    in trace order, so that is no hazard (was a WAR flag); the same region moved after the
    ``copy_`` reads the new ``b`` and is flagged (its name: the trace has no evidence of the order
    the program had)."""
    from thunder.core.trace import from_trace

    from thunder_ext.op_kinds import effect_of, is_fusion
    from thunder_ext.testing.compare import Config, compile_fn

    def make():
        torch.manual_seed(0)
        return torch.randn(4, 3, requires_grad=True), torch.randn(4, 3), torch.randn(3) * 0.1, torch.rand(3) + 0.5

    args = make()
    jf = compile_fn(recomputed_read_before_epilogue, Config(fusion_type="consecutive", executors="torch_compile", check=False))
    out = jf(*args)
    expected = make()
    ref = recomputed_read_before_epilogue(*expected)
    for got, want in zip((*out, *args), (*ref, *expected)):
        torch.testing.assert_close(got, want)
    final = thunder.last_traces(jf)[-1]
    assert verify(final) == []

    top = [b for b in final.bound_symbols if b.sym.name != "del"]
    regions = [k for k, b in enumerate(top) if is_fusion(b)]
    # b's epilogue: a copy_, or the foreach_copy_ that batches it with the other inputs' copies.
    copy_b = next(k for k, b in enumerate(top) if any(w.name == "b" for w in effect_of(b).writes))
    assert len(regions) == 2 and regions[-1] < copy_b, "the program no longer shows the recomputed read"
    moved = from_trace(final)
    moved.bound_symbols = [*top[: regions[-1]], *top[regions[-1] + 1 : copy_b + 1], top[regions[-1]], *top[copy_b + 1 :]]
    (v,) = verify(moved)
    assert {v.first.sym.name, v.second.sym.name} == {"add", top[copy_b].sym.name} and v.group == "b", str(v)


# -- a read in an earlier region than the write's (soak seed 43000) --------------------------


def read_then_written(x):
    y = x.sin()
    z = x.clone()  # keeps the epilogue out of the region (inductor_regions.epilogue_fits_a_region)
    x.mul_(2)
    return y, z


def test_a_read_outside_the_writing_region_runs_first_inside_it_needs_a_data_edge():
    """On a final trace (fusion has run, trace order is final), a read in a region before the
    write's is no hazard without a data edge to the write; the same read inside the region that
    holds the write is one, since that region's compiler may reorder its subsymbols."""
    from thunder.core.trace import from_trace

    from thunder_ext.op_kinds import is_copy, is_fusion
    from thunder_ext.testing.compare import Config, compile_fn

    jf = compile_fn(read_then_written, Config(fusion_type="consecutive", executors="torch_compile", check=False))
    x = torch.randn(4)
    expected = x.clone()
    torch.testing.assert_close(jf(x), read_then_written(expected))
    torch.testing.assert_close(x, expected)
    final = thunder.last_traces(jf)[-1]
    top = [b for b in final.bound_symbols if b.sym.name != "del"]
    (region,) = [b for b in top if is_fusion(b)]
    (copy,) = [b for b in top if is_copy(b)]
    assert verify(final) == []
    # The copy moved into the region, after the sin and the mul: the sin's read of x has no data
    # edge to the copy, and in one region nothing else orders it.
    merged = from_trace(final)
    fused = region.from_bsym(subsymbols=[*region.subsymbols, copy])
    merged.bound_symbols = [fused if b is region else b for b in top if b is not copy]
    kinds = {(v.kind, v.first.sym.name, v.second.sym.name) for v in verify(merged)}
    assert ("WAR", "sin", "copy_") in kinds, kinds
