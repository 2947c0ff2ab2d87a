"""An input that does not require grad, written with a value that does, gets eager's history.

The comparison the fuzzer's verdict rule makes does not see an input's history after the call;
these tests do: the caller's tensor after the call (its data, ``requires_grad``, and whether a
returned output is that very tensor), and the gradients of a loss that reads it *after* the
call, through ``thunder.jit`` and ThunderFX, both fusion types, both executor sets.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from thunder_ext.errors import ViewGradientError
from thunder_ext.testing.compare import Config, compile_fn
from thunder_ext.testing.fuzzing import CONFIGS

CELLS = tuple(
    replace(c, executors=ex, entry=e) for c in CONFIGS for ex in ("default", "torch_compile") for e in ("jit", "thunderfx")
)


def mul_then_read(x, w):
    x.mul_(w)
    return (x.sin(),)


def read_mul_then_returned(x, w):
    y = x * 2
    x.mul_(w)
    return x, y


def copy_of_a_value(x, w):
    x.copy_(w * 2)
    return (w.cos(),)


def slice_write_then_returned(x, w):
    x[1:].mul_(w[1:])
    return (x,)


def two_inputs(x, z, w):
    z.add_(w)
    x.mul_(z)
    return (x + z,)


# A write kept in place (under no-grad, into ``w``, which requires grad) around the value: a
# value whose gradient path eager's backward does not save that storage for is adopted.  Under
# thunder.jit these once left the caller's ``x`` without history (a loss read from it after the
# call missed ``w``'s gradient), under ThunderFX a ViewGradientError.


def copy_after_kept_write(x, w):
    with torch.no_grad():
        w.mul_(2)  # before the value reads w: eager's backward sees this w
    x.copy_(w)
    return (x,)


def add_then_kept_write(x, w):
    x.add_(w)  # add saves neither argument
    with torch.no_grad():
        w.mul_(2)
    return (w.cos(),)


def mul_then_kept_write(x, w):
    x.mul_(w)  # with only w requiring grad, eager saves x, not w
    with torch.no_grad():
        w.add_(1)
    return (x.sin(),)


def square_copied_after_kept_write(x, w):
    with torch.no_grad():
        w.mul_(2)
    x.copy_(w * w)
    return (w.sum(0, keepdim=True),)


def detached_product_then_write(x, w):
    y = (x * w).detach()  # eager saves x for w's gradient, but only detach reads the product
    x.add_(w)
    return (y,)


CASES = {
    detached_product_then_write: lambda: (torch.randn(3), torch.randn(3)),
    copy_after_kept_write: lambda: (torch.randn(3), torch.randn(3)),
    add_then_kept_write: lambda: (torch.randn(3), torch.randn(3)),
    mul_then_kept_write: lambda: (torch.randn(3), torch.randn(3)),
    square_copied_after_kept_write: lambda: (torch.randn(3), torch.randn(3)),
    mul_then_read: lambda: (torch.randn(3), torch.randn(3)),
    read_mul_then_returned: lambda: (torch.randn(3), torch.randn(3)),
    copy_of_a_value: lambda: (torch.randn(3), torch.randn(3)),
    slice_write_then_returned: lambda: (torch.randn(3), torch.randn(3)),
    two_inputs: lambda: (torch.randn(3), torch.randn(3), torch.randn(3)),
}


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
@pytest.mark.parametrize("fn", list(CASES), ids=lambda f: f.__name__)
def test_a_written_plain_input_gets_eagers_history(fn, config: Config):
    torch.manual_seed(0)
    compiled = compile_fn(fn, config)
    for call in range(2):  # the second call runs the cached traces
        args = CASES[fn]()
        plain = (False,) * (len(args) - 1)
        want = _run_grad(fn, args, plain)
        got = _run_grad(compiled, args, plain)
        assert want["requires_grad"] == [True] * len(want["requires_grad"])  # the test's premise
        assert got["is_input"] == want["is_input"], call
        assert got["requires_grad"] == want["requires_grad"], call
        torch.testing.assert_close(got["outputs"], want["outputs"])
        torch.testing.assert_close(got["inputs"], want["inputs"])
        torch.testing.assert_close(got["grads"], want["grads"])


def copy_read_by_no_output(x, z, w):
    x.copy_(w * 2)  # no returned output is computed from it; the caller reads x after the call
    return (z * 2,)


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
def test_a_written_plain_input_no_output_reads_gets_its_history(config: Config):
    """Under ``thunder.jit`` such a value once kept the path without its history: a caller who
    reads ``x`` after the call silently lost ``w``'s gradient through it (``None`` where eager
    gives it).  Where the caller never reads ``x``, ``w`` gets zeros where eager gives ``None``
    (docs/limits.md); this caller reads it."""
    torch.manual_seed(0)
    compiled = compile_fn(copy_read_by_no_output, config)
    for call in range(2):
        args = (torch.randn(3), torch.randn(3), torch.randn(3))
        want = _run_grad(copy_read_by_no_output, args, (False, False))
        got = _run_grad(compiled, args, (False, False))
        assert want["requires_grad"] == [True, False] and want["grads"][0] is not None  # the premise
        assert got["requires_grad"] == want["requires_grad"], call
        torch.testing.assert_close(got["outputs"], want["outputs"])
        torch.testing.assert_close(got["inputs"], want["inputs"])
        torch.testing.assert_close(got["grads"], want["grads"])


@pytest.mark.parametrize("config", CELLS[:4], ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
def test_a_call_without_grad_adopts_nothing(config: Config):
    """Under ``torch.no_grad()`` the value carries no history, and the caller's tensor gets none."""
    compiled = compile_fn(read_mul_then_returned, config)
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    want_x = x * w.detach()
    with torch.no_grad():
        out, y = compiled(x, w)
    assert out is x and not x.requires_grad and not y.requires_grad
    torch.testing.assert_close(x, want_x, rtol=0, atol=0)


def write_then_no_grad_write_through_a_view(x, w):
    x.add_(w)
    with torch.no_grad():
        x[0:1].zero_()  # keeps x's writes in place: no value to adopt
    return (w * 2,)


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
def test_a_written_plain_input_whose_writes_stay_in_place_is_refused(config: Config):
    """The caller's ``x`` cannot adopt the history of writes kept in place; eager gives it one
    (``x.requires_grad`` after the call, and a loss read from ``x`` reaches ``w``).  Under
    ThunderFX this was refused already; under ``thunder.jit`` the caller's ``x`` came back
    without history, and such a loss silently missed ``w``'s gradient (plain Thunder too)."""
    compiled = compile_fn(write_then_no_grad_write_through_a_view, config)
    args = (torch.randn(3), torch.randn(3))
    want = _run_grad(write_then_no_grad_write_through_a_view, args, (False,))
    assert want["requires_grad"] == [True]  # the premise: eager's x carries w's history
    words = "Dynamo hands the input itself back" if config.entry == "thunderfx" else "would get the data without"
    with pytest.raises(ViewGradientError, match=words):
        _run_grad(compiled, args, (False,))


# -- inputs that require grad, not leaves: what a model hands a submodule, or a ThunderFX piece
# after a graph break hands the next.  Eager records the write in the tensor's history (on a leaf
# it refuses the write); class 9 refused them all before.


def add_then_mul_then_read(x, w):
    x.add_(1)
    x.mul_(2)
    return (x.cos(),)


def relu_then_mul(x, w):
    x.relu_()
    return (x * w,)


def whole_overwrite(x, w):
    x.copy_(w * 2)
    return (x.cos(),)


def scale_read_by_no_output(x, w):
    x.mul_(2)  # refused under thunder.jit once: no returned output is computed from x
    return (w * 2,)


def grad_and_plain_inputs(z, x, w):
    z.add_(w)
    x.mul_(z)
    return (x + z,)


def mul_then_zeroed(x, z, w):
    y = x * z  # with only x requiring grad, eager saves z, not x: the write into x is fine
    x.zero_()
    return (y + w,)


GRAD_CASES = {
    mul_then_zeroed: (True, False),
    add_then_mul_then_read: (True,),
    read_mul_then_returned: (True,),
    slice_write_then_returned: (True,),
    relu_then_mul: (True,),
    whole_overwrite: (True,),
    scale_read_by_no_output: (True,),
    grad_and_plain_inputs: (True, False),
}


def _run_grad(fn, bases, grads):
    """Call ``fn(*inputs, w)``: the last of ``bases`` is ``w``, which requires grad; an input
    whose ``grads`` entry is true is a non-leaf ``a * 1.5`` of a leaf ``a``, the others are plain
    tensors.  The loss reads the outputs and every input after the call.  Returns the outputs,
    the inputs after the call (data, history), which outputs are inputs, and the gradients of
    ``w`` and of the leaves."""
    leaves = [b.clone().requires_grad_(g) for b, g in zip(bases[:-1], grads)]
    inputs = [a * 1.5 if g else a for a, g in zip(leaves, grads)]
    w = bases[-1].clone().requires_grad_()
    out = fn(*inputs, w)
    loss = sum((o.float() * 3).sum() for o in out) + sum((x * x).sum() for x in inputs)
    loss.backward()
    return {
        "outputs": [o.detach() for o in out],
        "is_input": [[o is x for x in inputs] for o in out],
        "inputs": [x.detach() for x in inputs],
        "requires_grad": [x.requires_grad for x in inputs],
        "is_leaf": [x.is_leaf for x in inputs],
        "grads": [w.grad, *(a.grad for a, g in zip(leaves, grads) if g)],
    }


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
@pytest.mark.parametrize("fn", list(GRAD_CASES), ids=lambda f: f.__name__)
def test_a_written_non_leaf_grad_input_gets_eagers_history(fn, config: Config):
    torch.manual_seed(0)
    grads = GRAD_CASES[fn]
    compiled = compile_fn(fn, config)
    for call in range(2):  # the second call runs the cached traces
        bases = [torch.randn(3) for _ in range(len(grads) + 1)]
        want = _run_grad(fn, bases, grads)
        got = _run_grad(compiled, bases, grads)
        assert want["requires_grad"][0] and not want["is_leaf"][0]  # the test's premise
        for key in ("is_input", "requires_grad", "is_leaf"):
            assert got[key] == want[key], (key, call)
        torch.testing.assert_close(got["outputs"], want["outputs"])
        torch.testing.assert_close(got["inputs"], want["inputs"])
        torch.testing.assert_close(got["grads"], want["grads"])


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
def test_a_write_with_grad_to_a_leaf_that_requires_grad_raises_eagers_error(config: Config):
    compiled = compile_fn(add_then_mul_then_read, config)
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        add_then_mul_then_read(x.detach().requires_grad_(), w)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        compiled(x, w)
    assert x.grad_fn is None


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
@pytest.mark.parametrize("base_grad", [False, True], ids=["plain_base", "grad_base"])
def test_a_written_input_that_is_a_view_rebases_its_base(base_grad: bool, config: Config):
    """The input is a view of the caller's tensor (``base[1:]``): eager's write rebases the base's
    history too, outside the view's rows as well.  Marking the view dirty in a custom Function
    lost the base's other rows' gradient; the transform copies as eager does."""

    def run(fn):
        torch.manual_seed(0)
        leaf, w = torch.randn(4, 3, requires_grad=base_grad), torch.randn(3, 3, requires_grad=True)
        base = leaf * 1 if base_grad else leaf.clone()
        x = base[1:]
        out = fn(x, w)
        (out.sum() + (base * base).sum()).backward()
        return out.detach(), base.detach(), leaf.grad, w.grad, base.requires_grad, x.requires_grad

    compiled = compile_fn(mul_then_read, config)
    for _ in range(2):
        torch.testing.assert_close(run(lambda x, w: compiled(x, w)[0]), run(lambda x, w: mul_then_read(x, w)[0]))
