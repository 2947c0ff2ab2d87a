"""Soak the fuzzer: judge many random programs, keep going past failures, group them.

    python scripts/soak.py                    # THUNDER_EXT_FUZZ_EXAMPLES programs (default 300)
    python scripts/soak.py --examples 2000 --seed 7 --shrink
    python scripts/soak.py --executors torch_compile   # the cells with executors=[torch_compile_ex]
    python scripts/soak.py --jobs 12 --seed 100 --examples 6000 --executors both --time-limit 540 --json s.json
    python scripts/soak.py --rotate --seed 13000 --examples 10000 --executors both --json s.json  # one cell per program
    python scripts/soak.py --device cuda --jobs 12 --seed 100 --examples 6000 --time-limit 300  # nvFuser, on a GPU

Prints how many programs ran, how many were out of scope (a documented Thunder limitation in every
cell), the verdict counts per cell, the outcomes (ok, refused by error class, wrong, crash;
``--plain`` judges plain Thunder the same way), and every distinct failure with the smallest program
that showed it (``--shrink`` asks hypothesis for a minimal one).  A refusal is joined with plain
Thunder in its cell: where plain Thunder matches eager, it is a failure (``needless-refusal``),
except class 9 with grad, counted apart.  Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", "300")))
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    parser.add_argument("--shrink", action="store_true", help="reduce the smallest program of each failure (delete lines while it fails the same way)")
    parser.add_argument("--executors", choices=("default", "torch_compile", "both"), default="default",
                        help="executors of the judged cells, under both fusion types (default: the defaults)")
    parser.add_argument("--progress", type=int, default=25, help="print a line every N programs (0: never)")
    parser.add_argument("--plain", action="store_true",
                        help="judge plain Thunder (no transform) by the same rule, for comparison")
    parser.add_argument("--rotate", action="store_true",
                        help="judge each program in one cell, rotating through the cells (about 8x the programs per minute)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes, worker i with seed SEED+i and its share of --examples (needs --seed)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="stop after this many seconds with the counts so far (each worker, with --jobs)")
    parser.add_argument("--json", default=None, help="also write the counts and failures to this file")
    parser.add_argument("--device", default="cpu",
                        help="where the programs' inputs live (default cpu; cuda runs the default executors' cells on nvFuser)")
    args = parser.parse_args(argv)
    if args.jobs > 1 and (args.seed is None or args.shrink):
        parser.error("--jobs needs --seed (workers get SEED, SEED+1, ...) and cannot --shrink")

    warnings.filterwarnings("ignore")
    start = time.monotonic()
    if args.jobs > 1:
        summary = _run_workers(args, argv if argv is not None else sys.argv[1:])
        result = None
    else:
        result, configs = _soak_here(args, start)
        summary = result.summary()
    elapsed = time.monotonic() - start

    share = summary["with_grad"] / summary["ran"] if summary["ran"] else 0.0
    print(f"\nprograms run: {summary['ran']} in {elapsed:.0f}s (with grad inputs: {summary['with_grad']}, "
          f"share {share:.2f}; out of scope: {summary['out_of_scope']})")
    print("cell verdicts: " + ", ".join(f"{k}={v}" for k, v in sorted(summary["cells"].items())))
    print("cell outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(summary["statuses"].items())))
    print(f"distinct failures: {len(summary['failures'])}")
    for sig, f in sorted(summary["failures"].items()):
        print(f"\n=== {sig}\n    in {f['programs']} programs; cells: {', '.join(f['cells'])}")
        source = f["smallest"]
        if args.shrink and result is not None:
            from thunder_ext.testing.fuzzing import fails_with, reduce

            source = reduce(result.smallest(sig), fails_with(sig, configs, args.device)).source
        print(source, end="")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "elapsed_s": round(elapsed, 1), **summary}, out, indent=1)
    return 1 if summary["failures"] else 0


def _soak_here(args, start: float):
    from dataclasses import replace

    from thunder_ext.testing.fuzzing import CONFIGS, soak

    executors = ("default", "torch_compile") if args.executors == "both" else (args.executors,)
    configs = tuple(replace(c, executors=e) for e in executors for c in CONFIGS)
    if args.plain:
        configs = tuple(replace(c, transform=False, check=False) for c in configs)

    reported: set[str] = set()

    def progress(result, program, judgement) -> None:
        # A new distinct failure is shown when it is found: a long soak is read while it runs.
        for sig in result.failures.keys() - reported:
            reported.add(sig)
            print(f"[{time.monotonic() - start:7.1f}s] new failure: {sig}\n{result.smallest(sig).source}", flush=True)
        if args.progress and result.ran % args.progress == 0:
            print(
                f"[{time.monotonic() - start:7.1f}s] {result.ran} programs, "
                f"{result.failed_programs} failing, {len(result.failures)} distinct failures",
                flush=True,
            )

    result = soak(args.examples, seed=args.seed, on_program=progress, configs=configs, time_limit=args.time_limit,
                  rotate=args.rotate, device=args.device)
    return result, configs


def _run_workers(args, argv: list[str]) -> dict:
    """Run ``--jobs`` copies of this script, each on its own seed, and add up their JSON summaries."""
    import subprocess
    import tempfile

    from thunder_ext.testing.fuzzing import merge_summaries

    base = _strip(argv, ("--jobs", "--seed", "--examples", "--json", "--progress"))
    share = -(-args.examples // args.jobs)
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i in range(args.jobs):
            out = os.path.join(tmp, f"w{i}.json")
            cmd = [sys.executable, __file__, *base, "--seed", str(args.seed + i), "--examples", str(share),
                   "--json", out, "--progress", "0"]
            procs.append((out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL)))
        summaries = []
        for out, proc in procs:
            proc.wait()
            if not os.path.exists(out):  # a worker that crashed outright is a finding, not a silent gap
                raise SystemExit(f"soak worker failed (exit {proc.returncode}): {' '.join(proc.args)}")
            with open(out) as f:
                summaries.append(json.load(f))
    return merge_summaries(summaries)


def _strip(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` without ``options`` and their values (both ``--opt v`` and ``--opt=v``)."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in options:
            skip = True
        elif not a.startswith(tuple(o + "=" for o in options)):
            kept.append(a)
    return kept


if __name__ == "__main__":
    sys.exit(main())
