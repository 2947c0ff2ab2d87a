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

from dataclasses import replace

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


def write_through_view_then_input(x, w):
    t = x.unsqueeze(0)
    t.clamp_(-1.0, 1.0)
    x.clamp_(-1.0, 1.0)  # a write to x itself after the view write
    return w * 2


def write_through_index_then_input(x, w):
    x[0].add_(1)
    x.mul_(2)
    return w + 1


def write_through_view_without_grad(x, w):
    with torch.no_grad():
        x[0].add_(1)
    x.mul_(2)
    return w + 1


# Writes through a view of an input that requires grad; no output depends on it (soak seed 9700).
VIEW_WRITES = [write_through_view_then_input, write_through_index_then_input]


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


def scale_unrelated_to_output(x, w):
    x.mul_(2)  # the output does not depend on x, but the caller's x now carries the write's history
    return w * 2


def _run_through_input(fn):
    """``_run``, then differentiate through the caller's ``x`` after the call, as a caller may."""
    torch.manual_seed(0)
    leaf, w = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    x = leaf * 1
    fn(x, w)
    x.sum().backward()
    return leaf.grad


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", [write_unrelated_to_output, scale_unrelated_to_output], ids=lambda f: f.__name__)
def test_output_independent_of_written_input_is_refused(fn, config: Config):
    """The caller's tensor cannot receive the write's history, whatever the outputs read."""
    with pytest.raises(Exception) as info:
        _run(compile_fn(fn, config))
    err = error_in_chain(info.value, GradInputWriteError)
    assert err is not None and "after the call" in str(err), repr(info.value)


def test_plain_thunder_leaves_the_caller_without_the_writes_history():
    """Why that refusal is not a regression: eager's gradient through ``x`` after ``x.mul_(2)`` is 2,
    plain Thunder's is 1 (and on a leaf, eager refuses the write)."""
    eager = _run_through_input(scale_unrelated_to_output)
    plain = _run_through_input(compile_fn(scale_unrelated_to_output, PLAIN_HAZARD))
    torch.testing.assert_close(eager, torch.full((4, 3), 2.0))
    torch.testing.assert_close(plain, torch.full((4, 3), 1.0))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        scale_unrelated_to_output(torch.randn(4, 3, requires_grad=True), torch.randn(4, 3))


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_write_through_view_of_grad_input_is_refused(fn, config: Config):
    """A clear refusal naming the write and its line, where Thunder's runtime would crash."""
    with pytest.raises(Exception) as info:
        _run(compile_fn(fn, config))
    err = error_in_chain(info.value, GradInputWriteError)
    assert err is not None, repr(info.value)
    assert "a view of the input" in str(err), str(err)
    if config.entry == "jit":  # ThunderFX names the line of its FX graph instead
        assert "a view of the input `x`" in str(err) and "test_grad_input_writes.py:" in str(err), str(err)


@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_plain_thunder_cannot_write_through_view_of_grad_input(fn, fusion_type):
    """Why the refusal is not a regression: eager runs these programs, plain Thunder raises."""
    _run(fn)  # eager runs it
    plain = replace(PLAIN_HAZARD, fusion_type=fusion_type)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        _run(compile_fn(fn, plain))


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
def test_write_through_view_of_grad_input_without_grad_is_not_what_is_refused(config: Config):
    """The view write under ``torch.no_grad()`` runs in Thunder; the later ``x.mul_(2)`` with grad
    is refused, because the caller's ``x`` cannot receive its history (plain Thunder drops it)."""
    with pytest.raises(Exception) as info:
        _run(compile_fn(write_through_view_without_grad, config))
    err = error_in_chain(info.value, GradInputWriteError)
    assert err is not None and "after the call" in str(err) and "a view of the input" not in str(err), repr(err)
    assert "mul_" in str(err), str(err)


# -- writes made with grad disabled: never refused, and eager's gradients ------------------------
#
# In eager a write under ``torch.no_grad()`` changes the data and keeps the tensor's autograd
# history: later reads differentiate into the tensor as it was (an EMA update, then a read).
# Thunder's write output is constant for autodiff, so plain Thunder drops that gradient; the
# transform reads such storage through a straight-through barrier instead.


def ema_under_no_grad(x, w):
    with torch.no_grad():
        x.lerp_(w, 0.1)
    return (x * x).sum() + w.sum()


def chained_writes_under_no_grad(x, w):
    with torch.no_grad():
        t = x.mul_(0.9).add_(w, alpha=0.1)
    return t * 2 + x.sin()


def set_grad_enabled_false(x, w):
    torch.set_grad_enabled(False)
    x.add_(w)
    torch.set_grad_enabled(True)
    return x * w


@torch.no_grad()
def decorated_no_grad(x, w):
    x.lerp_(w, 0.5)
    return x * 2


def private_write_under_no_grad(x, w):
    h = x * w
    with torch.no_grad():
        h.mul_(2)  # h keeps its history; the gradient sees the doubled data
    return h.sum() + (h * h).sum()


def copy_of_a_constant_under_no_grad(x, w):
    with torch.no_grad():
        x.copy_(torch.full_like(x, 2.0))  # a reset: later reads still differentiate into x
    return x.cos() * w


NO_GRAD_WRITES = [ema_under_no_grad, chained_writes_under_no_grad, set_grad_enabled_false, decorated_no_grad,
                  private_write_under_no_grad, copy_of_a_constant_under_no_grad]


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", NO_GRAD_WRITES, ids=lambda f: f.__name__)
def test_write_without_grad_matches_eager(fn, config: Config):
    """Outputs, the written input, and the leaves' gradients are eager's; nothing is refused."""
    expected = _run(fn)
    got = _run(compile_fn(fn, config))
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("fn", [ema_under_no_grad, chained_writes_under_no_grad, private_write_under_no_grad,
                                copy_of_a_constant_under_no_grad], ids=lambda f: f.__name__)
def test_plain_thunder_drops_the_gradient_after_a_write_without_grad(fn):
    """Why the cells above are evidence: plain Thunder gets these gradients wrong."""
    eager = _run(fn)
    plain = _run(compile_fn(fn, PLAIN_HAZARD))
    assert eager[2] is not None
    assert plain[2] is None or not torch.allclose(plain[2], eager[2])
