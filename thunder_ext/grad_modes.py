"""The grad mode the transform's rewrites are traced under, and the one a refusal leaves behind.

Thunder tags what a symbol returns as a constant for autodiff (``DETACHED_AUTOGRAD_GRAPH``)
whenever its compile data says grad is off.  After tracing, that flag holds the mode the traced
code *ends* in.  ThunderFX cuts a graph at ``with torch.no_grad():``, and the piece before the
cut ends with ``torch._C._set_grad_enabled(False)``; so does a piece that starts by turning grad
back on and ends in the next no-grad block.  What the transform traced for a write with grad in
such a piece (``silu`` for ``silu_``, the ``where`` that keeps an overwrite's zero gradient)
came out a constant: a gradient lost, silently.

So the rewrites before autodiff are traced with grad on wherever the traced code ran with grad
somewhere (:func:`grad_enabled_while_rewriting`).  The writes of a no-grad block are tagged by
the steps themselves, as they always were for ``with torch.no_grad():`` inside a
``thunder.jit`` function, whose flag ends on.  Code traced with grad is seen by its outputs:
Thunder tags those of every op traced with grad off (:func:`traced_with_grad_somewhere`).

Before (the first ThunderFX piece of ``t0 = a * 1; F.silu(t0, inplace=True);
with torch.no_grad(): t0.lerp_(rv, 0.1); return t0 * 2``, ``a`` requiring grad; the piece ends
with ``torch._C._set_grad_enabled(False)``)::

    t0 = ltorch.mul(l_a_, 1)
    (t7,) = prims.update_aliases((t0,))
    silu = ltorch.silu(t7, True)
      # silu = prims.copy_(t5, t7, grad_enabled=True)
    return {'output': (silu,), 'flat_args': [l_a_]}

After the barrier pass, which traced the ``silu`` under this module's mode::

    t0 = ltorch.mul(l_a_, 1)
    t12 = ltorch.silu(t0, False)
    return {'output': (t12,), 'flat_args': [l_a_]}

Traced under the flag as Thunder left it, ``t12`` was tagged a constant: the piece was compiled
without a backward, and ``a`` got no gradient.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import ProxyTag
from thunder.core.trace import TraceCtx

from thunder_ext.op_kinds import tensor_args, tensor_outs


def traced_with_grad_somewhere(trace: TraceCtx) -> bool:
    """Some op of ``trace`` that computes from tensors made a new tensor Thunder did not tag as
    no-grad code's: that op was traced with grad on."""
    for bsym in trace.bound_symbols:
        args = {p.name for p in tensor_args(bsym)}
        if not args:
            continue  # a factory, an unpack: no sign of the mode
        if any(o.name not in args and ProxyTag.DETACHED_AUTOGRAD_GRAPH not in o.tags for o in tensor_outs(bsym)):
            return True
    return False


@contextmanager
def grad_enabled_while_rewriting(trace: TraceCtx) -> Iterator[None]:
    """Grad on in the compile data while the transform rewrites ``trace`` before autodiff, where
    the flag ended off but ``trace`` ran with grad somewhere; the flag as it was afterwards
    (Thunder sets PyTorch's mode from it when the call returns)."""
    cd = get_compile_data()
    if cd is None or cd.is_grad_enabled or not traced_with_grad_somewhere(trace):
        yield
        return
    cd.is_grad_enabled = True
    try:
        yield
    finally:
        cd.is_grad_enabled = False


def leave_grad_mode_as_the_caller_had(trace: TraceCtx) -> None:
    """Before a refusal leaves a compilation: grad on where ``trace`` ran with grad somewhere.

    Thunder sets PyTorch's mode when a call returns, from the mode the traced code ends in.
    Under ThunderFX an earlier piece that ends in a no-grad block has turned grad off, and the
    piece that would turn it on again may be the one refused: the caller's process was then left
    with grad disabled, where eager's ``with torch.no_grad():`` restores it.
    """
    cd = get_compile_data()
    if cd is not None:
        torch.set_grad_enabled(cd.is_grad_enabled or traced_with_grad_somewhere(trace))
