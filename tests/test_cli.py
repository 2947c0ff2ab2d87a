"""``python -m thunder_ext``: subcommands, usage errors, --help, a closed pipe, progress.

Subprocesses run the real command line; none of these runs the gallery (about 45 s): a
usage error must stop before it starts.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from thunder_ext import cli
from thunder_ext.progress import progress

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "thunder_ext", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=300, **kwargs)


def test_help_shows_usage_and_subcommands_in_plain_text():
    p = run("--help")
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout.startswith("usage: python -m thunder_ext [-h] SUBCOMMAND ...")
    for command in ("gallery", "check", "bench"):
        assert f"\n    {command} " in p.stdout
    for markup in ("``", ":func:", ":class:", ":mod:"):
        assert markup not in p.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["chek", "file.py:f"], "unknown subcommand 'chek'; did you mean 'check'?"),
        (["galery"], "unknown subcommand 'galery'; did you mean 'gallery'?"),
        (["frobnicate"], "unknown subcommand 'frobnicate' (choose from gallery, check, bench"),
        (["--verbose"], "unrecognized arguments: --verbose"),
        (["gallery", "--entri", "jit"], "unrecognized arguments: --entri jit (did you mean --entry?)"),
        (["check", "x.py:f", "--seeds", "3"], "unrecognized arguments: --seeds 3 (did you mean --seed?)"),
        (["gallery", "--entry", "aot"], "argument --entry: invalid choice: 'aot'"),
    ],
)
def test_usage_errors_exit_2_before_running_anything(argv, message):
    p = run(*argv)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stdout == ""  # in particular, no gallery table
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m thunder_ext") and ": error: " in last
    assert message in last


def _into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    try:
        return subprocess.run([sys.executable, *argv], cwd=REPO, stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write_end)


def test_help_into_a_closed_pipe_ends_quietly():
    # `python -m thunder_ext --help | head` used to end in BrokenPipeError tracebacks
    p = _into_closed_pipe(["-m", "thunder_ext", "--help"])
    assert p.stderr == "" and p.returncode == 0


def test_long_output_into_a_closed_pipe_ends_quietly():
    # a subcommand's own output (the gallery table, a report) meeting a closed pipe
    code = "import sys; from thunder_ext import cli; sys.exit(cli.main([], gallery=lambda e, x: print('row ' * 50000) or 0))"
    p = _into_closed_pipe(["-c", code])
    assert p.stderr == ""  # no BrokenPipeError traceback, not even at the interpreter's exit
    assert p.returncode == 141


def test_script_subcommand_outside_a_checkout_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "SCRIPTS_DIR", tmp_path)  # a wheel install has no scripts/
    assert cli.main(["bench"], gallery=lambda *a: 0) == 2
    err = capsys.readouterr().err
    assert "bench.py is a developer script of the source checkout" in err


def test_no_argument_runs_the_gallery_with_its_defaults():
    calls = []
    assert cli.main([], gallery=lambda entry, executors: calls.append((entry, executors)) or 0) == 0
    assert cli.main(["gallery", "--entry", "thunderfx"], gallery=lambda *a: calls.append(a) or 0) == 0
    assert calls == [("jit", "default"), ("thunderfx", "default")]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(monkeypatch):
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert list(progress(["a", "b"], "check")) == ["a", "b"]
    assert pipe.getvalue() == ""

    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    assert list(progress(["a", "b"], "check")) == ["a", "b"]
    shown = tty.getvalue()
    assert "check 1/2: a" in shown and "check 2/2: b" in shown
    assert shown.endswith("\r") and "\n" not in shown  # one line, cleared at the end
