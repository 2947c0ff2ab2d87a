"""Errors raised by thunder-ext.  Each names the bound symbol(s) and the user's source line."""

from __future__ import annotations

from thunder.core.symbol import BoundSymbol

from thunder_ext.op_kinds import describe


class InplaceOrderingError(RuntimeError):
    """An in-place program that thunder-ext cannot compile with a guaranteed order."""

    def __init__(self, message: str, *bsyms: BoundSymbol) -> None:
        self.bsyms = bsyms
        where = "; ".join(describe(b) for b in bsyms)
        super().__init__(f"{message}\n  involved: {where}" if where else message)


class UnorderableAccessError(InplaceOrderingError):
    """Two accesses must be ordered but one of them produces no tensor to hang a data edge on."""


class ViewGradientError(InplaceOrderingError):
    """Class 5: a gradient would flow through a view of a tensor mutated in place."""


class StrideDependentViewError(ViewGradientError):
    """Class 5 through an op that is a view or a copy by strides (``reshape``, ``contiguous``): the
    answer depends on the caller's strides, and where those decide at run time the transform
    computes both (:mod:`thunder_ext.stride_choices`)."""


class SavedTensorMutationError(InplaceOrderingError):
    """Class 6: the forward writes in place to a value the backward reads."""


class KeptWriteOldValueError(SavedTensorMutationError):
    """Class 6 before autodiff: a write kept in place whose backward reads the value it overwrites.
    The transform answers it by computing the write from a clone, as eager does
    (:mod:`thunder_ext.old_value_clones`); raised where that cannot be done."""


class OverwriteGradientError(InplaceOrderingError):
    """A ``copy_`` of a value without gradient over a tensor that carries one (Thunder drops the zero grad)."""


class InputAliasError(InplaceOrderingError):
    """Class 7: two inputs share storage in a way Thunder's input-alias substitution gets wrong (raised per call)."""


class GradInputWriteError(InplaceOrderingError):
    """Class 9: a write in place to an input that requires grad, whose value the outputs depend on.

    Thunder cannot give the caller's tensor the history of the write (what ``ctx.mark_dirty``
    does in an ``autograd.Function``), and drops every gradient path through that input.
    """


class RunningStatsGradError(InplaceOrderingError):
    """Training-mode batch norm given running statistics that carry a gradient (eager refuses it)."""


class OverlappingSourceError(InplaceOrderingError):
    """An in-place op reads a source that shares elements with what it writes, at other positions.

    Eager's result then depends on its kernel's visiting order; Thunder reads the source first.
    """


class LostScalarWriteError(InplaceOrderingError):
    """``torch_compile_ex`` would silently lose a write into a 0-dim float64 CPU input (torch 2.11)."""


class PartitionerWouldDropError(InplaceOrderingError):
    """Thunder's dataflow partitioner would drop bound symbols of the barriered trace ("Trace has no return").

    Its merge-time cycle search stops at nodes that start later in the trace than the merged
    pair, and misses cycles through them.  thunder-ext rebinds and reorders barriers to avoid
    that; this error is what is left when neither helps.
    """


class PlacementDidNotConvergeError(RuntimeError):
    """Internal error: a fixed-point loop of the barrier pass ran more rounds than the trace has writes.

    Each round must act on at least one more write, so this is a bug in thunder-ext, not a
    refusal of the program (hence not an :class:`InplaceOrderingError`).
    """
