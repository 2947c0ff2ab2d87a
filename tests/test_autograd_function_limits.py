"""Class 8: which ``autograd.Function`` forwards with in-place ops Thunder can trace (docs/limits.md, class 8).

Thunder runs its own alias pass inside its ``autograd.Function`` lookaside while it acquires
the trace, before any transform hook; for these forwards it fails with "Detected a cycle while
swapping", with or without the transform.  This keeps the table in docs/limits.md true on both Thunders,
and notices when Thunder fixes one of them (the test then fails and the table must change).
"""

from __future__ import annotations

import pytest
import thunder
import torch

from support import THUNDER_MAIN
from thunder_ext import InplaceBarrierTransform


class RoundReturned(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, s):
        q = w.clone()
        q.round_()
        return q

    @staticmethod
    def backward(ctx, g):
        return g, None


class RoundThenScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, s):
        q = (w / s).round_()
        return q * s

    @staticmethod
    def backward(ctx, g):
        return g, None


class RoundThenClamp(torch.autograd.Function):
    """A straight-through fake quantizer."""

    @staticmethod
    def forward(ctx, w, s):
        q = w.clone()
        q.round_()
        return q.clamp(-2, 2)

    @staticmethod
    def backward(ctx, g):
        return g, None


class ClampSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, s):
        q = w / s
        q.clamp_(-8, 7)
        ctx.save_for_backward(w)
        return q * s

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g * (w.abs() < 8), None


class Chained(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, s):
        q = w.clone()
        q.div_(s).round_().clamp_(-8, 7).mul_(s)
        return q

    @staticmethod
    def backward(ctx, g):
        return g, None


# Function -> whether Thunder traces it, on (0.2.6, main).
TRACES = {
    RoundReturned: (True, True),
    RoundThenScale: (True, False),
    RoundThenClamp: (False, False),
    ClampSaved: (False, False),
    Chained: (False, False),
}


@pytest.mark.parametrize("transform", [False, True], ids=["plain", "transform"])
@pytest.mark.parametrize("fn_cls", list(TRACES), ids=lambda c: c.__name__)
def test_autograd_function_inplace_forward(fn_cls, transform: bool):
    traces = TRACES[fn_cls][THUNDER_MAIN]

    def f(w, s):
        return fn_cls.apply(w, s) * 2

    jf = thunder.jit(f, transforms=[InplaceBarrierTransform(check=True)] if transform else [])
    torch.manual_seed(0)
    w, s = torch.randn(6, requires_grad=True), torch.tensor(0.5)
    we = w.detach().clone().requires_grad_()
    if not traces:
        with pytest.raises(Exception, match="Detected a cycle while swapping"):
            jf(w, s)
        return
    out = jf(w, s)
    expected = f(we, s)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(w.grad, we.grad)
