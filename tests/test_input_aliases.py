"""Class 7: inputs that alias each other (``f(x, x[0, 0])``), on both Thunders.

What plain Thunder does with them depends on the release, and the transform must never make
it worse:

* Thunder ``main`` keeps aliasing arguments whose element counts differ as separate proxies
  in one alias group and gets those programs right.  With the transform they must stay right
  in every cell of the matrix: the transform reads the aliasing from Thunder's cache info
  (``thunder_ext/input_aliases.py``), since it strips Thunder's barriers.
* Thunder 0.2.6 substitutes one argument for the other before any transform runs; with
  different element counts the substitution's reshape fails, with or without the transform.
  That is the documented limit (docs/limits.md, class 7), checked here so that page stays true.
* Both substitute arguments with equal element counts.  Where they are different views
  (``f(x[0], x[1])``), plain Thunder is silently wrong; the transform's prologue guard
  refuses the call with ``InputAliasError``, and lets the right calls through.
"""

from __future__ import annotations

import pytest
import thunder
import torch

from support import MATRIX, PLAIN_HAZARD, THUNDER_MAIN, config_id
from thunder_ext import InplaceBarrierTransform, InputAliasError, SavedTensorMutationError, ViewGradientError
from thunder_ext.testing.compare import Config, differential, error_in_chain
from thunder_ext.testing.gallery import INPUT_ALIAS_PROGRAMS, Program

PLAIN_CONSECUTIVE = Config(transform=False, fusion_type="consecutive", executors="default", entry="jit", check=False)
REFUSAL_ERRORS = {"5": ViewGradientError, "6": SavedTensorMutationError, "7": InputAliasError}
SUBSTITUTED = [p for p in INPUT_ALIAS_PROGRAMS if p.name in ("alias_same_tensor", "alias_disjoint_rows")]
DIFFERENT_NUMEL = [p for p in INPUT_ALIAS_PROGRAMS if p not in SUBSTITUTED]

main_only = pytest.mark.skipif(
    not THUNDER_MAIN, reason="Thunder 0.2.6 substitutes aliasing inputs and fails to reshape (docs/limits.md, class 7)"
)


def _ids(p: Program) -> str:
    return p.name


def _assert_cell(prog: Program, config: Config) -> None:
    verdict = differential(prog.build, config)
    detail = f"{verdict.status}: {verdict.detail}"
    if prog.refused:
        expected = REFUSAL_ERRORS[prog.hazard.split()[0]]
        assert verdict.status == "refused", detail
        assert error_in_chain(verdict.outcome.error, expected) is not None, detail
        return
    assert verdict.status == "correct", detail


@main_only
@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("prog", DIFFERENT_NUMEL, ids=_ids)
def test_input_alias_cell(prog: Program, config: Config):
    """On Thunder main, with the transform, an input-aliasing program matches eager (or is refused as documented)."""
    _assert_cell(prog, config)


@main_only
@pytest.mark.parametrize("config", [PLAIN_HAZARD, PLAIN_CONSECUTIVE], ids=config_id)
@pytest.mark.parametrize("prog", DIFFERENT_NUMEL, ids=_ids)
def test_plain_main_on_input_aliases(prog: Program, config: Config):
    """The claim behind the cells above, measured: plain Thunder main gets exactly the non-refused ones right."""
    verdict = differential(prog.build, config)
    if prog.refused:
        assert verdict.status in ("wrong", "crash"), f"{verdict.status}: {verdict.detail}"
    else:
        assert verdict.status == "correct", f"{verdict.status}: {verdict.detail}"


@pytest.mark.skipif(THUNDER_MAIN, reason="Thunder main keeps aliasing inputs with different element counts apart")
@pytest.mark.parametrize("transform", [False, True], ids=["plain", "transform"])
@pytest.mark.parametrize("prog", DIFFERENT_NUMEL, ids=_ids)
def test_026_reshape_crash_on_input_aliases(prog: Program, transform: bool):
    """Thunder 0.2.6 fails on aliasing inputs with different element counts, with or without the transform."""
    config = Config(transform=transform, fusion_type="dataflow", check=transform)
    verdict = differential(prog.build, config)
    assert verdict.status == "crash", f"{verdict.status}: {verdict.detail}"
    assert "Attempting to reshape" in verdict.detail


@pytest.mark.parametrize("config", MATRIX, ids=config_id)
@pytest.mark.parametrize("prog", SUBSTITUTED, ids=_ids)
def test_substituted_input_alias_cell(prog: Program, config: Config):
    """Both Thunders, with the transform: ``f(x, x)`` is right, ``f(x[0], x[1])`` is refused, never wrong."""
    _assert_cell(prog, config)


@pytest.mark.parametrize("config", [PLAIN_HAZARD, PLAIN_CONSECUTIVE], ids=config_id)
def test_plain_thunder_merges_disjoint_views(config: Config):
    """What the guard prevents: plain Thunder returns wrong numbers for ``f(x[0], x[1])`` (both Thunders)."""
    (prog,) = [p for p in INPUT_ALIAS_PROGRAMS if p.name == "alias_disjoint_rows"]
    assert differential(prog.build, config).status == "wrong"


def _write_first(a, b):
    a.add_(1)
    return b * 2


def test_guard_checks_every_call():
    """The cache key only says which positions alias: a good call compiles, a bad one with the same key is refused."""
    jf = thunder.jit(_write_first, fusion_type="dataflow", transforms=[InplaceBarrierTransform(check=True)])
    y = torch.zeros(4)
    torch.testing.assert_close(jf(y, y), torch.full((4,), 2.0))
    x = torch.zeros(2, 4)
    with pytest.raises(InputAliasError, match=r"`a` and `b` are different views of one storage"):
        jf(x[0], x[1])
    torch.testing.assert_close(x, torch.zeros(2, 4))  # refused before anything ran


def _no_write(a, b):
    return a + b


def _unused_alias(a, b):
    a.add_(1)
    return a * 2


@pytest.mark.parametrize("fn", [_no_write, _unused_alias], ids=lambda f: f.__name__)
def test_guard_lets_harmless_aliasing_through(fn):
    """Disjoint views are fine when nothing is written (no substitution) or the replaced one is never read."""
    x = torch.randn(2, 4)
    expected_x = x.clone()
    expected = fn(expected_x[0], expected_x[1])
    jf = thunder.jit(fn, fusion_type="dataflow", transforms=[InplaceBarrierTransform(check=True)])
    torch.testing.assert_close(jf(x[0], x[1]), expected)
    torch.testing.assert_close(x, expected_x)


class RunningMeanNormaliser(torch.nn.Module):
    """ThunderFX sends ``detach`` to an Inductor graph, so the Thunder subgraph receives ``x`` and
    ``x.detach()`` as two inputs that alias, one requiring grad: the merge loses the gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        m = x.detach().mean(0)
        self.count.add_(1)
        self.mean.add_((m - self.mean) / self.count)
        return (x - self.mean) * 2


def _normaliser_build():
    module = RunningMeanNormaliser()
    return module, (torch.randn(3, 4, requires_grad=True),), {"mean": module.mean, "count": module.count}


@pytest.mark.parametrize("fusion_type", ["consecutive", "dataflow"])
def test_thunderfx_detach_alias_is_refused(fusion_type: str):
    """A tensor and its detach() merged by Thunder's substitution: plain Thunder gets it wrong, the transform refuses."""
    plain = differential(_normaliser_build, Config(transform=False, fusion_type=fusion_type, entry="thunderfx", check=False))
    assert plain.status in ("wrong", "crash"), f"{plain.status}: {plain.detail}"
    verdict = differential(_normaliser_build, Config(fusion_type=fusion_type, entry="thunderfx", check=True))
    assert verdict.status == "refused", f"{verdict.status}: {verdict.detail}"
    err = error_in_chain(verdict.outcome.error, InputAliasError)
    assert err is not None and "detach()" in str(err)
