"""Writes through ``detach()`` are no-grad writes (thunder_ext.detached_writes).

``p.detach().clamp_(-c, c)`` changes ``p``'s data and leaves its autograd history alone, as
the same write under ``torch.no_grad()`` would.  Plain Thunder drops ``p``'s gradient; the
transform refused these as class 9 (a write with grad into an input that requires grad).
Each program is judged against eager by the fuzzer's rule, with and without grad.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import thunder
import torch
from thunder.core.proxies import ProxyTag

from thunder_ext.errors import GradInputWriteError, InputAliasError
from thunder_ext.testing.compare import Config, compile_fn
from thunder_ext.testing.fuzzing import CONFIGS, judge_function
from thunder_ext import last_reports
from thunder_ext.transforms import InplaceBarrierTransform

# Under ThunderFX, Dynamo hands a detached tensor to the next subgraph as an input of its own,
# and Thunder merges it into the tensor it was detached from before any transform runs: the
# prologue refuses that (class 7, thunder_ext.input_aliases; tested below).
JIT_CELLS = tuple(replace(c, executors=x) for c in CONFIGS for x in ("default", "torch_compile"))


def _x(grad: bool) -> torch.Tensor:
    return torch.randn(4, 3).requires_grad_(grad)


def clamp_through_detach(a, w):  # weight clipping
    a.detach().clamp_(-0.5, 0.5)
    return (a * w).sum()


def ema_through_detach(e, p):  # an EMA written as torch.optim.swa_utils does
    e.detach().mul_(0.9).add_(p.detach(), alpha=0.1)
    return e.norm() + (p * p).sum()


def slice_through_detach(a, w):
    a.detach()[0].zero_()
    return a.exp() + w


def transpose_through_detach_read_after(a, w):
    d = a.detach()
    d.t().mul_(2)
    return d + w, a * w


def copy_through_detach(a, w):
    a.detach().copy_(w.detach() * 2)
    return a.cos() * w


def private_through_detach(a, w):
    b = a * 1
    b.detach().mul_(2)
    return b.sin() * w


def non_leaf_through_detach(a, w):
    a.detach().mul_(2)
    return a * w


def read_before_detach_write(a, w):  # eager raises in backward: the read saved `a`
    y = a * w
    a.detach().mul_(2)
    return y


def detach_write_then_grad_write(a, w):  # the second write is class 9
    a.detach().mul_(2)
    a.add_(w)
    return a


PROGRAMS = [
    (clamp_through_detach, lambda g: (_x(g), _x(g))),
    (ema_through_detach, lambda g: (_x(g), _x(g))),
    (slice_through_detach, lambda g: (_x(g), _x(g))),
    (transpose_through_detach_read_after, lambda g: (_x(g), _x(g))),
    (copy_through_detach, lambda g: (_x(g), _x(g))),
    (private_through_detach, lambda g: (_x(g), _x(g))),
    (non_leaf_through_detach, lambda g: (_x(g) * 1, _x(g))),
    (read_before_detach_write, lambda g: (_x(g), _x(g))),
    (detach_write_then_grad_write, lambda g: (_x(g), _x(g))),
]


@pytest.mark.parametrize("fn, make_args", PROGRAMS, ids=[f.__name__ for f, _ in PROGRAMS])
def test_writes_through_detach_match_eager(fn, make_args):
    """Every ``thunder.jit`` cell, both executors and fusion types, with and without grad."""
    judgement = judge_function(fn, make_args, configs=JIT_CELLS)
    assert not judgement.failures, "\n".join(map(str, judgement.failures))


@pytest.mark.parametrize("fn", [clamp_through_detach, slice_through_detach, copy_through_detach, private_through_detach])
def test_writes_through_detach_are_answered_with_grad(fn):
    """Answered, not refused, and with eager's gradients (the judge allows class 9 refusals
    under grad, so this asserts that none is raised)."""
    cells = judge_function(fn, lambda g: (_x(g), _x(g)), grad_modes=(True,), configs=JIT_CELLS).cells
    assert [c.status for c in cells] == ["correct"] * len(cells), [c.detail for c in cells]


def test_the_write_is_marked_without_grad_in_the_trace():
    jitted = thunder.jit(clamp_through_detach, transforms=[InplaceBarrierTransform()])
    jitted(_x(True), _x(True))
    (report,) = [r.detached_writes for r in last_reports(jitted)]
    assert len(report.without_grad) == 1 and not report.left_with_grad
    (write,) = report.without_grad
    assert write.sym.name == "clamp_"
    assert all(ProxyTag.DETACHED_AUTOGRAD_GRAPH in o.tags for o in write.flat_proxy_outs)
    # The trace the transform read has it so: its copy_ says grad_enabled=False.
    copies = [s for s in write.subsymbols if s.sym.name == "copy_"]
    assert copies and all(s.kwargs["grad_enabled"] is False for s in copies)


def gradient_value_through_detach(a, w):
    d = a.detach()
    d.add_(w)  # d gets w's history in eager, a gets none
    return (a * w).sum(), d


def test_a_gradient_value_written_through_detach_is_refused_with_its_reason():
    """Eager gives the detached tensor ``w``'s history and ``a`` none; Thunder cannot keep the
    two apart (plain Thunder drops ``a``'s gradient), and the refusal says what happens."""
    jitted = compile_fn(gradient_value_through_detach, Config(fusion_type="dataflow"))
    with pytest.raises(GradInputWriteError, match=r"through `detach\(\)` of the input `a`") as info:
        jitted(_x(True), _x(True))
    assert "add_" in str(info.value)


def test_under_thunderfx_the_detached_input_thunder_merges_is_refused():
    """Dynamo splits the graph at ``detach`` and hands the detached tensor on as an input;
    Thunder replaces it with the tensor it was detached from (requiring grad), which no
    transform can undo.  The prologue says so (class 7)."""
    jitted = compile_fn(clamp_through_detach, Config(fusion_type="dataflow", entry="thunderfx"))
    with pytest.raises(InputAliasError, match="detach"):
        jitted(_x(True), _x(True))
