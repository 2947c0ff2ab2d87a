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
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import TrackedViews, ViewStep, storage_groups
from thunder_ext.op_kinds import tensor_args, tensor_outs, writes_with_grad
from thunder_ext.recording import at_source_of, record_again

# View ops whose result stops being a plain view once autodiff runs (measured on every view op
# of Thunder's tables: tests/test_view_ops.py).  With no VJP of their own they are differentiated
# through their decomposition, which gathers (Thunder 0.2.6: ``diagonal`` is ``reshape`` and
# ``take``); autodiff differentiates every op on floats that a no-grad block did not make.
VIEWS_AUTODIFF_COPIES = frozenset({"diagonal"})

_DETACHED = ProxyTag.DETACHED_AUTOGRAD_GRAPH


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
    views = TrackedViews(info, autodiff_copies)
    replayed: dict[str, TensorProxy] = {}  # a stale name -> its replay, until the next write
    out: list[BoundSymbol] = []

    def replay(chain: list[ViewStep], like: BoundSymbol, detached: bool) -> TensorProxy:
        cur = tensor_args(chain[0][0])[0]
        for view, k in chain:
            made, outs = record_again(new_trace, view, {variableify(tensor_args(view)[0]): cur})
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
        uses = views.uses(bsym, effect)
        through = {u.name for u in uses if u.writes_through}
        for u in uses:
            if u.writes_through:
                if writes_with_grad(bsym):
                    # Its history cannot go through a detached handle: the program is left as
                    # written, for refusals.refuse_views_autodiff_copies to name this write.
                    return list(bsyms), CopiedViewsReport(left_with_grad=1)
                swap[variableify(u.proxy)] = handle = replay(u.chain, bsym, detached=True)
                report.stands_for[handle.name] = u.name
                report.write_handles += 1
            elif u.name not in through:  # a read after a write into its storage
                if u.name not in replayed:
                    replayed[u.name] = replay(u.chain, bsym, detached=False)
                    report.stands_for[replayed[u.name].name] = u.name
                    report.replayed_reads += 1
                swap[variableify(u.proxy)] = replayed[u.name]
        out.append(bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym)
        for n in views.advance(bsym, effect):
            replayed.pop(n, None)
    return out, report
