"""One rank of the distributed differential runs of ``tests/test_distributed.py``.

Run as a script, once per rank (``python tests/distributed_worker.py --rank 0 ...``): it
joins a FileStore rendezvous (no TCP port), trains the same small in-place model for a few
SGD steps in eager PyTorch data parallel (the reference) and through Thunder's distributed
transform in several variants, and writes every tensor the comparison needs to
``<out>/rank<R>.pt``.  The parent test compares; this script only records.  Any exception
propagates, so the traceback lands on stderr, which the parent shows.

Not collected by pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

STEPS = 3
BATCH = 6
LR = 0.1
# Small enough that the model's gradients (4.7 KB in float64) split into several
# multi-gradient buckets, if Thunder buckets at all (see test_ddp_gradient_bucketing_is_applied).
SMALL_BUCKET_MB = 0.001
DEFAULT_BUCKET_MB = 25.0


class InplaceNet(nn.Module):
    """In-place ReLUs, an in-place residual, and one BatchNorm applied twice per forward.

    Applying ``bn`` twice updates its running stats twice per step; plain Thunder under
    dataflow fusion loses one of those updates (README, "The problem").
    """

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)  # every first dimension is even: FSDP shards dim 0 across 2 ranks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.bn(self.fc1(x)))
        r = self.bn(self.fc2(h))
        r += h
        r.relu_()
        return self.head(r)


def _batches(rank: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # Different data on each rank: a missing or wrong gradient all-reduce changes the numbers.
    g = torch.Generator().manual_seed(100 + rank)
    return [
        (
            torch.randn(BATCH, 8, generator=g, dtype=torch.float64).to(device),
            torch.randn(BATCH, 4, generator=g, dtype=torch.float64).to(device),
        )
        for _ in range(STEPS)
    ]


def _train(
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    grads_of: Callable[[], dict[str, torch.Tensor]],
) -> dict[str, Any]:
    """SGD steps; records each step's output and gradients (before the step)."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    outputs, grads = [], []
    for x, target in batches:
        opt.zero_grad()
        out = model(x)
        ((out - target) ** 2).sum().backward()
        outputs.append(out.detach().cpu().clone())
        grads.append({k: v.detach().cpu().clone() for k, v in grads_of().items()})
        opt.step()
    return {"outputs": outputs, "grads": grads}


def _cpu(named: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in named.items()}


def _backward_symbols(jm) -> list[str]:
    import thunder

    return [b.sym.name for b in thunder.last_backward_traces(jm)[-1].bound_symbols]


def _eager_ddp(base: nn.Module, batches, device: torch.device) -> dict[str, Any]:
    em = copy.deepcopy(base)
    # broadcast_buffers=False: each rank keeps its own running stats, as Thunder's DDP does.
    ddp = nn.parallel.DistributedDataParallel(
        em, broadcast_buffers=False, device_ids=[device.index] if device.type == "cuda" else None
    )
    run = _train(ddp, batches, lambda: {n: p.grad for n, p in em.named_parameters()})
    run["params"] = _cpu(dict(em.named_parameters()))
    run["buffers"] = _cpu(dict(em.named_buffers()))
    return run


def _thunder_distributed(base: nn.Module, batches, dist_transform, *, barrier: bool) -> dict[str, Any]:
    """Train a copy of ``base`` through ``thunder.jit`` with ``dist_transform`` (DDP or FSDP), and maybe ours."""
    import thunder

    from thunder_ext import InplaceBarrierTransform

    tm = copy.deepcopy(base)
    transforms: list = [dist_transform]
    if barrier:
        transforms.append(InplaceBarrierTransform(check=True))
    jm = thunder.jit(tm, fusion_type="dataflow", transforms=transforms)
    # Under FSDP, parameters and their gradients are this rank's shard (dim 0); the parent slices eager's.
    run = _train(jm, batches, lambda: {n: p.grad for n, p in jm.named_parameters()})
    run["params"] = _cpu(dict(jm.named_parameters()))
    run["buffers"] = _cpu(dict(jm.named_buffers()))
    run["backward_symbols"] = _backward_symbols(jm)
    return run


def _thunder_ddp(base: nn.Module, batches, *, barrier: bool, bucket_mb: float) -> dict[str, Any]:
    from thunder.distributed.transforms.ddp_v2 import DDPTransform

    ddp = DDPTransform(process_group=dist.group.WORLD, bucket_size_in_mb=bucket_mb, broadcast_from=0)
    return _thunder_distributed(base, batches, ddp, barrier=barrier)


def _thunder_fsdp(base: nn.Module, batches, device: torch.device, *, barrier: bool) -> dict[str, Any]:
    from thunder.distributed.transforms.fsdp_v2 import FSDPTransform

    fsdp = FSDPTransform(device=device, process_group=dist.group.WORLD)
    return _thunder_distributed(base, batches, fsdp, barrier=barrier)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--store", required=True, help="FileStore path for the rendezvous")
    p.add_argument("--out", required=True, help="directory for rank<R>.pt")
    # Several modes share one launch: process start and Thunder's import dominate its time.
    p.add_argument("--modes", default="ddp,fsdp", help="comma-separated: ddp, fsdp")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = p.parse_args(argv)

    if a.device == "cuda":
        device = torch.device("cuda", a.rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # A short collective timeout: a rank that died must not leave the other hanging for 30 min.
    dist.init_process_group(
        backend,
        init_method=f"file://{a.store}",
        rank=a.rank,
        world_size=a.world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        torch.manual_seed(0)
        base = InplaceNet().double().to(device)  # float64: the comparison can use tight tolerances
        batches = _batches(a.rank, device)
        result: dict[str, Any] = {"rank": a.rank, "world_size": a.world_size, "eager": _eager_ddp(base, batches, device)}
        modes = a.modes.split(",")
        if "ddp" in modes:
            result["ddp_small_buckets"] = _thunder_ddp(base, batches, barrier=True, bucket_mb=SMALL_BUCKET_MB)
            result["ddp_default_buckets"] = _thunder_ddp(base, batches, barrier=True, bucket_mb=DEFAULT_BUCKET_MB)
            result["ddp_plain"] = _thunder_ddp(base, batches, barrier=False, bucket_mb=SMALL_BUCKET_MB)
        if "fsdp" in modes:
            result["fsdp"] = _thunder_fsdp(base, batches, device, barrier=True)
        torch.save(result, os.path.join(a.out, f"rank{a.rank}.pt"))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
