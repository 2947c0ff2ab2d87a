"""What ``thunder_ext.verify`` reports on the gallery's final traces, plain Thunder against the transform.

    .venv/bin/python scripts/verify_gallery.py                 # dataflow, default executors, thunder.jit
    .venv/bin/python scripts/verify_gallery.py --fusion-type consecutive

For each gallery program: the differential verdict (against eager) and the violations
``verify`` finds in the final forward and backward traces, counted by kind, for plain
Thunder and with ``InplaceBarrierTransform`` (its checker off, so that the transform's
traces are judged here and not by the transform itself).  A run that crashed still leaves
its final traces when Thunder got that far (plain Thunder's dead-write crash happens while
unwrapping the return, after the trace is recorded).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter


def _verified(fn, args, transform: bool, fusion_type: str) -> Counter | None:
    import thunder

    from thunder_ext import InplaceBarrierTransform, verify

    transforms = [InplaceBarrierTransform(check=False)] if transform else []
    jfn = thunder.jit(fn, transforms=transforms, fusion_type=fusion_type)
    try:
        jfn(*args)
    except Exception:
        pass  # the verdict column reports it; the traces are what is judged here
    fw = thunder.last_traces(jfn)
    if not fw:
        return None
    bw = thunder.last_backward_traces(jfn)
    traces = [fw[-1], bw[-1] if bw else None]
    if transform and getattr(thunder.compile_stats(jfn), "last_traces", None) is not None:
        from thunder_ext.integration import collect_final_traces

        # The transform removes its barriers from what runs (program order orders it then):
        # verify judges the final traces as they were before.
        done = collect_final_traces(jfn, with_barriers=True)
        if done:
            traces = list(done[0])
    kinds = Counter()
    for t in traces:
        if t is not None:
            kinds += Counter(v.kind for v in verify(t))
    return kinds


def _fmt(kinds: Counter | None) -> str:
    if kinds is None:
        return "-"
    return ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fusion-type", default="dataflow", choices=("dataflow", "consecutive"))
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    import torch

    from thunder_ext.testing.compare import Config, differential
    from thunder_ext.testing.gallery import PROGRAMS

    print(f"verify() on final traces, fusion_type={args.fusion_type!r}, default executors, thunder.jit\n")
    print("| program | plain verdict | plain: violations | transform verdict | transform: violations |")
    print("|---|---|---|---|---|")
    flagged = clean = wrong_plain = compiled = 0
    for prog in PROGRAMS:
        row = [prog.name]
        for transform in (False, True):
            cfg = Config(transform=transform, fusion_type=args.fusion_type, check=False)
            verdict = differential(prog.build, cfg).status
            torch.manual_seed(0)
            fn, fargs, _ = prog.build()
            # A refusal happens before the transform produces a trace: what Thunder recorded
            # then is its own trace from before the transform, not worth judging.
            refused = transform and verdict == "refused"
            kinds = None if refused else _verified(fn, fargs, transform, args.fusion_type)
            row += [verdict, _fmt(kinds)]
            if not transform and verdict != "correct":
                wrong_plain += 1
                flagged += bool(kinds)
            if transform and not refused:
                compiled += 1
                clean += kinds is not None and not kinds
        print("| " + " | ".join(row) + " |")
    print(f"\nplain Thunder wrong or crashing: {wrong_plain} programs, flagged by verify: {flagged}")
    print(f"with the transform: {clean} of {compiled} compiled programs have final traces without any violation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
