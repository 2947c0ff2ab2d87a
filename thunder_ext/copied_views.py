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
from thunder_ext.op_kinds import effect_of, tensor_args, tensor_outs, writes_with_grad
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


@dataclass
class _Root:
    """A tensor views are made from, as the barrier pass keeps it in place."""

    latest: TensorProxy  # its newest whole version: the write output Thunder's traces read next
    epoch: int = 0  # how many writes with a gradient it has had as a whole


def replay_views_after_grad_writes(
    new_trace: TraceCtx, bsyms: Sequence[BoundSymbol], inputs: set[str], differentiable: frozenset[str], effects=None
) -> tuple[list[BoundSymbol], CopiedViewsReport]:
    """``bsyms`` with every use of a view, made before a write with a gradient into its base as a
    whole, rewritten to use the view made again after that write, from the base's newest version
    (also a view whose own name carries no gradient: its base had none when it was made).
    ``new_trace`` names the new proxies; the input list is never mutated.

    Eager regenerates such a view's history from its base's when the base is written: its
    gradient goes through the write.  Thunder's autodiff knows nothing of the link: the view
    made before carries the base's old history, so its gradient skips the write (soak seed 63000:
    ``t1 = a + 1; t2 = t1.t(); t1.add_(t1)``, then ``t2.add_(t2)`` under no-grad and ``return t2``:
    ``a`` got ``g.t()``, eager ``2 * g.t()``).  The view made again reads the newest version,
    which carries the write's history, so autodiff differentiates it as eager does.  At run time
    both are the same view of the same storage.

    Before (the write kept in place: the no-grad write through ``t3`` stays a write)::

        t3 = ltorch.t(t1)
        t5 = ltorch.add_(t1, t1, alpha=1)
        t7 = ltorch.add_(t3, t3, alpha=1)       # grad disabled
        return (t7,)

    After::

        t3 = ltorch.t(t1)                       # read by nothing now; dce removes it
        t5 = ltorch.add_(t1, t1, alpha=1)
        t9 = ltorch.t(t5)                       # made again after the write
        t7 = ltorch.add_(t9, t9, alpha=1)
        return (t7,)

    Invariants:

    * only a base written as a whole counts (its name or an in-place op's output on it): a
      write with a gradient through one of its views leaves its history behind in Thunder's
      autodiff, a base read then is class 5, and none of its views is made again here;
    * a write without a gradient changes no history (eager), so it never makes a view stale;
    * views autodiff computes as copies are :func:`replay_views_autodiff_copies`' (it runs first);
    * a view made again is shared by the uses that follow, until the next write into its storage.
    """
    report = CopiedViewsReport()
    info = storage_groups(bsyms, inputs, cache=effects)
    roots: dict[str, _Root] = {}  # a whole version's name -> its root
    views: dict[str, tuple[_Root, list[ViewStep], int]] = {}  # view -> (root, chain, root epoch when made)
    aliases: set[str] = set()  # every name an op made as an alias of its argument, view or not
    opaque: set[str] = set()  # groups written with a gradient other than as a whole: left alone
    replayed: dict[str, TensorProxy] = {}
    out: list[BoundSymbol] = []

    def group(p: TensorProxy | str) -> str:
        # A view made again belongs to the group of the view it stands for (info predates it).
        name = p if isinstance(p, str) else p.name
        return info.group_of(report.stands_for.get(name, name))

    def root(p: TensorProxy) -> _Root | None:
        if p.name in views:
            return None
        if p.name not in roots:
            roots[p.name] = _Root(p)
        return roots[p.name]

    def replay(r: _Root, chain: list[ViewStep], like: BoundSymbol) -> TensorProxy:
        cur = r.latest
        for view, k in chain:
            made, outs = record_again(new_trace, view, {variableify(tensor_args(view)[0]): cur})
            out.extend(at_source_of(made, like))
            cur = outs[k]
        return cur

    for bsym, effect in zip(bsyms, info.effects):
        swap: dict = {}
        for p in tensor_args(bsym):
            entry = views.get(p.name)
            if entry is None or variableify(p) in swap:
                continue
            r, chain, epoch = entry
            # Also a view whose own name carries no gradient: made before its base got one
            # (``v = t[2:]; t.add_(a)``), eager gives it the base's new history all the same.
            if r.epoch == epoch or group(p) in opaque:
                continue
            if p.name not in replayed:
                replayed[p.name] = new = replay(r, chain, bsym)
                views[new.name] = (r, chain, r.epoch)
                report.stands_for[new.name] = p.name
                report.replayed_reads += 1
            swap[variableify(p)] = replayed[p.name]
        if swap:
            bsym = bsym.from_bsym_swap_proxies(swap, skip_output=True)
            effect = effect_of(bsym)
        out.append(bsym)
        # Take in the effect: writes move roots on, views extend chains.
        with_grad = writes_with_grad(bsym)
        for w in effect.writes:
            g = group(w)
            for n in [n for n in replayed if group(n) == g]:
                del replayed[n]
            outs = [o for o, a in effect.aliases if a is w]
            carries = with_grad and any(o.name in differentiable for o in outs)
            if w.name in views or (w.name in aliases and w.name not in roots) or not outs:
                # Through a view (or another alias, or with no output for what it wrote, as
                # batch_norm's running stats): the base's history in Thunder misses the write.
                if carries or (with_grad and not outs):
                    opaque.add(g)
                if w.name in views:
                    views.update((o.name, views[w.name]) for o in outs)  # the same view, written
                continue
            r = root(w)
            for o in outs:
                r.latest = o
                roots[o.name] = r
            r.epoch += carries
        position = {o.name: k for k, o in enumerate(tensor_outs(bsym))}
        for o, a in effect.aliases:
            if any(a is w for w in effect.writes):
                continue
            aliases.add(o.name)
            if not effect.is_view or autodiff_copies(bsym):
                continue
            step = (bsym, position[o.name])
            if a.name in views:
                r, chain, epoch = views[a.name]
                views[o.name] = (r, chain + [step], epoch)
            elif a.name not in aliases or a.name in roots:
                r = root(a)
                views[o.name] = (r, [step], r.epoch)
    return out, report
