"""Class 9: a write in place to an input that requires grad.

Called with ``x = leaf * 1`` (a non-leaf, so eager allows the write), eager gives ``leaf`` the
gradient through ``x``, before and after the write.  Thunder (plain, both fusion types) returns
outputs without that history: the whole gradient path through ``x`` is silently dropped.  The
transform refuses exactly the programs whose outputs depend on the written input
(:class:`GradInputWriteError`) and lets the others through, where plain Thunder is right.

The harness of the catalogue compares gradients of the arguments, which cannot see ``leaf``;
these tests differentiate to the leaves instead.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from support import MATRIX, PLAIN_HAZARD, config_id
from thunder_ext import GradInputWriteError
from thunder_ext.testing.compare import Config, compile_fn, error_in_chain


def add_after_read(x, w):
    t = x + w
    x.add_(1)
    return t


def relu_inplace_input(x, w):
    F.relu(x, inplace=True)
    return x * w


def scale_then_read(x, w):
    x.mul_(0.5)
    return x * 3 + w


def write_unrelated_to_output(x, w):
    x.add_(1)  # the output does not depend on x
    return w * 2


DEPENDENT = [add_after_read, relu_inplace_input, scale_then_read]


def _run(fn):
    """Call ``fn(x, w)`` with ``x = leaf * 1``; return output, final x, and the leaves' gradients."""
    torch.manual_seed(0)
    leaf, w = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    x = leaf * 1
    out = fn(x, w)
    if out.requires_grad:
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), x.detach(), leaf.grad, w.grad


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", DEPENDENT, ids=lambda f: f.__name__)
def test_dependent_output_is_refused(fn, config: Config):
    with pytest.raises(Exception) as info:
        _run(compile_fn(fn, config))
    assert error_in_chain(info.value, GradInputWriteError) is not None, repr(info.value)
    assert "requires grad" in str(error_in_chain(info.value, GradInputWriteError))


@pytest.mark.parametrize("fn", DEPENDENT, ids=lambda f: f.__name__)
def test_plain_thunder_drops_the_gradient(fn):
    """Why the refusal is not a regression: plain Thunder gives no gradient to the leaf behind ``x``."""
    eager = _run(fn)
    plain = _run(compile_fn(fn, PLAIN_HAZARD))
    assert eager[2] is not None and plain[2] is None


@pytest.mark.parametrize("config", (PLAIN_HAZARD, *MATRIX), ids=config_id)
def test_output_independent_of_written_input_matches_eager(config: Config):
    """No refusal where the outputs do not depend on the written input: plain Thunder and the transform match eager."""
    expected = _run(write_unrelated_to_output)
    got = _run(compile_fn(write_unrelated_to_output, config))
    torch.testing.assert_close(got, expected)
