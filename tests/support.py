"""Helpers shared by the test modules: the configuration matrix and device skips."""

from __future__ import annotations

import itertools

import pytest
import thunder
import torch
from packaging.version import Version

from thunder_ext.testing.compare import Config


def _has_nvfuser() -> bool:
    # Ask Thunder: it registers nvFuser only with CUDA and a recent enough nvfuser (or
    # nvfuser_direct, the module newer wheels ship).
    from thunder.executors.nvfuserex import nvfuser_available

    return nvfuser_available()


# Thunder ``main`` (0.2.7.dev0 from shared/wheels) or a later release, as opposed to 0.2.6 from the index.
THUNDER_MAIN = Version(thunder.__version__) > Version("0.2.6")

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
requires_nvfuser = pytest.mark.skipif(not _has_nvfuser(), reason="needs CUDA and nvFuser")

FUSION_TYPES = ("consecutive", "dataflow")
EXECUTORS = ("default", "torch_compile")
ENTRIES = ("jit", "thunderfx")

# Every cell of the matrix with the transform on (and its checker on).
MATRIX = tuple(
    Config(transform=True, fusion_type=f, executors=e, entry=n, check=True)
    for f, e, n in itertools.product(FUSION_TYPES, EXECUTORS, ENTRIES)
)
# The configuration where the failure classes reproduce with plain Thunder.
PLAIN_HAZARD = Config(transform=False, fusion_type="dataflow", executors="default", entry="jit", check=False)


def config_id(c: Config) -> str:
    return str(c)

ARGS_TENSOR_MASK = (
    "ThunderFX itself fails on torch.autograd.Function (KeyError 'args_tensor_mask' while tracing the "
    "GraphModule) with torch 2.11 + thunder 0.2.6, in plain Thunder too: "
    "see test_catalogue.py::test_autograd_function_thunderfx_in_plain_thunder"
)
# Thunder main fixed ThunderFX on torch.autograd.Function, so the failure above is 0.2.6's only.
ARGS_TENSOR_MASK_FAILS = not THUNDER_MAIN


def refused_where_eager_answers(a, b):
    """A construct the transform refuses (``GradInputWriteError``, class 9) where eager answers: a
    write with grad through ``contiguous()`` of a non-leaf input that requires grad (``a`` itself
    in eager, which rebases its history), a form the transform does not make a value."""
    t0 = a.contiguous()
    t0.add_(b)
    return t0, a * 2


def refused_where_eager_answers_args() -> tuple[torch.Tensor, ...]:
    return torch.randn(4, 3, requires_grad=True) * 1, torch.randn(4, 3)
