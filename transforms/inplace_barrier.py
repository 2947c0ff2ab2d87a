"""``InplaceBarrierTransform``: in-place ops stay ordered, and dead ones disappear, under dataflow fusion.

Use it as ``thunder.jit(fn, transforms=[InplaceBarrierTransform()])`` or through ThunderFX
(``thunderfx(fn, transforms=[...])``, ``ThunderCompiler(transforms=[...])``).

It acts twice:

* before autodiff (``transform_traces_pre_prologue``), on the computation trace, after
  recording each bsym at the user's line (:mod:`thunder_ext.source_lines`) and folding the ops
  that hand back their input itself (:mod:`thunder_ext.identity_ops`), where it also refuses
  the constructs whose gradients Thunder gets wrong (:mod:`thunder_ext.refusals`);
* at the fusion stage, after every decomposition and before any fusion pass, through
  :class:`thunder_ext.integration.BarrierStage`, where it also refuses forward writes to
  values the backward reads (class 6).

With ``check=True`` it verifies its own output and the final forward and backward traces
with :func:`thunder_ext.checker.assert_valid`.  Last, on the final traces, it re-inplaces
out-of-place elementwise ops whose private input buffer dies there
(:mod:`thunder_ext.reinplace`), so functionalized writes cost no extra memory, and removes
every top-level barrier, which orders nothing once program order is final
(:mod:`thunder_ext.final_barriers`; with ``check=True`` the removal is checked to change
nothing but names).  Both only where no later transform has a post-optimization hook.
"""

from __future__ import annotations

import time
from dataclasses import replace

import thunder
from thunder.core.compile_data import get_compile_data
from thunder.core.trace import TraceCtx

from thunder_ext import stage_config
from thunder_ext.alias_analysis import input_names
from thunder_ext.barriers import barrier_pass
from thunder_ext.errors import InplaceOrderingError, KeptWriteOldValueError, StrideDependentViewError
from thunder_ext.final_barriers import BarrierRemovalReport, count_barriers, remove_final_barriers
from thunder_ext.identity_ops import fold_identity_ops, separate_repeated_outputs
from thunder_ext.index_order import split_overlapping_index_writes
from thunder_ext.input_aliases import aliased_inputs, guard_substituted_aliases
from thunder_ext.input_histories import can_route, route_histories, written_values
from thunder_ext.grad_modes import grad_enabled_while_rewriting, leave_grad_mode_as_the_caller_had
from thunder_ext.integration import install_barrier_stage, reports_for
from thunder_ext.overlap import refuse_overlapping_sources
from thunder_ext.logs import log_refusal, log_removal, log_report, log_split
from thunder_ext.name_clashes import rename_proxies_shadowing_calls
from thunder_ext.nvfuser_forms import bump_written_versions
from thunder_ext.old_value_clones import clone_old_value
from thunder_ext.batched_copies import batch_copies
from thunder_ext.detached_writes import writes_through_detach_without_grad
from thunder_ext.source_lines import attribute_user_lines, function_span
from thunder_ext.stride_choices import (
    answers_eager_differs_on,
    choose_at_run_time,
    find_stride_choices,
    histories_by_answer,
    refuse_at_run_time,
    refusal_message,
)
from thunder_ext.reinplace import fold_copies, reinplace, reinplace_inputs
from thunder_ext.refusals import (
    differentiable_names,
    inputs_written_only_as_running_stats,
    refuse_unsupported_gradients,
    stripped_storage,
)
from thunder_ext.validation import require_bool


class InplaceBarrierTransform(thunder.Transform):
    """Order every access to mutated storage by data edges, and remove dead in-place ops."""

    def __init__(self, *, check: bool = False, comment: bool = True) -> None:
        require_bool(check, "check", "InplaceBarrierTransform")
        require_bool(comment, "comment", "InplaceBarrierTransform")
        self.check = check
        self.comment = comment

    def __repr__(self) -> str:
        return f"InplaceBarrierTransform(check={self.check})"

    def transform_traces_pre_prologue(self, prologue_trace, computation_trace, epilogue_trace, **kwargs):
        install_barrier_stage(check=self.check, comment=self.comment)
        cd = get_compile_data()
        # Messages and printed traces name the user's line, not ThunderFX's generated code or
        # Thunder's own dispatch (thunder_ext.source_lines).
        fx = stage_config.is_graph_module(cd)
        computation_trace, _ = attribute_user_lines(
            computation_trace,
            graph_module=cd.fn if fx else None,
            span=function_span(cd.fn) if cd is not None and not fx else None,
        )
        # What the rewrites trace is traced with grad on where the code ran with grad: a ThunderFX
        # piece may end inside a no-grad block (thunder_ext.grad_modes).
        with grad_enabled_while_rewriting(computation_trace):
            # An op that hands back its input is that input in eager: every later step reads it so.
            computation_trace, identities = fold_identity_ops(computation_trace)
            differentiable = frozenset(differentiable_names(computation_trace))
            # A write through detach() gives its input no history in eager: it is a no-grad write.
            computation_trace, detached = writes_through_detach_without_grad(computation_trace, differentiable)
            if detached.without_grad or detached.split or detached.detach_outputs_tagged:  # new proxies
                differentiable = frozenset(differentiable_names(computation_trace))
            aliased = aliased_inputs(computation_trace)
            config = stage_config.before_autodiff(
                cd, differentiable=differentiable, aliased_inputs=aliased, comment=self.comment,
                histories_routed=can_route(prologue_trace, computation_trace, epilogue_trace),
            )  # fmt: skip
            try:
                try:
                    computation_trace, config, new, report, stripped, overlaps = _place_and_refuse(computation_trace, config)
                except StrideDependentViewError as refusal:
                    # The answer depends on strides: both, chosen at run time, where they can be.
                    computation_trace, config, new, report, stripped, overlaps = _choose_at_run_time(computation_trace, config, refusal)
            except InplaceOrderingError as e:
                log_refusal("before autodiff", e)
                leave_grad_mode_as_the_caller_had(computation_trace)
                raise
        log_report("before autodiff", report, new)
        if self.check and not report.dropped_witnesses:
            # With dropped witnesses the order is only complete after the fusion-stage pass,
            # which is checked there.
            from thunder_ext.checker import assert_valid

            assert_valid(new, stage="before autodiff", aliased_inputs=aliased)
        if cd is not None:
            reports = reports_for(cd)
            reports.before_autodiff, reports.aliased_inputs, reports.overlaps = report, aliased, overlaps
            reports.running_stats_only = inputs_written_only_as_running_stats(stripped)
            reports.identity_ops_folded = identities.folded
            reports.detached_writes = detached
        prologue_trace = guard_substituted_aliases(prologue_trace, computation_trace)
        if config.histories_routed and report.histories:
            # The caller's inputs written with a gradient-carrying value take its history after
            # the call, in Thunder's epilogue (thunder_ext.input_histories).
            values = written_values(new, report.histories, report.epilogue_writes)
            n_out = len(new.bound_symbols[-1].args[0]["output"])
            choices = report.stride_choices
            prologue_trace, new, epilogue_trace, histories = route_histories(
                prologue_trace, new, epilogue_trace, values, report.returned_inputs,
                by_answer=choices.histories_by_answer if choices is not None else {},
            )  # fmt: skip
            flags = cd.compile_options.get("is_differentiable_outputs") if cd is not None else None
            if flags is not None and histories.extra_outputs:
                # ThunderFX flags each FX output; the values handed out carry gradients.
                cd.compile_options["is_differentiable_outputs"] = [*list(flags)[:n_out], *[True] * histories.extra_outputs]
            if cd is not None:
                reports.input_histories = histories
        return prologue_trace, new, epilogue_trace

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs) -> TraceCtx:
        start = time.perf_counter()
        cd = get_compile_data()
        last = self._last_to_rewrite(cd)
        # Re-inplacing only reuses buffers that nothing reads any more (thunder_ext.reinplace), in
        # program order: only where no later transform may still rewrite the final trace.
        new = reinplace(computation_trace)[0] if last else computation_trace
        aliased = reports_for(cd).aliased_inputs if cd is not None else ()
        if self.check:
            from thunder_ext.checker import assert_valid

            # The trace that runs, barriers still in (its slice copies carry their barriers; the
            # out= forms are ordered by program order, which is final here).
            assert_valid(new, stage="final trace", aliased_inputs=aliased)
        backward = _is_backward(computation_trace)
        if last:
            # Program order is final: a barrier orders nothing any more, and costs a call per step.
            ordered = new
            new, removal = remove_final_barriers(ordered)
            if self.check and new is not ordered:
                from thunder_ext.checker import assert_barrier_removal

                assert_barrier_removal(ordered, new, stage="final backward trace" if backward else "final forward trace")
            # An input whose writes became values is written in place again where its old value
            # dies, and its epilogue copy_ goes (thunder_ext.reinplace.reinplace_inputs).
            if not backward:  # the epilogues are the forward's; a backward's inputs are saved values
                new, removal.epilogues_reinplaced = reinplace_inputs(new, aliased)
            # With no barrier left, an op whose result only a copy_ reads can write the copy's
            # destination itself (thunder_ext.reinplace.fold_copies).
            new, removal.copies_folded = fold_copies(new, aliased)
            # The copies left (torch_compile_ex's epilogue) run as one call per run of them
            # (thunder_ext.batched_copies).
            new, removal.copies_batched = batch_copies(new, aliased)
        else:
            top, in_regions = count_barriers(new)
            removal = BarrierRemovalReport(
                kept=top, in_regions=in_regions, trace_with_barriers=new,
                why_kept="a later transform of this compilation rewrites the final traces" if top else "",
            )  # fmt: skip
        if not backward:
            # nvFuser writes a region's inputs behind autograd's back: the caller's tensors get
            # the version bump eager gives them (thunder_ext.nvfuser_forms).
            new, removal.versions_bumped = bump_written_versions(new, input_names(new))
        # A copy_ left outside a region is a bare call, which a proxy of its name would shadow.
        new, removal.names_changed = rename_proxies_shadowing_calls(new)
        removal.hook_seconds = time.perf_counter() - start
        if cd is not None:
            reports = reports_for(cd)
            if backward:
                reports.final_backward = removal
            else:
                reports.final_forward, reports.final_backward = removal, None
        log_removal("final backward trace" if backward else "final forward trace", removal)
        return new

    def _last_to_rewrite(self, cd) -> bool:
        """No transform after this one in the compilation has a post-optimization hook of its own."""
        transforms = list(getattr(cd, "transforms", None) or ()) if cd is not None else None
        if transforms is None or not any(t is self for t in transforms):
            return False  # cannot tell: leave the trace as it is
        after = transforms[next(k for k, t in enumerate(transforms) if t is self) + 1 :]
        base = thunder.Transform.transform_trace_post_optimization
        return all(type(t).transform_trace_post_optimization is base for t in after)


def _place_and_refuse(computation_trace: TraceCtx, config: stage_config.StageConfig):
    """The pass before autodiff and its refusals: the trace it read (index writes split, kept
    writes whose backward reads the old value computed from a clone), its config, the new trace,
    the report, the stripped analysis and the overlap report."""
    for _ in range(len(computation_trace.bound_symbols)):  # each round clones for one more write
        try:
            return _place_and_refuse_once(computation_trace, config)
        except KeptWriteOldValueError as refusal:
            # Eager saves a copy of such an op's original self: so does the trace (old_value_clones).
            again = clone_old_value(computation_trace, refusal.bsyms[0])
            if again is None:
                raise
            computation_trace = again
            config = replace(config, differentiable=frozenset(differentiable_names(again)) | config.differentiable)
    return _place_and_refuse_once(computation_trace, config)


def _place_and_refuse_once(computation_trace: TraceCtx, config: stage_config.StageConfig):
    # Thunder's barriers stripped, and their storage groups: the overlap check and the
    # gradient refusals read the same analysis of the trace.
    stripped = stripped_storage(computation_trace)
    # An index write reading rows it overwrites is written one entry at a time, in eager's order.
    computation_trace, split = split_overlapping_index_writes(computation_trace, stripped, config.differentiable)
    if split.split:
        log_split("before autodiff", split)
        stripped = stripped_storage(computation_trace)
        # The names carried over by stride_choices stay (the split renames none of them).
        config = replace(config, differentiable=frozenset(differentiable_names(computation_trace)) | config.differentiable)
    overlaps = refuse_overlapping_sources(computation_trace, inductor=config.inductor, stripped=stripped)
    overlaps.split = split
    new, report = barrier_pass(computation_trace, config)
    if config.differentiable:
        # Folding, and a returned input made its final value, can hand one proxy back twice.
        new, report.repeated_outputs = separate_repeated_outputs(new, frozenset(differentiable_names(new)))
    if config.differentiable:
        refuse_unsupported_gradients(
            computation_trace, new, report, set(config.differentiable),
            nvfuser_may_run=config.nvfuser, inductor=config.inductor,
            stripped=stripped, graph_module=config.graph_module, assumed_views=config.assumed_views,
            histories_routed=config.histories_routed,
        )  # fmt: skip
    return computation_trace, config, new, report, stripped, overlaps


def _choose_at_run_time(computation_trace: TraceCtx, config: stage_config.StageConfig, refusal: StrideDependentViewError):
    """:func:`_place_and_refuse` on the program written once per answer of its ops that are a view
    or a copy by strides (:mod:`thunder_ext.stride_choices`); ``refusal``, with a note saying
    why, where that cannot be done or leaves a write in place."""
    bsyms, info = stripped_storage(computation_trace)
    choices, why = find_stride_choices(bsyms, info)
    if not choices:
        refusal.add_note(f"Not chosen at run time: {why or 'no op found to choose'}.")
        raise refusal

    def written_out(refuse_views: str = ""):
        both, choice = choose_at_run_time(computation_trace, bsyms, info, choices, config.differentiable, refuse_views=refuse_views)
        if both is None:
            refusal.add_note(f"Not chosen at run time: {choice.not_chosen}.")
            raise refusal
        placed = replace(
            config,
            differentiable=frozenset(differentiable_names(both)) | choice.differentiable,
            assumed_views=choice.assumed_views,
        )
        try:
            return choice, *_place_and_refuse(both, placed)
        except StrideDependentViewError as e:
            answers = "the copy answer" if refuse_views else "both answers"
            refusal.add_note(f"Not chosen at run time: with {answers}, {e.args[0]}")
            raise refusal from None
        except InplaceOrderingError as e:
            # A refusal of both answers alike: its own reason is the one to give.
            e.add_note(f"Found with both answers of {', '.join(choice.chosen)} written out (thunder_ext.stride_choices).")
            raise e from None

    choice, both, placed, new, report, stripped, overlaps = written_out()
    if report.eager_raises_if_view:
        # Eager raises for the view answer (a write through a view older than its storage's
        # gradient): the program is the copy answer alone, and the view's strides are refused.
        if len(choice.chosen) > 1 or any(c.fixed is not None for c in choices):
            refusal.add_note("Not chosen at run time: eager raises for the view answer, which the strides may give.")
            raise refusal
        message = refusal_message(True, report.eager_raises_if_view[0], eager_raises=True)
        choice, both, placed, new, report, stripped, overlaps = written_out(refuse_views=message)
    if report.kept_inputs or report.kept_private_groups:
        refusal.add_note("Not chosen at run time: a write of one answer would stay in place.")
        raise refusal
    if config.histories_routed and report.histories:
        # A plain input whose new value carries a gradient in one answer only adopts its history
        # only where the strides give that answer (thunder_ext.input_histories): exact in both.
        adopted = written_values(new, report.histories, report.epilogue_writes)
        choice.histories_by_answer = histories_by_answer(new, choice, adopted)
    by_answer = frozenset(choice.input_values[n] for n in choice.histories_by_answer)
    inexact, why = answers_eager_differs_on(new, choice, by_answer)
    if len(inexact) > 1:
        refusal.add_note(f"Not chosen at run time: {why}.")
        raise refusal
    if inexact:  # the strides that give the other answer are refused when a call brings them
        new = refuse_at_run_time(new, choice, inexact.pop(), f"{choice.chosen[0]}: {why}")
    report.stride_choices = choice
    return both, replace(placed, assumed_views=frozenset()), new, report, stripped, overlaps


def _is_backward(trace: TraceCtx) -> bool:
    """The trace is the backward Thunder's forward/backward split made (its function is ``backward_fn``)."""
    return getattr(getattr(trace, "fn", None), "__name__", None) == "backward_fn"
