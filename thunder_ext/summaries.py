"""Short text and HTML summaries of the barrier pass's reports, without the traces inside them.

A :class:`~thunder_ext.barriers.BarrierReport` holds bound symbols, and a
:class:`~thunder_ext.integration.StageReports` a whole trace: their dataclass reprs dump
pages of trace.  These summaries name each barrier (its reasons and the access it goes
before), each dead in-place op removed, and the time taken.  This module imports nothing
from the pass, so the report classes can use it.
"""

from __future__ import annotations

import html


def _describe(bsym) -> str:
    from thunder_ext.op_kinds import describe

    return describe(bsym)


def _reasons(record) -> str:
    # Each reason already names both accesses ("WAR: `a = mul` (f.py:5) before `t6 = add_` (f.py:6)").
    return "; ".join(dict.fromkeys(record.reasons)) or f"before {_describe(record.before)}"


def barrier_report_headline(report) -> str:
    """``'3 barriers placed, 1 dead in-place op removed, 2 ms'``."""
    nb, nd = len(report.barriers), len(report.dead_writes)
    parts = [
        f"{nb} barrier{'s' if nb != 1 else ''} placed",
        f"{nd} dead in-place op{'s' if nd != 1 else ''} removed",
    ]
    if report.stripped:
        parts.append(f"{report.stripped} existing barrier{'s' if report.stripped != 1 else ''} replaced")
    parts.append(f"{report.seconds * 1e3:.1f} ms")
    return ", ".join(parts)


def barrier_report_lines(report, indent: str = "  ") -> list[str]:
    """The headline, then one line per barrier and per dead write."""
    lines = [barrier_report_headline(report)]
    for rec in report.barriers:
        lines.append(f"{indent}barrier: {_reasons(rec)}")
    for bsym in report.dead_writes:
        lines.append(f"{indent}removed dead in-place op {_describe(bsym)}")
    lines += [f"{indent}{line}" for line in _input_lines(report)]
    if report.dropped_witnesses:
        lines.append(f"{indent}{report.dropped_witnesses} ordering(s) left to the fusion stage (they carry gradients)")
    return lines


def _input_lines(report) -> list[str]:
    """The written inputs made values (one epilogue copy_ each) and those kept in place, with why."""
    lines = []
    choices = getattr(report, "stride_choices", None)
    if choices is not None:
        lines.append(
            f"view or copy by strides, both answers computed and chosen at run time ({choices.worlds} programs): "
            + ", ".join(choices.chosen)
            + (f"; strides giving the {choices.refused_at_run_time} refused at the call" if choices.refused_at_run_time else "")
        )
        for name, spec in getattr(choices, "histories_by_answer", {}).items():
            answer = "a view" if spec[-1] else "a copy"
            lines.append(f"input `{name}` takes its new value's gradient history only where the strides make it {answer}")
    if getattr(report, "functional_inputs", None):
        names = ", ".join(f"`{n}`" for n in report.functional_inputs)
        lines.append(f"inputs written as values, then copied back once at the end: {names}")
    for name, why in getattr(report, "kept_inputs", {}).items():
        lines.append(f"input `{name}` written in place (the fallback): {why}")
    if getattr(report, "saved_old_values", None):
        names = ", ".join(f"`{n}`" for n in report.saved_old_values)
        lines.append(f"old value(s) of written inputs the backward reads, copied once: {names}")
    if getattr(report, "zero_gradient_links", 0):
        lines.append(f"{report.zero_gradient_links} overwrite(s) of a tensor with gradients made a value that keeps its zero gradient (a where)")
    if getattr(report, "clones_copied", 0):
        lines.append(f"{report.clones_copied} clone(s) of written storage run as copies outside nvFuser (it would alias them)")
    if getattr(report, "copied_view_handles", 0) or getattr(report, "copied_views_replayed", 0):
        lines.append(
            f"views autodiff copies (diagonal): {report.copied_view_handles} no-grad write(s) through a detached "
            f"handle, {report.copied_views_replayed} read(s) after a write made again"
        )
    if getattr(report, "views_unfused", 0):
        lines.append(f"{report.views_unfused} squeezing view(s) run outside nvFuser's regions")
    if getattr(report, "strided_writes_copied", 0):
        lines.append(f"{report.strided_writes_copied} write(s) into strided views copied by torch outside nvFuser (it writes them as dense)")
    if getattr(report, "views_made_again", 0):
        lines.append(f"{report.views_made_again} view(s) of grad-requiring inputs made again in a later torch.compile region, not handed to it")
    if getattr(report, "epilogues_ordered", 0):
        lines.append(f"{report.epilogues_ordered} epilogue copy_(s) after every read a region could recompute (nvFuser)")
    if getattr(report, "epilogues_in_region", 0):
        lines.append(f"{report.epilogues_in_region} epilogue copy_(s) left in torch.compile's region, which writes the inputs itself")
    if getattr(report, "slice_epilogues_unfused", 0):
        lines.append(f"{report.slice_epilogues_unfused} slice write(s) and epilogue copy_(s) outside nvFuser's regions, to go back in place")
    if getattr(report, "bare_symbols_decomposed", 0):
        lines.append(f"{report.bare_symbols_decomposed} zero gradient(s) bound again with their decomposition, which a fusion region keeps")
    return lines


def barrier_report_text(report) -> str:
    return "\n".join(barrier_report_lines(report))


def barrier_report_html(report) -> str:
    e = html.escape
    items = [f"<li>barrier: {e(_reasons(r))}</li>" for r in report.barriers]
    items += [f"<li>removed dead in-place op <code>{e(_describe(b))}</code></li>" for b in report.dead_writes]
    items += [f"<li>{e(line)}</li>" for line in _input_lines(report)]
    body = f"<ul>{''.join(items)}</ul>" if items else ""
    return f"<div class=\"thunder-ext-report\"><b>{e(barrier_report_headline(report))}</b>{body}</div>"


def removal_report_headline(report) -> str:
    """``'4 barriers removed (3 placed by thunder-ext), 0 left inside fusion regions, 0.3 ms'``."""
    parts = [f"{report.removed} barrier{'s' if report.removed != 1 else ''} removed ({report.removed_ours} placed by thunder-ext)"]
    parts.append(f"{report.in_regions} left inside fusion regions")
    if report.epilogues_reinplaced:
        parts.append(f"{report.epilogues_reinplaced} input write(s) back in place")
    if report.copies_folded:
        parts.append(f"{report.copies_folded} copy_ folded into out=")
    if getattr(report, "copies_batched", 0):
        parts.append(f"{report.copies_batched} copy_ batched into foreach_copy_")
    if getattr(report, "versions_bumped", 0):
        parts.append(f"{report.versions_bumped} input version(s) bumped after nvFuser wrote them")
    if report.kept:
        parts.append(f"{report.kept} kept: {report.why_kept}")
    parts.append(f"{report.seconds * 1e3:.1f} ms")
    return ", ".join(parts)
