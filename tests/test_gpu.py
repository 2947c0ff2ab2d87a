"""The gallery on CUDA with nvFuser (default executors, dataflow fusion), compared with eager.

nvFuser can only write to inputs of its fusion regions and asserts that the return is last,
so these cells exercise the barrier placement rules that CPU runs cannot.  They skip
cleanly on a machine without CUDA or nvFuser.
"""

from __future__ import annotations

import pytest
import torch

from support import requires_nvfuser
from thunder_ext.compare import Config, differential
from thunder_ext.gallery import by_name

pytestmark = [pytest.mark.gpu, requires_nvfuser]

GPU_PROGRAMS = (
    "dead_intermediate",
    "write_view_of_input",
    "war_long_chain",
    "view_after_write",
    "batch_norm_running_stats",
    "batch_norm_grad",
    "copy_into_intermediate",
    "loop_inplace",
)


def _on_cuda(build):
    def wrapped():
        fn, args, state = build()
        moved = tuple(
            a.detach().to("cuda").requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args
        )
        return fn, moved, state

    return wrapped


@pytest.mark.parametrize("name", GPU_PROGRAMS)
@pytest.mark.parametrize("entry", ["jit", "thunderfx"])
def test_gallery_on_nvfuser(name: str, entry: str):
    """With the transform, the program on CUDA with nvFuser under dataflow fusion matches eager."""
    config = Config(transform=True, fusion_type="dataflow", executors="default", entry=entry, check=True)
    verdict = differential(_on_cuda(by_name(name).build), config)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"
