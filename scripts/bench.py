"""Benchmark InplaceBarrierTransform against plain Thunder, measured in the same run.

    .venv/bin/python scripts/bench.py                      # N in 100 200 400
    .venv/bin/python scripts/bench.py --n 50 100 --json out.json
    .venv/bin/python scripts/bench.py --skip-gallery       # only the timing loop
    .venv/bin/python scripts/bench.py --skip-gallery --loop input --n 400 800 1600   # the loop writes its input
    .venv/bin/python scripts/bench.py --skip-gallery --n 100 200 400 800 1600 --png docs/img/compile_time.png

Four markdown tables, the first three with ratios against plain Thunder from this very run:

(a) gallery: barriers in the final forward (+ backward) trace of every gallery program,
    ``fusion_type="dataflow"``, default executors, ``thunder.jit``; and fusion regions
    (top-level bsyms with ``sym.is_fusion``) with ``executors=[torch_compile_ex]``.
    ``-`` where a run produced no final trace (it crashed or was refused).
(b) compile time on ``y = x.exp(); acc = x * 0; for _ in range(N): y.add_(1); acc = acc + y``:
    the transform's own time (sum over ``last_reports`` of the passes before autodiff and at the
    fusion stage, and of the final-trace hook's ``hook_seconds``) and the wall-clock first call with the transform, both against
    the wall-clock first call of plain ``thunder.jit``.  The transform runs with
    ``check=False`` (the checker is a debugging aid, not part of the pass).
(c) scaling: the transform's time per bound symbol against the length of the trace it saw.
(d) with (a): per gallery program, the written inputs the transform made functional or kept in
    place, and its fusion-stage barriers by kind (ordering, torch.compile region ends, remat
    pins), against the budget of one ordering barrier per written input.

``--png PATH`` also draws (b): first-call time against N, plain Thunder and the transform
(and the transform's own share), on log-log axes.

Timings are single first calls on whatever machine runs this; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="transformer_engine module not found")

import torch  # noqa: E402


def _ratio(a, b) -> str:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return "-"
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}"


def _cell(x) -> str:
    return "-" if x is None else str(x)


def markdown(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# -- (a) gallery -----------------------------------------------------------------------------


def _barrier_kind(reasons: list[str]) -> str:
    """The kind of a fusion-stage barrier, from the reasons the pass gave it."""
    if any(r.startswith("torch.compile") for r in reasons):
        return "region_end"
    if any(r.startswith("remat") for r in reasons):
        return "remat_pin"
    return "ordering"


def _fusion_stage_counts(compiled) -> dict:
    """Written inputs made functional or kept in place (before autodiff), and fusion-stage barriers by kind."""
    from thunder_ext.integration import collect_reports

    out = {"functional_inputs": 0, "kept_inputs": 0, "ordering": 0, "region_end": 0, "remat_pin": 0}
    for rep in collect_reports(compiled):
        if rep.before_autodiff is not None:
            out["functional_inputs"] += len(rep.before_autodiff.functional_inputs)
            out["kept_inputs"] += len(rep.before_autodiff.kept_inputs)
        if rep.fusion_stage is not None:
            for b in rep.fusion_stage.barriers:
                out[_barrier_kind(b.reasons)] += 1
    return out


def _trace_counts(verdict) -> dict | None:
    from thunder_ext.integration import barrier_count, collect_final_traces

    if verdict.outcome is None or verdict.outcome.compiled is None or verdict.status not in ("correct", "wrong"):
        return None
    traces = collect_final_traces(verdict.outcome.compiled)
    if not traces:
        return None
    stage = _fusion_stage_counts(verdict.outcome.compiled)

    def fusions(t):
        return sum(1 for b in t.bound_symbols if b.sym.is_fusion)

    return {
        "barriers_fw": sum(barrier_count(fw) for fw, _ in traces),
        "barriers_bw": sum(barrier_count(bw) for _, bw in traces if bw is not None),
        "fusions_fw": sum(fusions(fw) for fw, _ in traces),
        "fusions_bw": sum(fusions(bw) for _, bw in traces if bw is not None),
        "has_bw": any(bw is not None for _, bw in traces),
        "stage": stage,
    }


def bench_gallery() -> list[dict]:
    from thunder_ext.testing.compare import Config, differential
    from thunder_ext.testing.gallery import PROGRAMS

    rows = []
    for prog in PROGRAMS:
        row: dict = {"program": prog.name}
        for executors in ("default", "torch_compile"):
            for label, transform in (("plain", False), ("transform", True)):
                cfg = Config(transform=transform, fusion_type="dataflow", executors=executors, check=False)
                v = differential(prog.build, cfg)
                key = f"{label}_{executors}"
                row[f"{key}_status"] = v.status
                row[key] = _trace_counts(v)
        rows.append(row)
    return rows


def _get(row, key, field):
    c = row.get(key)
    return None if c is None else c[field]


def _sum_fw_bw(row, key, what):
    c = row.get(key)
    if c is None:
        return None
    return c[f"{what}_fw"] + c[f"{what}_bw"]


def gallery_table(rows: list[dict]) -> str:
    header = [
        "program",
        "plain / transform (dataflow, default)",
        "barriers fw plain", "barriers fw transform", "ratio fw",
        "barriers bw plain", "barriers bw transform", "ratio fw+bw",
        "fusions plain (torch_compile_ex)", "fusions transform", "ratio fusions",
    ]
    body = []
    for r in rows:
        pd, td = "plain_default", "transform_default"
        pc, tc = "plain_torch_compile", "transform_torch_compile"
        bw_p = _get(r, pd, "barriers_bw") if (r.get(pd) or {}).get("has_bw") else None
        bw_t = _get(r, td, "barriers_bw") if (r.get(td) or {}).get("has_bw") else None
        body.append([
            r["program"],
            f"{r[pd + '_status']} / {r[td + '_status']}",
            _cell(_get(r, pd, "barriers_fw")), _cell(_get(r, td, "barriers_fw")),
            _ratio(_get(r, td, "barriers_fw"), _get(r, pd, "barriers_fw")),
            _cell(bw_p), _cell(bw_t),
            _ratio(_sum_fw_bw(r, td, "barriers"), _sum_fw_bw(r, pd, "barriers")),
            _cell(_sum_fw_bw(r, pc, "fusions")), _cell(_sum_fw_bw(r, tc, "fusions")),
            _ratio(_sum_fw_bw(r, tc, "fusions"), _sum_fw_bw(r, pc, "fusions")),
        ])
    both = [r for r in rows if r.get("plain_default") and r.get("transform_default")]
    tot_p = sum(_sum_fw_bw(r, "plain_default", "barriers") for r in both)
    tot_t = sum(_sum_fw_bw(r, "transform_default", "barriers") for r in both)
    fboth = [r for r in rows if r.get("plain_torch_compile") and r.get("transform_torch_compile")]
    fus_p = sum(_sum_fw_bw(r, "plain_torch_compile", "fusions") for r in fboth)
    fus_t = sum(_sum_fw_bw(r, "transform_torch_compile", "fusions") for r in fboth)
    body.append([
        f"**total** (programs where both ran: {len(both)} / {len(fboth)})", "",
        "", "", "", "", "", f"{tot_p} -> {tot_t}: {_ratio(tot_t, tot_p)}",
        fus_p, fus_t, _ratio(fus_t, fus_p),
    ])
    return markdown(header, body)


def budget_table(rows: list[dict]) -> str:
    """(d): the fusion-stage barriers of the transform against its budget, per program: written
    inputs made functional (one ordering barrier each at most, for the epilogue), written inputs
    kept in place (the fallback: class 7, gradients), and the barriers by kind."""
    header = [
        "program", "executors", "inputs functional", "inputs kept", "ordering barriers",
        "torch.compile region ends", "remat pins", "ordering <= functional + kept",
    ]
    body = []
    for r in rows:
        for ex in ("default", "torch_compile"):
            c = r.get(f"transform_{ex}")
            if c is None:
                continue
            st = c["stage"]
            if not (st["functional_inputs"] or st["kept_inputs"] or st["ordering"] or st["region_end"] or st["remat_pin"]):
                continue
            within = st["ordering"] <= st["functional_inputs"] + st["kept_inputs"]
            body.append([r["program"], ex, st["functional_inputs"], st["kept_inputs"], st["ordering"],
                         st["region_end"], st["remat_pin"], "yes" if within else "**no**"])  # fmt: skip
    return markdown(header, body)


# -- (b) and (c) the loop --------------------------------------------------------------------


def make_loop(n: int, kind: str = "private"):
    """The timed loop: N in-place adds to a private tensor (``private``) or to the input itself (``input``)."""

    def private(x):
        y = x.exp()
        acc = x * 0
        for _ in range(n):
            y.add_(1)
            acc = acc + y
        return acc

    def input(x):
        acc = x * 0
        for _ in range(n):
            x.add_(1)
            acc = acc + x
        return acc

    return {"private": private, "input": input}[kind]


def _barrier_trace_len(jfn) -> int | None:
    """Bound symbols of the trace the before-autodiff pass produced (from Thunder's history)."""
    import thunder

    for t in thunder.last_traces(jfn):
        prov = t.get_provenance()
        if prov is not None and "thunder_ext barriers" in str(prov):
            return len(t.bound_symbols)
    return None


def bench_loop(n: int, repeat: int = 1, kind: str = "private") -> dict:
    """The loop at size ``n``; with ``repeat`` > 1, every time is the median over repeats
    (the machine is shared, so the minimum flatters whichever side got a quiet moment)."""
    runs = [_bench_loop_once(n, kind) for _ in range(repeat)]
    best = dict(runs[0])
    for key in ("plain_first_call_s", "transform_first_call_s", "transform_own_s"):
        best[key] = statistics.median(r[key] for r in runs)
    own = sorted(runs, key=lambda r: r["transform_own_s"])[len(runs) // 2]
    best["transform_before_autodiff_s"] = own["transform_before_autodiff_s"]
    best["transform_fusion_stage_s"] = own["transform_fusion_stage_s"]
    best["transform_final_traces_s"] = own["transform_final_traces_s"]
    best["repeats"] = repeat
    return best


def _bench_loop_once(n: int, kind: str = "private") -> dict:
    import thunder

    from thunder_ext import InplaceBarrierTransform, last_reports

    fn = make_loop(n, kind)
    x = torch.randn(4, 3)
    x_expected = x.clone()
    expected = fn(x_expected)

    plain = thunder.jit(fn, fusion_type="dataflow")
    x_plain = x.clone()
    gc.collect()
    t0 = time.perf_counter()
    got_plain = plain(x_plain)
    plain_s = time.perf_counter() - t0

    jfn = thunder.jit(fn, transforms=[InplaceBarrierTransform(check=False)], fusion_type="dataflow")
    x_t = x.clone()
    gc.collect()
    t0 = time.perf_counter()
    got_t = jfn(x_t)
    transform_total_s = time.perf_counter() - t0

    reps = last_reports(jfn)
    before = sum(r.before_autodiff.seconds for r in reps if r.before_autodiff is not None)
    fusion = sum(r.fusion_stage.seconds for r in reps if r.fusion_stage is not None)
    final = sum(
        f.hook_seconds for r in reps for f in (r.final_forward, r.final_backward) if f is not None
    )
    fusion_len = sum(len(r.fusion_stage_trace.bound_symbols) for r in reps if r.fusion_stage_trace is not None)
    before_len = _barrier_trace_len(jfn)
    barriers = sum(len(r.before_autodiff.barriers) if r.before_autodiff else 0 for r in reps)
    return {
        "n": n,
        "plain_first_call_s": plain_s,
        "transform_first_call_s": transform_total_s,
        "loop": kind,
        "transform_own_s": before + fusion + final,
        "transform_before_autodiff_s": before,
        "transform_fusion_stage_s": fusion,
        "transform_final_traces_s": final,
        "before_autodiff_bsyms": before_len,
        "fusion_stage_bsyms": fusion_len,
        "barriers_placed_before_autodiff": barriers,
        "plain_matches_eager": bool(torch.allclose(got_plain, expected) and torch.equal(x_plain, x_expected)),
        "transform_matches_eager": bool(torch.allclose(got_t, expected) and torch.equal(x_t, x_expected)),
    }


def loop_table(rows: list[dict]) -> str:
    header = [
        "N", "plain first call (s)", "transform first call (s)", "ratio total",
        "transform own (s)", "own / plain", "own: before autodiff + fusion stage + final traces (s)", "matches eager (plain / transform)",
    ]
    body = [
        [
            r["n"], f"{r['plain_first_call_s']:.2f}", f"{r['transform_first_call_s']:.2f}",
            _ratio(r["transform_first_call_s"], r["plain_first_call_s"]),
            f"{r['transform_own_s']:.3f}", _ratio(r["transform_own_s"], r["plain_first_call_s"]),
            f"{r['transform_before_autodiff_s']:.3f} + {r['transform_fusion_stage_s']:.3f} + {r['transform_final_traces_s']:.3f}",
            f"{r['plain_matches_eager']} / {r['transform_matches_eager']}",
        ]
        for r in rows
    ]
    return markdown(header, body)


def _exponent(rows, key_t, key_n):
    """Log-log slope between consecutive sizes: 1 is linear, 2 quadratic."""
    out = [None]
    for a, b in zip(rows, rows[1:]):
        ta, tb, na, nb = a[key_t], b[key_t], a[key_n], b[key_n]
        if not (ta and tb and na and nb) or na == nb:
            out.append(None)
        else:
            out.append(math.log(tb / ta) / math.log(nb / na))
    return out


def scaling_table(rows: list[dict]) -> str:
    for r in rows:
        r["us_per_bsym_before_autodiff"] = (
            1e6 * r["transform_before_autodiff_s"] / r["before_autodiff_bsyms"] if r["before_autodiff_bsyms"] else None
        )
        r["us_per_bsym_fusion_stage"] = (
            1e6 * r["transform_fusion_stage_s"] / r["fusion_stage_bsyms"] if r["fusion_stage_bsyms"] else None
        )
    exp_b = _exponent(rows, "transform_before_autodiff_s", "before_autodiff_bsyms")
    exp_f = _exponent(rows, "transform_fusion_stage_s", "fusion_stage_bsyms")
    exp_p = _exponent(rows, "plain_first_call_s", "n")
    header = [
        "N", "bsyms before autodiff", "us/bsym", "growth exponent",
        "bsyms at fusion stage", "us/bsym", "growth exponent", "plain thunder growth exponent (vs N)",
    ]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    body = [
        [
            r["n"], _cell(r["before_autodiff_bsyms"]), f(r["us_per_bsym_before_autodiff"], ".1f"), f(eb, ".2f"),
            _cell(r["fusion_stage_bsyms"]), f(r["us_per_bsym_fusion_stage"], ".1f"), f(ef, ".2f"), f(ep, ".2f"),
        ]
        for r, eb, ef, ep in zip(rows, exp_b, exp_f, exp_p)
    ]
    for r, eb, ef, ep in zip(rows, exp_b, exp_f, exp_p):
        r["growth_exponent_before_autodiff"], r["growth_exponent_fusion_stage"], r["growth_exponent_plain"] = eb, ef, ep
    return markdown(header, body)


def compile_chart(rows: list[dict], path: str, title: str) -> None:
    """First-call time against N (log-log): plain Thunder, the transform, and the transform's own time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    series = (
        ("plain_first_call_s", "plain Thunder, first call", "#e76f51", "o-"),
        ("transform_first_call_s", "with the transform, first call", "#2a9d8f", "s-"),
        ("transform_own_s", "the transform's own time (both passes)", "#264653", "^--"),
    )
    for key, label, color, style in series:
        ys = [r[key] for r in rows]
        ax.plot(ns, ys, style, color=color, label=label, ms=4)
        for n, y in zip(ns, ys):
            ax.annotate(f"{y:.2f}", (n, y), textcoords="offset points", xytext=(4, 5 if key.startswith("plain") else -10), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns)
    ax.set_xticklabels([f"{n}\n({r['before_autodiff_bsyms'] or '?'} bsyms)" for n, r in zip(ns, rows)], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("N, in-place loop iterations (trace length the transform sees before autodiff)")
    ax.set_ylabel("seconds")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def warm_up() -> None:
    """One tiny compilation of each kind, so that the first timed N pays no import costs."""
    import thunder

    from thunder_ext import InplaceBarrierTransform

    fn = make_loop(2)
    thunder.jit(fn, fusion_type="dataflow")(torch.randn(2))
    thunder.jit(fn, transforms=[InplaceBarrierTransform()], fusion_type="dataflow")(torch.randn(2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[100, 200, 400], help="loop sizes (default 100 200 400)")
    parser.add_argument("--repeat", type=int, default=1, help="time each N this many times, keep the median")
    parser.add_argument("--json", metavar="PATH", help="also write every number to PATH as JSON")
    parser.add_argument("--skip-gallery", action="store_true", help="skip (a), the gallery counts")
    parser.add_argument("--loop", choices=("private", "input"), default="private",
                        help="(b)'s loop writes a private tensor (default) or the input itself")
    parser.add_argument("--png", metavar="PATH", help="also draw (b), first-call time against N, as a PNG")
    ns = parser.parse_args(argv)

    import thunder

    result: dict = {
        "env": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "thunder": getattr(thunder, "__version__", "?"),
            "platform": platform.platform(),
            "cuda": torch.cuda.is_available(),
        }
    }
    print(f"# thunder-ext bench (torch {torch.__version__}, thunder {result['env']['thunder']}, "
          f"{platform.machine()}, {'CUDA' if torch.cuda.is_available() else 'CPU only'})\n")

    if not ns.skip_gallery:
        t0 = time.perf_counter()
        rows = bench_gallery()
        result["gallery"] = rows
        print("## (a) barriers and fusion regions per gallery program (dataflow fusion, thunder.jit)\n")
        print("ratio = transform / plain. Barriers: default executors. Fusions: executors=[torch_compile_ex].\n")
        print(gallery_table(rows))
        print("\n## (d) the transform's fusion-stage barriers against written inputs (dataflow fusion)\n")
        print("Programs with no written input and no barrier are left out. Ordering barriers also order "
              "writes to private storage the pass keeps in place (docs/design.md).\n")
        print(budget_table(rows))
        print(f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)

    warm_up()
    loops = []
    for n in ns.n:
        r = bench_loop(n, ns.repeat, ns.loop)
        loops.append(r)
        print(f"  N={n}: plain {r['plain_first_call_s']:.2f} s, transform {r['transform_first_call_s']:.2f} s "
              f"(own {r['transform_own_s']:.3f} s)", file=sys.stderr, flush=True)
    print(f"## (b) first-call time on the in-place loop, {ns.loop} storage (dataflow fusion, default executors)\n")
    print(loop_table(loops))
    print("\n## (c) scaling of the transform's own time with trace length\n")
    print(scaling_table(loops))
    result["loop"] = loops
    if ns.png:
        compile_chart(
            loops, ns.png,
            f"first call of y.add_(1); acc = acc + y, N times (thunder {result['env']['thunder']}, "
            f"torch {torch.__version__}, {platform.machine()}, {'median of ' + str(ns.repeat) if ns.repeat > 1 else 'one run'})",
        )  # fmt: skip
        print(f"\nwrote {ns.png}")

    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(result, f, indent=2, default=str)
        print(f"\nwrote {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
