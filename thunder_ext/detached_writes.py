"""Writes through ``detach()`` are writes without grad.

``p.detach().clamp_(-c, c)``, ``ema.detach().mul_(d)``: the tensor ``detach`` returns shares its
input's storage but none of its autograd history.  Eager writes the storage and records nothing
on the input, which stays a leaf (or keeps its ``grad_fn``): later reads differentiate into it
as they would after the same write under ``torch.no_grad()``.  Thunder traces the write with
grad enabled (its ``copy_`` says ``grad_enabled=True``), as if it gave the input a history, so
the write into an input that requires grad was refused (class 9) and plain Thunder drops the
input's gradient.

:func:`writes_through_detach_without_grad` marks such a write as the no-grad write it is, where
eager's answer is the same: its ``copy_`` gets ``grad_enabled=False``, and every later pass
reads it as the write under ``torch.no_grad()`` it is equivalent to.  Before
(``a.detach().clamp_(-0.5, 0.5); return (a * w).sum()``, ``a`` requiring grad)::

    d = ltorch.detach(a)
    t9 = ltorch.clamp_(d, -0.5, 0.5)
      # ...
      # t9 = prims.copy_(t8, d, grad_enabled=True)
    t10 = ltorch.mul(a, w)

After::

    d = ltorch.detach(a)
    t22 = ltorch.clamp_(d, -0.5, 0.5)
      # ...
      # t22 = prims.copy_(t8, d, grad_enabled=False)
    t10 = ltorch.mul(a, w)

where ``t22`` is tagged ``DETACHED_AUTOGRAD_GRAPH``.

Invariants:

* only a write every destination of which is reached from its storage through a ``detach``
  (then views and in-place writes of it), so no write can give a tensor that requires grad a
  history;
* only where no tensor the write reads carries a gradient (``d.add_(w)`` with ``w`` requiring
  grad gives ``d`` ``w``'s history in eager, which a no-grad write would drop): such a write is
  left as it is;
* the input trace is not mutated: the outputs of a write made without grad are new proxies,
  tagged as Thunder tags what a no-grad block computes (autodiff takes the write for a
  constant), and later bsyms read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from thunder.core.proxies import ProxyTag, TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.op_kinds import effect_of, is_barrier, is_copy, is_detach, tensor_args, tensor_outs, writes_with_grad


@dataclass
class DetachedWritesReport:
    without_grad: list[BoundSymbol]  # the writes marked so (the new bsyms)
    left_with_grad: list[BoundSymbol]  # through detach, but reading a value that carries a gradient


def writes_through_detach_without_grad(
    trace: TraceCtx, differentiable: frozenset[str]
) -> tuple[TraceCtx, DetachedWritesReport]:
    """``trace`` with each write through a ``detach``ed alias, of a value without gradient, made a
    no-grad write.  ``differentiable``: the names gradients may flow through
    (:func:`thunder_ext.refusals.differentiable_names`, which stops at ``detach``).  The trace itself
    where there is none."""
    report = DetachedWritesReport([], [])
    new = from_trace(trace)
    detached: set[str] = set()  # names reached from a detach through aliases
    swap: dict = {}  # an output of a write made without grad -> its proxy tagged so
    whole: dict[str, TensorProxy] = {}  # detach(x), and what a write into it returns -> x
    bsyms: list[BoundSymbol] = []
    for b in trace.bound_symbols:
        if swap:
            b = b.from_bsym_swap_proxies(swap)
        effect = effect_of(b)
        _note_aliases(b, effect, detached)
        if is_detach(b) and tensor_args(b):
            x = tensor_args(b)[0]
            whole.update((o.name, whole.get(x.name, x)) for o in tensor_outs(b))
        elif is_barrier(b):  # Thunder's own: output k is input k's new version
            whole.update((o.name, whole[i.name]) for i, o in zip(tensor_args(b), tensor_outs(b)) if i.name in whole)
        if effect.writes and writes_with_grad(b) and all(w.name in detached for w in effect.writes):
            if any(p.name in differentiable for p in b.flat_proxy_args if isinstance(p, TensorProxy)):
                report.left_with_grad.append(b)
            else:
                into = {whole[w.name].name: whole[w.name] for w in effect.writes if w.name in whole}
                x = None
                if len(into) == 1 and all(w.name in whole for w in effect.writes):
                    # Into detach(x) whole: the same write into x itself, without grad, as
                    # ``with torch.no_grad(): x.mul_(2)`` traces.  A fusion region then takes x
                    # only, not x and its detached alias (AOT autograd refuses inputs that alias
                    # with different leafness: torch_compile_ex, a non-leaf x).
                    (x,) = into.values()
                    b = b.from_bsym_swap_proxies({variableify(w): x for w in effect.writes})
                # Autodiff takes a bsym whose outputs are tagged so for a constant, as it does
                # what a no-grad block computes: no backward through the write, none to detach.
                with tracectx(new):
                    tagged = {
                        variableify(o): o.replace(name=None, tags=o.tags | {ProxyTag.DETACHED_AUTOGRAD_GRAPH})
                        for o in b.flat_proxy_outs
                        if isinstance(o, TensorProxy)
                    }
                swap.update(tagged)
                detached.update(o.name for o in tagged.values())
                if x is not None:
                    whole.update((o.name, x) for o in tagged.values())
                b = _without_grad(b.from_bsym_swap_proxies(tagged))
                report.without_grad.append(b)
        bsyms.append(b)
    if not report.without_grad:
        return trace, report
    new.bound_symbols = bsyms
    new.set_provenance(TraceProvenance("Writes through detach made without grad (thunder_ext)"))
    return new, report


def detached_aliases(bsyms: Sequence[BoundSymbol]) -> set[str]:
    """The names reached from a ``detach`` through aliases (views of it, and what writes into
    them return): no gradient reaches their storage's history through them."""
    detached: set[str] = set()
    for b in bsyms:
        _note_aliases(b, effect_of(b), detached)
    return detached


def _note_aliases(bsym: BoundSymbol, effect, detached: set[str]) -> None:
    if is_detach(bsym):
        detached.update(p.name for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy))
    else:
        detached.update(o.name for o, a in effect.aliases if a.name in detached)


def _without_grad(bsym: BoundSymbol) -> BoundSymbol:
    """``bsym`` as traced under ``torch.no_grad()``: each ``copy_`` in it says so."""
    if is_copy(bsym):
        return bsym.from_bsym(kwargs={**bsym.kwargs, "grad_enabled": False})
    return bsym.from_bsym(subsymbols=[_without_grad(s) for s in bsym.subsymbols])
