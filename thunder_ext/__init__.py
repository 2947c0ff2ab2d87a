"""thunder-ext: in-place PyTorch code that compiles correctly under Thunder's dataflow fusion."""

from thunder_ext.barriers import insert_barriers, place_barriers
from thunder_ext.checker import TraceInvariantError, Violation, assert_valid, verify
from thunder_ext.integration import fusion_stage_traces, final_traces, last_reports
from thunder_ext.errors import (
    GradInputWriteError,
    InplaceOrderingError,
    InputAliasError,
    OverwriteGradientError,
    SavedTensorMutationError,
    UnorderableAccessError,
    ViewGradientError,
)

__all__ = [
    "CheckReport",
    "InplaceBarrierTransform",
    "GradInputWriteError",
    "InplaceOrderingError",
    "InputAliasError",
    "OverwriteGradientError",
    "SavedTensorMutationError",
    "TraceInvariantError",
    "UnorderableAccessError",
    "ViewGradientError",
    "Violation",
    "assert_valid",
    "check",
    "final_traces",
    "fusion_stage_traces",
    "last_reports",
    "insert_barriers",
    "place_barriers",
    "verify",
]


def __getattr__(name: str):
    # The transform lives in thunder_ext.transforms, which imports this package.
    if name == "InplaceBarrierTransform":
        from thunder_ext.transforms import InplaceBarrierTransform

        return InplaceBarrierTransform
    if name in ("check", "CheckReport"):
        # Lazy, like the transform: the doctor is only needed by its users.
        from thunder_ext import doctor

        return getattr(doctor, name)
    raise AttributeError(f"module 'thunder_ext' has no attribute {name!r}")
