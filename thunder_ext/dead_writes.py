"""Dead in-place ops: writes that no input reaches and nothing later reads.

Thunder's ``dce`` keeps every bsym that contains a ``copy_`` (``prims.copy_`` carries
``DONT_DCE`` and ``has_tags`` looks into subsymbols), and an extension cannot retag
symbols.  So this module finds the dead writes itself and removes them; Thunder's ``dce``
then removes whatever only they needed.

Liveness is read off data edges, which is sound only on a trace whose barriers already
order every access (the output of :class:`thunder_ext.barriers._Placer`): there, a later
read of written storage consumes the write's output, directly or through a barrier.

* Roots: the return; every write to storage an input reaches (never removed); every bsym
  tagged ``DONT_DCE`` that is not a write (side effects we do not understand).
* A write is dead when it is not a root and none of its outputs is needed by a live bsym.

Worked example (the barrier pass on ``t = a.exp(); t.mul_(2); return a.sin()``, whose write
to private ``t`` no output reads)::

    before                              after
    t0 = ltorch.exp(a)                  t3 = ltorch.sin(a)
    t2 = ltorch.mul_(t0, 2)             return (t3,)
    t3 = ltorch.sin(a)
    return (t3,)

``mul_`` is removed here, and Thunder's ``dce`` then removes ``exp``, which only it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from thunder.core import prims
from thunder.core.symbol import BoundSymbol, has_tags
from thunder.core.trace import TraceCtx, from_trace
from thunder.core.transform_common import dce

from thunder_ext.alias_analysis import storage_groups
from thunder_ext.op_kinds import is_return


def dead_inplace_ops(bsyms: Sequence[BoundSymbol], inputs: Iterable[str], cache: dict | None = None) -> list[int]:
    """Indices of the in-place bsyms in ``bsyms`` (a barriered list) that are dead (``cache``: see storage_groups)."""
    info = storage_groups(bsyms, inputs, cache=cache)
    input_groups = info.input_groups
    needed: set[str] = set()
    dead: list[int] = []
    for i in range(len(bsyms) - 1, -1, -1):
        bsym, effect = bsyms[i], info.effects[i]
        writes_input = any(info.group_of(w) in input_groups for w in effect.writes)
        live = (
            is_return(bsym)
            or writes_input
            or (not effect.writes and has_tags(bsym, {prims.OpTags.DONT_DCE}))
            or any(p.name in needed for p in bsym.flat_proxy_outs)
        )
        if live:
            needed.update(p.name for p in bsym.flat_proxy_args)
        elif effect.writes:
            dead.append(i)
    return sorted(dead)


def _fresh(bsym: BoundSymbol) -> BoundSymbol:
    """A copy whose subsymbol tree is new objects: ``dce`` edits subsymbols in place."""
    if not bsym.subsymbols:
        return bsym.from_bsym()
    return bsym.from_bsym(subsymbols=[_fresh(s) for s in bsym.subsymbols])


def has_dead_values(bsyms: Sequence[BoundSymbol]) -> bool:
    """Whether a bsym that ``dce`` would remove is left (nothing reads it, it has no side effect).

    Stripping barriers leaves such bsyms (a batch_norm output only a barrier read).  They must
    go before fusion: Thunder's rematerialization recomputes every input of a consumer region
    that the min cut does not supply, and a dead one is never in the cut, so its recomputation
    can reach back through a write (``copy_``) and run it twice.
    """
    read = {p.name for b in bsyms for p in b.flat_proxy_args}
    return any(
        not is_return(b) and not has_tags(b, {prims.OpTags.DONT_DCE}) and not any(p.name in read for p in b.flat_proxy_outs)
        for b in bsyms
    )


def remove_bsyms(trace: TraceCtx, bsyms: Sequence[BoundSymbol], drop: set[int]) -> list[BoundSymbol]:
    """``bsyms`` without the positions in ``drop``, then Thunder's ``dce`` on the rest."""
    tmp = from_trace(trace)
    tmp.bound_symbols = [_fresh(b) for i, b in enumerate(bsyms) if i not in drop]
    return list(dce(tmp).bound_symbols)
