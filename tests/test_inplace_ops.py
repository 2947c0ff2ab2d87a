"""Every in-place op in Thunder's table, through the transform, against eager PyTorch.

Thunder lists its in-place ops and their out-of-place forms in
``thunder.torch._inplace_to_out_of_place``.  For each one PyTorch's OpInfo database has an
in-place variant for, the first float32 CPU sample that eager can run in place is run twice:

* on *private* storage (``y = x * 1``, the op on ``y``): the write is made functional, its
  out-of-place form found by its signature (``polygamma_(a, n)`` is ``polygamma(n, a)``);
* on the *input* itself: the write stays, ordered by the barrier pass.

Each runs under both fusion types, with the default executors, through ``thunder.jit``, and
must match eager exactly (outputs and the input's final state).  Random ops (``exponential_``,
``rrelu_``) are checked for shape and dtype only.  An op plain Thunder cannot run on the sample
is skipped with its error: the transform is not asked to do better than Thunder traces.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database imports expecttest")

import thunder  # noqa: E402
import thunder.torch as ltorch  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from thunder_ext.testing.compare import Config, compile_fn, differential  # noqa: E402

_THUNDER_INPLACE = {s.name for s in ltorch._inplace_to_out_of_place}
_RANDOM = {"exponential_", "rrelu_"}


def _ops():
    seen = set()
    for op in op_db:
        variant = op.inplace_variant
        name = getattr(variant, "__name__", None)
        if name not in _THUNDER_INPLACE or (name, op.variant_test_name) in seen:
            continue
        seen.add((name, op.variant_test_name))
        yield pytest.param(op, id=f"{name}-{op.variant_test_name}" if op.variant_test_name else name)


def _sample(op):
    """(in-place callable, input, other args, kwargs) of the first sample eager runs in place, or None."""
    for s in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        if not isinstance(s.input, torch.Tensor):
            continue
        try:
            op.inplace_variant(s.input.clone(), *s.args, **s.kwargs)
        except Exception:  # a sample whose result cannot be written into its input (broadcast, dtype)
            continue
        return op.inplace_variant, s.input, tuple(s.args), dict(s.kwargs)
    return None


def _programs(inplace, args, kwargs):
    """The op on a private copy of ``x``, and on ``x`` itself; tensors among ``args`` are inputs too."""
    slots = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def rebuild(tensors):
        full = list(args)
        for i, t in zip(slots, tensors):
            full[i] = t
        return full

    def on_private(x, *tensors):
        y = x * 1
        inplace(y, *rebuild(tensors), **kwargs)
        return y

    def on_input(x, *tensors):
        inplace(x, *rebuild(tensors), **kwargs)
        return x * 1

    return {"private": on_private, "input": on_input}, [args[i] for i in slots]


@pytest.mark.parametrize("op", list(_ops()))
def test_inplace_op_matches_eager(op):
    found = _sample(op)
    if found is None:
        pytest.skip("no float32 sample eager runs in place")
    inplace, x, args, kwargs = found
    programs, tensors = _programs(inplace, args, kwargs)
    name = inplace.__name__
    for where, fn in programs.items():

        def build(fn=fn):
            return fn, (x.clone(), *(t.clone() for t in tensors)), {}

        plain = Config(transform=False, fusion_type="consecutive", executors="default", entry="jit", check=False)
        try:
            compile_fn(fn, plain)(x.clone(), *(t.clone() for t in tensors))
        except Exception as e:
            pytest.skip(f"plain Thunder cannot run {name} on {where} storage: {type(e).__name__}: {e}"[:300])
        for fusion_type in ("consecutive", "dataflow"):
            config = Config(transform=True, fusion_type=fusion_type, executors="default", entry="jit", check=True)
            if name in _RANDOM:
                out = compile_fn(fn, config)(x.clone(), *(t.clone() for t in tensors))
                assert out.shape == x.shape and out.dtype == x.dtype, f"{name} on {where} storage"
                continue
            verdict = differential(build, config)
            assert verdict.status == "correct", f"{name} on {where} storage, {fusion_type}: {verdict.status}: {verdict.detail}"


def test_the_table_is_covered():
    """The OpInfo database reaches most of Thunder's in-place table (the test above is not vacuous)."""
    covered = {p.values[0].inplace_variant.__name__ for p in _ops()}
    assert len(covered) >= 60, sorted(_THUNDER_INPLACE - covered)
    assert "polygamma_" in covered and "exponential_" in covered
