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

import weakref
from dataclasses import dataclass

from thunder.core.compile_data import get_compile_data
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.extend import FusionExecutor

from thunder_ext.barriers import BarrierReport, place_barriers
from thunder_ext.errors import SavedTensorMutationError

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
        executors = tuple(cd.executors_list) if cd is not None else None
        aliased = reports_for(cd).aliased_inputs if cd is not None else ()
        new, report = place_barriers(
            trace, executors=executors, comment=self.comment, remat_guard=True, aliased_inputs=aliased
        )
        if report.backward_reads_of_forward_writes:
            write, read = report.backward_reads_of_forward_writes[0]
            raise SavedTensorMutationError(
                "the forward writes in place to a tensor that the backward reads (a value saved for "
                "backward); eager PyTorch refuses this too. Clone the tensor before mutating it",
                write,
                read,
            )
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


def last_reports(compiled) -> list[StageReports]:
    """The barrier pass's reports for a ``thunder.jit`` or ThunderFX callable, one per subgraph."""
    import thunder

    return [reports_for(thunder.compile_data(fn)) for fn in jitted_functions(compiled)]


def fusion_stage_traces(compiled) -> list[TraceCtx]:
    """The traces the transform produced at the fusion stage, which Thunder does not record."""
    return [r.fusion_stage_trace for r in last_reports(compiled) if r.fusion_stage_trace is not None]


def final_traces(compiled) -> list[tuple[TraceCtx, TraceCtx | None]]:
    """(final forward trace, final backward trace or None) per compiled function or subgraph."""
    import thunder

    out = []
    for fn in jitted_functions(compiled):
        fw = thunder.last_traces(fn)
        bw = thunder.last_backward_traces(fn)
        if fw:
            out.append((fw[-1], bw[-1] if bw else None))
    return out


def barrier_count(trace: TraceCtx) -> int:
    """Barriers in a trace, inside fusion regions too (``torch_compile_ex`` fuses them)."""
    from thunder_ext.checker import flatten_for_check
    from thunder_ext.op_kinds import is_barrier

    return sum(1 for b in flatten_for_check(trace.bound_symbols) if is_barrier(b))
