"""Messages and printed traces name the user's line (thunder_ext.source_lines).

Thunder records ThunderFX's generated code (``<eval_with_key>.4:7``) for every bsym of a ThunderFX
compilation, and its own dispatch wrapper (``thunder/torch/experimental/dtensor_torch_and_prims.py``)
for ``reshape``, ``add``, ``mul``, ``transpose``, ``exp`` and a few more called as torch functions
or methods.  Each test below fails where the transform passes those records through.
"""

from __future__ import annotations

import inspect
import os
import re

import pytest
import thunder
import torch
from thunder.dynamo import thunderfx

from thunder_ext import InplaceBarrierTransform, SavedTensorMutationError, ViewGradientError
from thunder_ext.source_lines import attribute_user_lines, function_span

THUNDER_DIR = os.path.dirname(thunder.__file__)
ENTRIES = ("jit", "thunderfx")


def _compile(fn, entry: str, fusion_type: str = "dataflow"):
    if entry == "jit":
        return thunder.jit(fn, transforms=[InplaceBarrierTransform()], fusion_type=fusion_type)
    torch._dynamo.reset()
    return thunderfx(fn, transforms=[InplaceBarrierTransform()], fusion_type=fusion_type)


def _line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def _lines_of(fn) -> range:
    lines, start = inspect.getsourcelines(fn)
    return range(start, start + len(lines))


# -- refusals ----------------------------------------------------------------------------------


def _write_saved(a, w):
    s = a * w  # mul saves a for the gradient of w
    a.add_(1)  # MARK: saved-write
    return s


def _reshape_read_after_write(a, w):
    v = (a * w).cumsum(0)  # a cumsum: the run-time choice does not model its layout
    r = v.reshape(-1)  # MARK: maybe-copy
    v.mul_(2)
    return r


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    "fn, marker, error",
    [
        (_write_saved, "MARK: saved-write", SavedTensorMutationError),
        (_reshape_read_after_write, "MARK: maybe-copy", ViewGradientError),
    ],
    ids=["saved-tensor", "reshape-dispatched-by-thunder"],
)
def test_a_refusal_names_the_line_the_user_wrote(fn, marker, error, entry):
    """Under ThunderFX too, and for ops Thunder dispatches through a wrapper of its own."""
    compiled = _compile(fn, entry)
    with pytest.raises(error) as info:
        compiled(torch.randn(4, 4), torch.randn(4, requires_grad=True))
    message = str(info.value)
    assert f"{__file__}:{_line_of(fn, marker)}" in message, message
    assert "<eval_with_key>" not in message and THUNDER_DIR not in message, message


# -- printed traces ----------------------------------------------------------------------------


def _dispatched_ops(x, y):
    v = x * 2
    w = torch.add(v.reshape(-1).exp(), 1)
    z = v.transpose(0, 1)
    v.mul_(2)
    y.add_(v.neg().transpose(0, 1))
    return w, z + y


_COMMENT = re.compile(r"^\s*# (.+):(\d+): ", re.M)


def _first_trace_of_ours(traces) -> int:
    return next(k for k, t in enumerate(traces) if "thunder_ext" in str(t.get_provenance() or ""))


@pytest.mark.parametrize("fusion_type", ("consecutive", "dataflow"))
@pytest.mark.parametrize("entry", ENTRIES)
def test_every_trace_after_the_transform_prints_the_users_lines(entry, fusion_type):
    args = (torch.randn(3, 4), torch.randn(4, 3))
    expected_args = tuple(a.clone() for a in args)
    expected = _dispatched_ops(*expected_args)
    compiled = _compile(_dispatched_ops, entry, fusion_type)
    got = compiled(*args)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    for a, e in zip(args, expected_args):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    if entry == "thunderfx":
        (info,) = compiled._backend.subgraph_infos
        (compiled,) = info.thunder_compiled_fns
    traces = thunder.last_traces(compiled)
    printed = [str(t) for t in traces[_first_trace_of_ours(traces) :]]
    seen = [(f, int(n)) for text in printed for f, n in _COMMENT.findall(text)]
    assert seen, printed[-1]
    assert all(f == __file__ and n in _lines_of(_dispatched_ops) for f, n in seen), sorted(set(seen))
    # Each dispatched op's own line is printed, not only its neighbours'.
    for marker in ("reshape(-1)", "v.neg()"):
        assert (__file__, _line_of(_dispatched_ops, marker)) in seen, (marker, sorted(set(seen)))


def _reshape_first(x):
    w = x.reshape(-1)  # MARK: first
    return w.sin()


def test_a_dispatched_op_with_no_record_before_it_is_found_within_the_function():
    """No bsym precedes the reshape, and this file calls ``reshape`` on many lines before it: the
    compiled function's own lines bound the search (thunder.jit's entry; ThunderFX has FX nodes)."""
    jf = thunder.jit(_reshape_first)
    jf(torch.randn(3, 4))
    trace = thunder.last_traces(jf)[0]
    (reshape,) = [b for b in trace.bound_symbols if b.sym.name == "reshape"]
    assert reshape.source_filename.startswith(THUNDER_DIR), "Thunder now records the user's line"
    assert attribute_user_lines(trace)[0] is trace  # the whole file holds more than one such line
    new, report = attribute_user_lines(trace, span=function_span(_reshape_first))
    (reshape,) = [b for b in new.bound_symbols if b.sym.name == "reshape"]
    assert (reshape.source_filename, reshape.source_positions.lineno) == (__file__, _line_of(_reshape_first, "MARK: first"))
    assert report.from_thunder == 1
    x = torch.randn(3, 4)
    for fusion_type in ("consecutive", "dataflow"):
        compiled = _compile(_reshape_first, "jit", fusion_type)
        torch.testing.assert_close(compiled(x.clone()), _reshape_first(x.clone()), rtol=0, atol=0)
    traces = thunder.last_traces(compiled)
    seen = {(f, int(n)) for t in traces[_first_trace_of_ours(traces) :] for f, n in _COMMENT.findall(str(t))}
    assert (__file__, _line_of(_reshape_first, "MARK: first")) in seen, sorted(seen)


# -- what the pass leaves as Thunder recorded it ----------------------------------------------


def _two_reshapes_between_the_same_lines(x):
    s = x * 2
    a = s.reshape(-1)
    b = s.reshape(12)
    return a + b


def _flatten_in_a_helper(v):
    return v.reshape(-1)


def _through_a_helper(x):
    s = x * 2
    w = _flatten_in_a_helper(s)
    return w + 1


@pytest.mark.parametrize("fn", [_two_reshapes_between_the_same_lines, _through_a_helper])
def test_a_line_the_evidence_does_not_name_alone_stays_as_thunder_recorded_it(fn):
    jf = thunder.jit(fn)
    jf(torch.randn(3, 4))
    trace = thunder.last_traces(jf)[0]
    reshapes = [b for b in trace.bound_symbols if b.sym.name == "reshape"]
    assert reshapes and all(b.source_filename.startswith(THUNDER_DIR) for b in reshapes), "Thunder now records the user's line"
    new, report = attribute_user_lines(trace)
    assert new is trace and not report
    assert report.left == [f"{b.output.name} = reshape" for b in reshapes]


def _write_what_batch_norm_saved(b, rm, rv):
    t = torch.nn.functional.batch_norm(b, rm, rv, training=True)  # MARK: saving-op
    with torch.no_grad():
        b.add_(1.5)
    return t


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_backward_read_names_the_forward_op_that_saved_its_value(entry):
    """A backward bsym has no line; where it reads a value a forward op made (through barriers),
    the message names that op's line."""
    compiled = _compile(_write_what_batch_norm_saved, entry)
    with pytest.raises(SavedTensorMutationError) as info:
        compiled(torch.randn(4, 3, requires_grad=True) * 1, torch.zeros(3), torch.ones(3))
    message = str(info.value)
    assert "(backward)" in message and "saved at `" in message, message
    assert f"{__file__}:{_line_of(_write_what_batch_norm_saved, 'MARK: saving-op')}" in message, message


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_bsym_without_a_recorded_line_says_where_it_belongs(entry):
    """Thunder records no line for the return or for its gradient rules' bsyms: the message says
    which they are, where it said ``<unknown source>``."""
    compiled = _compile(_write_saved, entry)
    with pytest.raises(SavedTensorMutationError) as info:
        compiled(torch.randn(4, 4), torch.randn(4, requires_grad=True))
    assert re.search(r"`t\d+ = mul` \(backward\)", str(info.value)), str(info.value)
    compiled = _compile(_reshape_read_after_write, entry)
    with pytest.raises(ViewGradientError) as info:
        compiled(torch.randn(4, 4), torch.randn(4, requires_grad=True))
    assert "`python_return` (the return)" in str(info.value), str(info.value)
    assert "<unknown source>" not in str(info.value)
