"""``python -m thunder_ext``: the gallery through plain Thunder and with the transform.

Every program runs under ``fusion_type="dataflow"`` with the default executors, through
``thunder.jit``, and is compared with eager PyTorch.  Exit status 1 if any program is wrong
(or crashes) with the transform.  ``python -m thunder_ext check ...`` checks a function of
yours; see ``python -m thunder_ext check --help``.
"""

from __future__ import annotations

import sys
import warnings


def gallery_table(*, entry: str = "jit", executors: str = "default") -> tuple[list[dict], bool]:
    from thunder_ext.compare import Config, differential
    from thunder_ext.gallery import PROGRAMS
    from thunder_ext.integration import barrier_count, final_traces, last_reports

    rows, all_ok = [], True
    for prog in PROGRAMS:
        row = {"program": prog.name, "hazard": prog.hazard}
        for label, transform in (("plain", False), ("transform", True)):
            cfg = Config(transform=transform, executors=executors, entry=entry, check=transform)
            v = differential(prog.build, cfg)
            status = v.status
            if v.eager_error is not None and status == "refused":
                status = "refused (eager too)"
            row[label] = status
            row[f"{label}_detail"] = v.detail
            barriers, dead = "-", "-"
            if v.outcome is not None and v.outcome.compiled is not None and v.status in ("correct", "wrong"):
                traces = final_traces(v.outcome.compiled)
                barriers = str(sum(barrier_count(fw) + (barrier_count(bw) if bw else 0) for fw, bw in traces))
                if transform:
                    reps = last_reports(v.outcome.compiled)
                    dead = str(
                        sum(len(r.before_autodiff.dead_writes) if r.before_autodiff else 0 for r in reps)
                        + sum(len(r.fusion_stage.dead_writes) if r.fusion_stage else 0 for r in reps)
                    )
            row[f"{label}_barriers"] = barriers
            if transform:
                row["dead_removed"] = dead
                # A documented refusal is the expected result for the refused constructs.
                if not (v.ok or (prog.refused and v.status == "refused")):
                    all_ok = False
        rows.append(row)
    return rows, all_ok


def print_table(rows: list[dict]) -> None:
    cols = [
        ("program", "program"),
        ("hazard", "class"),
        ("plain", "plain thunder"),
        ("transform", "with transform"),
        ("plain_barriers", "barriers before"),
        ("transform_barriers", "barriers after"),
        ("dead_removed", "dead writes removed"),
    ]
    widths = [max(len(h), *(len(str(r.get(k, ""))) for r in rows)) for k, h in cols]
    print("  ".join(h.ljust(w) for (_, h), w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(r.get(k, "")).ljust(w) for (k, _), w in zip(cols, widths)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    warnings.filterwarnings("ignore", message="transformer_engine module not found")
    if argv and argv[0] == "check":
        from thunder_ext.cli import check_main

        return check_main(argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    print("thunder-ext gallery: fusion_type='dataflow', default executors, thunder.jit, compared with eager\n")
    rows, ok = gallery_table()
    print_table(rows)
    print()
    for r in rows:
        for label in ("plain", "transform"):
            if r[label] not in ("correct",) and r[f"{label}_detail"]:
                print(f"{r['program']} [{label}]: {r[f'{label}_detail']}")
    good = sum(r["transform"] == "correct" or r["transform"].startswith("refused") for r in rows)
    print(f"\n{'OK' if ok else 'FAILED'}: {good}/{len(rows)} programs correct or refused as documented with the transform")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
