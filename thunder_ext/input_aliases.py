"""Which trace inputs share storage at run time, as Thunder saw them for this compilation.

Thunder computes, from the actual arguments of the call being compiled, which flat
arguments share a storage (``alias_tensor_indices`` in its cache info) and keys its cache
on it.  What it does with that differs by release:

* 0.2.6 replaces every aliasing argument by the first one (reshaped), before any transform
  runs, so the trace has one proxy for the storage and nothing is left to tell us;
* ``main`` does the same only when the element counts match.  Arguments whose element
  counts differ (``f(x, x[0, 0])``) stay separate proxies, and its own barrier pass puts
  them in one alias group.  Our pass strips Thunder's barriers, so it must learn the same
  fact, or it would treat the two proxies as distinct storages and let dataflow fusion
  reorder a write through one past a read through the other.

The substitution itself is only right when the replaced argument is the same view as the
one kept (same offset, and the same layout or both contiguous, so that Thunder's reshape is
a view), and carries the same ``requires_grad``.  ``f(x[0], x[1])`` with a write through one
of them, or a tensor and its ``detach()`` (which ThunderFX hands to a subgraph when it splits
a graph at ``detach``), are merged into one tensor and give silently wrong numbers, in plain
Thunder too.  No transform can undo the merge, and the cache key (which argument positions
alias) does not tell the good calls from the bad ones, so :func:`guard_substituted_aliases`
adds a check to the *prologue*, which sees the real tensors on every call, and raises
:class:`thunder_ext.errors.InputAliasError` for a bad one.

Invariants: the indices refer to the flattened ``(args, kwargs)`` of the computation trace
as built from the call, which is what :func:`aliased_inputs` flattens; names of trace inputs
stay the same through autodiff and the fusion stage, so the sets found before autodiff serve
the fusion-stage pass too (:mod:`thunder_ext.integration` keeps them per compilation); and
the prologue names the tensors it hands to the computation as the computation names its
arguments.
"""

from __future__ import annotations

import torch
from thunder.core import compile_data as _compile_data_module
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import Symbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.errors import InputAliasError
from thunder_ext.op_kinds import describe, effect_of, is_return


def _alias_indices() -> list[list[int]]:
    """Thunder's ``alias_tensor_indices`` for the call being compiled ("0,2-1,3" -> [[0, 2], [1, 3]])."""
    import thunder

    try:
        info = thunder._get_cache_info()
    except LookupError:  # not inside a thunder.jit compilation
        return []
    text = info.get("alias_tensor_indices", "") if isinstance(info, dict) else ""
    return [[int(i) for i in group.split(",")] for group in text.split("-") if group]


def aliased_inputs(trace: TraceCtx) -> tuple[frozenset[str], ...]:
    """Sets (two or more) of the names of ``trace``'s tensor inputs that share storage in this call."""
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    out = []
    for indices in _alias_indices():
        names = {flat[i].name for i in indices if i < len(flat) and isinstance(flat[i], TensorProxy)}
        if len(names) > 1:
            out.append(frozenset(names))
    return tuple(out)


def _traced_uses() -> set[str] | None:
    """Names the trace as first recorded (before Thunder's alias substitution) reads, or None if unknown."""
    # Thunder keeps the list of computation traces of this compilation on its compile stats,
    # the first one as traced.
    _, stats = _compile_data_module._compile_data.get()
    traces = getattr(stats, "last_traces", None)
    if not traces:
        return None
    return {p.name for b in traces[0].bound_symbols if not is_return(b) for p in b.flat_proxy_args}


def substituted_aliases(trace: TraceCtx) -> list[tuple[str, str]]:
    """(kept, replaced) input names where Thunder replaced a read argument by an aliasing one."""
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    now = {p.name for b in trace.bound_symbols for p in b.flat_proxy_args}
    before = _traced_uses()
    pairs = []
    for indices in _alias_indices():
        kept = flat[indices[0]] if indices[0] < len(flat) else None
        if not isinstance(kept, TensorProxy):
            continue
        for i in indices[1:]:
            p = flat[i] if i < len(flat) else None
            read = before is None or (p is not None and p.name in before)
            if isinstance(p, TensorProxy) and p.name != kept.name and p.name not in now and read:
                pairs.append((kept.name, p.name))
    return pairs


def check_alias_substitution(kept: torch.Tensor, replaced: torch.Tensor, names: str, where: str) -> None:
    """Run by the prologue: raise if compiling ``replaced`` as (a reshape of) ``kept`` changes the program."""
    same_layout = kept.shape == replaced.shape and kept.stride() == replaced.stride()
    both_contiguous = kept.is_contiguous() and replaced.is_contiguous()
    same_view = kept.storage_offset() == replaced.storage_offset() and (same_layout or both_contiguous)
    if same_view and kept.requires_grad == replaced.requires_grad:
        return
    why = (
        "different views of one storage"
        if not same_view
        else "the same view, but only one of them requires grad (a tensor and its detach())"
    )
    raise InputAliasError(
        f"the inputs {names} are {why}. Thunder compiles them as one tensor because the function "
        f"writes in place ({where}), which would silently give wrong results. Pass separate tensors "
        "(clone one of them)"
    )


# A check with no output: DONT_DCE keeps Thunder's dead-code elimination from dropping it.
_CHECK = Symbol(
    name="thunder_ext_check_alias_substitution",
    id="thunder_ext.check_alias_substitution",
    tags=[prims.OpTags.DONT_DCE],
    python_impl=check_alias_substitution,
)


def guard_substituted_aliases(prologue: TraceCtx, computation: TraceCtx) -> TraceCtx:
    """``prologue`` with a check, before its return, of every alias substitution in ``computation``."""
    pairs = substituted_aliases(computation)
    if not pairs:
        return prologue
    proxies = {p.name: p for b in prologue.bound_symbols for p in b.flat_proxy_outs if isinstance(p, TensorProxy)}
    write = next((b for b in computation.bound_symbols if effect_of(b).writes), None)
    where = describe(write) if write is not None else "an in-place op"
    checks = [
        _CHECK.bind(
            proxies[kept],
            proxies[replaced],
            f"`{kept}` and `{replaced}`",
            where,
            output=None,
            _call_ctx={_CHECK.name: check_alias_substitution},
        )
        for kept, replaced in pairs
        if kept in proxies and replaced in proxies
    ]
    if not checks:
        return prologue
    guarded = from_trace(prologue)
    body = list(prologue.bound_symbols)
    ret = next(k for k in range(len(body) - 1, -1, -1) if is_return(body[k]))
    guarded.bound_symbols = body[:ret] + checks + body[ret:]
    guarded.set_provenance(TraceProvenance(f"thunder_ext input-alias guard ({len(checks)} substitution(s) checked)"))
    return guarded
