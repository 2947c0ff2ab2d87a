"""Property-based differential testing: random in-place programs, compiled vs eager.

The generator and the verdict rule live in :mod:`thunder_ext.testing.fuzzing` (see its docstring).
The CI profile (tests/conftest.py) runs a fixed, derandomized budget
(``THUNDER_EXT_FUZZ_EXAMPLES``, default 40).  The soak:

    THUNDER_EXT_HYPOTHESIS_PROFILE=soak THUNDER_EXT_FUZZ_EXAMPLES=300 pytest tests/test_fuzz.py

or ``python scripts/soak.py``, which keeps going past failures and groups them (the
``slow`` test below runs it too, under the soak profile only).
"""

from __future__ import annotations

import os

import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import event, given, note, reject  # noqa: E402

from thunder_ext.testing.fuzzing import Program, judge, programs  # noqa: E402


@given(program=programs())
def test_compiled_matches_eager(program: Program) -> None:
    j = judge(program)
    for cell in j.cells:
        event(f"{cell.label()}: {cell.status} -> {cell.verdict}")
        note(str(cell))
    if j.out_of_scope:
        reject()
    j.raise_first_failure()


SOAK = os.environ.get("THUNDER_EXT_HYPOTHESIS_PROFILE") == "soak"


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="the soak runs with THUNDER_EXT_HYPOTHESIS_PROFILE=soak only")
def test_soak_collects_every_failure() -> None:
    """The soak runner: keeps going past failures, and reports every distinct one."""
    from thunder_ext.testing.fuzzing import soak

    result = soak(int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", "300")))
    report = [f"{sig}\n{result.smallest(sig)}" for sig in result.failures]
    assert not report, f"{result.failed_programs} of {result.ran} programs failed:\n" + "\n".join(report)


@given(program=programs())
def test_generator_knows_eager_layouts(program: Program) -> None:
    """Transposed inputs are drawn, print and parse back; and the generator's layout bookkeeping
    is eager's: no drawn ``view`` meets a tensor eager cannot view (with a transposed input,
    ``a.sin()`` is transposed too, and ``a.t()`` contiguous)."""
    assert Program.from_source(program.source).source == program.source
    for spec, arg in zip(program.inputs, program.make_args(grad=True)):
        if spec.transposed:
            assert arg.stride() == (1, 4) and not arg.is_contiguous()
            assert arg._base is None  # its own storage, or `leaf * 1`
    event("transposed input" if any(i.transposed for i in program.inputs) else "contiguous inputs")
    try:
        program.function()(*program.make_args(grad=False))
    except RuntimeError as e:
        assert "view size is not compatible" not in str(e), program.source


def test_generator_knows_the_layouts_a_transposed_input_makes() -> None:
    """The transpose of a transposed input is contiguous, and a value computed from it is not
    (eager keeps its input's layout): ``view`` is legal on the first only."""
    from thunder_ext.testing.fuzzing import Input, _Builder

    b = _Builder(None, [Input("a", "x", transposed=True)], leaf_writes=False)  # new() draws nothing
    b.new("a.t()", (3, 4), 0.0, root="a")
    b.new("a.sin()", (4, 3), 1.0)
    contiguous = {v.name: v.contiguous for v in b.vars}
    assert contiguous == {"a": False, "t0": True, "t1": False}
