"""thunder-ext: in-place PyTorch code that compiles correctly under Thunder's dataflow fusion."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "CheckReport",
    "InplaceBarrierTransform",
    "GradInputWriteError",
    "RunningStatsGradError",
    "LostScalarWriteError",
    "PartitionerWouldDropError",
    "InplaceOrderingError",
    "InputAliasError",
    "OverlappingSourceError",
    "OverwriteGradientError",
    "SavedTensorMutationError",
    "TraceInvariantError",
    "UnorderableAccessError",
    "StrideDependentViewError",
    "ViewGradientError",
    "Violation",
    "assert_valid",
    "check",
    "draw_trace",
    "final_traces",
    "fusion_stage_traces",
    "last_reports",
    "insert_barriers",
    "place_barriers",
    "quiet_upstream_noise",
    "save_trace_graph",
    "trace_graph",
    "verify",
]

# Every export is imported on first use: `import thunder_ext` does not import Thunder, so that
# `python -m thunder_ext` can set its warning filters before Thunder's import-time warnings.
_HOMES = {
    "InplaceBarrierTransform": "thunder_ext.transforms",
    "CheckReport": "thunder_ext.doctor",
    "check": "thunder_ext.doctor",
    "TraceInvariantError": "thunder_ext.checker",
    "Violation": "thunder_ext.checker",
    "assert_valid": "thunder_ext.checker",
    "verify": "thunder_ext.checker",
    "final_traces": "thunder_ext.integration",
    "fusion_stage_traces": "thunder_ext.integration",
    "last_reports": "thunder_ext.integration",
    "draw_trace": "thunder_ext.graph",
    "quiet_upstream_noise": "thunder_ext.noise",
    "save_trace_graph": "thunder_ext.graph",
    "trace_graph": "thunder_ext.graph",
    "GradInputWriteError": "thunder_ext.errors",
    "RunningStatsGradError": "thunder_ext.errors",
    "LostScalarWriteError": "thunder_ext.errors",
    "PartitionerWouldDropError": "thunder_ext.errors",
    "InplaceOrderingError": "thunder_ext.errors",
    "InputAliasError": "thunder_ext.errors",
    "OverlappingSourceError": "thunder_ext.errors",
    "OverwriteGradientError": "thunder_ext.errors",
    "SavedTensorMutationError": "thunder_ext.errors",
    "UnorderableAccessError": "thunder_ext.errors",
    "StrideDependentViewError": "thunder_ext.errors",
    "ViewGradientError": "thunder_ext.errors",
}
# The pass itself is used inside the transform too; only the public names check their argument.
_TRACE_FUNCTIONS = ("insert_barriers", "place_barriers")

if TYPE_CHECKING:
    from thunder_ext.barriers import insert_barriers, place_barriers
    from thunder_ext.checker import TraceInvariantError, Violation, assert_valid, verify
    from thunder_ext.doctor import CheckReport, check
    from thunder_ext.errors import (
        GradInputWriteError,
        RunningStatsGradError,
        LostScalarWriteError,
        PartitionerWouldDropError,
        InplaceOrderingError,
        InputAliasError,
        OverlappingSourceError,
        OverwriteGradientError,
        SavedTensorMutationError,
        UnorderableAccessError,
        StrideDependentViewError,
        ViewGradientError,
    )
    from thunder_ext.graph import draw_trace, save_trace_graph, trace_graph
    from thunder_ext.integration import final_traces, fusion_stage_traces, last_reports
    from thunder_ext.noise import quiet_upstream_noise
    from thunder_ext.transforms import InplaceBarrierTransform


def __getattr__(name: str) -> Any:
    import importlib

    if name in _TRACE_FUNCTIONS:
        from thunder_ext import barriers
        from thunder_ext.validation import takes_trace

        value = takes_trace(getattr(barriers, name))
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module 'thunder_ext' has no attribute {name!r}")
    globals()[name] = value  # cached: later lookups skip __getattr__ and keep one identity
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
