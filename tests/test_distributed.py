"""Thunder's distributed transforms with the barrier transform, compared with eager data parallel.

Each launch starts one process per rank running ``tests/distributed_worker.py`` (rendezvous
through a FileStore under ``tmp_path``: no TCP port another test could hold).  Every rank
trains :class:`distributed_worker.InplaceNet` (in-place ReLUs, an in-place residual, one
BatchNorm applied twice per forward) in float64 for 3 SGD steps, in eager
``DistributedDataParallel(broadcast_buffers=False)`` and through Thunder under
``fusion_type="dataflow"``, and saves every step's outputs and gradients and the final
parameters and buffers.  The tests here compare them as ``thunder_ext.testing.compare`` does
(``torch.testing.assert_close`` with its float64 defaults).  Ranks see different data, so a
missing or wrong gradient all-reduce changes the numbers.

All CPU tests share one launch (both ranks, 4 Thunder compilations each): 50-55 s measured on
2 CPU cores shared with other jobs, under Thunder 0.2.6 and main, so nothing here is ``slow``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

WORKER = Path(__file__).with_name("distributed_worker.py")
WORLD_SIZE = 2
# A whole launch (imports, one compilation per Thunder variant, 3 steps) takes under a
# minute here; the collectives in the worker time out after 120 s.
LAUNCH_TIMEOUT_S = 300.0

NO_BUCKETING = (
    "Thunder 0.2.6 and main never bucket DDP gradients under thunder.jit: their bucketing pass "
    "matches the `wait` prim by id, but the joint forward-backward trace already holds the torch "
    "executor's `torch_wait_prim_impl` (the `Sort Waits` step), so bucket_size_in_mb has no effect. "
    "Thunder's own test_ddp_grad_bucketing is a strict xfail for this ('not updated yet for joint "
    "forward-backward trace')"
)
FSDP_SORT_WAITS = (
    "Thunder's FSDP trace holds waits, so Thunder reorders the joint trace by data edges "
    "(`Sort Waits`, to delay the all-gather waits) before the fusion stage; batch_norm's running-stat "
    "update is a copy_ inside the composite with no data edge to the second BatchNorm's read "
    "(`mul(0.9, running_mean)`), so that read moves before the first update. Measured: plain Thunder "
    "loses the update too, under both fusion types; the transform's pre-autodiff pass does not order "
    "the two batch_norm calls and its fusion-stage pass runs after the reorder"
)


def launch(tmp_path: Path, modes: str, device: str, world_size: int = WORLD_SIZE) -> list[dict[str, Any]]:
    """Run the worker on ``world_size`` ranks; return each rank's results, or fail with their logs."""
    env = dict(os.environ, OMP_NUM_THREADS="1")  # ranks share few cores; oversubscription only slows them
    procs, logs = [], []
    for rank in range(world_size):
        log = open(tmp_path / f"rank{rank}.log", "w+")
        cmd = [sys.executable, str(WORKER), "--rank", str(rank), "--world-size", str(world_size)]
        cmd += ["--store", str(tmp_path / "store"), "--out", str(tmp_path), "--modes", modes, "--device", device]
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        logs.append(log)
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    try:
        # Stop at the first failed rank: its peers would only wait for it in a collective.
        while any(p.poll() is None for p in procs) and not any(p.returncode for p in procs):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    report = []
    for r, (p, log) in enumerate(zip(procs, logs)):
        log.seek(0)
        report.append(f"--- rank {r} (exit status {p.returncode}) ---\n{log.read()[-6000:]}")
        log.close()
    if failed:
        timed_out = time.monotonic() > deadline
        head = f"timed out after {LAUNCH_TIMEOUT_S:.0f} s" if timed_out else f"rank(s) {failed} failed"
        pytest.fail(f"distributed worker {head}:\n" + "\n".join(report), pytrace=False)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world_size)]


def _shard(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    # FSDP keeps rank r's dim-0 chunk of every parameter (and of its gradient).
    return t.chunk(world_size, 0)[rank]


def assert_matches(got: dict, exp: dict, *, rank: int, world_size: int = 1, sharded: bool = False) -> None:
    """Every step's outputs and gradients, the final parameters and buffers, as compare.py does."""

    def params(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: _shard(v, rank, world_size) for k, v in d.items()} if sharded else d

    where = f"rank {rank}"
    for step, (g, e) in enumerate(zip(got["outputs"], exp["outputs"], strict=True)):
        assert_close(g, e, msg=lambda m: f"{where}, step {step}: outputs differ: {m}")
    for step, (g, e) in enumerate(zip(got["grads"], exp["grads"], strict=True)):
        assert_close(g, params(e), msg=lambda m: f"{where}, step {step}: gradients differ: {m}")
    assert_close(got["params"], params(exp["params"]), msg=lambda m: f"{where}: final parameters differ: {m}")
    assert_close(got["buffers"], exp["buffers"], msg=lambda m: f"{where}: final buffers differ: {m}")


def _running_stats(run: dict) -> dict[str, torch.Tensor]:
    return {k: v for k, v in run["buffers"].items() if "running_" in k}


def _assert_running_stats_lost(plain: dict, eager: dict, *, rank: int) -> None:
    """What plain Thunder gets wrong: running stats only (num_batches_tracked and all else match)."""
    with pytest.raises(AssertionError):
        assert_close(_running_stats(plain), _running_stats(eager))
    rest = {k: v for k, v in plain["buffers"].items() if k not in _running_stats(plain)}
    assert_close(rest, {k: eager["buffers"][k] for k in rest}, msg=lambda m: f"rank {rank}: {m}")
    for key in ("outputs", "grads", "params"):
        assert_close(plain[key], eager[key], msg=lambda m: f"rank {rank}: plain Thunder's {key} differ: {m}")


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """One gloo launch for every CPU test (DDP and FSDP): process start and Thunder's import dominate.

    FSDPTransform takes any device and gloo has the collectives it needs, so the CPU run
    exercises FSDP's trace rewriting (all-gather, reduce-scatter, wait sorting) in CI too.
    """
    return launch(tmp_path_factory.mktemp("dist"), "ddp,fsdp", "cpu")


# -- DDP ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["ddp_small_buckets", "ddp_default_buckets"])
def test_ddp_with_transform_matches_eager_ddp(cpu_results: list[dict], variant: str):
    """Thunder DDP + InplaceBarrierTransform under dataflow fusion matches eager DDP on every rank."""
    for result in cpu_results:
        assert_matches(result[variant], result["eager"], rank=result["rank"])
    # Data parallel keeps the replicas identical.
    assert_close(cpu_results[0][variant]["params"], cpu_results[1][variant]["params"])


def test_ddp_eager_ranks_see_different_data(cpu_results: list[dict]):
    """The reference is a real data-parallel run: local outputs differ, averaged gradients agree.

    Different data per rank is what makes a missing or wrong gradient all-reduce visible.
    """
    a, b = (r["eager"] for r in cpu_results)
    assert not torch.equal(a["outputs"][0], b["outputs"][0])
    assert_close(a["grads"], b["grads"])


def test_plain_thunder_ddp_loses_running_stat_update(cpu_results: list[dict]):
    """The same program without the transform: the twice-applied BatchNorm's running stats are wrong.

    Deterministic (the dataflow order is a function of the trace).  Everything else matches, so
    the transform's test above is evidence for the running stats in particular.
    """
    for result in cpu_results:
        _assert_running_stats_lost(result["ddp_plain"], result["eager"], rank=result["rank"])


@pytest.mark.xfail(strict=True, reason=NO_BUCKETING)
def test_ddp_gradient_bucketing_is_applied(cpu_results: list[dict]):
    """With a 1 KB bucket cap the backward should pack gradients into buckets (in-place copies).

    When Thunder starts bucketing, this passes (a strict XPASS fails the run), and the
    ``ddp_small_buckets`` comparison above then covers bucketing.
    """
    symbols = cpu_results[0]["ddp_small_buckets"]["backward_symbols"]
    assert any("update_bucket_view" in s for s in symbols), sorted(set(symbols))


# -- FSDP --------------------------------------------------------------------------------------


def _check_fsdp(results: list[dict], *, running_stats: bool) -> None:
    world_size = len(results)
    for result in results:
        got, exp = result["fsdp"], result["eager"]
        if not running_stats:  # see FSDP_SORT_WAITS
            got = dict(got, buffers={k: v for k, v in got["buffers"].items() if "running_" not in k})
            exp = dict(exp, buffers={k: v for k, v in exp["buffers"].items() if "running_" not in k})
        assert_matches(got, exp, rank=result["rank"], world_size=world_size, sharded=True)


def test_fsdp_cpu_with_transform_matches_eager(cpu_results: list[dict]):
    """Thunder FSDP (gloo, 2 ranks) + the transform: outputs, sharded grads and params, num_batches_tracked."""
    _check_fsdp(cpu_results, running_stats=False)


@pytest.mark.xfail(strict=True, reason=FSDP_SORT_WAITS)
def test_fsdp_cpu_running_stats_match_eager(cpu_results: list[dict]):
    _check_fsdp(cpu_results, running_stats=True)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [1, 2])
def test_fsdp_cuda_with_transform_matches_eager(tmp_path: Path, world_size: int):
    """Thunder FSDP on CUDA (nccl) + the transform against eager DDP, one GPU per rank.

    World size 1 is still meaningful: FSDPTransform rewrites the trace the same way (sharded
    parameter proxies, all-gather and reduce-scatter with their waits, wait sorting), and the
    collectives of one rank are exact, so the comparison is as strict.  Running stats are
    left out for the reason in FSDP_SORT_WAITS (the CPU test records it as a strict xfail).
    """
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if torch.cuda.device_count() < world_size:
        pytest.skip(f"needs {world_size} CUDA devices, found {torch.cuda.device_count()}")
    _check_fsdp(launch(tmp_path, "fsdp", "cuda", world_size), running_stats=False)
