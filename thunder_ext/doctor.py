"""``thunder_ext.check``: a doctor for your own in-place functions.

``check(fn, *args)`` runs ``fn`` eagerly, then compiled by plain Thunder and by Thunder with
:class:`~thunder_ext.InplaceBarrierTransform` (``check=True``), under both fusion types, and
compares every compiled run with eager through :mod:`thunder_ext.testing.compare` (outputs, the
final state of the inputs, and gradients when inputs require grad).  It also runs the
checker (:func:`thunder_ext.verify`) on each compiled run's final forward and backward
traces and on the fusion-stage traces the transform produced, and counts the violations.

Plain Thunder's traces usually show violations for a hazardous function even where its
numbers happen to come out right: that is the point, it tells you the function relies on
luck without the transform.

    >>> report = thunder_ext.check(fn, x, w, fusion_type="dataflow")
    >>> print(report)          # a table, with a one-line verdict on top (also what the REPL shows)
    >>> report.safe            # True iff every run with the transform agrees with eager (or differs as documented)
    >>> report.status          # 'safe', 'unsafe', or 'eager-error' (fn fails in eager PyTorch)
"""

from __future__ import annotations

import html
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

import torch

from thunder_ext.progress import progress
from thunder_ext.testing.compare import Config, Outcome, Verdict, _clone, differential, execute
from thunder_ext.testing.differences import documented_difference

FUSION_TYPES = ("consecutive", "dataflow")
ENTRIES = ("jit", "thunderfx")
EXECUTORS = ("default", "torch_compile")

# What the table's columns count; printed under it (the column names alone were not enough).
LEGEND = (
    ("configuration", "plain Thunder or with the transform, then fusion type, executors, and entry (thunder.jit or thunderfx)"),
    ("result", "the compiled run against eager PyTorch: correct (same outputs, final input state and gradients), "
               "documented (other numbers only in a way docs/limits.md documents, named in the detail: a None "
               "gradient for eager's zeros or zeros for its None, a written non-leaf input's retained .grad, "
               "float rounding), "
               "wrong (other numbers, no error), crash (an exception thunder-ext does not document), refused "
               "(a documented thunder_ext error; 'eager too' when eager PyTorch raises as well)"),
    ("violations", "ordering hazards thunder_ext.verify finds in the run's traces, by kind (RAW read-after-write, "
                   "WAR write-after-read, WAW, dead-write, ...); '-' when no trace was checked. A correct result "
                   "with violations is correct by luck: another legal fusion order can make it wrong"),
    ("barriers", "update_aliases barriers in the final forward and backward traces, before the transform removes "
                 "them from what runs ('-' when the run did not finish)"),
    ("detail", "why a run is not correct, or else its first violation"),
)
DETAIL_WIDTH = 100


@dataclass
class CheckRow:
    """One compiled run: its configuration, verdict, and what the checker found in its traces."""

    config: Config
    verdict: Verdict
    violations: list[tuple[str, str]] = field(default_factory=list)  # (trace stage, violation text)
    barriers: int | None = None  # in the final forward + backward traces; None when there are none
    traces_checked: int = 0
    checker_error: str = ""
    # Why a run that does not match eager is a documented difference (docs/limits.md), if it is.
    documented: str = ""

    @property
    def name(self) -> str:
        return str(self.config)

    @property
    def result(self) -> str:
        v = self.verdict
        if v.eager_error is not None and v.status == "refused":
            return "refused (eager too)"
        if self.documented and v.eager_error is None:
            return "documented"
        return v.status

    @property
    def ok(self) -> bool:
        # Where eager raises, a documented difference still leaves the function the user's error.
        return self.verdict.ok or bool(self.documented and self.verdict.eager_error is None)

    @property
    def violation_summary(self) -> str:
        if not self.traces_checked:
            return "-"
        if not self.violations:
            return "0"
        kinds = Counter(text.split("]", 1)[0].lstrip("[") for _, text in self.violations)
        return f"{len(self.violations)} (" + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")"

    @property
    def detail(self) -> str:
        parts = []
        if self.documented:
            parts.append(self.documented)
        if self.verdict.detail:
            parts.append(self.verdict.detail)
        if self.checker_error:
            parts.append(f"checker: {self.checker_error}")
        if not parts and self.violations:
            stage, text = self.violations[0]
            parts.append(f"{stage}: {text}")
        return " | ".join(parts)


@dataclass
class CheckReport:
    """The doctor's report: one row per compiled configuration, and a verdict."""

    function: str
    rows: list[CheckRow]
    eager_error: BaseException | None = None

    @property
    def transform_rows(self) -> list[CheckRow]:
        return [r for r in self.rows if r.config.transform]

    @property
    def plain_rows(self) -> list[CheckRow]:
        return [r for r in self.rows if not r.config.transform]

    @property
    def safe(self) -> bool:
        """Every run with the transform is correct, differs only as documented (docs/limits.md), or
        refuses where eager PyTorch refuses too."""
        rows = self.transform_rows
        return bool(rows) and all(r.ok for r in rows)

    @property
    def eager_fails(self) -> bool:
        """``fn`` raises in eager PyTorch and the transform does not refuse it the same way: the user's bug."""
        return self.eager_error is not None and not self.safe

    @property
    def status(self) -> str:
        """'safe', 'unsafe', or 'eager-error' (nothing to compare with: ``fn`` fails in eager PyTorch)."""
        if self.safe:
            return "safe"
        return "eager-error" if self.eager_fails else "unsafe"

    @property
    def plain_hazardous(self) -> bool:
        """Plain Thunder gets it wrong (or crashes) somewhere, or its traces break an invariant."""
        return any(not r.ok or r.violations for r in self.plain_rows)

    def row(self, name: str) -> CheckRow:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def verdict(self) -> str:
        """The one-line verdict printed on top of the table."""
        if self.safe:
            bad = [r for r in self.plain_rows if not r.ok]
            nviol = sum(len(r.violations) for r in self.plain_rows)
            if bad:
                why = "plain Thunder fails: " + ", ".join(f"{r.result} in {r.name}" for r in bad)
            elif nviol:
                why = f"plain Thunder is right here only by luck: {nviol} ordering violation(s) in its traces"
            else:
                why = "no in-place hazard found for plain Thunder either"
            if self.eager_error is not None:
                why += "; eager PyTorch raises and the transform refuses too"
            return f"safe with InplaceBarrierTransform ({why})"
        if self.eager_fails:
            return (
                f"ERROR IN YOUR FUNCTION: it raises in eager PyTorch ({_short(self.eager_error)}), so there is "
                "nothing to compare the compiled runs with; fix the function or its inputs first"
            )
        bad = [r for r in self.transform_rows if not r.ok]
        refused = [r for r in bad if r.verdict.status == "refused"]
        if refused and len(refused) == len(bad):
            first = refused[0].verdict.detail.split(":", 1)[0] or "an InplaceOrderingError"
            return (
                f"UNSAFE: InplaceBarrierTransform refuses this function ({first}) where eager PyTorch "
                "runs it; rewrite it as the error says"
            )
        what = ", ".join(f"{r.result} in {r.name}" for r in bad)
        return f"UNSAFE: the compiled function does not match eager PyTorch even with the transform ({what})"

    def _table(self) -> tuple[list[str], list[list[str]]]:
        header = ["configuration", "result", "violations", "barriers", "detail"]
        body = [
            [r.name, r.result, r.violation_summary, "-" if r.barriers is None else str(r.barriers), r.detail]
            for r in self.rows
        ]
        return header, body

    def __str__(self) -> str:
        header, body = self._table()
        lines = [self.verdict, f"function: {self.function} (status: {self.status})"]
        if self.eager_error is not None:
            lines.append(f"eager PyTorch raises: {_short(self.eager_error)}")
        lines.append("")
        widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
        widths[-1] = len(header[-1])  # the detail column is not padded
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        for row in body:
            # The detail is wrapped, never cut: its end is often the useful part.
            cells = [c.ljust(w) for c, w in zip(row[:-1], widths)]
            indent = " " * (sum(widths[:-1]) + 2 * len(cells))
            detail = textwrap.wrap(row[-1], DETAIL_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
            lines.append("  ".join([*cells, detail[0]]).rstrip())
            lines.extend(indent + more for more in detail[1:])
        lines.append("")
        lines.extend(legend_lines())
        listed = [r for r in self.rows if r.violations]
        if listed:
            lines.append("")
            lines.append("violations (first 3 per configuration):")
            for r in listed:
                for stage, text in r.violations[:3]:
                    lines.append(f"  {r.name} [{stage}] {text}")
                if len(r.violations) > 3:
                    lines.append(f"  {r.name}: ... {len(r.violations) - 3} more")
        return "\n".join(lines)

    def __repr__(self) -> str:
        # What a REPL shows for ``check(...)``: the table, as a notebook shows its HTML form.
        return str(self)

    def _repr_html_(self) -> str:
        e = html.escape
        header, body = self._table()
        color = "#1a7f37" if self.safe else "#cf222e"
        out = [
            f'<div class="thunder-ext-check"><p style="color:{color}"><b>{e(self.verdict)}</b></p>',
            f"<p>function: <code>{e(self.function)}</code></p>",
        ]
        if self.eager_error is not None:
            out.append(f"<p>eager PyTorch raises: <code>{e(_short(self.eager_error))}</code></p>")
        out.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr></thead><tbody>")
        for r, row in zip(self.rows, body):
            title = e("\n".join(f"[{s}] {t}" for s, t in r.violations), quote=True)
            cells = "".join(f"<td>{e(c)}</td>" for c in row[:-1])
            out.append(f'<tr title="{title}">{cells}<td>{e(row[-1])}</td></tr>')
        out.append("</tbody></table>")
        out.append("<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in LEGEND) + "</dl></div>")
        return "\n".join(out)


def _deep_clone(x):
    """``compare._clone`` applied inside lists, tuples and dicts too."""
    from torch.utils._pytree import tree_map

    return tree_map(_clone, x)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def legend_lines(width: int = 100) -> list[str]:
    """The column legend, one wrapped entry per column."""
    out = ["columns:"]
    for k, v in LEGEND:
        out.extend(textwrap.wrap(f"{k}: {v}", width, initial_indent="  ", subsequent_indent="      "))
    return out


def _name(fn: Callable) -> str:
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{qual}" if mod else qual


def _inspect_traces(row: CheckRow, outcome: Outcome | None) -> None:
    """Fill in the checker's violations and the barrier count of a compiled run.

    A run that completed is checked on its final traces.  A crashed run is checked on the
    last traces Thunder recorded before the crash (that is often where the hazard shows).
    A refused run is not checked: Thunder's last traces then predate the transform.
    """
    from thunder_ext.checker import verify
    from thunder_ext.integration import barrier_count, collect_final_traces, collect_fusion_stage_traces

    if outcome is None or outcome.compiled is None or row.verdict.status == "refused":
        return
    completed = row.verdict.status in ("correct", "wrong")
    prefix = "final" if completed else "last recorded"
    stages = []
    try:
        # Before barrier removal: data edges order the accesses there (what verify checks).
        finals = collect_final_traces(outcome.compiled, with_barriers=True)
        for k, trace in enumerate(collect_fusion_stage_traces(outcome.compiled)):
            stages.append((_stage("fusion stage", k), trace))
        for k, (fw, bw) in enumerate(finals):
            stages.append((_stage(f"{prefix} forward", k), fw))
            if bw is not None:
                stages.append((_stage(f"{prefix} backward", k), bw))
        if finals and completed:
            row.barriers = sum(barrier_count(fw) + (barrier_count(bw) if bw is not None else 0) for fw, bw in finals)
    except Exception as e:  # traces are missing when the run failed early
        if completed:
            row.checker_error = _short(e)
        return
    for stage, trace in stages:
        try:
            found = verify(trace)
        except Exception as e:  # the checker must not take the doctor down
            row.checker_error = f"{stage}: {_short(e)}"
            continue
        row.traces_checked += 1
        row.violations.extend((stage, str(v)) for v in found)


def _stage(name: str, k: int) -> str:
    return name if k == 0 else f"{name} #{k}"


# The keyword options ``check()`` takes, named as the CLI spells them (--fusion-type, --entry,
# --executors); the old plural spellings point to the new ones.
OPTIONS = ("fusion_type", "entry", "executors", "state", "kwargs")
RENAMED = {"fusion_types": "fusion_type", "entries": "entry", "executor": "executors"}


def _unknown_options(unknown: dict) -> TypeError:
    name = next(iter(unknown))
    valid = ", ".join(f"{o}=" for o in OPTIONS)
    if name in RENAMED:
        return TypeError(
            f"check() got the option {name}=, which is now spelled {RENAMED[name]}= (as the CLI's "
            f"--{RENAMED[name].replace('_', '-')}); the valid options are {valid}"
        )
    near = get_close_matches(name, OPTIONS, n=1)
    hint = f" (did you mean {near[0]}=?)" if near else ""
    return TypeError(
        f"check() got an unknown option {name}={hint}; the valid options are {valid}. Your function's own "
        f"keyword arguments go in kwargs=, e.g. check(f, x, kwargs={{{name!r}: ...}})"
    )


def check(
    fn: Callable,
    /,
    *args: Any,
    fusion_type: str | Sequence[str] = FUSION_TYPES,
    entry: str | Sequence[str] = "jit",
    executors: str | Sequence[str] = "default",
    state: dict[str, torch.Tensor] | None = None,
    kwargs: dict[str, Any] | None = None,
    **unknown: Any,
) -> CheckReport:
    """Check ``fn(*args, **kwargs)`` against eager PyTorch, with and without the transform.

    ``args`` (positional, after ``fn``) are cloned for every run (``fn`` may mutate them);
    gradients are compared for the tensors in ``args`` that require grad.  The options are
    keyword-only, named as the CLI's flags; each takes one name or a sequence of names:

    * ``fusion_type``: ``"consecutive"`` and/or ``"dataflow"`` (default both);
    * ``entry``: ``"jit"`` (``thunder.jit``, the default) and/or ``"thunderfx"``;
    * ``executors``: ``"default"`` and/or ``"torch_compile"`` (``torch_compile_ex`` only);
    * ``state``: extra tensors ``fn`` mutates (a module's buffers); their final values are
      compared too.  They are *not* cloned: they are reset to their initial values after
      each run instead;
    * ``kwargs``: ``fn``'s own keyword arguments.  Tensors among them are cloned per run, and
      their final values are compared like ``state`` (their gradients are not).

    Any other keyword is a ``TypeError`` that lists these.  Returns the report;
    ``print(report)`` shows the table, and a notebook renders it.
    """
    from thunder_ext.validation import require_function, require_kwargs, require_names, require_state

    if unknown:
        raise _unknown_options(unknown)
    require_function(fn)
    fusion_types = require_names(fusion_type, "fusion_type", FUSION_TYPES)
    entries = require_names(entry, "entry", ENTRIES)
    executor_sets = require_names(executors, "executors", EXECUTORS)
    require_state(state)
    kwargs = require_kwargs(kwargs)

    state = dict(state or {})
    initial_state = {k: v.detach().clone() for k, v in state.items()}
    originals = tuple(_deep_clone(a) for a in args)
    original_kwargs = {k: _deep_clone(v) for k, v in kwargs.items()}

    def build():
        for k, v in state.items():  # reset buffers the previous run mutated
            with torch.no_grad():
                v.copy_(initial_state[k])
        run_kwargs = {k: _deep_clone(v) for k, v in original_kwargs.items()}
        run_state = dict(state)
        run_state.update({f"kwarg {k}": v for k, v in run_kwargs.items() if isinstance(v, torch.Tensor)})
        target = fn
        if run_kwargs:

            def target(*a):
                return fn(*a, **run_kwargs)

        return target, tuple(_deep_clone(a) for a in originals), run_state

    # Eager once, as ``differential`` would run it, shared by every compiled run.
    torch.manual_seed(0)
    efn, eargs, estate = build()
    eager = execute(efn, [_clone(a) for a in eargs], estate)

    configs = [
        Config(transform=transform, fusion_type=ftype, executors=ex, entry=e, check=transform)
        for e in entries
        for ex in executor_sets
        for ftype in fusion_types
        for transform in (False, True)
    ]
    rows = []
    for cfg in progress(configs, "check", name=str):
        verdict = differential(build, cfg, eager=eager)
        row = CheckRow(cfg, verdict, documented=documented_difference(build, verdict) or "")
        _inspect_traces(row, verdict.outcome)
        rows.append(row)
    for k, v in state.items():
        with torch.no_grad():
            v.copy_(initial_state[k])
    return CheckReport(_name(fn), rows, eager.error)
