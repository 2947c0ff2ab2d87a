"""``python -m thunder_ext``: the command line (:mod:`thunder_ext.cli`), and the gallery table.

The gallery, the default subcommand, runs every program under ``fusion_type="dataflow"``
(default executors and ``thunder.jit`` unless told otherwise), through plain Thunder and
with the transform, and compares each with eager PyTorch.  Exit status 1 if any program is
wrong (or crashes) with the transform.
"""

from __future__ import annotations

import sys
import textwrap

# What the main table's columns mean, printed under it.
LEGEND = (
    ("class", "the failure class of docs/design.md the program exercises (1 dead in-place op, 2 read after a write "
              "(through a composite), 3 write after read, 4 copy_ exposed by a decomposition, 5 gradient through "
              "a view of a mutated tensor, 6 forward write to a value saved for backward); '2+4' is both; "
              "no number: not a failure class, a case the transform must keep right"),
    ("plain thunder / with transform", "the compiled run against eager PyTorch: correct, wrong (other numbers, "
              "no error), crash, or refused (a documented thunder_ext error; 'eager too' when eager PyTorch "
              "raises as well)"),
    ("barriers before", "update_aliases barriers in plain Thunder's final forward and backward traces "
              "(Thunder's own alias pass); '-' when the run crashed"),
    ("barriers after", "barriers in the final traces with the transform: it replaces Thunder's and keeps "
              "only those that data edges need (counted before it removes them from what runs, once "
              "program order is final); '-' when the run was refused"),
    ("dead writes removed", "dead in-place ops the transform removed, before autodiff and at the fusion stage"),
)
WIDTH = 100


def gallery_table(*, entry: str = "jit", executors: str = "default") -> tuple[list[dict], bool]:
    from thunder_ext.testing.compare import Config, differential
    from thunder_ext.testing.gallery import PROGRAMS, reference_outcome
    from thunder_ext.integration import barrier_count, collect_final_traces, collect_reports

    from thunder_ext.progress import progress

    rows, all_ok = [], True
    for prog in progress(PROGRAMS, "gallery", name=lambda p: p.name):
        row = {"program": prog.name, "hazard": prog.hazard}
        # Where eager itself refuses (its version counter is stricter), the mutation-free
        # reference says what the program computes.
        reference = reference_outcome(prog)
        for label, transform in (("plain", False), ("transform", True)):
            cfg = Config(transform=transform, executors=executors, entry=entry, check=transform)
            v = differential(prog.build, cfg, eager=reference)
            status = v.status
            if v.eager_error is not None and status == "refused":
                status = "refused (eager too)"
            row[label] = status
            row[f"{label}_detail"] = v.detail
            barriers, dead = "-", "-"
            if v.outcome is not None and v.outcome.compiled is not None and v.status in ("correct", "wrong"):
                # The barriers that order the final traces, before the transform removes them.
                traces = collect_final_traces(v.outcome.compiled, with_barriers=True)
                barriers = str(sum(barrier_count(fw) + (barrier_count(bw) if bw else 0) for fw, bw in traces))
                if transform:
                    reps = collect_reports(v.outcome.compiled)
                    dead = str(
                        sum(len(r.before_autodiff.dead_writes) if r.before_autodiff else 0 for r in reps)
                        + sum(len(r.fusion_stage.dead_writes) if r.fusion_stage else 0 for r in reps)
                    )
            row[f"{label}_barriers"] = barriers
            if transform:
                row["dead_removed"] = dead
                # A documented refusal is the expected result for the refused constructs.
                if not (v.ok or (prog.refused_in(entry) and v.status == "refused")):
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
        print("  ".join(str(r.get(k, "")).ljust(w) for (k, _), w in zip(cols, widths)).rstrip())


def legend_lines(width: int = WIDTH) -> list[str]:
    out = ["columns:"]
    for k, v in LEGEND:
        out.extend(textwrap.wrap(f"{k}: {v}", width, initial_indent="  ", subsequent_indent="      "))
    return out


def detail_lines(rows: list[dict], width: int = WIDTH) -> list[str]:
    """Why each run that is not correct failed, wrapped, never cut."""
    out = []
    for r in rows:
        for label in ("plain", "transform"):
            if r[label] != "correct" and r[f"{label}_detail"]:
                head = f"{r['program']} [{label}]: "
                out.extend(textwrap.wrap(head + r[f"{label}_detail"], width, subsequent_indent="    ",
                                         break_long_words=False, break_on_hyphens=False))
    return out


def run_gallery(entry: str = "jit", executors: str = "default") -> int:
    """Print the gallery table, its legend and why each failing run failed; the exit status."""
    print(f"thunder-ext gallery: fusion_type='dataflow', {executors} executors, {_ENTRY_NAMES[entry]}, "
          "compared with eager\n")
    rows, ok = gallery_table(entry=entry, executors=executors)
    print_table(rows)
    print()
    print("\n".join(legend_lines()))
    print()
    print("\n".join(detail_lines(rows)))
    good = sum(r["transform"] == "correct" or r["transform"].startswith("refused") for r in rows)
    print(f"\n{'OK' if ok else 'FAILED'}: {good}/{len(rows)} programs correct or refused as documented with the transform")
    return 0 if ok else 1


_ENTRY_NAMES = {"jit": "thunder.jit", "thunderfx": "thunderfx"}


def main(argv: list[str] | None = None) -> int:
    """``python -m thunder_ext [SUBCOMMAND] ...``; see ``--help``."""
    from thunder_ext.cli import main as cli_main
    from thunder_ext.noise import quiet_upstream_noise

    quiet_upstream_noise()  # before Thunder is imported: its import warns
    return cli_main(argv, gallery=run_gallery)


if __name__ == "__main__":
    sys.exit(main())
