"""How the pass reaches the fusion stage of a ``thunder.jit`` or ThunderFX compilation.

A :class:`thunder.Transform` only sees the trace before autodiff (pipeline step 3) and the
final traces (step 9).  ``copy_``s that decompositions expose later (the grad transform's
batch_norm, an ``autograd.Function`` decomposed by the claim step) only exist at step 6.
So from step 3 the transform prepends :class:`BarrierStage`, a fusion executor that claims
nothing, to *this compilation's* executor list.  Its ``fusion_pass`` receives the joint
trace after claim-or-decompose and before every real fusion pass, and runs the barrier pass
there.

Invariants:

* per-compilation state lives on the compile data (ThunderFX shares one transform instance
  across subgraphs); nothing global is modified;
* ``BarrierStage`` is installed at most once per compile data, and claims no symbol, so the
  claim step is unchanged;
* the reports of the last run are kept per compile data, weakly, for :func:`last_reports`.
"""

from __future__ import annotations

import html
import weakref
from dataclasses import dataclass, field

from thunder.core.compile_data import get_compile_data
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.extend import FusionExecutor

from thunder_ext import stage_config
from thunder_ext.barriers import BarrierReport, barrier_pass
from thunder_ext.errors import InplaceOrderingError
from thunder_ext.grad_modes import leave_grad_mode_as_the_caller_had
from thunder_ext.logs import log_refusal, log_report
from thunder_ext.refusals import refuse_lost_scalar_writes, refuse_saved_tensor_mutation
from thunder_ext.detached_writes import DetachedWritesReport
from thunder_ext.final_barriers import BarrierRemovalReport
from thunder_ext.overlap import OverlapReport
from thunder_ext.summaries import (
    barrier_report_headline,
    barrier_report_html,
    barrier_report_lines,
    removal_report_headline,
)
from thunder_ext.validation import require_compiled, warn_if_nothing_to_report

STAGE_NAME = "thunder_ext_inplace_barriers"


@dataclass
class StageReports:
    """Reports of the barrier pass for one compilation (the latest cache entry)."""

    before_autodiff: BarrierReport | None = None
    fusion_stage: BarrierReport | None = None
    fusion_stage_trace: TraceCtx | None = None
    # Inputs that share storage in the call being compiled (thunder_ext.input_aliases); set
    # before autodiff, read by the fusion-stage pass of the same compilation.
    aliased_inputs: tuple[frozenset[str], ...] = ()
    # Inputs only training-mode batch_norm writes (its running stats), found before autodiff,
    # where batch_norm is still one symbol; the fusion stage sees its copy_s only
    # (thunder_ext.refusals.refuse_saved_tensor_mutation).
    running_stats_only: frozenset[str] = frozenset()
    # Writes whose source shares the destination's storage, checked before autodiff
    # (thunder_ext.overlap): how many, and how many were shown apart.
    overlaps: OverlapReport | None = None
    # Ops that hand back their input itself, folded into it before autodiff (thunder_ext.identity_ops).
    identity_ops_folded: list[str] = field(default_factory=list)
    # Writes through detach() marked as the no-grad writes they are (thunder_ext.detached_writes).
    detached_writes: DetachedWritesReport | None = None
    # Inputs that adopt their write's history in Thunder's epilogue (thunder_ext.input_histories).
    input_histories: object = None
    # Barrier removal on the final traces (thunder_ext.final_barriers), forward and backward.
    final_forward: "BarrierRemovalReport | None" = None
    final_backward: "BarrierRemovalReport | None" = None

    def _stages(self) -> list[tuple[str, BarrierReport | None]]:
        return [("before autodiff", self.before_autodiff), ("fusion stage", self.fusion_stage)]

    def _removals(self) -> list[tuple[str, "BarrierRemovalReport"]]:
        return [(n, r) for n, r in (("final forward", self.final_forward), ("final backward", self.final_backward)) if r]

    def __repr__(self) -> str:
        # Printed inside the list last_reports returns: one line, no trace.
        parts = [f"{name}: {barrier_report_headline(r) if r else 'did not run'}" for name, r in self._stages()]
        parts += [f"{name}: {r.removed} barrier(s) removed" for name, r in self._removals()]
        return f"<StageReports {'; '.join(parts)}>"

    def __str__(self) -> str:
        lines = []
        for name, r in self._stages():
            if r is None:
                lines.append(f"{name}: did not run")
                continue
            head, *rest = barrier_report_lines(r)
            lines.append(f"{name}: {head}")
            lines.extend(rest)
        for name, r in self._removals():
            lines.append(f"{name}: {removal_report_headline(r)}")
        if self.fusion_stage_trace is not None:
            lines.append("(the fusion-stage trace: thunder_ext.fusion_stage_traces(fn))")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [
            f"<div><b>{html.escape(name)}</b>: " + (barrier_report_html(r) if r else "did not run") + "</div>"
            for name, r in self._stages()
        ]
        rows += [f"<div><b>{html.escape(n)}</b>: {html.escape(removal_report_headline(r))}</div>" for n, r in self._removals()]
        return '<div class="thunder-ext-stage-reports">' + "".join(rows) + "</div>"


_REPORTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reports_for(cd) -> StageReports:
    rep = _REPORTS.get(cd)
    if rep is None:
        rep = _REPORTS[cd] = StageReports()
    return rep


class BarrierStage(FusionExecutor):
    """A fusion executor that fuses nothing; its ``fusion_pass`` is the step-6 barrier pass."""

    def __init__(self, *, check: bool, comment: bool) -> None:
        super().__init__(STAGE_NAME)
        self.check = check
        self.comment = comment

    def can_fuse(self, bsym: BoundSymbol) -> bool:
        return False

    def fusion_pass(self, trace: TraceCtx) -> TraceCtx:
        cd = get_compile_data()
        aliased = reports_for(cd).aliased_inputs if cd is not None else ()
        before = reports_for(cd).before_autodiff if cd is not None else None
        config = stage_config.fusion_stage(
            cd, aliased_inputs=aliased, comment=self.comment,
            epilogue_inputs=frozenset(before.functional_inputs) if before is not None else frozenset(),
        )  # fmt: skip
        try:
            new, report = barrier_pass(trace, config)
            refuse_saved_tensor_mutation(
                report, before.epilogue_writes if before is not None else None, joint=trace,
                running_stats_only=reports_for(cd).running_stats_only if cd is not None else frozenset(),
                placed=new,
            )  # fmt: skip
            refuse_lost_scalar_writes(new, config.executors)
        except InplaceOrderingError as e:
            log_refusal("fusion stage", e)
            leave_grad_mode_as_the_caller_had(trace)
            raise
        log_report("fusion stage", report, new)
        if self.check:
            from thunder_ext.checker import assert_valid

            assert_valid(new, stage="fusion stage (joint trace)", aliased_inputs=aliased)
        if cd is not None:
            rep = reports_for(cd)
            rep.fusion_stage, rep.fusion_stage_trace = report, new
        return new


def install_barrier_stage(*, check: bool, comment: bool = True) -> bool:
    """Prepend a :class:`BarrierStage` to the current compilation's executors, once."""
    cd = get_compile_data()
    if cd is None:
        return False
    if not any(isinstance(ex, BarrierStage) for ex in cd.executors_list):
        cd.executors_list = (BarrierStage(check=check, comment=comment), *cd.executors_list)
    return True


def jitted_functions(compiled) -> list:
    """The ``thunder.jit`` functions behind ``compiled``: itself, or every ThunderFX subgraph's.

    ``compiled`` is a ``thunder.jit`` function, a ``thunderfx`` object or a ``ThunderCompiler``.
    """
    # A thunderfx object carries its ThunderCompiler as ``_backend``; a ThunderCompiler is
    # its own backend.
    backend = compiled if hasattr(compiled, "subgraph_infos") else getattr(compiled, "_backend", None)
    if backend is None:
        return [compiled]
    fns = []
    for info in backend.subgraph_infos:
        fns.extend(info.thunder_compiled_fns)
    return fns


def collect_reports(compiled) -> list[StageReports]:
    """:func:`last_reports` without the argument checks and warnings (for the main job and the doctor)."""
    import thunder

    return [reports_for(thunder.compile_data(fn)) for fn in jitted_functions(compiled)]


def collect_fusion_stage_traces(compiled) -> list[TraceCtx]:
    """:func:`fusion_stage_traces` without the argument checks and warnings."""
    return [r.fusion_stage_trace for r in collect_reports(compiled) if r.fusion_stage_trace is not None]


def collect_final_traces(compiled, *, with_barriers: bool = False) -> list[tuple[TraceCtx, TraceCtx | None]]:
    """:func:`final_traces` without the argument checks and warnings."""
    import thunder

    out = []
    for fn in jitted_functions(compiled):
        if getattr(thunder.compile_stats(fn), "last_traces", None) is None:
            continue  # never compiled: thunder.last_traces would raise
        fw = thunder.last_traces(fn)
        bw = thunder.last_backward_traces(fn)
        if not fw:
            continue
        pair = (fw[-1], bw[-1] if bw else None)
        if with_barriers:
            rep = reports_for(thunder.compile_data(fn))
            pair = (
                _with_barriers(rep.final_forward, pair[0]),
                _with_barriers(rep.final_backward, pair[1]) if pair[1] is not None else None,
            )
        out.append(pair)
    return out


def _with_barriers(removal: BarrierRemovalReport | None, final: TraceCtx) -> TraceCtx:
    if removal is None or removal.trace_with_barriers is None:
        return final
    # Before the removal and the copy folding (Thunder unwraps the return of a forward without
    # backward after the hook, so this one still returns the wrapped form).
    return removal.trace_with_barriers


def last_reports(compiled) -> list[StageReports]:
    """The barrier pass's reports for a ``thunder.jit`` or ThunderFX callable, one per subgraph.

    ``print(report)`` gives a summary of one: barriers placed with their reasons, dead
    in-place ops removed, and the time taken, before autodiff and at the fusion stage.
    Warns when ``compiled`` has no compilation yet or was compiled without the transform.
    """
    require_compiled(compiled, "last_reports")
    warn_if_nothing_to_report(compiled, jitted_functions(compiled), "last_reports", need_transform=True)
    return collect_reports(compiled)


def fusion_stage_traces(compiled) -> list[TraceCtx]:
    """The traces the transform produced at the fusion stage, which Thunder does not record.

    Warns when ``compiled`` has no compilation yet or was compiled without the transform.
    """
    require_compiled(compiled, "fusion_stage_traces")
    warn_if_nothing_to_report(compiled, jitted_functions(compiled), "fusion_stage_traces", need_transform=True)
    return collect_fusion_stage_traces(compiled)


def final_traces(compiled, *, with_barriers: bool = False) -> list[tuple[TraceCtx, TraceCtx | None]]:
    """(final forward trace, final backward trace or None) per compiled function or subgraph.

    These are the traces that run: with the transform, without their top-level barriers
    (:mod:`thunder_ext.final_barriers`).  ``with_barriers=True`` gives them as they were before
    the removal, ordered by data edges, which is what :func:`thunder_ext.verify` checks.
    Works without the transform too (nothing is removed then); warns when ``compiled`` has no
    compilation yet.
    """
    require_compiled(compiled, "final_traces")
    warn_if_nothing_to_report(compiled, jitted_functions(compiled), "final_traces", need_transform=False)
    return collect_final_traces(compiled, with_barriers=with_barriers)


def barrier_count(trace: TraceCtx) -> int:
    """Barriers in a trace, inside fusion regions too (``torch_compile_ex`` fuses them)."""
    from thunder_ext.checker import flatten_for_check
    from thunder_ext.op_kinds import is_barrier

    return sum(1 for b in flatten_for_check(trace.bound_symbols) if is_barrier(b))
