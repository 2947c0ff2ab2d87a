"""Class 9: a write in place to an input that requires grad.

Called with ``x = leaf * 1`` (a non-leaf, so eager allows the write), eager gives ``leaf`` the
gradient through ``x``, before and after the write.  Thunder (plain, both fusion types) returns
outputs without that history: the whole gradient path through ``x`` is silently dropped.  The
transform makes the write a value and gives the caller's ``x`` that value's history after the
call (:mod:`thunder_ext.input_histories`), so outputs and ``x`` itself differentiate as in eager.
It refuses (:class:`GradInputWriteError`) what it cannot answer so: writes mixed with no-grad
writes into the same input, and a write through ``contiguous()``.  Where no returned output
reads the written ``x`` and the caller never reads it either, ``leaf`` gets a zero gradient
where eager gives none (documented; ``torch.compile`` the same).

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


def _assert_matches_eager(fn, config: Config, *, zeros_for_none: bool = False) -> None:
    """Output, final ``x`` and the leaves' gradients as in eager, and the gradient of a loss
    taken through the caller's ``x`` after the call; twice (the second runs the cached traces).

    ``zeros_for_none``: a leaf eager gives no gradient (``None``) may get zeros, the documented
    difference where no output reads the written ``x`` (docs/limits.md, "differ from eager on
    purpose"; ``torch.compile`` gives the same zeros)."""
    compiled = compile_fn(fn, config)
    for _ in range(2):
        got, want = list(_run(compiled)), list(_run(fn))
        for k in (2, 3):
            if zeros_for_none and want[k] is None and got[k] is not None:
                assert not got[k].any(), got[k]
                got[k] = None
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(_run_through_input(compiled), _run_through_input(fn))


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", DEPENDENT, ids=lambda f: f.__name__)
def test_dependent_output_gets_eagers_gradients(fn, config: Config):
    _assert_matches_eager(fn, config)


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
def test_output_independent_of_written_input(fn, config: Config):
    """The caller's ``x`` gets the write's history, through both entries.  Where the caller
    never reads ``x``, Thunder's one backward node gives ``leaf`` a zero gradient where eager gives
    none (the output does not read ``x``): the documented difference."""
    _assert_matches_eager(fn, config, zeros_for_none=True)


def test_plain_thunder_leaves_the_caller_without_the_writes_history():
    """Why the history matters: eager's gradient through ``x`` after ``x.mul_(2)`` is 2, plain
    Thunder's is 1 (and on a leaf, eager refuses the write)."""
    eager = _run_through_input(scale_unrelated_to_output)
    plain = _run_through_input(compile_fn(scale_unrelated_to_output, PLAIN_HAZARD))
    torch.testing.assert_close(eager, torch.full((4, 3), 2.0))
    torch.testing.assert_close(plain, torch.full((4, 3), 1.0))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        scale_unrelated_to_output(torch.randn(4, 3, requires_grad=True), torch.randn(4, 3))


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_write_through_view_of_grad_input(fn, config: Config):
    """Eager's answer, through both entries: the writes become values, and ``x`` adopts their
    history (zeros for ``None`` where nothing reads ``x``, see above)."""
    _assert_matches_eager(fn, config, zeros_for_none=True)


@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_plain_thunder_cannot_write_through_view_of_grad_input(fn, fusion_type):
    """Why answering them matters: eager runs these programs, plain Thunder raises."""
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
