"""Soak the fuzzer: judge many random programs, keep going past failures, group them.

    python scripts/soak.py                    # THUNDER_EXT_FUZZ_EXAMPLES programs (default 300)
    python scripts/soak.py --examples 2000 --seed 7 --shrink
    python scripts/soak.py --executors torch_compile   # the cells with executors=[torch_compile_ex]

Prints how many programs ran, how many were out of scope (a documented Thunder limitation in every
cell), the verdict counts per cell, the outcomes (ok, refused by error class, wrong, crash;
``--plain`` judges plain Thunder the same way), and every distinct failure with the smallest program
that showed it (``--shrink`` asks hypothesis for a minimal one).  Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore")
    from dataclasses import replace

    from thunder_ext.testing.fuzzing import CONFIGS, fails_with, reduce, soak

    executors = ("default", "torch_compile") if args.executors == "both" else (args.executors,)
    configs = tuple(replace(c, executors=e) for e in executors for c in CONFIGS)
    if args.plain:
        configs = tuple(replace(c, transform=False, check=False) for c in configs)

    start = time.monotonic()

    def progress(result, program, judgement) -> None:
        if args.progress and result.ran % args.progress == 0:
            print(
                f"[{time.monotonic() - start:7.1f}s] {result.ran} programs, "
                f"{result.failed_programs} failing, {len(result.failures)} distinct failures",
                flush=True,
            )

    result = soak(args.examples, seed=args.seed, on_program=progress, configs=configs)
    elapsed = time.monotonic() - start
    print(f"\nprograms run: {result.ran} in {elapsed:.0f}s (out of scope: {result.out_of_scope})")
    print("cell verdicts: " + ", ".join(f"{k}={v}" for k, v in sorted(result.cells.items())))
    print("cell outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(result.statuses.items())))
    print(f"failing programs: {result.failed_programs}; distinct failures: {len(result.failures)}")
    for sig, progs in sorted(result.failures.items()):
        cells = ", ".join(sorted(result.cells_of[sig]))
        print(f"\n=== {sig}\n    in {len(progs)} programs; cells: {cells}")
        program = result.smallest(sig)
        if args.shrink:
            program = reduce(program, fails_with(sig, configs))
        print(program, end="")
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
