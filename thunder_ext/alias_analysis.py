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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.op_kinds import Effect, PrimIDs, effect_of, tensor_args, view_kind


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
        written = [a for o, a in e.aliases if o.name == name and any(a is w for w in e.writes)]
        if written:
            name = written[0].name  # an in-place op's output is the tensor it wrote
            continue
        args, outs = tensor_args(b), b.flat_proxy_outs
        if not e.is_view or e.writes or view_kind(b) != "view" or len(outs) != 1 or len(args) != 1:
            return None, []
        if not b.args or b.args[0] is not args[0]:
            return None, []
        chain.append(b)
        name = args[0].name
    return (name, chain[::-1]) if chain else (None, [])
