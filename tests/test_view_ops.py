"""Every view op in Thunder's view tables, with a write into its storage, against eager PyTorch.

Thunder lists the ops whose result shares its input's storage in
``thunder.torch._syms_returning_views``.  Each one is run on an input that requires grad, in
the two shapes where autodiff decides whether the view is still a view at run time:

* made before a write under no-grad into the input, and read after it (``t0 = a.diagonal()``,
  ``a.add_(1.5)``, then ``t0``);
* written through, under no-grad (``t0.mul_(1.5)``), then the input read.

Every cell must give eager's answer, or a refusal where plain Thunder does not give it, or raise
where eager raises (the fuzzer's verdict rule).  ``diagonal`` is why: autodiff runs it as a
gather, a copy (any float ``diagonal`` not made under no-grad, once autodiff runs at all), and
plain Thunder loses the write silently (answered: ``thunder_ext.copied_views``,
``VIEWS_AUTODIFF_COPIES``); and eager refuses ``split``'s outputs after such a write, where
Thunder computes numbers (refused: ``thunder_ext.refusals.MULTI_OUTPUT_VIEWS``).  An op that behaves so in a later Thunder
or PyTorch fails here until it joins those tables.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import replace

import pytest
import torch

import thunder.torch as ltorch
from thunder_ext.copied_views import VIEWS_AUTODIFF_COPIES
from thunder_ext.refusals import MULTI_OUTPUT_VIEWS
from thunder_ext.testing.compare import Config, differential
from thunder_ext.testing.fuzzing import CONFIGS, judge_function

# Each view op of the table, applied to a (4, 3) float tensor.
VIEW_OPS = {
    "adjoint": lambda a: a.adjoint(),
    "as_strided": lambda a: a.as_strided((2, 2), (3, 1)),
    "chunk": lambda a: a.chunk(2, 1)[0],
    "detach": lambda a: a.detach(),
    "diagonal": lambda a: a.diagonal(),
    "expand": lambda a: a[:1].expand(4, 3),
    "expand_as": lambda a: a[:1].expand_as(a),
    "getitem": lambda a: a[1:, ::2],
    "hsplit": lambda a: a.hsplit(3)[1],
    "movedim": lambda a: a.movedim(0, 1),
    "narrow": lambda a: a.narrow(0, 1, 2),
    "permute": lambda a: a.permute(1, 0),
    "select": lambda a: a.select(0, 2),
    "split": lambda a: a.split(2)[1],
    "split_with_sizes": lambda a: a.split_with_sizes([1, 3])[1],
    "squeeze": lambda a: a.unsqueeze(0).squeeze(0),
    "swapaxes": lambda a: a.swapaxes(0, 1),
    "swapdims": lambda a: a.swapdims(0, 1),
    "t": lambda a: a.t(),
    "tensor_split": lambda a: a.tensor_split(2)[1],
    "transpose": lambda a: a.transpose(0, 1),
    "unbind": lambda a: a.unbind(0)[1],
    "unflatten": lambda a: a.unflatten(0, (2, 2)),
    "unsqueeze": lambda a: a.unsqueeze(0),
    "view": lambda a: a.view(12),
    "view_as": lambda a: a.view_as(a),
    "vsplit": lambda a: a.vsplit(2)[1],
}
# Table entries with no such call: complex or sparse inputs only, or a complex result
# (view_as_complex, in Thunder main's table), Thunder's own primitive, and an op plain Thunder
# cannot trace at all (unfold: "Exception encountered when doing automatic registration",
# Thunder 0.2.6).
NOT_APPLICABLE = {"real", "imag", "view_as_real", "view_as_complex", "indices", "values", "shallow_copy", "unfold"}

GRAD_CELLS = tuple(replace(c, executors=e) for e in ("default", "torch_compile") for c in CONFIGS)


def _made_before_a_write(view):
    def fn(a, b):
        t0 = view(a)
        with torch.no_grad():
            a.add_(1.5)
        return (t0 * 2.0, a * b)

    return fn


def _written_through(view):
    def fn(a, b):
        t0 = view(a)
        with torch.no_grad():
            t0.mul_(1.5)
        return (a * b,)

    return fn


def _args(grad: bool):
    return torch.randn(4, 3).requires_grad_(grad), torch.randn(4, 3)


@functools.cache
def _plain_torch_compile_differentiates(name: str) -> bool:
    """Whether plain Thunder with torch_compile_ex differentiates the view op at all, no write
    anywhere.  Not for the ops Thunder registers from PyTorch (``narrow``, ``swapaxes``,
    ``adjoint``, ...): their VJP calls torch.autograd inside a region, where Dynamo fails
    ("Unexpected type in sourceless builder", torch 2.11), so their cells are out of scope."""
    view = VIEW_OPS[name]
    plain = Config(transform=False, check=False, fusion_type="consecutive", executors="torch_compile")
    return differential(lambda: (lambda a, b: (view(a) * 2.0, a * b), _args(True), {}), plain).status == "correct"


def test_the_table_is_covered():
    names = {s.name for s in ltorch._syms_returning_views}
    assert names - NOT_APPLICABLE == set(VIEW_OPS), names ^ (set(VIEW_OPS) | NOT_APPLICABLE)
    assert VIEWS_AUTODIFF_COPIES | MULTI_OUTPUT_VIEWS <= set(VIEW_OPS)


@pytest.mark.parametrize("shape", [_made_before_a_write, _written_through], ids=["made_before", "written_through"])
@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_view_op_across_a_no_grad_write(name: str, shape):
    configs = GRAD_CELLS if _plain_torch_compile_differentiates(name) else CONFIGS
    cells = judge_function(shape(VIEW_OPS[name]), _args, grad_modes=(True,), configs=configs).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))
    if name in VIEWS_AUTODIFF_COPIES:
        # Answered (thunder_ext.copied_views), where plain Thunder is silently wrong.
        assert all(c.status == "correct" for c in cells), "\n".join(map(str, cells))
        plain = Config(transform=False, check=False, fusion_type="consecutive", executors="default")
        assert differential(lambda: (shape(VIEW_OPS[name]), _args(True), {}), plain).status == "wrong"


# -- views Thunder does not list -------------------------------------------------------------
#
# Thunder registers PyTorch ops it has no symbol of automatically, and takes their outputs for new
# tensors unless the op is in its short table of such views.  Some of the rest return a view of
# their input, or the input itself, at run time: a write through either name reaches the other,
# which plain Thunder never sees.  The transform asks eager on meta tensors which argument's
# storage each output shares (thunder_ext.meta_calls.output_storage_sources).
UNLISTED_VIEW_OPS = {
    "ravel": lambda a: a.ravel(),
    "linalg_diagonal": lambda a: torch.linalg.diagonal(a),
    "meshgrid": lambda a: torch.meshgrid(a[0], a[1], indexing="ij")[0],
    "broadcast_tensors": lambda a: torch.broadcast_tensors(a, a[:1])[1],
    "positive": lambda a: torch.positive(a),
    "conj": lambda a: a.conj(),
    "resolve_neg": lambda a: a.resolve_neg(),
    "cpu": lambda a: a.cpu(),
    "alpha_dropout": lambda a: torch.nn.functional.alpha_dropout(a, 0.0, True),
}


def _auto_registered_ops_returning_their_inputs_storage() -> set[str]:
    """Every automatically registered op outside Thunder's view table that, called on one (4, 3)
    tensor, returns that tensor or a view of it (by eager, on real tensors)."""
    from thunder.torch.default_torch_ops import _auto_registered_operators_returning_views, torch_auto_registered_ops

    listed = set(_auto_registered_operators_returning_views)
    found = set()
    for fns in torch_auto_registered_ops.values():
        for fn in fns:
            if fn in listed:
                continue
            x = torch.randn(4, 3)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # deprecations of ops never called like this
                    out = fn(x)
            except Exception:  # needs other arguments
                continue
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, torch.Tensor) and o.layout == torch.strided and o.device == x.device:
                    if o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                        found.add(fn.__name__)
    return found


def test_the_unlisted_views_are_covered():
    """Each op found to return its input's storage is exercised below, by one of its names (``to_dense``
    and ``cartesian_prod`` of one tensor return it; Thunder cannot differentiate them)."""
    found = _auto_registered_ops_returning_their_inputs_storage()
    assert found - {"to_dense", "cartesian_prod"} <= set(UNLISTED_VIEW_OPS) | {"conj_physical", "resolve_conj", "view_as_complex",
                                                                                "feature_alpha_dropout"}, found


@pytest.mark.parametrize("shape", [_made_before_a_write, _written_through], ids=["made_before", "written_through"])
@pytest.mark.parametrize("name", sorted(UNLISTED_VIEW_OPS))
def test_unlisted_view_across_a_write(name: str, shape):
    """Every cell gives eager's answer, or raises or refuses where plain Thunder does not answer:
    never a silent wrong answer.  Plain Thunder was silently wrong on several, and so was the
    transform (``t = a.ravel(); t.mul_(1.5)`` left ``a`` as it was)."""
    cells = judge_function(shape(UNLISTED_VIEW_OPS[name]), _args, grad_modes=(False, True), configs=CONFIGS).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))


def _transposed_args(grad: bool):
    """``a`` laid out transposed (strides (1, 4)), with its own storage."""
    a = torch.empty_strided((4, 3), (1, 4)).copy_(torch.randn(4, 3))
    return a.requires_grad_(grad), torch.randn(4, 3)


@pytest.mark.parametrize("shape", [_made_before_a_write, _written_through], ids=["made_before", "written_through"])
@pytest.mark.parametrize("name", sorted(UNLISTED_VIEW_OPS))
def test_unlisted_view_of_a_transposed_input_across_a_write(name: str, shape):
    """The same on an input laid out transposed.  ``ravel`` is ``contiguous()`` then ``view``:
    a copy of it, where the transform took every ``ravel`` for a view (soak seed 87000: ``t0 =
    a.ravel(); t0.add_(1.5)`` wrote into ``a``; plain Thunder right).  An unlisted op that views
    its argument on contiguous meta tensors is asked again on strided ones, and where it copies
    there it is a view or a copy by strides, as ``reshape`` is (``meta_calls.copies_when_strided``)."""
    cells = judge_function(shape(UNLISTED_VIEW_OPS[name]), _transposed_args, grad_modes=(False, True), configs=CONFIGS).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))


def test_ravel_of_a_transpose_is_a_copy_not_a_view():
    """``a.t().ravel()`` of a contiguous ``a`` copies in eager: a write into it leaves ``a`` as it
    was (every ``thunder.jit`` cell, executors and fusion types; ``a`` was written before)."""

    def fn(a, w):
        t0 = a.t().ravel()
        t0.mul_(w.t().ravel())
        return (t0 * 1, a * 1)

    configs = tuple(replace(c, executors=e) for c in CONFIGS for e in ("default", "torch_compile"))
    cells = judge_function(fn, lambda g: (torch.randn(4, 3), torch.randn(4, 3).requires_grad_(g)), configs=configs).cells
    assert cells and all(c.verdict == "ok" for c in cells), "\n".join(map(str, cells))
    assert all(c.status == "correct" for c in cells if not c.grad), "\n".join(map(str, cells))
