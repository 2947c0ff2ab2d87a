"""Ops that hand back their input unchanged, after an in-place write to private storage.

``dropout`` with ``p=0`` (or in eval mode), a no-op ``to``/``type_as``, and ``contiguous`` trace as
a composite around ``prims.shallow_copy`` (or a may-alias op).  When such an op follows a write
whose backward needs the value before it (``h.sin_()``), the write must still be made
functional; otherwise autodiff reads the overwritten value and the gradient is silently wrong
(plain Thunder is wrong on every shape here: ``test_plain_thunder_is_wrong``).  The write may
also go *through* the identity op's output, which then writes its input whole.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from support import MATRIX, PLAIN_HAZARD, config_id
from thunder_ext.testing.compare import Config, differential


def dropout_eval(x, w):
    h = x * w
    h.sin_()
    return F.dropout(h, 0.0, training=False) + x


def dropout_train_p0(x, w):
    h = x * w
    h.sin_()
    return F.dropout(h, 0.0, training=True) + x


def to_same_dtype(x, w):
    h = x * w
    h.sin_()
    return h.to(torch.float64) + x


def type_as_same_dtype(x, w):
    h = x * w
    h.sin_()
    return h.type_as(x) + x


def contiguous_after_write(x, w):
    h = x * w
    h.sin_()
    return h.contiguous() + x


def write_through_identity(x, w):
    h = x * w
    h2 = h.type_as(x)
    h2[0].mul_(2)  # writes h's first row
    return h.sin() + h2


def write_whole_through_dropout(x, w):
    h = x * w
    F.dropout(h, 0.0, training=False).mul_(2)  # writes h
    return h.sin() + x


SHAPES = (dropout_eval, dropout_train_p0, to_same_dtype, type_as_same_dtype, contiguous_after_write,
          write_through_identity, write_whole_through_dropout)


def _build(fn):
    def build():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(3, 4, generator=g, dtype=torch.float64).requires_grad_()
        w = torch.randn(3, 4, generator=g, dtype=torch.float64).requires_grad_()
        return fn, (x, w), {}

    return build


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", SHAPES, ids=lambda f: f.__name__)
def test_identity_op_after_write_matches_eager(fn, config: Config):
    verdict = differential(_build(fn), config)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"


@pytest.mark.parametrize("fn", SHAPES[:5], ids=lambda f: f.__name__)
def test_plain_thunder_is_wrong(fn):
    """The shapes above are evidence: plain Thunder's gradient is wrong on each."""
    verdict = differential(_build(fn), PLAIN_HAZARD)
    assert verdict.status == "wrong", f"{verdict.status}: {verdict.detail}"


# Soak seed 67000: the same ops on inputs and buffers, where eager's result *is* the input.  Each
# was refused where plain Thunder is right, or silently wrong (plain Thunder too), until identity
# ops were folded into their inputs before any analysis (thunder_ext.identity_ops).


def subtract_own_identity(b):
    t0 = b.to(torch.float32)  # t0 is b: b - b over the same positions (was OverlappingSourceError)
    b.sub_(t0)
    return b + 1


def identity_read_after_private_write(a):
    h = a * 1
    h.div_(0.5)
    t0 = F.dropout(h, 0.5, False)  # t0 is h: it reads the write after it (was ViewGradientError)
    h.div_(2.0)
    return t0


def return_identity_of_written_buffer(a, rm):
    t0 = rm.to(torch.float32)  # t0 is rm, so it carries copy_'s history (plain: no gradient for a)
    rm.copy_(a.sum(0))
    return t0


def view_and_identity_of_input_written_with_grad(a, c):
    t0 = c[0]
    t1 = c.to(torch.float32)  # plain Thunder: a's gradient misses t1's share
    c += a
    return t0, t1


def write_through_eval_dropout_of_input(a, b, c):
    c.copy_(a)
    a.abs_()
    t1 = F.dropout(b, 0.5, False)  # t1 is b: the write reaches b (torch_compile_ex lost it)
    with torch.no_grad():
        t1.mul_(1.5)
    return t1


def identity_of_input_read_after_writes(a, b):
    a.cos_()
    t0 = b.to(torch.float32)
    t1 = t0 @ a.t()
    b.sub_(a)
    t2 = t0.type_as(t0)  # b after sub_ (torch_compile_ex returned b before it)
    a[1:] = 0.5
    return t2, t1


def identity_made_under_no_grad(x, w):
    with torch.no_grad():
        v = x.to(torch.float32)  # x itself in eager, so it requires grad (plain Thunder: no gradient for x)
    return v * w


def identity_written_under_no_grad(x, w):
    h = x * 1
    with torch.no_grad():
        v = h.to(torch.float32)  # h itself: the write below, with grad, is h's (plain Thunder: wrong gradient)
    v.mul_(w)
    return h


def view_made_under_no_grad(x, w):
    with torch.no_grad():
        v = x.reshape(4, 3)  # a new tensor in eager, not x: it does not require grad, so is not folded
    return v * w


def identity_returned_beside_its_input(a):
    t0 = a.sum(1)
    t1 = t0.type_as(t0)  # t1 is t0: two outputs, one tensor, each with its own cotangent (soak seed 68000)
    t0[0] = 2.0
    return t0, t1


def identity_returned_from_no_grad(x, w):
    h = x * w
    with torch.no_grad():
        v = h.to(torch.float32)  # h itself, which has history
    h.mul_(2)
    return v


def identity_of_written_input_returned_beside_it(a, b):
    t0 = b.to(torch.float32)
    b.sub_(a)
    return b, t0  # one tensor in eager, two outputs


# Ops Thunder registers automatically (it has no symbol of its own for them) are opaque to it,
# and their outputs new tensors; eager hands back the input object: ``torch.positive``,
# ``t.cpu()`` on the CPU, ``F.alpha_dropout`` with ``p=0``.  Plain Thunder is wrong on the first,
# and the transform was wrong on both (the second where plain Thunder is right).


def positive_after_private_write(x, w):
    h = x * w
    h.sin_()
    return torch.positive(h) + x  # h itself: its backward needs h after sin_


def write_through_positive_of_private(x, w):
    h = x * w
    h2 = torch.positive(h)
    h2[0].mul_(2)  # writes h's first row
    return h.sin() + h2


def auto_registered_identities_of_input_read_after_writes(a, b):
    a.cos_()
    t0 = F.alpha_dropout(b, 0.0, True)  # b itself
    t1 = t0 @ a.t()
    b.sub_(a)
    t2 = t0.cpu()  # b after sub_
    a[1:] = 0.5
    return t2, t1


# program -> the inputs that require grad (in the grad run); every input is (4, 3), except rm (3,)
GRAD_INPUTS = {
    subtract_own_identity: (),
    identity_read_after_private_write: ("a",),
    return_identity_of_written_buffer: ("a",),
    view_and_identity_of_input_written_with_grad: ("a",),
    write_through_eval_dropout_of_input: (),
    identity_of_input_read_after_writes: (),
    identity_made_under_no_grad: ("x", "w"),
    identity_written_under_no_grad: ("x", "w"),
    view_made_under_no_grad: ("x", "w"),
    identity_returned_beside_its_input: ("a",),
    identity_returned_from_no_grad: ("x", "w"),
    identity_of_written_input_returned_beside_it: ("a",),
    positive_after_private_write: ("x", "w"),
    write_through_positive_of_private: ("x", "w"),
    auto_registered_identities_of_input_read_after_writes: (),
}
# Refused under ThunderFX with grad (a value that carries a gradient written into a plain input
# is answered there too: the input adopts the write's history, thunder_ext/input_histories.py)
GRADIENT_INTO_INPUT = {
    # ThunderFX leaves the op Thunder has no symbol of to Inductor: `h` and `h2` reach the next
    # Thunder region as two inputs, one tensor that requires grad, written with grad (class 9)
    write_through_positive_of_private: "GradInputWriteError",
}


def _build_inputs(fn, grad: bool):
    def build():
        g = torch.Generator().manual_seed(1)
        names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        args = [torch.randn(3 if n == "rm" else (4, 3), generator=g) for n in names]
        for n, t in zip(names, args):
            t.requires_grad_(grad and n in GRAD_INPUTS[fn])
        return fn, tuple(args), {}

    return build


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("fn", list(GRAD_INPUTS), ids=lambda f: f.__name__)
def test_identity_op_is_its_input(fn, config: Config):
    import thunder_ext
    from thunder_ext.testing.compare import error_in_chain

    for grad in (False, True) if GRAD_INPUTS[fn] else (False,):
        verdict = differential(_build_inputs(fn, grad), config)
        if grad and fn in GRADIENT_INTO_INPUT and config.entry == "thunderfx":
            refusal = getattr(thunder_ext, GRADIENT_INTO_INPUT[fn])
            assert verdict.status == "refused" and error_in_chain(verdict.outcome.error, refusal), verdict.detail
            continue
        assert verdict.status == "correct", f"grad={grad}: {verdict.status}: {verdict.detail}"


def test_identity_ops_are_folded_into_their_inputs():
    """Before autodiff the trace has no identity op left, and the return hands back the buffer."""
    import thunder

    from thunder_ext import last_reports
    from thunder_ext.transforms import InplaceBarrierTransform

    jf = thunder.jit(return_identity_of_written_buffer, transforms=[InplaceBarrierTransform()])
    fn, args, _ = _build_inputs(return_identity_of_written_buffer, True)()
    jf(*args)
    (folded_op,) = last_reports(jf)[0].identity_ops_folded
    assert folded_op.startswith("t0 = to(")
    first = thunder.last_traces(jf)[0]
    folded = next(t for t in thunder.last_traces(jf) if "thunder_ext barriers" in str(t.get_provenance()))
    assert "to" in [b.sym.name for b in first.bound_symbols]
    assert "to" not in [b.sym.name for b in folded.bound_symbols]
