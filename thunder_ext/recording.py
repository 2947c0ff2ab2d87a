"""Recording new bound symbols: a call traced into a trace's scope, and the bsyms it made.

Every step that adds bsyms to a trace (a write made a value, a view made again, a clone of an
old value) traces an ``ltorch`` call this way, so that Thunder names the new proxies and binds
the symbols exactly as it does when it traces the user's program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from thunder.core.proxies import ProxyTag, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, tracectx

T = TypeVar("T")


def record(trace: TraceCtx, fn: Callable[[], T]) -> tuple[list[BoundSymbol], T]:
    """Call ``fn`` with ``trace`` current, and return the bsyms it bound at top level and its
    result; the scope is closed even where ``fn`` raises."""
    with tracectx(trace):
        trace.push_scope([])
        try:
            result = fn()
        finally:
            made = trace.pop_scope()
    return made, result


def call_again(bsym: BoundSymbol, swap: dict) -> list[TensorProxy]:
    """Call ``bsym``'s symbol again, in the current trace scope, with the proxies ``swap`` names
    (variableified -> new) in place of its arguments: its tensor outputs, which are new proxies
    (a view made again on another tensor, say)."""
    swapped = bsym.from_bsym_swap_proxies(swap, skip_output=True)
    result = swapped.sym(*swapped.args, **swapped.kwargs)
    outs = [p for p in tree_flatten(result)[0] if isinstance(p, TensorProxy)]
    # What is made again keeps what autodiff must know of the original: a ``detach`` (or an op
    # of a no-grad block) made again from a new base is still a constant.
    for old, out in zip([p for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy)], outs):
        if ProxyTag.DETACHED_AUTOGRAD_GRAPH in old.tags:
            out.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
    return outs


def record_again(trace: TraceCtx, bsym: BoundSymbol, swap: dict) -> tuple[list[BoundSymbol], list[TensorProxy]]:
    """:func:`call_again` recorded into ``trace``: the bsyms it bound, and its tensor outputs."""
    return record(trace, lambda: call_again(bsym, swap))


def at_source_of(bsyms: Iterable[BoundSymbol], like: BoundSymbol) -> list[BoundSymbol]:
    """``bsyms`` under ``like``'s source line: what the user sees for the code a rewrite of ``like`` made."""
    return [b.from_bsym(source_filename=like.source_filename, source_positions=like.source_positions) for b in bsyms]
