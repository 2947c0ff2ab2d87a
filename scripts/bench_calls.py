"""Time per call: eager, plain Thunder, the transform and torch.compile, on the same inputs.

    .venv/bin/python scripts/bench_calls.py                         # everything (about 10 min here)
    .venv/bin/python scripts/bench_calls.py --quick                 # the six named programs only
    .venv/bin/python scripts/bench_calls.py --programs ema_20 kv_cache_decode --executors default
    .venv/bin/python scripts/bench_calls.py --json out.json --png docs/img/calls.png

Columns, all compiled in this process and called on fresh copies of the same inputs:

* ``eager``: the function itself;
* ``plain``: ``thunder.jit(fn, fusion_type="dataflow")``; ``transform``: the same with
  ``InplaceBarrierTransform(check=False)``; with ``--executors both`` (the default) also
  ``plain tc`` and ``transform tc``, the same with ``executors=[torch_compile_ex]``;
* ``inductor``: ``torch.compile(fn)``.

Each compiled column's first call is compared with eager by ``thunder_ext.testing.compare``
(outputs, inputs after the call, gradients): a column that is wrong or crashes says so in
its cell and gets no ratio.

Timing: ``--rounds`` interleaved rounds (each round times every column once, in an order
that rotates between rounds), each timing ``--inner`` calls after ``--warmup`` untimed ones;
the table shows the median over rounds of µs per call.  On a CPU with one intra-op thread the
clock is the calling thread's CPU time (``time.thread_time``): every op then runs in that
thread, and time the machine gives to other processes is not counted (``--clock wall`` to
count it).  A call of a program with inputs
that require grad is the forward plus ``backward()`` of the sum of its outputs.  One
intra-op thread by default (``--threads N`` for more); CUDA events when ``--device cuda``.
The ratios ``/ plain`` and ``/ inductor`` divide the transform's time by plain Thunder's and
by Inductor's from the same run.  Compare ratios, not microseconds, across machines.
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
warnings.filterwarnings("ignore", category=UserWarning)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench_gpu import kv_cache_decode, residual_block  # noqa: E402  (scripts/ is on sys.path)
from thunder_ext.testing.gallery import ema_reads  # noqa: E402

# -- programs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallBench:
    name: str
    build: Callable[[str], tuple[Callable, tuple, dict]]  # device -> (fn, args, state)
    what: str = ""


def _r(*shape: int, device: str, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device=device).requires_grad_(grad)


def _ema(dev: str):
    return ema_reads, tuple(_r(64, device=dev) for _ in range(40)), {}


def _kv(dev: str):
    b, s, d = 8, 64, 32
    pos = torch.tensor([s // 2], device=dev)
    args = (_r(b, s, d, device=dev), _r(b, s, d, device=dev), _r(b, 1, d, device=dev), _r(b, 1, d, device=dev),
            _r(b, 1, d, device=dev), pos)
    return kv_cache_decode, args, {}


def _residual_train(dev: str):
    s = 32
    scale = 1 / math.sqrt(s)
    x = _r(16, s, device=dev)
    w1 = (_r(s, s, device=dev) * scale).requires_grad_()
    w2 = (_r(s, s, device=dev) * scale).requires_grad_()
    return residual_block, (x, w1, w2), {}


def adam_step(param, grad, exp_avg, exp_avg_sq, step):
    """One step of torch.optim's single-tensor Adam, called as a function of tensors."""
    from torch.optim.adam import _single_tensor_adam

    _single_tensor_adam(
        [param], [grad], [exp_avg], [exp_avg_sq], [], [step], grad_scale=None, found_inf=None,
        amsgrad=False, has_complex=False, beta1=0.9, beta2=0.999, lr=1e-3, weight_decay=0.0, eps=1e-8,
        maximize=False, capturable=False, differentiable=False, decoupled_weight_decay=False,
    )  # fmt: skip


def _adam(dev: str):
    return adam_step, (_r(64, 64, device=dev), _r(64, 64, device=dev), torch.zeros(64, 64, device=dev),
                       torch.zeros(64, 64, device=dev), torch.tensor(0.0, device=dev)), {}


def sgd_momentum_step(param, grad, buf):
    """One step of torch.optim's single-tensor SGD with momentum, called as a function of tensors."""
    from torch.optim.sgd import _single_tensor_sgd

    _single_tensor_sgd(
        [param], [grad], [buf], grad_scale=None, found_inf=None, weight_decay=0.0, momentum=0.9, lr=0.01,
        dampening=0.0, nesterov=False, maximize=False, has_sparse_grad=False,
    )  # fmt: skip


def _sgd(dev: str):
    # A momentum buffer already there (the first step would create it, outside the function).
    return sgd_momentum_step, (_r(64, 64, device=dev), _r(64, 64, device=dev), _r(64, 64, device=dev)), {}


def _bn_twice(dev: str):
    from thunder_ext.testing.gallery import by_name

    fn, args, state = by_name("module_applied_twice").build()
    return fn, tuple(a.to(dev) if isinstance(a, torch.Tensor) else a for a in args), state


NAMED: tuple[CallBench, ...] = (
    CallBench("ema_20", _ema, "20 parameters: r = e.sum(); e.mul_(0.9).add_(p, alpha=0.1)"),
    CallBench("kv_cache_decode", _kv, "index_copy_ into K/V caches, then attention over them"),
    CallBench("residual_train", _residual_train, "x @ w1, relu_, @ w2, h += x, relu_: forward + backward"),
    CallBench("adam_step", _adam, "torch.optim.adam._single_tensor_adam, one 64x64 parameter"),
    CallBench("sgd_momentum_step", _sgd, "torch.optim.sgd._single_tensor_sgd, momentum 0.9"),
    CallBench("bn_module_twice", _bn_twice, "gallery module_applied_twice: a BatchNorm applied twice in training"),
)


def gallery_benches() -> list[CallBench]:
    from thunder_ext.testing.gallery import PROGRAMS

    out = []
    for p in PROGRAMS:
        if p.refused:
            continue
        out.append(CallBench(f"gallery/{p.name}", lambda dev, p=p: p.build(), p.hazard))
    return out


# -- columns ----------------------------------------------------------------------------------

THUNDER_COLUMNS = {
    "plain": (False, "default"),
    "transform": (True, "default"),
    "plain tc": (False, "torch_compile"),
    "transform tc": (True, "torch_compile"),
}


def compile_column(fn: Callable, column: str) -> Callable:
    if column == "eager":
        return fn
    if column == "inductor":
        torch._dynamo.reset()
        return torch.compile(fn)
    from thunder_ext.testing.compare import Config, compile_fn

    transform, executors = THUNDER_COLUMNS[column]
    return compile_fn(fn, Config(transform=transform, fusion_type="dataflow", executors=executors, check=False))


def _flat_tensors(x) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def one_call(compiled: Callable, args: tuple) -> Callable[[], object]:
    """A call; with inputs that require grad, forward plus backward of the sum of the outputs."""
    if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return lambda: compiled(*args)

    def step():
        out = compiled(*args)
        loss = [o.sum() for o in _flat_tensors(out) if o.requires_grad]
        if loss:
            sum(loss).backward()
        return out

    return step


def check_column(bench: CallBench, column: str, device: str, eager) -> tuple[str, Callable | None]:
    """The first call of ``column`` against eager, as thunder_ext.testing.compare judges it."""
    from thunder_ext.testing.compare import _assert_same, clone_args, execute

    torch.manual_seed(0)
    fn, args, state = bench.build(device)
    try:
        compiled = compile_column(fn, column)
    except Exception as e:  # noqa: BLE001 - the cell shows it
        return type(e).__name__, None
    got = execute(compiled, clone_args(args), state)
    if got.error is not None:
        return type(got.error).__name__, None
    if column == "eager" or eager.error is not None:
        return ("correct" if eager.error is None else f"eager raised {type(eager.error).__name__}"), compiled
    try:
        _assert_same(got, eager)
    except AssertionError:
        return "wrong", compiled
    return "correct", compiled


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_batch(call: Callable[[], object], device: str, inner: int, clock: str = "wall") -> float:
    """µs per call over ``inner`` back-to-back calls (``clock="cpu"``: CPU time of this thread)."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / inner
    now = time.thread_time if clock == "cpu" else time.perf_counter
    t0 = now()
    for _ in range(inner):
        call()
    return (now() - t0) * 1e6 / inner


def measure(bench: CallBench, columns: list[str], ns: argparse.Namespace) -> dict:
    from thunder_ext.testing.compare import clone_args, execute

    torch.manual_seed(0)
    fn, args, state = bench.build(ns.device)
    eager = execute(fn, clone_args(args), state)
    row: dict = {"program": bench.name, "status": {}, "us": {}}
    calls: dict[str, Callable] = {}
    for col in columns:
        status, compiled = check_column(bench, col, ns.device, eager)
        row["status"][col] = status
        if compiled is None:
            continue
        torch.manual_seed(0)
        _, args, _ = bench.build(ns.device)  # the same inputs for every column
        call = one_call(compiled, tuple(args))
        try:
            for _ in range(ns.warmup):
                call()
            _sync(ns.device)
        except Exception as e:  # noqa: BLE001
            row["status"][col] = type(e).__name__
            continue
        calls[col] = call
    samples: dict[str, list[float]] = {c: [] for c in calls}
    order = list(calls)
    for r in range(ns.rounds):
        k = r % len(order) if order else 0
        for col in order[k:] + order[:k]:  # rotate: no column always runs first
            samples[col].append(time_batch(calls[col], ns.device, ns.inner, ns.clock))
    row["us"] = {c: statistics.median(s) for c, s in samples.items() if s}
    return row


# -- output -----------------------------------------------------------------------------------


def _ratio(row: dict, a: str, b: str) -> float | None:
    ok = ("correct",)
    if row["status"].get(a) not in ok or row["status"].get(b) not in ok:
        return None
    ua, ub = row["us"].get(a), row["us"].get(b)
    return ua / ub if ua and ub else None


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _cell(row: dict, col: str) -> str:
    status = row["status"].get(col)
    if status is None:
        return ""
    us = row["us"].get(col)
    if us is None:
        return status
    return f"{us:.0f}" if status == "correct" else f"{us:.0f} ({status})"


def table(rows: list[dict], columns: list[str]) -> str:
    header = ["program", *columns, "transform / plain", "transform / inductor"]
    tc = "transform tc" in columns
    if tc:
        header.append("transform tc / plain tc")
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        cells = [r["program"], *(_cell(r, c) for c in columns)]
        cells += [_fmt_ratio(_ratio(r, "transform", "plain")), _fmt_ratio(_ratio(r, "transform", "inductor"))]
        if tc:
            cells.append(_fmt_ratio(_ratio(r, "transform tc", "plain tc")))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary(rows: list[dict], a: str, b: str) -> str:
    rs = [x for x in (_ratio(r, a, b) for r in rows) if x is not None]
    if not rs:
        return f"{a} / {b}: no program where both match eager"
    geo = math.exp(sum(math.log(x) for x in rs) / len(rs))
    return (f"{a} / {b}: geometric mean {geo:.2f} over {len(rs)} programs where both match eager; "
            f"min {min(rs):.2f}, max {max(rs):.2f}; above 1.05 on {sum(x > 1.05 for x in rs)}")


def chart(rows: list[dict], columns: list[str], path: str, title: str) -> None:
    """Horizontal bars: time per call relative to plain Thunder (default executors), per program."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in ("eager", "transform", "inductor", "transform tc") if c in columns]
    base = {"eager": "plain", "transform": "plain", "inductor": "plain", "transform tc": "plain tc"}
    labels = {"eager": "eager / plain", "transform": "transform / plain",
              "inductor": "torch.compile / plain", "transform tc": "transform / plain (torch_compile_ex)"}
    colors = {"eager": "#999999", "transform": "#2a9d8f", "inductor": "#e76f51", "transform tc": "#264653"}
    names = [r["program"].replace("gallery/", "") for r in rows]
    h = 0.8 / len(shown)
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(rows) * max(1, len(shown) / 2) + 1.5))
    for k, col in enumerate(shown):
        vals = [_ratio(r, col, base[col]) for r in rows]
        ys = [i + (k - (len(shown) - 1) / 2) * h for i in range(len(rows))]
        ax.barh(ys, [v if v is not None else 0 for v in vals], height=h, color=colors[col], label=labels[col])
        if col == "transform":
            for y, v in zip(ys, vals):
                if v is not None:
                    ax.text(v + 0.02, y, f"{v:.2f}", va="center", fontsize=6)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time per call / plain Thunder's (lower is faster; missing bar: wrong or crashed)")
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(title, 95)), fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--inner", type=int, default=20, help="calls timed per round (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per column first (default 3)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None,
                        help="on CPU: 'cpu' (default with one thread) times this thread's CPU time, which other "
                             "processes on a shared machine do not inflate; 'wall' (default with more threads)")
    parser.add_argument("--executors", choices=("default", "torch_compile", "both"), default="both")
    parser.add_argument("--no-inductor", action="store_true", help="leave out the torch.compile column")
    parser.add_argument("--quick", action="store_true", help="only the six named programs, not the gallery")
    parser.add_argument("--programs", nargs="+", metavar="NAME", help="only these (gallery ones as gallery/NAME)")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--png", metavar="PATH", help="also draw the ratios as a bar chart (PNG)")
    parser.add_argument("--replot", metavar="JSON", help="only redraw --png (and the table) from an earlier --json")
    ns = parser.parse_args(argv)
    if ns.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    if ns.clock is None:
        ns.clock = "cpu" if ns.threads == 1 and ns.device == "cpu" else "wall"
    if ns.clock == "cpu" and ns.threads != 1:
        parser.error("--clock cpu counts this thread only: use it with --threads 1")
    os.environ.setdefault("OMP_NUM_THREADS", str(ns.threads))
    torch.set_num_threads(ns.threads)

    if ns.replot:
        with open(ns.replot) as f:
            saved = json.load(f)
        print(table(saved["rows"], saved["columns"]))
        if ns.png:
            chart(saved["rows"], saved["columns"], ns.png, saved["env"])
        return 0

    import thunder

    columns = ["eager", "plain", "transform"]
    if not ns.no_inductor:
        columns.append("inductor")
    if ns.executors in ("torch_compile", "both"):
        columns += ["plain tc", "transform tc"]
    if ns.executors == "torch_compile":
        columns = [c for c in columns if c not in ("plain", "transform")]
    benches = list(NAMED) + ([] if ns.quick else gallery_benches())
    if ns.programs:
        benches = [b for b in benches if b.name in ns.programs]
    machine = (torch.cuda.get_device_name() if ns.device == "cuda" else
               f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    head = (f"torch {torch.__version__}, thunder {thunder.__version__}, {ns.device} ({machine}), "
            f"{ns.threads} intra-op thread(s), {ns.rounds} interleaved rounds x {ns.inner} calls, median, "
            f"{'CUDA events' if ns.device == 'cuda' else ('thread CPU time' if ns.clock == 'cpu' else 'wall clock')}")
    print(f"# thunder-ext: time per call (µs)\n\n{head}\n")
    rows = []
    t_all = time.perf_counter()
    for b in benches:
        t0 = time.perf_counter()
        row = measure(b, columns, ns)
        rows.append(row)
        print(f"  {b.name}: " + ", ".join(f"{c} {_cell(row, c)}" for c in columns)
              + f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if ns.json:
            with open(ns.json, "w") as f:
                json.dump({"env": head, "columns": columns, "rows": rows}, f, indent=2)
    print(table(rows, columns))
    print()
    for a, b in (("transform", "plain"), ("transform", "inductor"), ("transform tc", "plain tc")):
        if a in columns and b in columns:
            print(f"- {summary(rows, a, b)}")
    print()
    for b in benches:
        if b.what and not b.name.startswith("gallery/"):
            print(f"- `{b.name}`: {b.what}")
    print(f"\n({time.perf_counter() - t_all:.0f} s)")
    if ns.png:
        chart(rows, columns, ns.png, head)
        print(f"wrote {ns.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
