"""The gallery on CUDA, compared with eager: with nvFuser, and with the CUDA torch executors.

nvFuser can only write to inputs of its fusion regions and asserts that the return is last,
so those cells exercise the barrier placement rules that CPU runs cannot.  The CUDA cells
without nvFuser run the default executors and ``torch_compile_ex`` (Inductor emitting Triton
kernels, which rematerializes differently from its CPU code).  Each test skips cleanly on a
machine without what it needs.
"""

from __future__ import annotations

import pytest
import torch

from support import ARGS_TENSOR_MASK, ARGS_TENSOR_MASK_FAILS, ENTRIES, EXECUTORS, requires_cuda, requires_nvfuser
from thunder_ext.testing.compare import Config, differential
from thunder_ext.testing.gallery import PROGRAMS, by_name, reference_outcome

pytestmark = [pytest.mark.gpu]

# Every program the transform accepts whose state is its arguments (a module's buffers would
# stay on the CPU).
GPU_PROGRAMS = tuple(p.name for p in PROGRAMS if not p.refused and not p.build()[2])


def _on_cuda(build):
    def wrapped():
        fn, args, state = build()
        moved = tuple(
            a.detach().to("cuda").requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args
        )
        return fn, moved, state

    return wrapped


def _differential_on_cuda(name: str, config: Config):
    """``differential`` on CUDA copies of the program's inputs; a program eager refuses (stricter
    version counter) is judged against its mutation-free reference, as in the CPU catalogue."""
    prog = by_name(name)
    build = _on_cuda(prog.build)
    return differential(build, config, eager=reference_outcome(prog, build))


def _cases():
    """(program, entry) pairs; ThunderFX's own failure on autograd.Function is a strict xfail."""
    for name in GPU_PROGRAMS:
        for entry in ENTRIES:
            upstream = ARGS_TENSOR_MASK_FAILS and name == "autograd_function_inplace" and entry == "thunderfx"
            marks = [pytest.mark.xfail(strict=True, reason=ARGS_TENSOR_MASK)] if upstream else []
            yield pytest.param(name, entry, marks=marks, id=f"{name}-{entry}")


def _expect(name: str, entry: str, config: Config) -> None:
    """The verdict the CPU catalogue expects: correct, or refused where the gallery documents
    the refusal for this entry (a value with a gradient written into an input, under ThunderFX)."""
    verdict = _differential_on_cuda(name, config)
    expected = "refused" if by_name(name).refused_in(entry) else "correct"
    assert verdict.status == expected, f"{verdict.status}: {verdict.detail}"


@requires_nvfuser
@pytest.mark.parametrize("name,entry", list(_cases()))
def test_gallery_on_nvfuser(name: str, entry: str):
    """With the transform, the program on CUDA with nvFuser under dataflow fusion matches eager."""
    _expect(name, entry, Config(transform=True, fusion_type="dataflow", executors="default", entry=entry, check=True))


@requires_cuda
@pytest.mark.parametrize("name,entry", list(_cases()))
@pytest.mark.parametrize("executors", EXECUTORS)
@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
def test_gallery_on_cuda(name: str, entry: str, executors: str, fusion_type: str):
    """With the transform, the program on CUDA tensors matches eager (nvFuser too, where installed)."""
    _expect(name, entry, Config(transform=True, fusion_type=fusion_type, executors=executors, entry=entry, check=True))
