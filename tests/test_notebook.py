"""Execute every notebook in notebooks/ and check what each shows (at least one picture each).

The kernel must run the interpreter that runs the tests (the one with thunder_ext installed),
whatever ``python3`` kernelspecs exist in the user's or the system's Jupyter paths.  So the
test writes a ``python3`` kernelspec for ``sys.executable`` into a temporary directory and
hands nbclient a kernel manager that only looks there: nothing outside the temporary
directory is installed or modified.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from ipykernel.kernelspec import write_kernel_spec  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def _kernel_manager(tmp_path: Path) -> KernelManager:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    # write_kernel_spec puts sys.executable in argv[0]
    write_kernel_spec(str(kernels / "python3"), overrides={"display_name": "thunder-ext test kernel"})
    ksm = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
    spec = ksm.get_kernel_spec("python3")
    assert Path(spec.argv[0]) == Path(sys.executable)
    return KernelManager(kernel_name="python3", kernel_spec_manager=ksm)


def _outputs_text(nb) -> list[str]:
    """The text of every code cell's outputs, one string per cell."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", ""))
            elif out.output_type == "error":
                parts.append(f"{out.ename}: {out.evalue}")
        texts.append("".join(parts))
    return texts


def _rich(nb, mime: str) -> list[str]:
    """Every rich output of type ``mime`` (``image/png`` base64, ``text/html``), in cell order."""
    return [
        out["data"][mime]
        for c in nb.cells
        if c.cell_type == "code"
        for out in c.outputs
        if out.output_type in ("execute_result", "display_data") and mime in out.get("data", {})
    ]


def _images(nb) -> list[str]:
    return _rich(nb, "image/png")


def _html(nb) -> list[str]:
    return _rich(nb, "text/html")


# Upstream messages the notebooks filter (thunder_ext.quiet_upstream_noise): Thunder's import
# without transformer_engine, and torch's cpp_extension on a machine with CUDA_HOME but no GPU.
UPSTREAM_NOISE = ("transformer_engine module not found", "No CUDA runtime is found")


def _execute(path: Path, tmp_path: Path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        km=_kernel_manager(tmp_path),
        kernel_name="python3",
        timeout=600,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError if any cell fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return nb


def test_every_notebook_is_checked_below():
    assert {p.name for p in NOTEBOOKS} == set(_CHECKS), "add a check for each notebook in notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], "store the notebook with outputs cleared"
            assert cell.execution_count is None, "store the notebook with outputs cleared"


def _check_dead_inplace_fix(nb) -> None:
    texts = _outputs_text(nb)
    everything = "\n".join(texts)

    # plain Thunder: the bare AssertionError, and the dead write after the return
    assert "plain Thunder raised AssertionError" in everything
    assert "copy_(" in texts[2]
    assert texts[2].index("return ") < texts[2].index("copy_(")
    assert "bound symbols after the return: []" not in texts[2]

    # with the transform: the dead write is gone, the fusion-stage trace is shown, results match
    assert "copy_(" not in texts[4]
    assert "Constructed by thunder_ext barriers" in texts[5]
    assert "ltorch.mul_" in texts[5]  # the removed dead write, from the report
    assert "result matches eager: True" in everything
    assert "violations in the final trace: []" in everything

    # the live write: a value (a scatter into x's value), then one copy_ into x just before the return
    last = texts[-1]
    assert "index_copy(x, 0" in last and "copy_(" in last and "update_aliases" not in last
    assert last.index("index_copy(x") < last.rindex("copy_(") < last.rindex("return {")
    assert "result and mutated input match eager: True" in last

    # the pictures: plain Thunder's graph and the fixed one, each a figure of its own cell
    assert "Figure" in texts[3] and "Figure" in texts[6]
    assert len(_images(nb)) == 2


def _check_war_and_batchnorm(nb) -> None:
    texts = _outputs_text(nb)
    # write-after-read: plain is wrong, the transform is right; the graphs show why
    assert "plain: result matches eager: False" in texts[1]
    assert "with the transform: result matches eager: True, x matches eager: True" in texts[1]
    # the hazard as the function is written: x is read, then written (whatever order fusion chose)
    assert "[WAR] write after read is not ordered" in texts[2] and "= mul` " in texts[2].split("->")[0]
    assert "violations: []" in texts[3]
    assert "safe with InplaceBarrierTransform" in texts[4]
    assert "thunder-ext-check" in _html(nb)[0]  # the report shows as a table, not <CheckReport ...>
    # BatchNorm twice: plain loses an update, the transform keeps both
    assert "plain: output matches eager: True, running_mean matches eager: False" in texts[5]
    assert "with the transform: output matches eager: True, running_mean matches eager: True" in texts[5]
    assert "[WAW] write after write is not ordered" in texts[6]
    assert "barrier: WAW" in texts[6] or "barrier: RAW" in texts[6]
    assert "safe with InplaceBarrierTransform" in texts[7]
    assert len(_html(nb)) == 2
    assert len(_images(nb)) == 2


_CHECKS = {
    "dead_inplace_fix.ipynb": _check_dead_inplace_fix,
    "war_and_batchnorm_thunderfx.ipynb": _check_war_and_batchnorm,
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    nb = _execute(path, tmp_path)
    assert _images(nb), f"{path.name} shows no picture (no image/png output)"
    everything = "\n".join(_outputs_text(nb))
    for message in UPSTREAM_NOISE:
        assert message not in everything
    _CHECKS[path.name](nb)
