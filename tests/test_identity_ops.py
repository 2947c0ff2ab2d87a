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
