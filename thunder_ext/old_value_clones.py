"""A write kept in place whose backward reads the value it overwrites: computed from a clone.

The barrier pass keeps some private storage in place (a later write under no-grad into a tensor
that gradients flow through, a view it cannot replay).  An in-place op with grad on such storage
whose backward reads the destination's old value (``t0.abs_()``, ``t0.mul_(w)``) would be
differentiated by Thunder as if that value were the new one, so
:func:`thunder_ext.refusals.refuse_kept_writes_whose_backward_reads_the_old_value` refuses it.
Eager answers it: autograd saves a copy of the original ``self`` for such an in-place op.

:func:`clone_old_value` does what eager does, before autodiff: the op computes its value from a
clone of the destination, and the ``copy_`` it ends with writes that value into the destination.
The backward then reads the clone, which nothing writes.  Before (``t0`` kept in place)::

    t2 = ltorch.abs_(t0)
      # t1 = ltorch.abs(t0)
      # t2 = prims.copy_(t1, t0, grad_enabled=True)

After::

    t3 = ltorch.clone(t0)
    t1 = ltorch.abs(t3)
    t2 = prims.copy_(t1, t0, grad_enabled=True)

Invariant: the write has the form the functionalizer rewrites (a composite whose last subsymbol
is the ``copy_`` into its destination, nothing else written); its output, the ``copy_``'s, keeps
its name, so every later reader is unchanged.  Cost: one copy of the destination per such write.
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.proxies import variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.functionalize import _write_form
from thunder_ext.recording import at_source_of, record


def clone_old_value(trace: TraceCtx, write: BoundSymbol) -> TraceCtx | None:
    """``trace`` with the in-place op that makes ``write``'s output computed from a clone of its
    destination (see the module's docstring); None where no top-level bsym of ``trace`` makes
    that output, or it is not of that form."""
    outs = {p.name for p in write.flat_proxy_outs}
    at = [k for k, b in enumerate(trace.bound_symbols) if b.sym is write.sym and {p.name for p in b.flat_proxy_outs} == outs]
    if len(at) != 1:
        return None
    bsym = trace.bound_symbols[at[0]]
    w = _write_form(bsym)
    if w is None or not w.pre or w.out is None:
        return None
    new = from_trace(trace)
    made, clone = record(new, lambda: ltorch.clone(w.dst))
    swap = {variableify(w.dst): clone}
    rewritten = [*made, *(s.from_bsym_swap_proxies(swap) for s in w.pre), bsym.subsymbols[-1]]
    new.bound_symbols = [*trace.bound_symbols[: at[0]], *at_source_of(rewritten, bsym), *trace.bound_symbols[at[0] + 1 :]]
    new.set_provenance(TraceProvenance("thunder_ext: a kept in-place write computed from a clone of its destination"))
    return new
