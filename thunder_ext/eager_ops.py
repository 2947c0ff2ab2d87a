"""The transform's own operator executor, ``thunder_ext_eager``, and the symbols it runs.

Its symbols run eagerly, through PyTorch, and no fusion executor takes them: ``torch_compile_ex``
fuses whatever the torch executor runs, so a bsym that must stay outside every Inductor region is
bound here (:func:`thunder_ext.inductor_regions.eager_scatter`).  The executor is created once,
on first use, and registered nowhere: Thunder's module state is untouched, and a symbol of it
only ever reaches a trace through this package.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from thunder.core import prims
from thunder.extend import OperatorExecutor

_EXECUTOR: list[OperatorExecutor] = []
_FOREACH_COPY: list[object] = []
_COPY: list[object] = []


def eager_executor() -> OperatorExecutor:
    """``thunder_ext_eager``, created on the first call."""
    if not _EXECUTOR:
        _EXECUTOR.append(OperatorExecutor("thunder_ext_eager"))
    return _EXECUTOR[0]


def _foreach_copy_meta(sources: Sequence, destinations: Sequence) -> list:
    from thunder.core.proxies import TensorProxy

    return [TensorProxy(like=d) for d in destinations]


def _foreach_copy_impl(sources: Sequence[torch.Tensor], destinations: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    destinations = list(destinations)
    torch._foreach_copy_(destinations, list(sources))
    return destinations


def foreach_copy():
    """The symbol ``foreach_copy_(sources, destinations)``: ``destinations[i].copy_(sources[i])``
    for every ``i``, in one call (``torch._foreach_copy_``).  It returns the destinations, as
    ``copy_`` returns its own, and is never dead code (``DONT_DCE``): its effect is the write.  Callers keep every destination apart from
    every other destination and from every source (:mod:`thunder_ext.batched_copies`), since on
    CUDA the copies may run as one kernel, in no order."""
    if not _FOREACH_COPY:
        _FOREACH_COPY.append(
            eager_executor().register_operator(
                "foreach_copy_", meta=_foreach_copy_meta, fn=_foreach_copy_impl, tags=(prims.OpTags.DONT_DCE,)
            )
        )
    return _FOREACH_COPY[0]


def _copy_meta(source, destination):
    from thunder.core.proxies import TensorProxy

    return TensorProxy(like=destination)


def _copy_impl(source: torch.Tensor, destination: torch.Tensor) -> torch.Tensor:
    return destination.copy_(source)


def eager_copy():
    """The symbol ``eager_copy_(source, destination)``: ``destination.copy_(source)`` by PyTorch's
    own kernel, in ``prims.copy_``'s argument order.  For a copy whose source overlaps what it
    writes: eager's kernel reads the source as it goes, and no fusion executor's copy promises that
    order (:func:`thunder_ext.inductor_regions.eager_overlapping_copies`).  Never dead code."""
    if not _COPY:
        _COPY.append(eager_executor().register_operator("eager_copy_", meta=_copy_meta, fn=_copy_impl, tags=(prims.OpTags.DONT_DCE,)))
    return _COPY[0]
