"""Views autodiff computes as copies, made again wherever a write into their storage comes between.

Thunder's autodiff differentiates ``diagonal`` through its decomposition, a gather, so once
autodiff runs (any input requires grad) a float ``diagonal`` made with grad enabled is a tensor
of its own at run time, not a view: a write through it never reaches its base, and a read of it
after a write into the base sees the values from before.  A ``diagonal`` made with grad disabled
is a constant to autodiff (Thunder tags its output ``DETACHED_AUTOGRAD_GRAPH``), which runs it as
written, a real view.

This step (before autodiff, on the writes the barrier pass keeps in place) rewrites the two
uses where that difference shows:

* a write made with grad disabled through such a view writes through a *write handle* instead:
  the view chain made again from its base just before the write, with every output tagged
  detached, so it stays a view and the write reaches the base;
* a read of such a view (or of a view of it) after a write into its storage reads the chain
  made again after the write, from the base's current storage (view replay); with grad, its
  gather then differentiates into the base as eager's view does.

A write with grad enabled through such a view cannot be rewritten (its history cannot go through
a detached handle): then the program is left as written, and
:func:`thunder_ext.refusals.refuse_views_autodiff_copies` refuses it.

Before (``a`` requires grad; ``t0 = a.diagonal()``, then under no-grad ``a.add_(1.5)`` and
``t0.mul_(2.0)``, then ``t0 * b``)::

    t11 = ltorch.diagonal(a, 0, 0, 1)
    t13 = ltorch.add_(a, 1.5, alpha=1)      # grad disabled
    t15 = ltorch.mul_(t11, 2.0)             # grad disabled
    t16 = ltorch.mul(t11, b)
    return (t16,)

After::

    t11 = ltorch.diagonal(a, 0, 0, 1)       # read by nothing now; dce removes it
    t13 = ltorch.add_(a, 1.5, alpha=1)
    t17 = ltorch.diagonal(a, 0, 0, 1)       # the write handle, tagged DETACHED_AUTOGRAD_GRAPH
    t15 = ltorch.mul_(t17, 2.0)
    t18 = ltorch.diagonal(a, 0, 0, 1)       # made after both writes
    t16 = ltorch.mul(t18, b)
    return (t16,)

Invariants:

* the base a chain is made again from is the tracked view's own argument, by its name in the
  program as written: the barrier pass that runs next orders every read of that name after the
  writes before it, so a replay reads the storage as it is at that point;
* a chain is made of view ops only (``Effect.is_view``), each made again with its own arguments
  but the first, so a replay selects the same elements;
* a replay read made after a write is shared by the reads that follow, until the next write
  into its storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from thunder.core import dtypes
from thunder.core.proxies import ProxyTag, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import storage_groups
from thunder_ext.op_kinds import tensor_args, tensor_outs, writes_with_grad
from thunder_ext.recording import at_source_of, record

# View ops whose result stops being a plain view once autodiff runs (measured on every view op
# of Thunder's tables: tests/test_view_ops.py).  With no VJP of their own they are differentiated
# through their decomposition, which gathers (Thunder 0.2.6: ``diagonal`` is ``reshape`` and
# ``take``); autodiff differentiates every op on floats that a no-grad block did not make.
VIEWS_AUTODIFF_COPIES = frozenset({"diagonal"})

_DETACHED = ProxyTag.DETACHED_AUTOGRAD_GRAPH

# One step of a view chain: the view op, and which of its tensor outputs the chain goes on from.
_Step = tuple[BoundSymbol, int]


def is_detached(bsym: BoundSymbol) -> bool:
    """Made in a no-grad block: Thunder tags such outputs ``DETACHED_AUTOGRAD_GRAPH``, and
    autodiff treats the op as constant (it stays as written)."""
    return any(_DETACHED in o.tags for o in tensor_outs(bsym))


def autodiff_copies(bsym: BoundSymbol) -> bool:
    """``bsym`` is a view autodiff will compute as a copy: a ``VIEWS_AUTODIFF_COPIES`` op on floats,
    made with grad enabled."""
    args = tensor_args(bsym)
    return (
        bsym.sym.name in VIEWS_AUTODIFF_COPIES
        and bool(args)
        and dtypes.is_inexact_dtype(args[0].dtype)
        and not is_detached(bsym)
    )


@dataclass
class CopiedViewsReport:
    write_handles: int = 0  # writes made with grad disabled redirected through a detached chain
    replayed_reads: int = 0  # chains made again after a write, for the reads that follow
    left_with_grad: int = 0  # a write with grad through such a view: nothing rewritten, left for the refusal
    # Each name swapped in -> the name it stands for: a handle or a replay of a view of storage
    # gradients flow through carries gradients as that view does (the barrier pass's
    # straight-through rule after a no-grad write reads this).
    stands_for: dict[str, str] = field(default_factory=dict)


def replay_views_autodiff_copies(
    new_trace: TraceCtx, bsyms: Sequence[BoundSymbol], inputs: set[str], effects: dict | None = None
) -> tuple[list[BoundSymbol], CopiedViewsReport]:
    """``bsyms`` (barriers stripped, before autodiff) with every use of a view autodiff copies
    across a write into its storage rewritten as the module docstring shows; ``new_trace`` names
    the new proxies.  The input list is never mutated.  ``effects``: the cache of
    :func:`thunder_ext.alias_analysis.storage_groups`."""
    report = CopiedViewsReport()
    info = storage_groups(bsyms, inputs, cache=effects)
    chains: dict[str, list[_Step]] = {}  # a tracked view's name, or a view of one -> its chain
    stale: set[str] = set()  # such names written into since they were made
    replayed: dict[str, TensorProxy] = {}  # a stale name -> its replay, until the next write
    out: list[BoundSymbol] = []

    def replay(name: str, like: BoundSymbol, detached: bool) -> TensorProxy:
        steps = chains[name]
        cur = tensor_args(steps[0][0])[0]
        for view, k in steps:
            swapped = view.from_bsym_swap_proxies({variableify(tensor_args(view)[0]): cur}, skip_output=True)
            made, result = record(new_trace, lambda: swapped.sym(*swapped.args, **swapped.kwargs))
            outs = [p for p in tree_flatten(result)[0] if isinstance(p, TensorProxy)]
            for o, original in zip(outs, tensor_outs(view)):
                # The handle is constant to autodiff throughout; a read replay keeps each step's
                # own standing (a step the user made under no-grad stays detached).
                if detached or _DETACHED in original.tags:
                    o.tags.add(_DETACHED)
                else:
                    o.tags.discard(_DETACHED)
            out.extend(at_source_of(made, like))
            cur = outs[k]
        return cur

    for bsym, effect in zip(bsyms, info.effects):
        swap: dict = {}
        written = {w.name for w in effect.writes}
        for p in {p.name: p for p in tensor_args(bsym)}.values():  # ``t0.add_(t0)``: one handle
            if p.name not in chains:
                continue
            if p.name in written:
                if writes_with_grad(bsym):
                    # Its history cannot go through a detached handle: the program is left as
                    # written, for refusals.refuse_views_autodiff_copies to name this write.
                    return list(bsyms), CopiedViewsReport(left_with_grad=1)
                swap[variableify(p)] = handle = replay(p.name, bsym, detached=True)
                report.stands_for[handle.name] = p.name
                report.write_handles += 1
            elif p.name in stale:  # a view made from it after the write too: it views the replay
                if p.name not in replayed:
                    replayed[p.name] = replay(p.name, bsym, detached=False)
                    report.stands_for[replayed[p.name].name] = p.name
                    report.replayed_reads += 1
                swap[variableify(p)] = replayed[p.name]
        out.append(bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym)
        outs = tensor_outs(bsym)
        for w in effect.writes:
            g = info.group_of(w)
            for n in chains:
                if info.group_of(n) == g:
                    stale.add(n)
                    replayed.pop(n, None)
        for o, a in effect.aliases:
            if a.name in chains and o.name not in chains and (effect.is_view or a.name in written):
                # A view of a tracked name extends its chain; a write's output is the tensor it wrote.
                chains[o.name] = chains[a.name] + [(bsym, outs.index(o))] if effect.is_view else chains[a.name]
                if o.name != a.name and a.name in stale:
                    stale.add(o.name)
        if autodiff_copies(bsym) and not (tensor_args(bsym)[0].name in chains):
            for k, o in enumerate(outs):
                chains[o.name] = [(bsym, k)]
    return out, report
