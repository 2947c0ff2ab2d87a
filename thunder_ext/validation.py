"""Argument checks for the public functions: a wrong argument gets a message that says what to pass.

Thunder's own errors for these slips are far from the cause (``'list' object has no
attribute 'bound_symbols'``, ``cannot create weak reference to 'NoneType' object``), so
every public entry point checks its arguments here first.  Accessors given a compiled
function with nothing to report warn instead of returning empty results silently.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from thunder.core.trace import TraceCtx

F = TypeVar("F", bound=Callable[..., Any])

COMPILE_HINT = (
    "thunder.jit(fn, fusion_type='dataflow', transforms=[InplaceBarrierTransform()]) "
    "or thunderfx(fn, transforms=[InplaceBarrierTransform()])"
)


def _what(obj: object) -> str:
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"the function `{obj.__qualname__}`"
    text = repr(obj)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(obj).__name__} {text}"


def require_trace(trace: object, function: str) -> None:
    """Raise a TypeError saying what to pass unless ``trace`` is one Thunder trace."""
    if isinstance(trace, TraceCtx):
        return
    if isinstance(trace, (list, tuple)):
        hint = "pass one trace, e.g. thunder.last_traces(jf)[-1]"
        if trace and all(isinstance(t, TraceCtx) for t in trace):
            hint += " (the last one is the final trace)"
        raise TypeError(f"{function}() takes one trace, not a {type(trace).__name__} of {len(trace)}; {hint}")
    if _is_compiled(trace) or callable(trace):
        raise TypeError(
            f"{function}() takes a trace, not {_what(trace)}; pass one of its traces, e.g. "
            "thunder.last_traces(jf)[-1] or thunder_ext.fusion_stage_traces(jf)[0]"
        )
    raise TypeError(f"{function}() takes a Thunder trace (TraceCtx), not {_what(trace)}")


def takes_trace(fn: F) -> F:
    """Wrap a trace-to-anything function so that its first argument is checked by :func:`require_trace`."""

    @functools.wraps(fn)
    def checked(trace, *args, **kwargs):
        require_trace(trace, fn.__name__)
        return fn(trace, *args, **kwargs)

    return checked  # type: ignore[return-value]


def require_bool(value: object, name: str, owner: str) -> None:
    # bool subclasses int; 0/1 and strings like "yes" are slips, not choices.
    if not isinstance(value, bool):
        raise TypeError(f"{owner}({name}=...) takes True or False, not {value!r} ({type(value).__name__})")


def require_names(value: object, name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """One option name, or a sequence of them; duplicates are dropped, order kept."""
    names: tuple
    if isinstance(value, str):
        names = (value,)
    else:
        try:
            names = tuple(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"check({name}=...) takes one of {allowed} or a sequence of them, not {_what(value)}"
            ) from None
    if not names:
        raise ValueError(f"check({name}=...) is empty; give at least one of {allowed}")
    for n in names:
        if n not in allowed:
            what = name.replace("_", " ")
            raise ValueError(f"check({name}=...): unknown {what} {n!r}; expected one of {allowed}")
    return tuple(dict.fromkeys(names))


def require_kwargs(kwargs: object) -> dict:
    """``check(kwargs=...)``: the function's own keyword arguments, as a dict with string keys."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(
            "check(kwargs=...) takes a dict of your function's keyword arguments, e.g. kwargs={'w': w}, "
            f"not {_what(kwargs)}"
        )
    return kwargs


def _is_compiled(obj: object) -> bool:
    import thunder

    return (
        thunder.compile_data(obj) is not None
        or hasattr(obj, "subgraph_infos")  # a ThunderCompiler
        or hasattr(getattr(obj, "_backend", None), "subgraph_infos")  # a thunderfx object
    )


def require_compiled(compiled: object, function: str) -> None:
    """Raise a TypeError unless ``compiled`` is a ``thunder.jit`` function, a thunderfx object or a ThunderCompiler."""
    if _is_compiled(compiled):
        return
    if isinstance(compiled, TraceCtx):
        raise TypeError(f"{function}() takes a compiled function, not a trace; pass the thunder.jit function or thunderfx object")
    if isinstance(compiled, (list, tuple)):
        raise TypeError(
            f"{function}() takes one compiled function, not a {type(compiled).__name__}; call it once per function"
        )
    if callable(compiled):
        raise TypeError(
            f"{function}() takes a function compiled by Thunder, not {_what(compiled)}, a plain Python callable; "
            f"compile it first with {COMPILE_HINT}, and call it"
        )
    raise TypeError(
        f"{function}() takes a thunder.jit function, a thunderfx object or a ThunderCompiler, not {_what(compiled)}"
    )


def warn_if_nothing_to_report(compiled: object, jitted: list, function: str, *, need_transform: bool) -> None:
    """Warn when ``compiled`` has no compilation yet, or was compiled without the transform."""
    import thunder

    from thunder_ext.transforms import InplaceBarrierTransform

    name = _what(compiled)
    if not jitted:
        warnings.warn(
            f"{function}(): {name} has compiled no subgraph yet, so there is nothing to report; call it first",
            UserWarning,
            stacklevel=3,
        )
        return
    uncalled = [fn for fn in jitted if getattr(thunder.compile_stats(fn), "last_traces", None) is None]
    if uncalled:
        warnings.warn(
            f"{function}(): {name} has no compilation (it was never called, or its compilation failed), "
            "so there is nothing to report; call it first",
            UserWarning,
            stacklevel=3,
        )
        return
    if need_transform:
        without = [
            fn
            for fn in jitted
            if not any(isinstance(t, InplaceBarrierTransform) for t in (thunder.compile_data(fn).transforms or ()))
        ]
        if without:
            warnings.warn(
                f"{function}(): {name} was compiled without InplaceBarrierTransform, so the transform has "
                f"nothing to report; compile with {COMPILE_HINT}",
                UserWarning,
                stacklevel=3,
            )


def require_function(fn: object) -> None:
    """``check`` compiles ``fn`` itself, so it takes the plain Python function."""
    if _is_compiled(fn):
        raise TypeError(
            f"check() takes your plain Python function and compiles it itself, not {_what(fn)} that Thunder "
            "already compiled; pass the original function (for thunder.jit(f), pass f)"
        )
    if not callable(fn):
        raise TypeError(f"check() takes the function to check as its first argument, not {_what(fn)}")


def require_state(state: object) -> None:
    import torch

    if state is None:
        return
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise TypeError(
            "check(state=...) takes a dict from names to the tensors fn mutates besides its arguments, "
            f"e.g. dict(module.named_buffers()), not {_what(state)}"
        )
