"""Wrong arguments to the public functions get a TypeError that says what to pass, and accessors
with nothing to report warn instead of returning empty results silently.

Each slip below raised a raw error from deep inside Thunder before (``'list' object has no
attribute 'bound_symbols'``, ``cannot create weak reference to 'NoneType' object``), or
was accepted (``check="yes"``), or returned ``[]`` without a word.
"""

from __future__ import annotations

import warnings

import pytest
import thunder
import torch

import thunder_ext
from thunder_ext import InplaceBarrierTransform
from thunder_ext.testing.gallery import war_long_chain


def plain_function(x):
    return x.sin()


def _jit(fn, **kwargs):
    return thunder.jit(fn, fusion_type="dataflow", **kwargs)


@pytest.fixture(scope="module")
def called_with_transform():
    jf = _jit(war_long_chain, transforms=[InplaceBarrierTransform()])
    jf(torch.randn(4, 3), torch.randn(4, 3))
    return jf


@pytest.fixture(scope="module")
def called_without_transform():
    jf = _jit(plain_function)
    jf(torch.randn(3))
    return jf


def _our_warnings(record) -> list[str]:
    # Only thunder_ext's own warnings: Thunder and torch emit deprecation warnings of their own.
    return [str(w.message) for w in record if "thunder_ext" in w.filename or "InplaceBarrierTransform" in str(w.message)
            or "nothing to report" in str(w.message)]


# -- functions that take one trace ------------------------------------------------------------


TRACE_FUNCTIONS = ["verify", "assert_valid", "insert_barriers", "place_barriers"]


@pytest.mark.parametrize("name", TRACE_FUNCTIONS)
def test_trace_functions_reject_the_list_of_last_traces(name, called_with_transform):
    traces = thunder.last_traces(called_with_transform)
    with pytest.raises(TypeError, match=r"pass one trace, e\.g\. thunder\.last_traces\(jf\)\[-1\]"):
        getattr(thunder_ext, name)(traces)


@pytest.mark.parametrize("name", TRACE_FUNCTIONS)
def test_trace_functions_reject_a_compiled_function(name, called_with_transform):
    with pytest.raises(TypeError, match=rf"{name}\(\) takes a trace, not the function `war_long_chain`"):
        getattr(thunder_ext, name)(called_with_transform)


@pytest.mark.parametrize("name", TRACE_FUNCTIONS)
def test_trace_functions_reject_other_objects(name):
    with pytest.raises(TypeError, match=r"takes a Thunder trace \(TraceCtx\), not str"):
        getattr(thunder_ext, name)("trace")


@pytest.mark.parametrize("name", TRACE_FUNCTIONS)
def test_trace_functions_still_take_a_trace(name, called_with_transform):
    traces = thunder.last_traces(called_with_transform)
    # the pass takes a trace before execution transforms; the checker takes any, the final one
    # included (as ordered by data edges, before the transform removes its barriers)
    final = thunder_ext.final_traces(called_with_transform, with_barriers=True)[0][0]
    trace = traces[0] if name in ("insert_barriers", "place_barriers") else final
    getattr(thunder_ext, name)(trace)  # no exception


def test_wrapped_pass_keeps_its_name_and_docstring():
    from thunder_ext import barriers

    assert thunder_ext.insert_barriers.__name__ == "insert_barriers"
    assert thunder_ext.insert_barriers.__doc__ == barriers.insert_barriers.__doc__
    assert thunder_ext.insert_barriers is thunder_ext.insert_barriers  # cached, one identity


# -- accessors that take a compiled function --------------------------------------------------


ACCESSORS = ["fusion_stage_traces", "last_reports", "final_traces"]


@pytest.mark.parametrize("name", ACCESSORS)
def test_accessors_reject_a_plain_function(name):
    with pytest.raises(TypeError, match=r"not the function `plain_function`, a plain Python callable; compile it first"):
        getattr(thunder_ext, name)(plain_function)


@pytest.mark.parametrize("name", ACCESSORS)
def test_accessors_reject_a_trace_and_a_list(name, called_with_transform):
    with pytest.raises(TypeError, match="not a trace; pass the thunder.jit function"):
        getattr(thunder_ext, name)(thunder.last_traces(called_with_transform)[-1])
    with pytest.raises(TypeError, match="not a list; call it once per function"):
        getattr(thunder_ext, name)([called_with_transform])
    with pytest.raises(TypeError, match="takes a thunder.jit function, a thunderfx object or a ThunderCompiler"):
        getattr(thunder_ext, name)(None)


@pytest.mark.parametrize("name", ACCESSORS)
def test_accessors_warn_on_a_function_never_called(name):
    jf = _jit(plain_function, transforms=[InplaceBarrierTransform()])
    with pytest.warns(UserWarning, match=rf"{name}\(\): the function `plain_function` has no compilation .*call it first"):
        result = getattr(thunder_ext, name)(jf)
    if name != "last_reports":
        assert result == []


@pytest.mark.parametrize("name", ["fusion_stage_traces", "last_reports"])
def test_accessors_warn_on_a_function_compiled_without_the_transform(name, called_without_transform):
    with pytest.warns(UserWarning, match=rf"{name}\(\): .* was compiled without InplaceBarrierTransform"):
        getattr(thunder_ext, name)(called_without_transform)


def test_final_traces_works_without_the_transform_and_does_not_warn(called_without_transform):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ((fw, bw),) = thunder_ext.final_traces(called_without_transform)
    assert _our_warnings(record) == []
    assert bw is None and fw.bound_symbols


@pytest.mark.parametrize("name", ACCESSORS)
def test_accessors_do_not_warn_when_there_is_something_to_report(name, called_with_transform):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = getattr(thunder_ext, name)(called_with_transform)
    assert _our_warnings(record) == []
    assert len(result) == 1


def test_thunderfx_object_not_called_warns():
    from thunder.dynamo import thunderfx

    cfn = thunderfx(plain_function, transforms=[InplaceBarrierTransform()])
    with pytest.warns(UserWarning, match="has compiled no subgraph yet"):
        assert thunder_ext.fusion_stage_traces(cfn) == []


# -- the transform's options ------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{"check": "yes"}, {"check": 1}, {"check": None}, {"comment": "no"}])
def test_transform_options_take_booleans(kwargs):
    (name, value), = kwargs.items()
    with pytest.raises(TypeError, match=rf"InplaceBarrierTransform\({name}=\.\.\.\) takes True or False, not {value!r}"):
        InplaceBarrierTransform(**kwargs)


def test_transform_options_are_keyword_only():
    with pytest.raises(TypeError):
        InplaceBarrierTransform(True)


# -- check() ----------------------------------------------------------------------------------


def test_check_rejects_a_compiled_function(called_with_transform):
    with pytest.raises(TypeError, match=r"check\(\) takes your plain Python function .* pass the original function"):
        thunder_ext.check(called_with_transform, torch.randn(4, 3), torch.randn(4, 3))


def test_check_rejects_a_non_callable():
    with pytest.raises(TypeError, match=r"check\(\) takes the function to check as its first argument"):
        thunder_ext.check(torch.randn(3), torch.randn(3))


def test_check_options_take_one_name_or_several():
    r = thunder_ext.check(plain_function, torch.randn(3), fusion_type="dataflow", entry="jit", executors="default")
    assert [row.name for row in r.rows] == ["plain-dataflow-default-jit", "transform-dataflow-default-jit"]
    r = thunder_ext.check(plain_function, torch.randn(3), fusion_type=("dataflow", "dataflow"))
    assert len(r.rows) == 2  # a repeated name runs once


def test_check_entry_option_is_not_passed_to_the_function():
    # The misuse of issue #21: check(f, x, entry='thunderfx') reached f as a keyword argument
    # and was reported as an error in the user's function.  It is the option now.
    r = thunder_ext.check(plain_function, torch.randn(3), entry="thunderfx", fusion_type="dataflow")
    assert r.status == "safe" and r.eager_error is None
    assert [row.name for row in r.rows] == ["plain-dataflow-default-thunderfx", "transform-dataflow-default-thunderfx"]


@pytest.mark.parametrize("old, new", [("fusion_types", "fusion_type"), ("entries", "entry")])
def test_check_old_option_spellings_name_the_new_ones(old, new):
    with pytest.raises(TypeError, match=rf"check\(\) got the option {old}=, which is now spelled {new}="):
        thunder_ext.check(plain_function, torch.randn(3), **{old: ("dataflow",)})


def test_check_unknown_option_is_named_with_the_valid_ones():
    with pytest.raises(TypeError) as exc:
        thunder_ext.check(plain_function, torch.randn(3), fusion="dataflow")
    text = str(exc.value)
    assert "unknown option fusion=" in text and "did you mean fusion_type=?" in text
    for option in ("fusion_type=", "entry=", "executors=", "state=", "kwargs="):
        assert option in text
    assert "kwargs=" in text.split("keyword arguments go in")[1]


def test_check_passes_the_functions_keywords_through_kwargs():
    def scale(x, *, factor):
        return x * factor

    x = torch.randn(3)
    r = thunder_ext.check(scale, x, fusion_type="dataflow", kwargs={"factor": 3.0})
    assert r.status == "safe" and all(row.result == "correct" for row in r.rows)
    with pytest.raises(TypeError, match=r"check\(kwargs=\.\.\.\) takes a dict of your function's keyword arguments"):
        thunder_ext.check(scale, x, kwargs=[("factor", 3.0)])


@pytest.mark.parametrize("option", ["fusion_type", "entry", "executors"])
def test_check_options_reject_what_is_not_a_name(option):
    with pytest.raises(TypeError, match=rf"check\({option}=\.\.\.\) takes one of"):
        thunder_ext.check(plain_function, torch.randn(3), **{option: 3})
    with pytest.raises(ValueError, match=rf"check\({option}=\.\.\.\) is empty"):
        thunder_ext.check(plain_function, torch.randn(3), **{option: ()})


def test_check_options_reject_unknown_names():
    with pytest.raises(ValueError, match="unknown fusion type 'sideways'"):
        thunder_ext.check(plain_function, torch.randn(3), fusion_type=("sideways",))
    with pytest.raises(ValueError, match="unknown executors 'nvfuser'"):
        thunder_ext.check(plain_function, torch.randn(3), executors=("nvfuser",))


def test_check_report_shows_as_its_table():
    r = thunder_ext.check(plain_function, torch.randn(3), fusion_type="dataflow")
    text = str(r)
    assert repr(r) == text
    assert text.splitlines()[0].startswith("safe with InplaceBarrierTransform")
    assert "configuration" in text and "transform-dataflow-default-jit" in text


def test_check_state_must_be_a_dict_of_tensors():
    with pytest.raises(TypeError, match=r"check\(state=\.\.\.\) takes a dict .* dict\(module\.named_buffers\(\)\)"):
        thunder_ext.check(plain_function, torch.randn(3), state=[torch.zeros(3)])
