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


CASES = {
    mul_then_read: lambda: (torch.randn(3), torch.randn(3)),
    read_mul_then_returned: lambda: (torch.randn(3), torch.randn(3)),
    copy_of_a_value: lambda: (torch.randn(3), torch.randn(3)),
    slice_write_then_returned: lambda: (torch.randn(3), torch.randn(3)),
    two_inputs: lambda: (torch.randn(3), torch.randn(3), torch.randn(3)),
}


def _run(fn, args):
    """Outputs, the plain inputs after the call (data, history), which outputs are inputs, and
    the gradient of a loss that reads the outputs and the written inputs after the call."""
    *plain, w = [a.clone() for a in args]
    w.requires_grad_()
    out = fn(*plain, w)
    loss = sum((o.float() * 3).sum() for o in out) + sum((x * x).sum() for x in plain)
    loss.backward()
    return {
        "outputs": [o.detach() for o in out],
        "is_input": [[o is x for x in plain] for o in out],
        "inputs": [x.detach() for x in plain],
        "requires_grad": [x.requires_grad for x in plain],
        "grad": w.grad,
    }


@pytest.mark.parametrize("config", CELLS, ids=lambda c: f"{c.entry}-{c.executors}-{c.fusion_type}")
@pytest.mark.parametrize("fn", list(CASES), ids=lambda f: f.__name__)
def test_a_written_plain_input_gets_eagers_history(fn, config: Config):
    torch.manual_seed(0)
    compiled = compile_fn(fn, config)
    for call in range(2):  # the second call runs the cached traces
        args = CASES[fn]()
        want = _run(fn, args)
        got = _run(compiled, args)
        assert want["requires_grad"] == [True] * len(want["requires_grad"])  # the test's premise
        assert got["is_input"] == want["is_input"], call
        assert got["requires_grad"] == want["requires_grad"], call
        torch.testing.assert_close(got["outputs"], want["outputs"])
        torch.testing.assert_close(got["inputs"], want["inputs"])
        torch.testing.assert_close(got["grad"], want["grad"])


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
