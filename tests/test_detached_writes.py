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
import torch.nn.functional as F
from thunder.core.proxies import ProxyTag

from thunder_ext.errors import InplaceOrderingError, InputAliasError
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


def gradient_value_into_a_plain_input_through_detach(a, w):
    d = a.detach()
    d.add_(w)
    return (d * 2).sum(), a * 1  # a * 1 does not require grad in eager


def gradient_values_written_twice_through_detach(a, w):
    d = a.detach()
    d.mul_(w).add_(1.0)  # the second write reads the first's history
    return d.t() * 2, a.cos()


def gradient_value_through_detach_then_into_the_input(a, w):
    d = a.detach()
    d.add_(w)
    a.mul_(2)  # eager's d sees this write and keeps w's history: not split
    return d * 1


def gradient_value_through_detach_with_an_older_view(a, w):
    d = a.detach()
    v = d[0]  # eager rebases v's history on the write: not split
    d.add_(w)
    return v * 1, d


SPLIT = [
    (gradient_value_through_detach, lambda g: (_x(g), _x(g))),
    (gradient_value_into_a_plain_input_through_detach, lambda g: (_x(False), _x(g))),
    (gradient_values_written_twice_through_detach, lambda g: (_x(g) * 1, _x(g))),
]
NOT_SPLIT = [
    (gradient_value_through_detach_then_into_the_input, lambda g: (_x(False), _x(g))),
    (gradient_value_through_detach_with_an_older_view, lambda g: (_x(False), _x(g))),
]


@pytest.mark.parametrize("fn, make_args", SPLIT + NOT_SPLIT, ids=[f.__name__ for f, _ in SPLIT + NOT_SPLIT])
def test_gradient_values_written_through_detach_match_eager(fn, make_args):
    """Every ``thunder.jit`` cell, both executors and fusion types, with and without grad: no
    wrong answer and no crash.  A refusal is allowed here: ``NOT_SPLIT``'s first is refused with
    grad where plain Thunder matches eager (docs/limits.md); the next test says which are answered."""
    cells = judge_function(fn, make_args, configs=JIT_CELLS).cells
    bad = [c for c in cells if c.verdict not in ("ok", "needless-refusal")]
    assert cells and not bad, "\n".join(map(str, bad))


@pytest.mark.parametrize("fn, make_args", SPLIT, ids=[f.__name__ for f, _ in SPLIT])
def test_a_gradient_value_written_through_detach_is_a_value_and_a_no_grad_write(fn, make_args):
    """``d = a.detach(); d.add_(w)``: eager gives ``d`` the history of ``w``, and writes ``a``'s
    storage without giving ``a`` any.  The write is made on a clone of ``a`` (a value with that
    history, which later reads of ``d`` read) and copied into ``a`` under no-grad.  Answered,
    with eager's gradients, in every cell (this was class 9, or class 5 on a plain input)."""
    cells = judge_function(fn, make_args, grad_modes=(True,), configs=JIT_CELLS).cells
    assert [c.status for c in cells] == ["correct"] * len(cells), [c.detail for c in cells]
    jitted = thunder.jit(fn, transforms=[InplaceBarrierTransform()])
    jitted(*make_args(True))
    (report,) = [r.detached_writes for r in last_reports(jitted)]
    assert report.split and not report.left_with_grad


@pytest.mark.parametrize("fn, make_args", NOT_SPLIT, ids=[f.__name__ for f, _ in NOT_SPLIT])
def test_a_gradient_value_through_detach_eager_keeps_apart_is_left_as_written(fn, make_args):
    """Where eager's detached tensor would see a later write into the input, or a view of it
    older than the write takes its history, the split would not be eager's answer: the write is
    left as it was traced (and refused, where the pass cannot order it with grad)."""
    jitted = thunder.jit(fn, transforms=[InplaceBarrierTransform()])
    try:
        jitted(*make_args(True))
    except InplaceOrderingError:
        pass
    (report,) = [r.detached_writes for r in last_reports(jitted)] or [None]
    assert report is None or (not report.split and report.left_with_grad)


def test_under_thunderfx_the_detached_input_thunder_merges_is_refused():
    """Dynamo splits the graph at ``detach`` and hands the detached tensor on as an input;
    Thunder replaces it with the tensor it was detached from (requiring grad), which no
    transform can undo.  The prologue says so (class 7)."""
    jitted = compile_fn(clamp_through_detach, Config(fusion_type="dataflow", entry="thunderfx"))
    with pytest.raises(InputAliasError, match="detach"):
        jitted(_x(True), _x(True))


def detach_returned(a, c):  # soak seed 94000, shortened
    t0 = c.mean(1)
    t0.cos_()
    return t0, a.detach()


def detach_read_without_a_write(a, c):
    return c * 2, a.detach() * 3, (a * c).sum()


@pytest.mark.parametrize("fn", [detach_returned, detach_read_without_a_write])
def test_what_detach_returns_carries_no_gradient(fn):
    """Thunder differentiates ``detach`` (PyTorch's VJP, called back): the caller's ``a`` got a
    zero gradient from it where eager gives ``None`` (soak seed 94000, silently wrong; plain
    Thunder too), and ``torch_compile_ex`` failed on that VJP.  The transform tags what
    ``detach`` returns as a constant for autodiff."""
    make = lambda g: (_x(g), _x(False))  # noqa: E731
    judgement = judge_function(fn, make, configs=JIT_CELLS)
    assert [c.status for c in judgement.cells] == ["correct"] * len(judgement.cells), judgement.cells
    plain = judge_function(fn, make, grad_modes=(True,), configs=(replace(CONFIGS[0], transform=False),)).cells
    assert fn is not detach_returned or plain[0].status == "wrong", plain


def detached_tensor_written_then_returned(a, w):
    d = a.detach()
    d[0] = 0.5  # into a itself, without grad: what the write returns is still the detached tensor
    return d, (a * w).sum()


def detached_view_read_after_a_write_through_detach(a, w):
    d = a.detach()
    v = d[1:]
    d.mul_(2)
    return v + 1, d.sum() * w


def relu_then_a_write_through_detach(a, b, c):  # soak seed 95000
    a[0] = 0.5
    b.mul_(a)
    t0 = c.detach()
    t1 = c.sum(1)
    F.relu(t1, inplace=True)
    t0[0] = 0.5
    a[1:] = 0.5
    return (t1, b, t0)


@pytest.mark.parametrize(
    "fn, make_args",
    [
        (detached_tensor_written_then_returned, lambda g: (_x(g) * 1, _x(g))),
        (detached_view_read_after_a_write_through_detach, lambda g: (_x(g) * 1, _x(g))),
        (relu_then_a_write_through_detach, lambda g: (_x(False).t().contiguous().t(), _x(False), _x(g) * 1)),
    ],
    ids=lambda f: getattr(f, "__name__", ""),
)
def test_the_detached_tensor_after_a_no_grad_write_carries_no_gradient(fn, make_args):
    """The write into ``detach(a)`` goes into ``a`` itself, without grad; what it returns, and
    later reads of the detached tensor, were read as ``a``'s new version, which a barrier then
    renamed to a name that carries ``a``'s gradient: eager's ``d`` carries none (soak seed 95000,
    silently wrong in every ``thunder.jit`` cell with grad).  They read a ``detach`` of that
    version now.  (``torch_compile_ex`` with consecutive fusion crashes on the first, with grad,
    as plain Thunder does: AOT autograd's leafness check there.)"""
    cells = judge_function(fn, make_args, configs=JIT_CELLS).cells
    bad = [c for c in cells if c.status != "correct" and not (c.status == "crash" and c.plain == "crash")]
    assert cells and not bad, [c.detail for c in bad]
    assert sum(c.status == "correct" for c in cells) >= len(cells) - 1


def detach_of_private_storage_written_later(w):
    h = w * 1
    d = h.detach()  # the functionalizer makes d again from h's new value
    h.mul_(2)
    return d * 3, h


def test_a_detach_made_again_from_a_new_value_stays_a_constant():
    """A view the functionalizer makes again keeps the original's tags: ``detach`` made again
    on ``h``'s new value is still a constant for autodiff.  Untagged, Thunder differentiated it
    through PyTorch's VJP, which ``torch_compile_ex`` fails on."""
    cells = judge_function(detach_of_private_storage_written_later, lambda g: (_x(g),), configs=JIT_CELLS).cells
    assert [c.status for c in cells] == ["correct"] * len(cells), [c.detail for c in cells]
