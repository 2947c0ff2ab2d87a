"""The README's usage example runs as shown: its checks pass, it prints the report, and no
upstream message reaches the user's terminal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
UPSTREAM_NOISE = ("transformer_engine module not found", "No CUDA runtime is found")


def _usage_example() -> str:
    usage = README.read_text().split("\n## Usage\n", 1)[1]
    (code,) = re.findall(r"^```python\n(.*?)^```", usage.split("\n## ", 1)[0], flags=re.M | re.S)[:1]
    return code


def test_usage_example_runs_quietly_and_prints_the_report(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(_usage_example())
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    for message in UPSTREAM_NOISE:
        assert message not in p.stderr and message not in p.stdout
    lines = p.stdout.splitlines()
    assert lines[0].startswith("safe with InplaceBarrierTransform (plain Thunder fails: wrong in plain-dataflow")
    shown = README.read_text().split("It prints", 1)[1]
    # the rows the README shows are the rows the example prints
    for name in ("plain-consecutive-default-jit", "transform-dataflow-default-jit"):
        row = next(line for line in lines if line.startswith(name))
        assert " ".join(row.split()[:4]) in " ".join(shown.split())
