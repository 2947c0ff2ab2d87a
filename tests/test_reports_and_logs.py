"""What the user reads: report summaries, the ``thunder_ext`` logger and ``THUNDER_EXT_LOGS``,
and the main job's table (legend, details wrapped and never cut, no upstream noise)."""

from __future__ import annotations

import inspect

import logging
import os
import subprocess
import sys

import pytest
import thunder
import torch

import thunder_ext
from thunder_ext import GradInputWriteError, InplaceBarrierTransform
from thunder_ext.barriers import BarrierReport
from support import refused_where_eager_answers_args, refused_where_eager_answers
from thunder_ext.logs import level_from_env
from thunder_ext.summaries import barrier_report_html, barrier_report_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """\
import torch, thunder
from thunder_ext import InplaceBarrierTransform


def f(x, w):
    z = w.sin().cos().tanh().sin()
    a = x * z      # reads x ...
    x.add_(1)      # ... before this write: a WAR barrier
    y = x * 2
    y.mul_(3)      # dead: nothing reads y
    return a


jf = thunder.jit(f, fusion_type="dataflow", transforms=[InplaceBarrierTransform()])
jf(torch.randn(4, 3), torch.randn(4, 3))
print("done")
"""


def hazard(x, w):
    z = w.sin().cos().tanh().sin()
    a = x * z
    x.add_(1)
    y = x * 2
    y.mul_(3)
    return a


@pytest.fixture(scope="module")
def reports():
    jf = thunder.jit(hazard, fusion_type="dataflow", transforms=[InplaceBarrierTransform()])
    jf(torch.randn(4, 3), torch.randn(4, 3))
    (rep,) = thunder_ext.last_reports(jf)
    return rep


# -- summaries --------------------------------------------------------------------------------


def test_stage_reports_str_names_barriers_dead_writes_and_time(reports):
    text = str(reports)
    lines = text.splitlines()
    assert lines[0].startswith("before autodiff: 1 barrier placed, 1 dead in-place op removed")
    assert lines[0].endswith(" ms")
    # x.add_(1) is a value now, written back by one copy_ under its line: the barrier orders that copy.
    add_line = f"{__file__}:{inspect.getsourcelines(hazard)[1] + 3}"
    assert any(line.strip().startswith("barrier: WAR: `a = mul`") and "copy_" in line and add_line in line for line in lines)
    assert any("inputs written as values, then copied back once at the end: `x`" in line for line in lines)
    assert any(line.strip().startswith("removed dead in-place op `") and "mul_" in line for line in lines)
    assert any(line.startswith("fusion stage: ") for line in lines)
    # no trace inside: a trace prints its bound symbols and a `def computation(...)`
    assert "def " not in text and "update_aliases(" not in text and len(lines) < 15


def test_stage_reports_repr_is_one_line_without_traces(reports):
    r = repr(reports)
    assert "\n" not in r and r.startswith("<StageReports before autodiff: 1 barrier placed")
    assert "fusion stage: " in r and "TraceCtx" not in r and "BoundSymbol" not in r
    # a list of reports (what last_reports returns) prints short too
    assert len(repr([reports, reports])) < 600


def test_stage_reports_html(reports):
    h = reports._repr_html_()
    assert h.startswith('<div class="thunder-ext-stage-reports">')
    assert "<li>barrier: WAR: `a = mul`" in h and "removed dead in-place op" in h
    assert "<b>fusion stage</b>" in h and "def " not in h


def test_stage_reports_before_any_run_say_so():
    from thunder_ext.integration import StageReports

    assert str(StageReports()) == "before autodiff: did not run\nfusion stage: did not run"


def test_barrier_report_summary_functions(reports):
    rep = reports.before_autodiff
    assert "before autodiff: " + barrier_report_text(rep) == "\n".join(str(reports).splitlines()[:4])
    assert "<b>1 barrier placed, 1 dead in-place op removed" in barrier_report_html(rep)
    empty = BarrierReport()
    assert barrier_report_text(empty) == "0 barriers placed, 0 dead in-place ops removed, 0.0 ms"


def test_barrier_report_str_is_the_summary(reports):
    rep = reports.before_autodiff
    assert str(rep) == barrier_report_text(rep)
    assert rep._repr_html_() == barrier_report_html(rep)


# -- logging ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, level",
    [(None, None), ("", None), ("0", None), ("off", None), ("1", logging.INFO), ("info", logging.INFO),
     ("INFO", logging.INFO), ("debug", logging.DEBUG), (" Debug ", logging.DEBUG)],
)
def test_level_from_env(value, level):
    assert level_from_env(value) == level


def test_unknown_env_value_warns():
    with pytest.warns(UserWarning, match=r"THUNDER_EXT_LOGS='verbose' is not understood; use 1 \(or info\) or debug"):
        assert level_from_env("verbose") is None


def _run(code: str, env_value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "THUNDER_EXT_LOGS"}
    if env_value is not None:
        env["THUNDER_EXT_LOGS"] = env_value
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def logged_runs():
    # one subprocess per setting: the variable is read at import, like TORCH_LOGS
    return {value: _run(PROGRAM, value) for value in (None, "1", "debug")}


def test_logs_off_by_default(logged_runs):
    p = logged_runs[None]
    assert p.returncode == 0, p.stderr
    assert "[thunder_ext" not in p.stderr


def test_logs_on_name_barriers_and_dead_writes_with_reasons(logged_runs):
    p = logged_runs["1"]
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.startswith("[thunder_ext")]
    assert any(line.startswith("[thunder_ext INFO] before autodiff: 1 barrier(s) placed, 1 dead in-place op(s) removed")
               for line in lines), p.stderr
    assert any("before autodiff: barrier: WAR: `a = mul`" in line for line in lines), p.stderr
    assert any("before autodiff: removed dead in-place op `" in line and "mul_" in line for line in lines), p.stderr
    assert any(line.startswith("[thunder_ext INFO] fusion stage: ") for line in lines), p.stderr
    assert "[thunder_ext DEBUG]" not in p.stderr


def test_logs_debug_adds_the_traces(logged_runs):
    p = logged_runs["debug"]
    assert p.returncode == 0, p.stderr
    assert "[thunder_ext DEBUG] before autodiff: trace after the pass:" in p.stderr
    assert "[thunder_ext DEBUG] fusion stage: trace after the pass:" in p.stderr


def test_refusals_are_logged_with_their_reason(caplog):
    jf = thunder.jit(refused_where_eager_answers, fusion_type="dataflow", transforms=[InplaceBarrierTransform()])
    with caplog.at_level(logging.INFO, logger="thunder_ext"), pytest.raises(GradInputWriteError):
        jf(*refused_where_eager_answers_args())
    refusals = [r.getMessage() for r in caplog.records if r.name == "thunder_ext" and "refused" in r.getMessage()]
    assert len(refusals) == 1
    assert refusals[0].startswith("before autodiff: refused with GradInputWriteError: the function writes in place to the input `a`")
    assert f"{__file__.replace('test_reports_and_logs', 'support')}:" in refusals[0], refusals[0]


# -- the main job -----------------------------------------------------------------------------


def test_main_table_has_a_legend_and_uncut_details():
    from thunder_ext.__main__ import LEGEND, WIDTH, detail_lines, legend_lines

    long_detail = "final module state differs: " + "x " * 200 + "The failure occurred for item ['running_mean']"
    rows = [{"program": "p", "plain": "wrong", "plain_detail": long_detail, "transform": "correct", "transform_detail": ""}]
    lines = detail_lines(rows)
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert " ".join(line.strip() for line in lines).endswith("['running_mean']")
    legend = "\n".join(legend_lines())
    for header in ("class", "barriers before", "barriers after", "dead writes removed"):
        assert f"  {header}: " in legend
    assert {k for k, _ in LEGEND} >= {"class", "barriers before", "barriers after", "dead writes removed"}


def test_cli_prints_no_upstream_noise():
    # transformer_engine's warning comes at `import thunder`; torch's CUDA_HOME log line when
    # ThunderFX imports torch.utils.cpp_extension on a machine with CUDA_HOME but no GPU.
    p = subprocess.run(
        [sys.executable, "-m", "thunder_ext", "check", "thunder_ext.testing.gallery:war_long_chain", "-i", "4,3,float32",
         "-i", "4,3,float32", "--fusion-type", "dataflow", "--entry", "thunderfx"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "transformer_engine" not in p.stderr and "CUDA_HOME" not in p.stderr, p.stderr
    assert "columns:" in p.stdout


def _batch_norm_stats_then_add(x, rm, rv):
    torch.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.1)
    with torch.no_grad():
        rv.mul_(0.9).add_(x.mean(0), alpha=0.1)
    return x + 1


def test_no_nvfuser_barrier_without_nvfuser_in_any_trace():
    """On a CPU (no nvFuser registered) no trace, before autodiff included, carries nvFuser's barrier:
    a write through a copy_'s output (`rv.mul_(0.9).add_`) is a write to a non-input name."""
    from thunder.extend import get_default_executors

    assert not any(ex.name == "nvfuser" for ex in get_default_executors())
    jf = thunder.jit(_batch_norm_stats_then_add, transforms=[InplaceBarrierTransform()])
    jf(torch.randn(4, 3), torch.zeros(3), torch.ones(3))
    traces = thunder.last_traces(jf) + thunder_ext.fusion_stage_traces(jf)
    assert traces and not [t for t in traces if "nvFuser: write" in str(t)]
