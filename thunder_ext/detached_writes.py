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

A write through ``detach()`` of a value that carries a gradient (``d = a.detach(); d.add_(w)``,
``w`` requiring grad) gives ``d`` the history of ``w`` in eager, and ``a``'s storage the values
but no history.  :func:`_split_gradient_write` writes it so: the same op on a clone of ``a``
(private storage, whose write the barrier pass makes a value with that history), then a no-grad
copy of the result into ``a``; later reads of ``d`` read the result.  Before::

    d = ltorch.detach(a)
    t2 = ltorch.add_(d, w, alpha=1)
    t3 = ltorch.mul(d, 2)

After (``t20`` tagged as a no-grad block's output, and so is ``t23``)::

    d = ltorch.detach(a)
    t20 = ltorch.clone(a)
    t22 = ltorch.add_(t20, w, alpha=1)
    t23 = prims.copy_(t22, a, grad_enabled=False)
    t3 = ltorch.mul(t22, 2)

Every ``detach`` output is tagged so too (under its own name): it has no history in eager.
Thunder would differentiate ``detach`` through PyTorch's VJP, making ``return a.detach()`` an
output that requires grad and giving ``a`` a zero gradient where eager gives None.

Invariants:

* only a write every destination of which is reached from its storage through a ``detach``
  (then views and in-place writes of it), so no write can give a tensor that requires grad a
  history;
* only where no tensor the write reads carries a gradient (``d.add_(w)`` with ``w`` requiring
  grad gives ``d`` ``w``'s history in eager, which a no-grad write would drop): such a write is
  split as above where that is eager's answer (see :func:`_split_gradient_write`), and left as
  it is otherwise;
* the input trace is not mutated: the outputs of a write made without grad are new proxies,
  tagged as Thunder tags what a no-grad block computes (autodiff takes the write for a
  constant), and later bsyms read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import ProxyTag, TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.op_kinds import effect_of, is_barrier, is_copy, is_detach, tensor_args, tensor_outs, writes_with_grad
from thunder_ext.recording import at_source_of, record, record_again


@dataclass
class DetachedWritesReport:
    without_grad: list[BoundSymbol]  # the writes marked so (the new bsyms)
    left_with_grad: list[BoundSymbol]  # through detach, but reading a value that carries a gradient
    split: list[BoundSymbol] = field(default_factory=list)  # such writes made a value and a no-grad write
    detach_outputs_tagged: int = 0  # detach bsyms whose outputs are now tagged as constants for autodiff


def writes_through_detach_without_grad(
    trace: TraceCtx, differentiable: frozenset[str]
) -> tuple[TraceCtx, DetachedWritesReport]:
    """``trace`` with each write through a ``detach``ed alias, of a value without gradient, made a
    no-grad write; each such write of a value with gradient split into a value and a no-grad
    write where that is eager's answer; and what ``detach`` returns tagged a constant for
    autodiff.  ``differentiable``: the names gradients may flow through
    (:func:`thunder_ext.refusals.differentiable_names`, which stops at ``detach``).  The trace
    itself where there is no ``detach``."""
    report = DetachedWritesReport([], [])
    new = from_trace(trace)
    detached: set[str] = set()  # names reached from a detach through aliases
    swap: dict = {}  # an output of a write made without grad -> its proxy tagged so
    whole: dict[str, TensorProxy] = {}  # detach(x), and what a write into it returns -> x
    split_into: dict[str, TensorProxy] = {}  # a split write's value, and its later versions -> x
    bsyms: list[BoundSymbol] = []
    for at, b in enumerate(trace.bound_symbols):
        if swap:
            b = b.from_bsym_swap_proxies(swap)
        effect = effect_of(b)
        _note_aliases(b, effect, detached)
        if is_detach(b) and tensor_args(b):
            # What detach returns has no history: tagged as a no-grad block's output, autodiff
            # takes it for a constant.  Thunder's own VJP of detach (PyTorch's, called back) gives
            # its input a zero gradient where eager gives None, and fails under torch_compile_ex.
            # Under the same name, which errors then say: made in a scratch trace's scope, as the
            # new trace already holds that name.
            with tracectx(TraceCtx()):
                constant = {
                    variableify(o): o.replace(tags=o.tags | {ProxyTag.DETACHED_AUTOGRAD_GRAPH})
                    for o in tensor_outs(b)
                    if ProxyTag.DETACHED_AUTOGRAD_GRAPH not in o.tags
                }
            if constant:
                swap.update(constant)
                b = b.from_bsym_swap_proxies(constant)
                effect = effect_of(b)
                detached.update(o.name for o in tensor_outs(b))
                report.detach_outputs_tagged += 1
            x = tensor_args(b)[0]
            whole.update((o.name, whole.get(x.name, x)) for o in tensor_outs(b))
        elif is_barrier(b):  # Thunder's own: output k is input k's new version
            for i, o in zip(tensor_args(b), tensor_outs(b)):
                for versions in (whole, split_into):
                    if i.name in versions:
                        versions[o.name] = versions[i.name]
        if len(effect.writes) == 1 and effect.writes[0].name in split_into:
            # A later write into a split write's value: the same write on it (it has the history
            # eager's detached tensor has), and again a copy of the result into x without grad.
            x = split_into[effect.writes[0].name]
            with tracectx(new):
                copied = _copy_without_grad(new, tensor_outs(b)[0], x)
            bsyms.extend([b, *at_source_of(copied, b)])
            split_into.update((o.name, x) for o in tensor_outs(b))
            report.split.append(b)
            continue
        if effect.writes and writes_with_grad(b) and all(w.name in detached for w in effect.writes):
            if any(p.name in differentiable for p in b.flat_proxy_args if isinstance(p, TensorProxy)):
                later = [c.from_bsym_swap_proxies(swap) for c in trace.bound_symbols[at + 1 :]]
                split = _split_gradient_write(new, bsyms, later, b, whole)
                if split is None:
                    report.left_with_grad.append(b)
                    bsyms.append(b)
                    continue
                made, renamed, (value, x) = split
                bsyms.extend(made)
                swap.update(renamed)
                split_into[value.name] = x
                report.split.append(b)
                continue
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
                b = _without_grad(b.from_bsym_swap_proxies(tagged))
                report.without_grad.append(b)
                if x is not None:
                    whole.update((o.name, x) for o in tagged.values())
                    # What the write returns is the detached tensor, not x: later reads read a
                    # detach of x's new version.  (Read as x's version, a later pass would rename
                    # it to a barrier's output, which carries x's gradient.)
                    bsyms.append(b)
                    for old, out in zip([o for o in trace.bound_symbols[at].flat_proxy_outs if isinstance(o, TensorProxy)], tagged.values()):
                        made, again = record(new, lambda out=out: ltorch.detach(out))
                        again.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
                        bsyms.extend(at_source_of(made, b))
                        swap[variableify(old)] = again
                        detached.add(again.name)
                        whole[again.name] = x
                    continue
        bsyms.append(b)
    if not report.without_grad and not report.split and not report.detach_outputs_tagged:
        return trace, report
    new.bound_symbols = bsyms
    new.set_provenance(TraceProvenance("Writes through detach made without grad (thunder_ext)"))
    return new, report


def _split_gradient_write(
    new: TraceCtx,
    before: Sequence[BoundSymbol],
    later: Sequence[BoundSymbol],
    b: BoundSymbol,
    whole: dict[str, TensorProxy],
) -> tuple[list[BoundSymbol], dict, tuple[TensorProxy, TensorProxy]] | None:
    """``d.add_(w)`` with ``d = x.detach()`` and ``w`` carrying a gradient: eager gives ``d`` the
    history of ``w`` and writes ``x``'s storage, giving ``x`` none.  Written as the same op on a
    clone of ``d`` (private storage, which the functionalizer makes a value with that history),
    then a copy of the result into ``x`` under no-grad; later reads of ``d`` read the result, and
    later writes into it are made so too (the caller's loop).  The bsyms that make it, the
    renaming of ``d`` and of ``b``'s outputs, and (the value, ``x``); None where that is not
    eager's answer.  ``before`` and ``later``: the bsyms around ``b``, under the names it reads.

    * the write must write ``detach(x)`` whole (a write into a part of it scatters into ``x``);
    * no view of ``d`` may be made before it (eager rebases such a view's history on the write,
      where the split would leave it reading ``x``'s storage, without history);
    * every later write into ``x``'s storage must write ``d`` itself, whole (a write into ``x``
      or through a view would change ``d`` in eager, not the value).
    """
    effect = effect_of(b)
    if len(effect.writes) != 1 or effect.writes[0].name not in whole:
        return None
    d, x = effect.writes[0], whole[effect.writes[0].name]
    # ``whole`` holds, up to here, the names of ``detach(x)`` itself (its versions past Thunder's
    # barriers and past writes into it); an alias made from one of them that is none is a view.
    lineage = {n for n, y in whole.items() if y is x}
    if any(a.name in lineage and o.name not in lineage for e in map(effect_of, before) for o, a in e.aliases):
        return None
    lineage.update(o.name for o in tensor_outs(b))
    storage = _aliases_from([*before, b, *later], x.name)
    for c in later:
        e = effect_of(c)
        if not any(w.name in storage for w in e.writes):
            if is_barrier(c):
                lineage.update(o.name for i, o in zip(tensor_args(c), tensor_outs(c)) if i.name in lineage)
            continue
        if len(e.writes) != 1 or e.writes[0].name not in lineage:
            return None
        lineage.update(o.name for o, a in e.aliases if a is e.writes[0])
    with tracectx(new):
        # A clone of x itself, tagged as a no-grad block's output: it has no history, as ``d``
        # has none.  Not of ``d``: autodiff would need a backward through ``detach`` (Thunder has
        # no rule of its own and calls PyTorch's, which torch_compile_ex fails on), and a fusion
        # region would take x and its detached alias (AOT autograd refuses such inputs).
        made, e = record(new, lambda: ltorch.clone(x))
        e.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
        again, outs = record_again(new, b, {variableify(d): e})
        if not outs:
            return None
        value = outs[0]
        copied = _copy_without_grad(new, value, x)
    renamed = {variableify(d): value, **{variableify(o): value for o in tensor_outs(b)}}
    return at_source_of([*made, *again, *copied], b), renamed, (value, x)


def _copy_without_grad(new: TraceCtx, value: TensorProxy, x: TensorProxy) -> list[BoundSymbol]:
    """``x.copy_(value)`` as traced under ``torch.no_grad()``: its output tagged as a no-grad block's."""
    copied, out = record(new, lambda: prims.copy_(value, x, grad_enabled=False))
    out.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
    return copied


def _aliases_from(bsyms: Sequence[BoundSymbol], name: str) -> set[str]:
    """``name`` and every alias ``bsyms`` make of it, transitively."""
    names = {name}
    for b in bsyms:
        names.update(o.name for o, a in effect_of(b).aliases if a.name in names)
    return names


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
