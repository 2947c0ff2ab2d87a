"""What the barrier walk and its executor policies exchange: a :class:`Plan` and the hooks of :class:`WalkPolicy`.

The walk (:class:`thunder_ext.barriers._Placer`) orders accesses to mutated storage and
nothing else.  An executor's further needs are policies (:mod:`thunder_ext.executor_policies`,
:mod:`thunder_ext.inductor_regions`), chosen once per walk, which the walk calls at fixed points
of each step.  A policy adds barriers only through the walk's ``emit``; it never removes a bsym
(a ``torch_compile_ex`` cut moves views, which read no data, after itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol


@dataclass
class Plan:
    """One barrier to place before a bsym: versions to rename (name -> (version, stale-making write)),
    witnesses to consume, and why."""

    rename: dict[str, tuple[TensorProxy, BoundSymbol | None]] = field(default_factory=dict)
    witnesses: list[TensorProxy] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rename or self.witnesses)


class WalkPolicy:
    """An executor's rules, called by the walk at each step; every hook does nothing by default.

    In the order a step calls them: ``before`` may place barriers before the bsym; ``extend``
    adds to the plan of the bsym's own ordering barrier (only when the bsym accesses mutated
    storage); ``after`` records what the bsym did.  ``version_bumped`` and ``barrier_placed``
    keep a policy's names in step with the walk's versions; ``witness`` is the name a barrier
    consumes a witness under.
    """

    def __init__(self, walk) -> None:
        self.walk = walk

    def before(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        pass

    def extend(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str], plan: Plan) -> None:
        pass

    def after(self, i: int, bsym: BoundSymbol, effect, write_groups: set[str]) -> None:
        pass

    def version_bumped(self, old: TensorProxy, new: TensorProxy) -> None:
        pass

    def barrier_placed(self, renamed: list[tuple[TensorProxy, TensorProxy]], *, cut: bool) -> None:
        """``renamed``: (old version, barrier output) pairs; ``cut``: the barrier is an unfused pin that may start a region."""

    def witness(self, w: TensorProxy) -> TensorProxy:
        return w
