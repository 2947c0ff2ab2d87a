"""Helpers shared by the test modules: the configuration matrix and device skips."""

from __future__ import annotations

import itertools

import pytest
import torch

from thunder_ext.compare import Config


def _has_nvfuser() -> bool:
    try:
        import nvfuser  # noqa: F401
    except Exception:
        return False
    return torch.cuda.is_available()


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
