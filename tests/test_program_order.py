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
