"""Packaging and set-up: the built wheel, the README's set-up commands, and CI's command.

* The wheel maps ``transforms/`` to ``thunder_ext.transforms`` and must install no
  top-level ``transforms`` package.  It is built from a copy of the repository (so no
  ``build/`` or ``*.egg-info`` lands in the working tree), installed with ``--no-deps``
  into a scratch virtualenv, and imported from a directory outside the repository: run
  from the repository root, the source ``thunder_ext/`` (which has no ``transforms``
  subpackage) would shadow the installed one.
* The README's "Set-up" section holds exactly two commands, and ``.ci/run`` runs the
  second one (the test suite), then the Thunder ``main`` lane (``.ci/thunder-main``), which
  runs a named lane of the same suite against Thunder main (the whole suite on request).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"

MAIN_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python -m thunder_ext"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"

IMPORT_CHECK = "import thunder_ext.transforms; from thunder_ext import InplaceBarrierTransform, insert_barriers"


# -- README and CI ------------------------------------------------------------------------------


def setup_section() -> str:
    text = README.read_text()
    m = re.search(r"^## Set-up[ \t]*\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, "README.md has no '## Set-up' section"
    return m.group(1)


def setup_commands() -> list[str]:
    """Every command in the fenced code blocks of the Set-up section, one per line."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", setup_section(), flags=re.M | re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def readme_test_command() -> str:
    cmds = [c for c in setup_commands() if "pytest" in c]
    assert len(cmds) == 1, cmds
    return cmds[0]


def test_readme_has_exactly_two_setup_commands():
    section = setup_section()
    assert len(re.findall(r"^```", section, flags=re.M)) == 4, "expected exactly two fenced code blocks"
    assert setup_commands() == [MAIN_COMMAND, TEST_COMMAND]


def ci_commands() -> list[str]:
    lines = [ln.strip() for ln in CI_RUN.read_text().splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_ci_runs_the_readme_test_command():
    text = CI_RUN.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n")
    assert CI_RUN.stat().st_mode & stat.S_IXUSR, ".ci/run must be executable"
    cmds = ci_commands()
    assert cmds[0] == "set -euo pipefail"
    assert re.fullmatch(r'cd "\$\(dirname "\$0"\)/\.\."', cmds[1]), cmds[1]
    assert cmds[2:] == [readme_test_command(), "bash .ci/thunder-main"], (
        "after the cd: the README's test command, then the Thunder main lane"
    )
    subprocess.run(["bash", "-n", str(CI_RUN)], check=True)


def _collected(args: list[str]) -> set[str]:
    """Node ids pytest collects from the repository root with ``args`` (in one process)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTEST_ADDOPTS": ""},  # a -v there would undo -q, and the node ids with it
    ).stdout
    return {ln for ln in out.splitlines() if "::" in ln}


def test_thunder_main_lane_is_the_lane_it_says():
    """The lane against Thunder main: the whole suite with ``THUNDER_MAIN_LANE=full``; otherwise
    the default-executor tests of every file not named (the gallery grid among them)."""
    lane = CI_RUN.parent / "thunder-main"
    subprocess.run(["bash", "-n", str(lane)], check=True)
    cmds = [ln.strip() for ln in lane.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert "set -euo pipefail" in cmds
    assert cmds[-1] == '.venv-main/bin/python -m pytest ${LANE[@]+"${LANE[@]}"}'
    assert cmds[-2] == 'if [ "${THUNDER_MAIN_LANE:-ci}" = "full" ]; then LANE=(); fi'
    (lane_line,) = [c for c in cmds if c.startswith("LANE=(")]
    args = shlex.split(lane_line[len("LANE=(") : -1])
    ignored = {a.split("=", 1)[1] for a in args if a.startswith("--ignore=")}
    assert all((ROOT / f).is_file() for f in ignored), "an --ignore names no test file (renamed?)"

    everything, lane_tests = _collected([]), _collected(args)
    files = lambda ids: {i.split("::")[0] for i in ids}  # noqa: E731
    assert files(everything) - files(lane_tests) == ignored
    for f in ("tests/test_catalogue.py", "tests/test_final_barriers.py"):
        cells = {i for i in everything if i.startswith(f)}
        assert cells & lane_tests == {i for i in cells if "torch_compile" not in i}, f
        assert any("torch_compile" in i for i in cells), "the lane's -k no longer tells tc cells apart"


# -- the wheel ----------------------------------------------------------------------------------


def _backend_available() -> bool:
    """Can setuptools build a wheel here without fetching anything (``--no-isolation``)?"""
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(p) for p in re.findall(r"\d+", setuptools.__version__)[:2])
    if (major, minor) < (64, 0):
        return False
    # setuptools < 70.1 needs the separate `wheel` package for bdist_wheel
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


# Everything pyproject.toml builds the wheel from (package dirs and the readme it names).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "thunder_ext", "transforms")


def build_wheel(tmp: Path) -> Path:
    # Copy only what the wheel is built from: the checkout also holds ignored virtual
    # environments (.venv-main, several GB, once filled CI's disk through this copy).
    src = tmp / "src"
    src.mkdir()
    for name in WHEEL_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp / "dist"
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist)]
    if _backend_available():
        cmd.append("--no-isolation")
    # else: an isolated build fetches setuptools and wheel from the package index
    proc = subprocess.run(cmd + [str(src)], cwd=tmp, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = dist.glob("thunder_ext-*.whl")
    return wheel


def wheel_bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("build")
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert "transforms" not in top, "a top-level `transforms` package got installed"
    assert all(t == "thunder_ext" or t.startswith("thunder_ext-") for t in top), top
    assert "thunder_ext/transforms/__init__.py" in names
    assert "thunder_ext/transforms/inplace_barrier.py" in names
    assert "thunder_ext/barriers.py" in names
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")] or [None]
    if top_level is not None:
        assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["thunder_ext"]


def test_wheel_installs_and_imports_outside_the_repository(wheel, tmp_path):
    venv = tmp_path / "venv"
    # --system-site-packages exposes the base interpreter's packages; when the tests run in a
    # virtualenv (the usual case) torch and thunder live in *its* site-packages, which a .pth
    # file adds below, after the wheel is installed (so that pip does not see the editable
    # install of thunder-ext there).  Nothing is downloaded.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = wheel_bin(venv, "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        env=env,
        cwd=tmp_path,
    )
    scratch_site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout.strip()
    )
    outer = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]]) if Path(p).is_dir()]
    # plain path lines: the outer site-packages' own .pth files (the editable finder) are not run
    (scratch_site / "zz_outer_site_packages.pth").write_text("".join(f"{p}\n" for p in outer))

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    check = IMPORT_CHECK + "; import thunder_ext; print(thunder_ext.__file__); print(thunder_ext.transforms.__file__)"
    proc = subprocess.run([str(py), "-c", check], cwd=outside, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = [Path(line) for line in proc.stdout.split()]
    assert len(files) == 2, proc.stdout
    for f in files:
        assert f.resolve().is_relative_to(scratch_site.resolve()), f"imported from {f}, not from the wheel"

    # and no top-level `transforms` was installed into the scratch environment
    assert not (scratch_site / "transforms").exists()
    proc = subprocess.run(
        [str(py), "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('transforms') is not None)"],
        cwd=outside,
        env=env,
    )
    assert proc.returncode == 0, "a top-level `transforms` module is importable from the installed wheel"


def test_hypothesis_only_behind_the_fuzzer():
    """hypothesis is a test extra: the product, the main job and the harness never import it."""
    code = (
        "import sys, thunder_ext, thunder_ext.transforms, thunder_ext.doctor, thunder_ext.cli, "
        "thunder_ext.testing.compare, thunder_ext.testing.gallery\n"
        "thunder_ext.InplaceBarrierTransform\n"
        "assert 'hypothesis' not in sys.modules, 'hypothesis was imported'\n"
        "import thunder_ext.testing.fuzzing\n"
        "assert 'hypothesis' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
