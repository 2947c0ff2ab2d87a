"""The checker: every ordering hazard in a trace, stated independently of the barrier logic.

``verify(trace)`` walks the bound symbols in trace order and checks the invariants of
``docs/design.md`` (*Invariants*):

* **ordering**: every two accesses to one storage group, at least one a write, are ordered
  by data edges.  The pair is named in the *user's* program order, which dataflow fusion
  may have reversed: when the later access in the trace touches an older version of the
  storage than the earlier one (a proxy the other's version was derived from, as Thunder's
  ``update_aliases`` renamings derive each version from the last), it came first in the
  program.  So ``a = x * z; x.add_(1)`` is a write after a read (WAR) whichever of the two
  fusion emitted first; with no such evidence, trace order is program order.  Reported as
  RAW, WAR or WAW, ``first`` being the earlier access in the program;
* **dead writes**: no write whose storage no input reaches and that nothing later reads;
* **return last**: the return is the last bound symbol;
* **latest inputs**: when the return hands back the arguments (``flat_args``, as it does
  until Thunder unwraps it in the final trace), it depends on the last write to every
  mutated input.

A read that rematerialization recomputes in a later region (under the name an earlier bsym
made), or a read in a region whose outputs the write does not take, is not ordered by data
edges before a write that follows it; in a trace with fusion regions, which runs in trace
order, it is no hazard when it precedes the write outside the write's own region and reads the
version the write replaces (or an older one), the write naming the version it makes.

It works on traces at any stage: fusion regions (``sym.is_fusion``) are replaced by their
subsymbols, which keep their data edges (less the ones whose result nothing uses, which the
fusion compiler drops), and ``del`` bsyms are ignored.  A region runs as a
unit, so a bsym that reads one of its outputs depends on every bsym in it; inside a region,
data edges between its own subsymbols are what counts (a value that rematerialization
recomputes there, under the same name, is read from the region's own copy).  It reuses the alias
analysis (:mod:`thunder_ext.alias_analysis`) and the liveness of
:mod:`thunder_ext.dead_writes`, never the barrier placement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from thunder.core.proxies import TensorProxy
from thunder.core import prims
from thunder.core.symbol import BoundSymbol, has_tags
from thunder.core.trace import TraceCtx

from thunder_ext.alias_analysis import accessed_groups, input_names, storage_groups
from thunder_ext.dead_writes import dead_inplace_ops
from thunder_ext.errors import InplaceOrderingError
from thunder_ext.op_kinds import PrimIDs, describe, is_fusion, is_return
from thunder_ext.validation import require_trace


@dataclass(frozen=True)
class Violation:
    """One broken invariant.  ``first`` precedes ``second`` in the user's program order."""

    kind: str  # 'RAW', 'WAR', 'WAW', 'dead-write', 'return-not-last', 'stale-input'
    first: BoundSymbol
    second: BoundSymbol | None
    group: str

    def __str__(self) -> str:
        what = {
            "RAW": "read after write is not ordered by data edges",
            "WAR": "write after read is not ordered by data edges",
            "WAW": "write after write is not ordered by data edges",
            "dead-write": "dead in-place write (no input reaches its storage, nothing reads it)",
            "return-not-last": "the return is not the last bound symbol",
            "stale-input": "the return does not depend on the last write to a mutated input",
        }[self.kind]
        pair = describe(self.first) + (f" -> {describe(self.second)}" if self.second is not None else "")
        return f"[{self.kind}] {what}: {pair} (storage group of `{self.group}`)"


class TraceInvariantError(InplaceOrderingError):
    """Raised by :func:`assert_valid` with the full report."""


def flatten_for_check(bsyms) -> list[BoundSymbol]:
    """Top-level bsyms with fusion regions opened up and ``del`` dropped."""
    return [b for b, _ in flatten_with_regions(bsyms)]


def flatten_with_regions(bsyms, region: BoundSymbol | None = None) -> list[tuple[BoundSymbol, BoundSymbol | None]]:
    """Like :func:`flatten_for_check`, each bsym paired with the top-level fusion region holding it (or None)."""
    out: list[tuple[BoundSymbol, BoundSymbol | None]] = []
    for b in bsyms:
        if b.sym.id == PrimIDs.DEL:
            continue
        if is_fusion(b):
            out.extend(flatten_with_regions(_live_subsymbols(b), region or b))
        else:
            out.append((b, region))
    return out


def _live_subsymbols(region: BoundSymbol) -> list[BoundSymbol]:
    """The subsymbols of a fusion region whose result is used: an output of the region, or
    read by a later live subsymbol, or a side effect (``DONT_DCE``, which ``copy_`` carries).

    Rematerialization leaves a producer region's copy of a value it moved to a consumer; the
    fusion compiler drops it, so its read of the storage never happens and is no hazard.
    """
    needed = {p.name for p in region.flat_proxy_outs}
    live: list[BoundSymbol] = []
    for s in reversed(region.subsymbols):
        if has_tags(s, {prims.OpTags.DONT_DCE}) or any(p.name in needed for p in s.flat_proxy_outs):
            live.append(s)
            needed.update(p.name for p in s.flat_proxy_args)
    return live[::-1]


def _ancestry_of(proxies, producer: dict[str, int], anc: list[int], region_of_output: dict[str, int], region_anc: dict[int, int]) -> int:
    a = 0
    for p in proxies:
        j = producer.get(p.name)
        if j is not None:
            a |= anc[j]
        elif p.name in region_of_output:
            a |= region_anc[region_of_output[p.name]]
    return a


def _returns_flat_args(ret: BoundSymbol) -> bool:
    arg = ret.args[0] if ret.args else None
    if isinstance(arg, tuple) and arg and isinstance(arg[0], dict):
        arg = arg[0]
    return isinstance(arg, dict) and "flat_args" in arg


# A pair found in trace order (j before i), named in program order when the versions say so.
_REVERSED = {"RAW": "WAR", "WAR": "RAW", "WAW": "WAW"}


class _Versions:
    """Which version of a storage group each access touches, and whether one version derives from another."""

    def __init__(self, bsyms: list[BoundSymbol], info) -> None:
        self.bsyms = bsyms
        self.info = info
        self.producer: dict[str, int] = {}  # name -> index of the bsym that first made it
        for k, b in enumerate(bsyms):
            for p in b.flat_proxy_outs:
                self.producer.setdefault(p.name, k)

    def touched(self, i: int, group: str) -> set[str]:
        """The proxies of ``group`` that bsym ``i`` writes, or, if it writes none there, reads."""
        b, effect = self.bsyms[i], self.info.effects[i]
        written = {w.name for w in effect.writes if self.info.group_of(w) == group}
        if written:
            return written
        return {p.name for p in b.flat_proxy_args if isinstance(p, TensorProxy) and self.info.group_of(p) == group}

    def _ancestors(self, names: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(names)
        while todo:
            k = self.producer.get(todo.pop())
            if k is None:
                continue
            for p in self.bsyms[k].flat_proxy_args:
                if p.name not in seen:
                    seen.add(p.name)
                    todo.append(p.name)
        return seen

    def reads_what_the_write_replaces(self, j: int, i: int, group: str) -> bool:
        """Read ``j`` touches the version write ``i`` overwrites, or an older one, and ``i`` names
        the version it makes: every read that follows ``i`` in the program reads that new name."""
        effect = self.info.effects[i]
        written = {w.name for w in effect.writes if self.info.group_of(w) == group}
        renamed = {a.name for _, a in effect.aliases}
        if not written or not written <= renamed:
            return False
        read = self.touched(j, group)
        older = written | self._ancestors(written)
        return bool(read) and all(self._view_of(r, older) for r in read)

    def _view_of(self, name: str, versions: set[str]) -> bool:
        """``name`` is one of ``versions``, or a view made from one by views alone (``a[0]`` of
        ``a``): the same version of the storage, under another name."""
        for _ in range(10_000):
            if name in versions:
                return True
            k = self.producer.get(name)
            if k is None:
                return False
            effect = self.info.effects[k]
            source = next((a.name for o, a in effect.aliases if o.name == name), None)
            if not effect.is_view or effect.writes or source is None:
                return False
            name = source
        return False

    def in_program_order(self, kind: str, j: int, i: int, group: str) -> Violation:
        """The pair (j earlier in the trace, i later), reversed when i touched an older version than j."""
        earlier, later = self.touched(j, group), self.touched(i, group)
        if later and not (later & earlier) and later & self._ancestors(earlier):
            return Violation(_REVERSED[kind], self.bsyms[i], self.bsyms[j], group)
        return Violation(kind, self.bsyms[j], self.bsyms[i], group)


def verify(trace: TraceCtx, *, aliased_inputs: Iterable[Iterable[str]] = ()) -> list[Violation]:
    """Every violation of the in-place ordering invariants in ``trace``.

    ``aliased_inputs``: sets of input names that share storage at run time (see
    :func:`thunder_ext.input_aliases.aliased_inputs`).
    """
    require_trace(trace, "verify")
    flat = flatten_with_regions(trace.bound_symbols)
    bsyms = [b for b, _ in flat]
    inputs = input_names(trace)
    info = storage_groups(bsyms, inputs, aliased_inputs)
    violations: list[Violation] = []

    top = trace.bound_symbols
    ret_pos = next((k for k in range(len(top) - 1, -1, -1) if is_return(top[k])), None)
    if ret_pos is not None and ret_pos != len(top) - 1:
        after = next((b for b in top[ret_pos + 1 :] if b.sym.id != PrimIDs.DEL), top[ret_pos + 1])
        violations.append(Violation("return-not-last", top[ret_pos], after, "-"))

    mutated = info.mutated_groups
    versions = _Versions(bsyms, info)
    # A fusion region runs as a unit: whatever reads one of its outputs runs after every bsym
    # in it, so a region output carries the ancestry of the whole region.  Inside a region, its
    # own bsyms' outputs are read (rematerialization may recompute a value under the same name).
    producer: dict[str, int] = {}  # top-level name -> producing bsym index
    region_of_output: dict[str, int] = {}  # name a region outputs -> id(region)
    region_anc: dict[int, int] = {}  # id(region) -> ancestry of all its bsyms so far
    local: dict[int, dict[str, int]] = {}  # id(region) -> name -> producing bsym index
    region_outs: dict[int, set[str]] = {}  # id(region) -> names it outputs
    anc: list[int] = []
    bits: dict[int, int] = {}  # bsym index -> access bit
    last_write: dict[str, int] = {}  # group -> bsym index
    epoch: dict[str, list[int]] = {}  # group -> accesses since last write (incl. it)
    region_in_anc: dict[int, int] = {}  # id(region) -> ancestry of everything it takes as input
    made_in: dict[str, BoundSymbol | None] = {}  # name -> the region (None: top level) that first made it
    recomputed: set[int] = set()  # bsyms a region recomputes (rematerialization) under names made before
    fused = any(r is not None for _, r in flat)  # fusion has run: the trace runs in trace order
    for i, (b, region) in enumerate(flat):
        outs = [p.name for p in b.flat_proxy_outs]
        if region is not None and outs and all(n in made_in and made_in[n] is not region for n in outs):
            recomputed.add(i)
        for n in outs:
            made_in.setdefault(n, region)
        scope = local.setdefault(id(region), {}) if region is not None else {}
        a = 0
        if region is not None:
            # A region is one call: it starts after all of its inputs exist, so every bsym in
            # it (a rematerialized read too) runs after whatever produced any of them.
            if id(region) not in region_in_anc:
                region_in_anc[id(region)] = _ancestry_of(region.flat_proxy_args, producer, anc, region_of_output, region_anc)
            a |= region_in_anc[id(region)]
        for p in b.flat_proxy_args:
            j = scope.get(p.name, producer.get(p.name))
            if j is not None:
                a |= anc[j]
            elif p.name in region_of_output:
                a |= region_anc[region_of_output[p.name]]
        effect = info.effects[i]
        groups = accessed_groups(info, b, effect) & mutated
        write_groups = {info.group_of(w) for w in effect.writes}
        groups |= write_groups
        for g in sorted(groups):
            if g in write_groups:
                for j in epoch.get(g, ()):
                    if not (a >> bits[j]) & 1:
                        kind = "WAW" if j == last_write.get(g) else "WAR"
                        runs_first = j in recomputed or (fused and flat[j][1] is not region)
                        if kind == "WAR" and runs_first and versions.reads_what_the_write_replaces(j, i, g):
                            # A read before the write in a trace that fusion has made final, and not
                            # in the write's own region (which its compiler may reorder): it runs
                            # first.  Rematerialization moves reads into later regions like this, and
                            # a region whose outputs the write does not take reads before it too.
                            continue
                        violations.append(versions.in_program_order(kind, j, i, g))
            else:
                j = last_write.get(g)
                if j is not None and not (a >> bits[j]) & 1:
                    violations.append(versions.in_program_order("RAW", j, i, g))
        if groups:
            bits[i] = len(bits)
            a |= 1 << bits[i]
            for g in groups:
                if g in write_groups:
                    last_write[g] = i
                    epoch[g] = [i]
                else:
                    epoch.setdefault(g, []).append(i)
        anc.append(a)
        if region is None:
            for p in b.flat_proxy_outs:
                producer.setdefault(p.name, i)
        else:
            region_anc[id(region)] = region_anc.get(id(region), 0) | a
            if id(region) not in region_outs:
                region_outs[id(region)] = {p.name for p in region.flat_proxy_outs}
            for p in b.flat_proxy_outs:
                scope[p.name] = i
                if p.name in region_outs[id(region)]:
                    region_of_output.setdefault(p.name, id(region))

    rets = [i for i, b in enumerate(bsyms) if is_return(b)]
    if rets and _returns_flat_args(bsyms[rets[-1]]):
        r = rets[-1]
        for g in info.input_groups & mutated:
            j = last_write.get(g)
            if j is not None and j < r and not (anc[r] >> bits[j]) & 1:
                violations.append(Violation("stale-input", bsyms[j], bsyms[r], g))

    for k in dead_inplace_ops(bsyms, inputs):
        w = next((p for p in info.effects[k].writes if isinstance(p, TensorProxy)), None)
        violations.append(Violation("dead-write", bsyms[k], None, info.group_of(w) if w is not None else "-"))
    return violations


def format_report(violations: list[Violation]) -> str:
    if not violations:
        return "no in-place ordering violations"
    return "\n".join(f"  {v}" for v in violations)


def assert_valid(trace: TraceCtx, *, stage: str = "trace", aliased_inputs: Iterable[Iterable[str]] = ()) -> None:
    """Raise :class:`TraceInvariantError` listing every violation in ``trace``, if any."""
    require_trace(trace, "assert_valid")
    violations = verify(trace, aliased_inputs=aliased_inputs)
    if violations:
        raise TraceInvariantError(
            f"thunder_ext check failed on the {stage}: {len(violations)} violation(s)\n" + format_report(violations)
        )


# -- barrier removal on the final traces changes nothing but names ----------------------------


def _top_barrier(b: BoundSymbol) -> bool:
    from thunder_ext.op_kinds import is_barrier

    return not is_fusion(b) and is_barrier(b)


def _shape(b: BoundSymbol, rename: dict[str, str]) -> tuple:
    """A bsym as a comparable value: its symbol, its flattened inputs and outputs (proxies by
    name after ``rename``, the rest by repr), and its subsymbols the same way."""
    from thunder.core.proxies import Proxy
    from thunder.core.pytree import tree_flatten

    def flat(x) -> tuple:
        leaves, spec = tree_flatten(x)
        return tuple(rename.get(v.name, v.name) if isinstance(v, Proxy) else repr(v) for v in leaves), str(spec)

    return (
        b.sym.name,
        str(b.sym.id),
        flat((b.args, b.kwargs)),
        flat(b.output),
        tuple(_shape(s, rename) for s in b.subsymbols),
    )


def _del_problems(trace: TraceCtx) -> list[str]:
    """Names read after their ``del``, deleted twice, or deleted before they exist."""
    problems: list[str] = []
    deleted: dict[str, int] = {}
    for i, b in enumerate(trace.bound_symbols):
        if b.sym.id == PrimIDs.DEL:
            for p in b.flat_proxy_args:
                if p.name in deleted:
                    problems.append(f"`{p.name}` deleted twice (bsyms {deleted[p.name]} and {i})")
                deleted[p.name] = i
            continue
        for p in b.flat_proxy_args:
            if p.name in deleted:
                problems.append(f"`{p.name}` read by bsym {i} ({b.sym.name}) after its del at {deleted[p.name]}")
    return problems


def verify_barrier_removal(before: TraceCtx, after: TraceCtx) -> list[str]:
    """What :func:`thunder_ext.final_barriers.remove_final_barriers` changed besides names.

    ``after`` must be ``before`` less its top-level ``update_aliases``, every output of one
    renamed to its argument (through chains), with the ``del``s and collection clears left
    out of the comparison; and in ``after`` no name is used after its ``del``.  Returns one line
    per difference (empty: the removal changed nothing but names).
    """
    require_trace(before, "verify_barrier_removal")
    require_trace(after, "verify_barrier_removal")
    rename: dict[str, str] = {}
    expected = []
    for b in before.bound_symbols:
        if _top_barrier(b):
            outs, args = b.flat_proxy_outs, b.flat_proxy_args
            if len(outs) != len(args):
                expected.append(b)  # the removal leaves these
                continue
            for o, a in zip(outs, args):
                rename[o.name] = rename.get(a.name, a.name)
            continue
        if b.sym.id == PrimIDs.DEL or b.sym.name == "clear_mutable_collection":
            continue
        expected.append(b)
    got = [b for b in after.bound_symbols if b.sym.id != PrimIDs.DEL and b.sym.name != "clear_mutable_collection"]
    problems: list[str] = []
    if len(got) != len(expected):
        problems.append(f"{len(got)} bound symbols (dels aside) where {len(expected)} were expected")
    for k, (e, g) in enumerate(zip(expected, got)):
        if _shape(e, rename) != _shape(g, {}):
            problems.append(f"bsym {k}: expected {describe(e)} (renamed), got {describe(g)}")
            break  # the rest is shifted
    problems.extend(_del_problems(after))
    return problems


def assert_barrier_removal(before: TraceCtx, after: TraceCtx, *, stage: str = "final trace") -> None:
    """Raise :class:`TraceInvariantError` when the barrier removal changed more than names."""
    problems = verify_barrier_removal(before, after)
    if problems:
        raise TraceInvariantError(
            f"thunder_ext check failed on the barrier removal of the {stage}: {len(problems)} problem(s)\n"
            + "\n".join(f"  {p}" for p in problems)
        )
