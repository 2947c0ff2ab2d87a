"""Refusals: constructs whose gradients Thunder 0.2.6 gets wrong, turned into clear errors.

They are judged on the trace before autodiff, where the transform still sees the program as
written.  Writes to private storage never reach them: the barrier pass makes those
functional first (:mod:`thunder_ext.functionalize`), so classes 5 and 6 are refused only on
storage a caller can see (inputs and their views), where the write stays.  Each refusal names the bound symbols and the user's source lines.

* class 5 (:class:`ViewGradientError`): a value read after an in-place write through another
  alias of its storage, when gradients flow through it (Thunder's VJP of ``copy_`` ignores
  views);
* a returned input that does not require grad after a differentiable value was written into
  it (Thunder returns the input tensor itself, without history);
* :class:`OverwriteGradientError`: ``dst.copy_(src)`` with ``dst`` differentiable and ``src``
  not (Thunder loses the zero gradient, or fails in its backward).

Class 6 is judged at the fusion stage instead (:mod:`thunder_ext.integration`), where the
backward exists.  Intermediate proxies carry no ``requires_grad`` before autodiff, so
:func:`differentiable_names` derives it by forward propagation from the inputs.
"""

from __future__ import annotations

from thunder.core import dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import input_names, storage_groups
from thunder_ext.barriers import BarrierReport, strip_barriers
from thunder_ext.errors import OverwriteGradientError, ViewGradientError
from thunder_ext.op_kinds import effect_of, is_copy, is_return, tensor_args


def refuse_unsupported_gradients(before: TraceCtx, after: TraceCtx, report: BarrierReport, diff: set[str]) -> None:
    """Raise for the first unsupported construct; ``after`` is the barrier pass's output for ``before``."""
    refuse_view_gradients(report, diff)
    refuse_returned_input_with_new_history(after, diff)
    refuse_gradless_overwrite(before, diff)


def refuse_view_gradients(report: BarrierReport, diff: set[str]) -> None:
    """Class 5: gradients would flow through a view of a tensor mutated in place."""
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


def refuse_returned_input_with_new_history(trace: TraceCtx, diff: set[str]) -> None:
    """Refuse returning an input that does not require grad after writing a differentiable value into it.

    Thunder hands such an output back as the input tensor itself, which has no autograd
    history, so eager's gradient (through the write) would silently be lost.
    """
    ret = trace.bound_symbols[-1] if trace.bound_symbols else None
    if ret is None or not is_return(ret) or not ret.args or not isinstance(ret.args[0], dict):
        return
    info = storage_groups(trace.bound_symbols, input_names(trace))
    plain_inputs = {
        info.group_of(a): a for a in trace.args if isinstance(a, TensorProxy) and not a.requires_grad
    }
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


def refuse_gradless_overwrite(trace: TraceCtx, diff: set[str]) -> None:
    """Refuse ``dst.copy_(src)`` where ``dst`` carries gradients and ``src`` does not.

    Eager gives the overwritten tensor's inputs a zero gradient; Thunder 0.2.6 returns None
    for them or fails inside its backward with a bare ``AssertionError``.
    """
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
