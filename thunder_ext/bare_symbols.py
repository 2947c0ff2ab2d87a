"""Symbols autodiff binds without their decomposition, given one, so a fusion region keeps them.

Thunder's autodiff gives an intermediate that receives no gradient a zero gradient by binding
``ltorch.zeros`` directly, with no subsymbols.  A fusion executor that takes it into a region
then loses it: the fusion pass ends with Thunder's ``dce``, which drops every subsymbol of a
region that is neither a prim nor has subsymbols of its own (a "no-op"), and the region reads a
name nothing defines (torch 2.11, Thunder 0.2.6 and ``main``; Dynamo: ``failed to find name
`t31` in frame's builtins``).  The program that shows it writes a slice of a grad input under
no-grad, then reads the input again (``torch_compile_ex``, grad)::

    t0 = a[1:]
    with torch.no_grad():
        t0.mul_(1.5)
    return a[1:] * b

This step binds each such symbol again, traced in the trace being built, so that it carries
its decomposition (``ltorch.full``, ``prims.full``), the same output and the same tags::

    before                                            after
    t31 = ltorch.zeros(4, 3, device=.., dtype=..)     t31 = ltorch.zeros(4, 3, device=.., dtype=..)
                                                        # t31 = ltorch.full((4, 3), 0, ...)
                                                          # t31 = prims.full((4, 3), 0, ...)

Invariant: only bsyms that read no tensor are bound again, each in its own place and with its
own output, so no other bsym changes and no order does.
"""

from __future__ import annotations

from collections.abc import Sequence

from thunder.core.proxies import variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.extend import Executor

from thunder_ext.functionalize import _claim
from thunder_ext.op_kinds import tensor_args, tensor_outs
from thunder_ext.recording import record


def is_bare(bsym: BoundSymbol) -> bool:
    """A symbol a fusion pass's ``dce`` would drop from a region: no prim, no subsymbols, and a
    tensor output, but no tensor input (what autodiff binds for a zero gradient; its shape may be
    symbolic numbers)."""
    return not bsym.sym.is_prim and not bsym.subsymbols and not tensor_args(bsym) and bool(tensor_outs(bsym))


def decompose_bare_symbols(
    trace: TraceCtx, new_trace: TraceCtx, bsyms: Sequence[BoundSymbol], executors: Sequence[Executor] | None
) -> tuple[list[BoundSymbol], int]:
    """``bsyms`` with every bare symbol (:func:`is_bare`) bound again with its decomposition, and
    how many were.  Only where fusion executors run (``executors`` not None)."""
    if executors is None:
        return list(bsyms), 0
    out: list[BoundSymbol] = []
    n = 0
    for b in bsyms:
        made = _bound_again(trace, new_trace, b, executors) if is_bare(b) else None
        if made is None:
            out.append(b)
        else:
            out.extend(made)
            n += 1
    return out, n


def _bound_again(
    trace: TraceCtx, new_trace: TraceCtx, bsym: BoundSymbol, executors: Sequence[Executor]
) -> list[BoundSymbol] | None:
    """``bsym`` traced again in ``new_trace``, its output renamed back; None where tracing it gives
    no decomposition (the symbol has none to give) or another number of outputs."""
    try:
        made, _ = record(new_trace, lambda: bsym.sym(*bsym.args, **bsym.kwargs))
    except Exception:  # noqa: BLE001  (a symbol that cannot be called again keeps its binding)
        return None
    if len(made) != 1 or not made[0].subsymbols:
        return None
    old, new = bsym.flat_proxy_outs, made[0].flat_proxy_outs
    if len(old) != len(new):
        return None
    back = {variableify(n): o for n, o in zip(new, old)}
    again = made[0].from_bsym_swap_proxies(back).from_bsym(
        tags=set(bsym.tags), source_filename=bsym.source_filename, source_positions=bsym.source_positions
    )
    return _claim(trace, [again], executors)
