"""What one run of the barrier pass knows about its compilation, read once and passed whole.

The pass runs at two stages of a compilation (``transforms/inplace_barrier.py``): before
autodiff, on the computation trace, and at the fusion stage, on the joint trace
(:mod:`thunder_ext.integration`).  Each stage reads its compile data once into a
:class:`StageConfig`; every step of the pass, and every refusal, reads that, never the compile
data nor executor names.  The executor policies are its derived properties; the walk that
places barriers turns them into policy objects once (:func:`thunder_ext.executor_policies.policies_for`):

===================  =====================================================================
property             on when
===================  =====================================================================
``write_barriers``   nvFuser may run the trace: a write needs its destination to be a
                     region input, so one barrier goes before each write into non-input
                     storage (``executor_policies.WriteInputs``)
``inductor``         ``torch_compile_ex`` is among the executors: its regions end where
                     Inductor mishandles writes into inputs, and the epilogue stays out of
                     them (:mod:`thunder_ext.inductor_regions`; at the fusion stage, where
                     it claims the barriers)
``nvfuser``          nvFuser is known to be among the executors: the refusals of writes
                     through views of inputs that require grad (``refusals``)
``remat_guard``      the fusion stage, where fusion executors rematerialize
                     (:mod:`thunder_ext.remat_guard`, ``executor_policies.RematPins``)
``dataflow``         ``fusion_type="dataflow"``: Thunder's partitioner is run on the result
                     (``remat_guard.partition_keeps_every_bsym``)
===================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from thunder.extend import Executor

from thunder_ext.functionalize import InputPolicy
from thunder_ext.remat_guard import has_nvfuser, has_torch_compile


@dataclass(frozen=True)
class StageConfig:
    """One stage's view of its compilation.

    ``executors`` are the ones that must claim what the pass adds: None before autodiff, where
    nothing is claimed yet.  ``compilation_executors`` are the compilation's, for the policies
    (the same list at the fusion stage; known before autodiff too, when compile data exists).
    """

    executors: tuple[Executor, ...] | None = None
    compilation_executors: tuple[Executor, ...] | None = None
    dataflow: bool = False
    # Tensors gradients flow through (before autodiff; see barriers.place_barriers).
    differentiable: frozenset[str] = frozenset()
    aliased_inputs: tuple[frozenset[str], ...] = ()
    functional: bool = True  # writes to private storage become values (thunder_ext.functionalize)
    functional_inputs: InputPolicy = InputPolicy()
    # Inputs whose writes became values before autodiff: their copy_s at the end are the epilogue.
    epilogue_inputs: frozenset[str] = frozenset()
    remat_guard: bool = False
    comment: bool = True  # each barrier gets a header saying why it is there
    nvfuser_may_run: bool | None = None  # overrides what the executors say (None: they decide)
    graph_module: bool = False  # the compiled function is an FX graph (ThunderFX)
    # Inputs written with history adopt it in Thunder's epilogue (thunder_ext.input_histories).
    histories_routed: bool = False
    # Outputs of ops that may be views, taken as views (before autodiff; thunder_ext.stride_choices).
    assumed_views: frozenset[str] = frozenset()

    @property
    def write_barriers(self) -> bool:
        """nvFuser may run the trace (unknown executors: it may)."""
        if self.nvfuser_may_run is not None:
            return self.nvfuser_may_run
        return has_nvfuser(self.compilation_executors) is not False

    @property
    def nvfuser(self) -> bool:
        """nvFuser is known to be among the compilation's executors (unknown: no)."""
        return bool(has_nvfuser(self.compilation_executors))

    @property
    def inductor(self) -> bool:
        """``torch_compile_ex`` is among the compilation's executors."""
        return has_torch_compile(self.compilation_executors)


def _executors(cd) -> tuple[Executor, ...] | None:
    executors = getattr(cd, "executors_list", None) if cd is not None else None
    return tuple(executors) if executors is not None else None


def is_graph_module(cd) -> bool:
    """The compilation's function is an FX graph: ThunderFX compiles Dynamo's subgraphs so."""
    import torch.fx

    return isinstance(getattr(cd, "fn", None), torch.fx.GraphModule)


def before_autodiff(
    cd, *, differentiable: frozenset[str], aliased_inputs: tuple[frozenset[str], ...], comment: bool, histories_routed: bool = False
) -> StageConfig:
    """The computation trace's stage: nothing claimed yet, writes to inputs that do not require
    grad made values (:class:`thunder_ext.functionalize.InputPolicy`)."""
    return StageConfig(
        compilation_executors=_executors(cd),
        differentiable=differentiable,
        aliased_inputs=aliased_inputs,
        functional_inputs=InputPolicy(enabled=True, grad_inputs=histories_routed),
        comment=comment,
        graph_module=is_graph_module(cd),
        histories_routed=histories_routed,
    )


def fusion_stage(cd, *, aliased_inputs: tuple[frozenset[str], ...], epilogue_inputs: frozenset[str], comment: bool) -> StageConfig:
    """The joint trace's stage, after claim-or-decompose: what the pass adds is claimed by the
    compilation's executors, and the remat guard is on."""
    executors = _executors(cd)
    return StageConfig(
        executors=executors,
        compilation_executors=executors,
        dataflow=cd is not None and cd.compile_options.get("fusion_type") == "dataflow",
        aliased_inputs=aliased_inputs,
        epilogue_inputs=epilogue_inputs,
        remat_guard=True,
        comment=comment,
    )


def direct(executors: Sequence[Executor] | None = None, **fields) -> StageConfig:
    """A config for a direct call of :func:`thunder_ext.barriers.place_barriers` (its keywords)."""
    executors = tuple(executors) if executors is not None else None
    return StageConfig(executors=executors, compilation_executors=executors, **fields)
