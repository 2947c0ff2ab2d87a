"""Proxies named like a function the final trace calls by its bare name.

ThunderFX names proxies after FX nodes, so ``t1.copy_(b)`` gives a proxy ``copy_``.  Where the
transform leaves an epilogue ``copy_`` outside a fusion region, the torch executor prints it as
a bare call, ``copy_(t18, l_b_, grad_enabled=False)``, and a proxy of that name assigned anywhere
in the same function makes Python take ``copy_`` for a local: the call raises
``UnboundLocalError`` (soak seed 92000's programs under ThunderFX with ``torch_compile_ex``).
:func:`rename_proxies_shadowing_calls` gives such proxies new names.  Before::

    [copy_] = TorchCompile1(t18, t3)
    t19 = copy_(t18, l_b_, grad_enabled=False)

After::

    [t20] = TorchCompile1(t18, t3)
    t19 = copy_(t18, l_b_, grad_enabled=False)

The trace's inputs keep their names (they are its signature); the input trace is not mutated.
"""

from __future__ import annotations

from thunder.core.proxies import Proxy, variableify
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.alias_analysis import input_names


def rename_proxies_shadowing_calls(trace: TraceCtx) -> tuple[TraceCtx, int]:
    """``trace`` with every proxy that shares its name with a called symbol renamed; how many."""
    called = {b.sym.name for b in trace.bound_symbols}
    inputs = input_names(trace)
    clashing: dict[str, Proxy] = {}
    for b in trace.bound_symbols:
        for p in (*b.flat_proxy_args, *b.flat_proxy_outs):
            if isinstance(p, Proxy) and p.name in called and p.name not in inputs:
                clashing.setdefault(p.name, p)
    if not clashing:
        return trace, 0
    new = from_trace(trace)
    with tracectx(new):
        swap = {variableify(p): p.replace(name=None) for p in clashing.values()}
    new.bound_symbols = [b.from_bsym_swap_proxies(swap) for b in trace.bound_symbols]
    new.set_provenance(TraceProvenance("Proxies renamed apart from the functions the trace calls (thunder_ext)"))
    return new, len(clashing)
