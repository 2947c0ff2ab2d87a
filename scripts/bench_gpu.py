"""Run time, kernel launches and fusion regions: plain Thunder, the transform, torch.compile.

    python scripts/bench_gpu.py                                  # CUDA when there is one
    python scripts/bench_gpu.py --device cpu --size 32 --iters 5 --warmup 2
    python scripts/bench_gpu.py --programs tanh_four_reads kv_cache_decode --json out.json

One markdown table, one row per (program, configuration), every ratio taken against runs of
this very process:

* configurations: ``plain`` = ``thunder.jit(fn, fusion_type="dataflow")`` with the default
  executors (nvFuser among them when Thunder finds it); ``transform`` = the same with
  ``InplaceBarrierTransform(check=False)``; ``inductor`` = ``torch.compile(fn)``.
* ``eager``: the first compiled call compared with eager PyTorch by ``thunder_ext.testing.compare``
  (outputs, final inputs, gradients): ``correct``, ``wrong``, or the error class of a crash.
* ``regions fw / bw``: top-level bound symbols with ``sym.is_fusion`` in the final forward
  (and backward) trace, and in brackets those named ``nvFusion*``. For ``inductor``: the
  number of graphs Dynamo compiled (more than one means a graph break).
* ``launches``: on CUDA, GPU kernels per call (``torch.profiler``, memcpy/memset excluded);
  on CPU there are no launches, so the column counts outermost ATen ops per call instead
  (Inductor's generated C++ kernels are no ATen ops: its count is only its library calls).
* ``us``: median microseconds per call after ``--warmup`` calls, over ``--iters`` calls;
  CUDA events on CUDA, ``time.perf_counter`` on CPU. A call of a grad program is forward
  plus ``backward()``.  The timed calls of one program's configurations are interleaved, in
  ``--rounds`` rounds of rotating order, so that drift of the machine hits them alike.
* ratios: ``/ plain`` and ``/ inductor`` divide this row's number by that configuration's.

A configuration that crashes shows the error class in its cells; the table always completes.
Timings on a shared CPU are noisy: compare ratios, not microseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

warnings.filterwarnings("ignore", message="transformer_engine module not found")
warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from thunder_ext.testing import gallery  # noqa: E402

CONFIGS = ("plain", "transform", "inductor")


# -- programs -----------------------------------------------------------------------------------
# Each builder takes (size, device) and returns (fn, args, state) as gallery builders do.


@dataclass(frozen=True)
class Bench:
    name: str
    build: Callable[[int, str], tuple[Callable, tuple, dict]]
    grad: bool = False
    what: str = ""


def _r(*shape: int, device: str, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device=device).requires_grad_(grad)


def residual_block(x, w1, w2):
    h = x @ w1.t()
    h.relu_()
    h = h @ w2.t()
    h += x  # the residual, in place on an intermediate
    h.relu_()
    return h


def ema_update(*tensors):
    # The first half are the EMA copies, updated in place; the second half the parameters.
    n = len(tensors) // 2
    d = 0.99
    for e, p in zip(tensors[:n], tensors[n:]):
        e.mul_(d).add_(p, alpha=1 - d)


def kv_cache_decode(cache_k, cache_v, k, v, q, pos):
    cache_k.index_copy_(1, pos, k)
    cache_v.index_copy_(1, pos, v)
    att = (q @ cache_k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    return att.softmax(-1) @ cache_v  # reads the caches after the writes (RAW)


def train_step(x, w1, b1, bn_w, bn_b, rm, rv, w2):
    # Linear -> BatchNorm (training: running stats updated in place) -> relu_ -> Linear -> loss.
    h = F.linear(x, w1, b1)
    h = F.batch_norm(h, rm, rv, bn_w, bn_b, training=True, momentum=0.1)
    h = h.relu_()
    return F.linear(h, w2).square().mean()


def _loop(s: int, dev: str):
    return gallery.loop_inplace, (_r(s, s, device=dev),), {}


def _tanh(s: int, dev: str):
    return gallery.tanh_four_reads, (_r(s, s, device=dev),), {}


def _residual(s: int, dev: str):
    scale = 1 / math.sqrt(s)
    return residual_block, (_r(s, s, device=dev), _r(s, s, device=dev) * scale, _r(s, s, device=dev) * scale), {}


def _ema(s: int, dev: str):
    n = 4
    return ema_update, tuple(_r(s, s, device=dev) for _ in range(2 * n)), {}


def _kv(s: int, dev: str):
    b, d = 8, 64  # batch*heads, head dim; the cache length is the size
    pos = torch.tensor([s // 2], device=dev)
    args = (_r(b, s, d, device=dev), _r(b, s, d, device=dev), _r(b, 1, d, device=dev), _r(b, 1, d, device=dev),
            _r(b, 1, d, device=dev), pos)
    return kv_cache_decode, args, {}


def _train(s: int, dev: str):
    scale = 1 / math.sqrt(s)
    args = (
        _r(s, s, device=dev),
        (_r(s, s, device=dev) * scale).requires_grad_(),
        _r(s, device=dev, grad=True),
        (1 + 0.1 * _r(s, device=dev)).requires_grad_(),
        _r(s, device=dev, grad=True),
        torch.zeros(s, device=dev),
        torch.ones(s, device=dev),
        (_r(s, s, device=dev) * scale).requires_grad_(),
    )
    return train_step, args, {}


BENCHES: tuple[Bench, ...] = (
    Bench("loop_inplace", _loop, what="gallery: y.add_(1) 20 times, each read"),
    Bench("tanh_four_reads", _tanh, what="a.tanh_(); a*a*a*a (Thunder #2768: one region is the goal)"),
    Bench("residual_block", _residual, what="relu_, h += x"),
    Bench("ema_update", _ema, what="4 x e.mul_(d).add_(p, alpha=1-d)"),
    Bench("kv_cache_decode", _kv, what="index_copy_ into K/V caches, then attention over them"),
    Bench("train_step_bn", _train, grad=True, what="Linear+BatchNorm(train)+relu_, fwd+bwd"),
)


# -- measuring ------------------------------------------------------------------------------


def _compile(fn: Callable, config: str) -> Callable:
    if config == "inductor":
        torch._dynamo.reset()  # a fresh cache: no recompile limit carried over from another program
        return torch.compile(fn)
    from thunder_ext.testing.compare import Config, compile_fn

    return compile_fn(fn, Config(transform=config == "transform", fusion_type="dataflow", check=False))


def _callable(compiled: Callable, args: tuple, grad: bool) -> Callable[[], object]:
    """One timed call: forward, and backward for a grad program."""
    if not grad:
        return lambda: compiled(*args)

    def step():
        loss = compiled(*args)
        loss.backward()
        return loss

    return step


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_samples(call: Callable[[], object], device: str, n: int) -> list[float]:
    """``n`` timed calls, in microseconds: CUDA events on CUDA, ``perf_counter`` on CPU."""
    _sync(device)
    samples = []
    for _ in range(n):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            call()
            samples.append((time.perf_counter() - t0) * 1e6)
    return samples


def _outermost_aten(e) -> bool:
    """An ATen op not called by another ATen op: Inductor and autograd wrap theirs in
    non-ATen ranges ("Torch-Compiled Region", "autograd::engine::..."), so 'no parent' would miss them."""
    if not e.name.startswith("aten::"):
        return False
    p = e.cpu_parent
    while p is not None:
        if p.name.startswith("aten::"):
            return False
        p = p.cpu_parent
    return True


def launches_per_call(call: Callable[[], object], device: str, calls: int = 3) -> float:
    """GPU kernels per call on CUDA; outermost ATen ops per call on CPU (see the docstring)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    _sync(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        _sync(device)
    events = prof.events()
    if device == "cuda":
        # Kernels only: copies and fills are not launches of generated or library kernels.
        n = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                and not e.name.startswith(("Memcpy", "Memset")))
    else:
        n = sum(1 for e in events if _outermost_aten(e))
    return n / calls


def regions(compiled: Callable, config: str) -> str:
    if config == "inductor":
        from torch._dynamo.utils import counters

        return f"{counters['stats']['unique_graphs']} graph(s)"
    from thunder_ext.integration import final_traces

    def count(trace) -> str:
        fus = [b for b in trace.bound_symbols if b.sym.is_fusion]
        nv = sum(1 for b in fus if b.sym.name.startswith("nvFusion"))
        return f"{len(fus)} ({nv})"

    traces = final_traces(compiled)
    if not traces:
        return "-"
    fw = " + ".join(count(f) for f, _ in traces)
    bws = [count(b) for _, b in traces if b is not None]
    return fw + (" / " + " + ".join(bws) if bws else "")


def write_traces(compiled: Callable, path: str) -> None:
    """The final forward and backward traces Thunder ran, for reading the host's work per call."""
    import thunder

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(f"# final forward\n{thunder.last_traces(compiled)[-1]}\n")
        bw = thunder.last_backward_traces(compiled)
        if bw:
            f.write(f"\n# final backward\n{bw[-1]}\n")


def _err(e: BaseException) -> str:
    return type(e).__name__


def correctness(bench: Bench, config: str, size: int, device: str) -> tuple[str, Callable | None]:
    """The first compiled call against eager, as thunder_ext.testing.compare judges it."""
    from thunder_ext.testing.compare import _assert_same, clone_args, execute

    torch.manual_seed(0)
    fn, args, state = bench.build(size, device)
    eager = execute(fn, clone_args(args), state)
    try:
        compiled = _compile(fn, config)
    except Exception as e:  # noqa: BLE001 - the cell shows what failed
        return _err(e), None
    got = execute(compiled, clone_args(args), state)
    if got.error is not None:
        return _err(got.error), compiled
    if eager.error is not None:
        return f"eager raised {_err(eager.error)}", compiled
    try:
        _assert_same(got, eager)
    except AssertionError:
        return "wrong", compiled
    return "correct", compiled


def prepare(bench: Bench, config: str, ns: argparse.Namespace) -> tuple[dict, Callable[[], object] | None]:
    """The row's correctness and regions, and the call to time (``None`` when it crashed)."""
    row: dict = {"program": bench.name, "config": config}
    if config == "inductor":
        from torch._dynamo.utils import counters

        counters.clear()
    status, compiled = correctness(bench, config, ns.size, ns.device)
    row["eager"] = status
    if compiled is None or status not in ("correct", "wrong"):
        for k in ("regions", "launches", "us"):
            row[k] = status  # the crash's class, in every cell of this row
        return row, None
    try:
        row["regions"] = regions(compiled, config)
    except Exception as e:  # noqa: BLE001
        row["regions"] = _err(e)
    if ns.traces and config != "inductor":
        write_traces(compiled, os.path.join(ns.traces, f"{bench.name}.{config}.txt"))
    # Fresh arguments for the timed calls: the first call's ones were compared, not reused.
    torch.manual_seed(0)
    _, args, _ = bench.build(ns.size, ns.device)
    call = _callable(compiled, args, bench.grad)
    try:
        for _ in range(ns.warmup):
            call()
        row["launches"] = launches_per_call(call, ns.device)
    except Exception as e:  # noqa: BLE001
        row["launches"] = row["us"] = _err(e)
        return row, None
    return row, call


def measure_program(bench: Bench, ns: argparse.Namespace) -> list[dict]:
    """Every configuration of one program, timed in interleaved rounds.

    Each round times ``iters / rounds`` calls of every configuration, in an order that rotates
    from round to round, so that a slow phase of the machine (clocks, another tenant) falls on
    every configuration alike; ``us`` is the median of all of a configuration's samples.
    """
    prepared = []
    for config in ns.configs:
        try:
            prepared.append(prepare(bench, config, ns))
        except Exception as e:  # noqa: BLE001 - e.g. eager itself failing, out of memory
            err = _err(e)
            prepared.append(({"program": bench.name, "config": config, "eager": err, "regions": err,
                              "launches": err, "us": err}, None))
    live = [(row, call) for row, call in prepared if call is not None]
    samples: dict[int, list[float]] = {id(row): [] for row, _ in live}
    per_round = max(1, ns.iters // ns.rounds)
    for r in range(ns.rounds if live else 0):
        k = r % len(live)
        for row, call in live[k:] + live[:k]:
            if "us" in row:
                continue  # it crashed in an earlier round
            try:
                samples[id(row)] += time_samples(call, ns.device, per_round)
            except Exception as e:  # noqa: BLE001
                row["us"] = _err(e)
    for row, _ in live:
        row.setdefault("us", statistics.median(samples[id(row)]))
    return [row for row, _ in prepared]


# -- the table --------------------------------------------------------------------------------


def _num(x) -> float | None:
    return x if isinstance(x, (int, float)) else None


def _ratio(a, b) -> str:
    a, b = _num(a), _num(b)
    if a is None or b is None:
        return "-"
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}"


def _fmt(x, spec: str) -> str:
    return format(x, spec) if _num(x) is not None else str(x)


def table(rows: list[dict], device: str) -> str:
    launch = "kernels/call" if device == "cuda" else "ATen ops/call (CPU)"
    header = ["program", "config", "eager", "regions fw / bw (nvFusion)", launch, "/ plain", "/ inductor",
              "us/call", "/ plain", "/ inductor"]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    by = {(r["program"], r["config"]): r for r in rows}
    for r in rows:
        plain = by.get((r["program"], "plain"), {})
        ind = by.get((r["program"], "inductor"), {})
        cells = [
            r["program"], r["config"], r["eager"], r["regions"],
            _fmt(r["launches"], ".1f"), _ratio(r["launches"], plain.get("launches")),
            _ratio(r["launches"], ind.get("launches")),
            _fmt(r["us"], ".1f"), _ratio(r["us"], plain.get("us")), _ratio(r["us"], ind.get("us")),
        ]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(out)


def _write_json(ns: argparse.Namespace, nvf: bool, rows: list[dict]) -> None:
    import thunder

    with open(ns.json, "w") as f:
        json.dump({"torch": torch.__version__, "thunder": thunder.__version__, "device": ns.device,
                   "nvfuser": nvf, "size": ns.size, "iters": ns.iters, "warmup": ns.warmup, "rows": rows},
                  f, indent=2, default=str)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if cuda else "cpu")
    parser.add_argument("--size", type=int, default=None, help="base dimension (default 1024 on CUDA, 64 on CPU)")
    parser.add_argument("--iters", type=int, default=None, help="timed calls (default 100 on CUDA, 10 on CPU)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 10 on CUDA, 2 on CPU)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds the timed calls are split into (default 5)")
    parser.add_argument("--programs", nargs="+", choices=[b.name for b in BENCHES], default=None)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--json", metavar="PATH", help="also write every row to PATH as JSON")
    parser.add_argument("--traces", metavar="DIR", help="write each Thunder configuration's final traces to DIR")
    ns = parser.parse_args(argv)
    if ns.device == "cuda" and not cuda:
        parser.error("--device cuda, but torch sees no CUDA device")
    on_gpu = ns.device == "cuda"
    ns.size = ns.size or (1024 if on_gpu else 64)
    ns.iters = ns.iters or (100 if on_gpu else 10)
    ns.warmup = ns.warmup if ns.warmup is not None else (10 if on_gpu else 2)
    if not on_gpu:
        # One intra-op thread: on a shared CPU, idle OpenMP workers turn a 10 us matmul into
        # milliseconds of noise, at random.
        torch.set_num_threads(1)

    import thunder
    from thunder.executors.nvfuserex import nvfuser_available

    nvf = nvfuser_available()
    dev_name = torch.cuda.get_device_name() if on_gpu else platform.processor() or platform.machine()
    print(f"# thunder-ext GPU bench (torch {torch.__version__}, thunder {thunder.__version__}, "
          f"{ns.device}: {dev_name}, nvFuser {'available' if nvf else 'not available'})\n")
    print(f"size {ns.size}, {ns.warmup} warm-up + {ns.iters} timed calls (median, {ns.rounds} interleaved rounds); "
          "fusion_type=\"dataflow\", "
          "default executors.")
    if not on_gpu:
        print("CPU run: no kernel launches to count, so the launch column counts outermost ATen ops per call (Inductor: library calls only); "
              "no nvFuser, so Thunder fuses nothing (regions 0).")
    print()

    benches = [b for b in BENCHES if ns.programs is None or b.name in ns.programs]
    rows = []
    for b in benches:
        t0 = time.perf_counter()
        got = measure_program(b, ns)
        rows += got
        if ns.json:  # after every program: a run stopped by a time limit keeps what it measured
            _write_json(ns, nvf, rows)
        cells = ", ".join(f"{r['config']} {r['eager']} {_fmt(r['us'], '.1f')} us" for r in got)
        print(f"  {b.name}: {cells} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(table(rows, ns.device))
    print()
    for b in benches:
        print(f"- `{b.name}`: {b.what}")
    if ns.json:
        print(f"\nwrote {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
