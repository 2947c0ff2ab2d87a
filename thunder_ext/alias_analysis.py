"""Storage groups: which proxies of a trace may share memory.

A *storage group* is a set of proxy names that may alias.  It is built, flow-insensitively,
from every alias edge that :func:`thunder_ext.op_kinds.effect_of` reports: view outputs,
the outputs of writes (``copy_`` returns its destination), and barrier outputs.

Invariants:

* groups only grow: an edge that might alias is an edge (reshape counts, even though it
  sometimes copies), so two proxies in different groups never share memory;
* inputs are distinct storages unless the caller says otherwise (``aliased_inputs``).
  Thunder 0.2.6 merges aliasing inputs before any transform runs
  (``replace_args_with_alias_map``), so there the only aliasing between inputs it knows of
  is already expressed as a reshape or a plain substitution.  Thunder ``main`` keeps
  aliasing inputs whose element counts differ (``f(x, x[0, 0])``) as separate arguments;
  the transform reads which ones alias from Thunder's cache info
  (:mod:`thunder_ext.input_aliases`) and passes them here, and each such set is one group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.op_kinds import Effect, PrimIDs, effect_of, tensor_args, tensor_outs, view_kind


def input_names(trace: TraceCtx) -> set[str]:
    """Names of the tensor proxies the trace receives as arguments."""
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    names = {p.name for p in flat if isinstance(p, TensorProxy)}
    # Thunder's traces unpack their inputs with UNPACK_TRIVIAL; a trace built by hand may
    # carry no args and only the unpacks tell what the inputs are.
    for bsym in trace.bound_symbols:
        if bsym.sym.id == PrimIDs.UNPACK_TRIVIAL:
            names.update(p.name for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy))
    return names


def proxy_named(bsyms: Sequence[BoundSymbol], name: str) -> TensorProxy:
    """The tensor proxy ``bsyms`` read or make under ``name``: searched in the bsyms, not a
    trace's args, which a trace built by hand may carry only as unpacks."""
    for b in bsyms:
        for p in (*b.flat_proxy_args, *b.flat_proxy_outs):
            if p.name == name and isinstance(p, TensorProxy):
                return p
    raise KeyError(name)


class StorageGroups:
    """Union-find over proxy names; ``group(name)`` is a canonical representative."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def group(self, name: str) -> str:
        parent = self._parent
        root = name
        while parent.get(root, root) != root:
            root = parent[root]
        while name != root:  # path compression
            parent[name], name = root, parent.get(name, root)
        return root

    def add(self, name: str) -> None:
        self._parent.setdefault(name, name)

    def __contains__(self, name: str) -> bool:
        return name in self._parent

    def union(self, a: str, b: str) -> None:
        ra, rb = self.group(a), self.group(b)
        if ra != rb:
            self._parent[ra] = rb

    def members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name in list(self._parent):
            out.setdefault(self.group(name), []).append(name)
        for root in list(out):
            if root not in out[root]:
                out[root].append(root)
        return out


@dataclass
class AliasInfo:
    """Alias analysis of a list of bound symbols."""

    effects: list[Effect]
    groups: StorageGroups
    inputs: set[str]

    def group_of(self, proxy: Proxy | str) -> str:
        return self.groups.group(proxy if isinstance(proxy, str) else proxy.name)

    def writes_of(self, index: int) -> tuple[TensorProxy, ...]:
        return self.effects[index].writes

    @property
    def mutated_groups(self) -> set[str]:
        return {self.group_of(w) for e in self.effects for w in e.writes}

    @property
    def input_groups(self) -> set[str]:
        return {self.group_of(n) for n in self.inputs}


def storage_groups(
    bsyms: Sequence[BoundSymbol],
    inputs: Iterable[str] = (),
    aliased_inputs: Iterable[Iterable[str]] = (),
    *,
    cache: dict[int, tuple] | None = None,
) -> AliasInfo:
    """Classify every bsym and union the proxies that may share storage.

    ``aliased_inputs``: sets of input names that share storage at run time.
    ``cache`` (id of a bsym -> (bsym, effect)) lets one pass reuse the effects of bsyms it
    analyses more than once; an entry counts only for the very same object.
    """
    groups = StorageGroups()
    effects = []
    for names in aliased_inputs:
        names = list(names)
        for n in names:
            groups.add(n)
            groups.union(n, names[0])
    for bsym in bsyms:
        hit = cache.get(id(bsym)) if cache is not None else None
        if hit is not None and hit[0] is bsym:
            e = hit[1]
        else:
            e = effect_of(bsym)
            if cache is not None:
                cache[id(bsym)] = (bsym, e)
        effects.append(e)
        for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs):
            if isinstance(p, TensorProxy):
                groups.add(p.name)
        for out, arg in e.aliases:
            groups.union(out.name, arg.name)
    return AliasInfo(effects=effects, groups=groups, inputs=set(inputs))


def accessed_groups(info: AliasInfo, bsym: BoundSymbol, effect: Effect) -> set[str]:
    """Groups whose data ``bsym`` reads or writes.  Pure view creation reads no data."""
    if effect.is_view or effect.is_barrier:
        return set()
    return {info.group_of(p) for p in tensor_args(bsym)}


def tensor_written_as(name: str, effect: Effect) -> TensorProxy | None:
    """The tensor an in-place op wrote, where ``name`` is the op's output for it (an in-place
    op's output is the tensor it wrote); None where ``name`` is no such output."""
    return next((a for o, a in effect.aliases if o.name == name and any(a is w for w in effect.writes)), None)


def view_chain(
    name: str, bsyms: Sequence[BoundSymbol], effects: Sequence[Effect], made_at: dict[str, int], inputs: Iterable[str]
) -> tuple[str | None, list[BoundSymbol]]:
    """The trace input ``name`` is a view of, and the views that make it, input side first:
    single-output bsyms that always alias their one tensor argument (``view_kind`` 'view'),
    passing through in-place ops, whose output is the tensor they wrote (so the first view's
    argument may be such an output, a version of the input).  (None, []) where ``name`` is an
    input, or is made otherwise (a reshape that may copy, a computed value).  ``made_at``: name
    -> index of its producer."""
    inputs = set(inputs)
    chain: list[BoundSymbol] = []
    while name not in inputs:
        k = made_at.get(name)
        if k is None or len(chain) > 64:
            return None, []
        b, e = bsyms[k], effects[k]
        written = tensor_written_as(name, e)
        if written is not None:
            name = written.name
            continue
        args, outs = tensor_args(b), b.flat_proxy_outs
        if not e.is_view or e.writes or view_kind(b) != "view" or len(outs) != 1 or len(args) != 1:
            return None, []
        if not b.args or b.args[0] is not args[0]:
            return None, []
        chain.append(b)
        name = args[0].name
    return (name, chain[::-1]) if chain else (None, [])


# One step of a view chain: the view op, and which of its tensor outputs the chain goes on from.
ViewStep = tuple[BoundSymbol, int]


class ViewUse(NamedTuple):
    """A use of a tracked view across a write into its storage (:class:`TrackedViews`)."""

    proxy: TensorProxy  # the view as used
    chain: list[ViewStep]  # the views that make it from its base, the tracked view first
    write: BoundSymbol  # the first write into its storage since it was made, or ``use`` when it writes through it
    use: BoundSymbol  # the reader, or the write itself
    writes_through: bool

    @property
    def name(self) -> str:
        return self.proxy.name

    @property
    def view(self) -> BoundSymbol:
        """The tracked view op the used name is, or is a view of."""
        return self.chain[0][0]


class TrackedViews:
    """The views ``tracked`` picks, walked through ``info``'s bsyms in order: each with the chain of
    view ops that makes it from its base, and whether a write into its storage has come since.

    Views of a tracked view, and the outputs of writes through one (the tensor they wrote), are
    tracked too, on the same chain.  Call :meth:`uses`, then :meth:`advance`, on every bsym in
    trace order.

    Invariants: a chain holds view ops only (``Effect.is_view``), its first step's first tensor
    argument is the base; a name once stale stays stale (its first write is what a refusal names).
    """

    def __init__(self, info: AliasInfo, tracked: Callable[[BoundSymbol], bool]) -> None:
        self.info = info
        self.tracked = tracked
        self.chains: dict[str, list[ViewStep]] = {}
        self.stale: dict[str, BoundSymbol] = {}  # a tracked name -> the first write into its storage after it

    def uses(self, bsym: BoundSymbol, effect: Effect) -> list[ViewUse]:
        """``bsym``'s reads of stale tracked names, then its writes through tracked names; one each."""
        reads = {p.name: p for p in tensor_args(bsym) if p.name in self.stale}
        through = {w.name: w for w in effect.writes if w.name in self.chains}
        return [ViewUse(p, self.chains[n], self.stale[n], bsym, False) for n, p in reads.items()] + [
            ViewUse(p, self.chains[n], bsym, bsym, True) for n, p in through.items()
        ]

    def advance(self, bsym: BoundSymbol, effect: Effect) -> set[str]:
        """Take in ``bsym``'s effect; returns the tracked names it wrote into."""
        written: set[str] = set()
        for w in effect.writes:
            g = self.info.group_of(w)
            for n in self.chains:
                if self.info.group_of(n) == g:
                    written.add(n)
                    self.stale.setdefault(n, bsym)
        outs = tensor_outs(bsym)
        for o, a in effect.aliases:
            chain = self.chains.get(a.name)
            if chain is None or o.name in self.chains:
                continue
            if any(a is w for w in effect.writes):
                # A write's output is the tensor it wrote, written already: Thunder's traces read it
                # after the write (``t0.add_(t0)``, then ``t0.sum(0)`` reads the add_'s output).
                self.chains[o.name] = chain
                self.stale.setdefault(o.name, bsym)
                written.add(o.name)
            elif effect.is_view:
                self.chains[o.name] = chain + [(bsym, next(k for k, x in enumerate(outs) if x is o))]
        args = tensor_args(bsym)
        if self.tracked(bsym) and args and args[0].name not in self.chains:
            for k, o in enumerate(outs):
                self.chains[o.name] = [(bsym, k)]
        return written
