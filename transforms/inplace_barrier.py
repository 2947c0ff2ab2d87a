"""``InplaceBarrierTransform``: in-place ops stay ordered, and dead ones disappear, under dataflow fusion.

Use it as ``thunder.jit(fn, transforms=[InplaceBarrierTransform()])`` or through ThunderFX
(``thunderfx(fn, transforms=[...])``, ``ThunderCompiler(transforms=[...])``).

It acts twice:

* before autodiff (``transform_traces_pre_prologue``), on the computation trace, where it
  also refuses gradients through views of mutated tensors (class 5);
* at the fusion stage, after every decomposition and before any fusion pass, through
  :class:`thunder_ext.integration.BarrierStage`, where it also refuses forward writes to
  values the backward reads (class 6).

With ``check=True`` it verifies its own output and the final forward and backward traces
with :func:`thunder_ext.checker.assert_valid`.
"""

from __future__ import annotations

import thunder
from thunder.core import dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx

from thunder_ext.barriers import place_barriers
from thunder_ext.errors import OverwriteGradientError, ViewGradientError
from thunder_ext.integration import install_barrier_stage, reports_for


def differentiable_names(trace: TraceCtx) -> set[str]:
    """Tensors that gradients may flow through: inputs that require grad and what they feed.

    Intermediate proxies do not carry ``requires_grad`` before autodiff, so it is derived here.
    Empty when the compilation has Thunder's autograd support disabled.
    """
    cd = get_compile_data()
    if cd is not None and getattr(cd, "disable_torch_autograd_support", False):
        return set()
    names = {a.name for a in trace.args if isinstance(a, TensorProxy) and a.requires_grad}
    if not names:
        return names
    for bsym in trace.bound_symbols:
        # Factories shaped like their input (zeros_like, ...) carry no gradient.
        if str(bsym.sym.id).endswith("_like"):
            continue
        if any(p.name in names for p in bsym.flat_proxy_args):
            names.update(
                p.name for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy) and dtypes.is_inexact_dtype(p.dtype)
            )
    return names


def _refuse_returned_input_with_new_history(trace: TraceCtx, diff: set[str]) -> None:
    """Refuse returning an input that does not require grad after writing a differentiable value into it.

    Thunder hands such an output back as the input tensor itself, which has no autograd
    history, so eager's gradient (through the write) would silently be lost.
    """
    from thunder_ext.alias_analysis import input_names, storage_groups
    from thunder_ext.op_kinds import is_return

    ret = trace.bound_symbols[-1] if trace.bound_symbols else None
    if ret is None or not is_return(ret) or not ret.args or not isinstance(ret.args[0], dict):
        return
    info = storage_groups(trace.bound_symbols, input_names(trace))
    plain_inputs = {
        info.group_of(a): a for a in trace.args if isinstance(a, TensorProxy) and not a.requires_grad
    }
    from thunder.core.pytree import tree_flatten

    for out in tree_flatten(ret.args[0].get("output"))[0]:
        if isinstance(out, TensorProxy) and out.name in diff and info.group_of(out) in plain_inputs:
            writer = next(
                (b for b in trace.bound_symbols if any(p.name == out.name for p in b.flat_proxy_outs)), ret
            )
            raise ViewGradientError(
                f"the output `{out.name}` is the input `{plain_inputs[info.group_of(out)].name}` (which does not "
                "require grad) after an in-place write of a value that does; Thunder returns the input tensor "
                "itself, without the gradient history eager gives it. Return a clone, or make the input require grad",
                writer,
                ret,
            )


def _refuse_gradless_overwrite(trace: TraceCtx, diff: set[str]) -> None:
    """Refuse ``dst.copy_(src)`` where ``dst`` carries gradients and ``src`` does not.

    Eager gives the overwritten tensor's inputs a zero gradient; Thunder 0.2.6 returns None
    for them or fails inside its backward with a bare ``AssertionError``.
    """
    from thunder_ext.barriers import strip_barriers
    from thunder_ext.op_kinds import effect_of, is_copy, tensor_args

    # Without barriers, every proxy has its traced name, which is what ``diff`` knows.
    for bsym in strip_barriers(trace.bound_symbols)[0]:
        if not (is_copy(bsym) or bsym.sym.id == "torch.Tensor.copy_"):
            continue
        dests = {w.name for w in effect_of(bsym).writes}
        srcs = [p for p in tensor_args(bsym) if p.name not in dests]
        if dests & diff and srcs and not any(p.name in diff for p in srcs):
            raise OverwriteGradientError(
                "`copy_` overwrites a tensor that carries gradients with a value that carries none; eager "
                "gives the overwritten inputs a zero gradient, Thunder loses it. Use a new tensor instead "
                "of copying into one that requires grad",
                bsym,
            )


class InplaceBarrierTransform(thunder.Transform):
    """Order every access to mutated storage by data edges, and remove dead in-place ops."""

    def __init__(self, *, check: bool = False, comment: bool = True) -> None:
        self.check = check
        self.comment = comment

    def __repr__(self) -> str:
        return f"InplaceBarrierTransform(check={self.check})"

    def transform_traces_pre_prologue(self, prologue_trace, computation_trace, epilogue_trace, **kwargs):
        install_barrier_stage(check=self.check, comment=self.comment)
        diff = differentiable_names(computation_trace)
        new, report = place_barriers(computation_trace, comment=self.comment, differentiable=frozenset(diff))
        if diff:
            for ar in report.alias_reads:
                involved = (ar.proxy, ar.written, *ar.write.flat_proxy_args)
                if any(p.name in diff for p in involved):
                    raise ViewGradientError(
                        f"`{ar.proxy.name}` is read after an in-place write to `{ar.written.name}`, which "
                        "shares its storage, and gradients flow through it. Thunder's autodiff would give a "
                        "wrong gradient here (its VJP of copy_ ignores views). Clone before the in-place op, "
                        "or use the out-of-place op",
                        ar.write,
                        ar.read,
                    )
        if diff:
            _refuse_returned_input_with_new_history(new, diff)
            _refuse_gradless_overwrite(computation_trace, diff)
        if self.check and not report.dropped_witnesses:
            # With dropped witnesses the order is only complete after the fusion-stage pass,
            # which is checked there.
            from thunder_ext.checker import assert_valid

            assert_valid(new, stage="before autodiff")
        cd = get_compile_data()
        if cd is not None:
            reports_for(cd).before_autodiff = report
        return prologue_trace, new, epilogue_trace

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs) -> TraceCtx:
        if self.check:
            from thunder_ext.checker import assert_valid

            assert_valid(computation_trace, stage="final trace")
        return computation_trace
