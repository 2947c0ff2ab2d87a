"""Time per call of a write into a non-leaf input that requires grad (class 9): eager, plain
Thunder, the transform and torch.compile, forward plus backward.

    .venv/bin/python scripts/bench_grad_inputs.py [--rounds 7] [--inner 200] [--size 64]

The program is what a ThunderFX piece after a graph break, or a submodule, sees: ``h`` comes
from the caller's graph, and the function writes it in place (``h.add_(r);
F.relu(h, inplace=True); return h * w``).  Each call makes a fresh ``h = leaf * 1`` (in every column alike),
and the loss reads the output and ``h`` after the call.  Plain Thunder's answer is not eager's
(it drops the gradient through ``h``; the check below prints so): its time is what the
transform's correct answer is compared with, not a right answer.  Median over interleaved
rounds of the calling thread's CPU time, one intra-op thread.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def write_into_activation(h, r, w):
    h.add_(r)
    F.relu(h, inplace=True)
    return h * w


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--inner", type=int, default=200)
    p.add_argument("--size", type=int, default=64)
    ns = p.parse_args()
    import thunder

    from thunder_ext import InplaceBarrierTransform

    torch.set_num_threads(1)
    leaf, r, w = (torch.randn(ns.size, ns.size, requires_grad=g) for g in (True, False, True))
    columns = {
        "eager": write_into_activation,
        "plain": thunder.jit(write_into_activation, fusion_type="dataflow"),
        "transform": thunder.jit(write_into_activation, fusion_type="dataflow", transforms=[InplaceBarrierTransform()]),
        "inductor": torch.compile(write_into_activation),
    }

    def call(fn):
        leaf.grad = w.grad = None
        h = leaf * 1
        out = fn(h, r, w)
        (out.sum() + h.sum()).backward()
        return out.detach(), leaf.grad, w.grad

    want = call(write_into_activation)
    for name, fn in columns.items():
        got = call(fn)
        same = all(g is not None and torch.allclose(g, e) for g, e in zip(got, want))
        print(f"{name:10s} {'eager' if same else 'NOT eager'}'s answer")
    times: dict[str, list[float]] = {k: [] for k in columns}
    names = list(columns)
    for k in range(ns.rounds):
        for name in names[k % len(names):] + names[: k % len(names)]:
            start = time.thread_time()
            for _ in range(ns.inner):
                call(columns[name])
            times[name].append((time.thread_time() - start) / ns.inner * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in names:
        print(f"{name:10s} {med[name]:8.1f} us/call")
    print(f"transform / plain {med['transform'] / med['plain']:.2f}, transform / inductor {med['transform'] / med['inductor']:.2f}")


if __name__ == "__main__":
    main()
