"""A KV-cache decode step of realistic size: time per call and peak memory, eager, plain Thunder
and the transform, each in a fresh process.

    .venv/bin/python scripts/kv_cache.py                 # caches of 64 MiB each (seq 8192)
    .venv/bin/python scripts/kv_cache.py --seq 16384 --calls 50 --executors default torch_compile
    python scripts/kv_cache.py --device cuda              # on a GPU: nvFuser among the defaults

The step writes the new key and value into one position of each cache (``kc[:, :, pos] = k``),
then attends over the whole cache.  The caches are inputs, so with the transform their writes
become values and an epilogue ``copy_`` before autodiff, and go back in place on the final
trace (:func:`thunder_ext.reinplace.reinplace_inputs`): the step must cost no more than plain
Thunder's.  Each configuration runs in its own process, which reports

* ``ms``: the median wall time of ``--calls`` warm calls (after three warm-up calls);
* ``extra MiB``: the process's peak resident memory (``ru_maxrss``) minus its resident memory
  once the inputs exist and before the first call, so what compiling and running the step
  added at its peak (compilation included: it is the same work for plain and transform, apart
  from the transform's own pass); on CUDA, the peak of the caching allocator's allocated
  memory (``torch.cuda.max_memory_allocated``) over the calls, minus what the inputs hold;
* whether the outputs and the caches' final state match eager's.

Printed as a markdown table with the ratios transform / plain, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch


def decode_step(q, k, v, kc, vc):
    kc[:, :, 4000] = k
    vc[:, :, 4000] = v
    att = torch.softmax((q @ kc.transpose(-1, -2)) * 0.088, dim=-1)
    return att @ vc


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _inputs(heads: int, seq: int, dim: int, device: str):
    g = torch.Generator().manual_seed(0)
    shapes = ((1, heads, 1, dim), (1, heads, dim), (1, heads, dim), (1, heads, seq, dim), (1, heads, seq, dim))
    return tuple(torch.randn(*s, generator=g).to(device) for s in shapes)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_one(mode: str, executors: str, heads: int, seq: int, dim: int, calls: int, device: str = "cpu") -> dict:
    import thunder

    from thunder_ext.noise import quiet_upstream_noise
    from thunder_ext.transforms import InplaceBarrierTransform

    quiet_upstream_noise()
    args = _inputs(heads, seq, dim, device)
    expected_args = [a.clone() for a in args]
    expected = decode_step(*expected_args)
    _sync(device)
    base = _rss_mib()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    if mode == "eager":
        fn = decode_step
    else:
        kw: dict = {"fusion_type": "dataflow"}
        if executors == "torch_compile":
            from thunder.executors.torch_compile import torch_compile_ex

            kw["executors"] = [torch_compile_ex]
        fn = thunder.jit(decode_step, transforms=[InplaceBarrierTransform()] if mode == "transform" else [], **kw)
    with torch.no_grad():
        out = fn(*args)
        # Outputs within float32 rounding (Inductor fuses softmax differently); caches exactly.
        ok = torch.allclose(out, expected, rtol=1e-4, atol=1e-5) and all(torch.equal(a, b) for a, b in zip(args, expected_args))
        for _ in range(2):
            fn(*args)
        times = []
        for _ in range(calls):
            _sync(device)
            t = time.perf_counter()
            fn(*args)
            _sync(device)
            times.append(time.perf_counter() - t)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"ms": statistics.median(times) * 1e3, "extra_mib": peak - base, "matches_eager": ok}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--executors", nargs="+", default=["default"], choices=["default", "torch_compile"])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--run", nargs=2, metavar=("MODE", "EXECUTORS"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.run:
        print(json.dumps(run_one(a.run[0], a.run[1], a.heads, a.seq, a.dim, a.calls, a.device)))
        return
    mib = a.heads * a.seq * a.dim * 4 / 2**20
    print(f"KV-cache decode step: 2 caches of {mib:.0f} MiB each (heads {a.heads}, seq {a.seq}, dim {a.dim}), "
          f"median of {a.calls} calls, torch {torch.__version__}, {a.device}")  # fmt: skip
    print()
    print("| executors | mode | ms/call | extra MiB at peak | matches eager | ms vs plain | MiB vs plain |")
    print("|---|---|---|---|---|---|---|")
    for ex in a.executors:
        res = {}
        for mode in ("eager", "plain", "transform"):
            cmd = [sys.executable, __file__, "--run", mode, ex, "--heads", str(a.heads), "--seq", str(a.seq),
                   "--dim", str(a.dim), "--calls", str(a.calls), "--device", a.device]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            res[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        for mode, r in res.items():
            ratio_t = f"{r['ms'] / res['plain']['ms']:.2f}" if mode != "plain" else "1"
            ratio_m = f"{r['extra_mib'] / max(res['plain']['extra_mib'], 1e-9):.2f}" if mode != "plain" else "1"
            print(f"| {ex} | {mode} | {r['ms']:.3f} | {r['extra_mib']:.0f} | {r['matches_eager']} | {ratio_t} | {ratio_m} |")


if __name__ == "__main__":
    main()
