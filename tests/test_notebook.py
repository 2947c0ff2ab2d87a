"""Execute notebooks/dead_inplace_fix.ipynb and check what it shows.

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

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "dead_inplace_fix.ipynb"


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


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], "store the notebook with outputs cleared"
            assert cell.execution_count is None, "store the notebook with outputs cleared"


def test_notebook_runs(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        km=_kernel_manager(tmp_path),
        kernel_name="python3",
        timeout=600,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError if any cell fails

    texts = _outputs_text(nb)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    everything = "\n".join(texts)

    # plain Thunder: the bare AssertionError, and the dead write after the return
    assert "plain Thunder raised AssertionError" in everything
    assert "copy_(" in texts[2]
    assert texts[2].index("return ") < texts[2].index("copy_(")
    assert "bound symbols after the return: []" not in texts[2]

    # with the transform: the dead write is gone, the fusion-stage trace is shown, results match
    assert "copy_(" not in texts[3]
    assert "Constructed by thunder_ext barriers" in texts[4]
    assert "ltorch.mul_" in texts[4]  # the removed dead write, from the report
    assert "result matches eager: True" in everything
    assert "violations in the final trace: []" in everything

    # the live write: kept, ordered before the return by a commented barrier, correct
    assert "# thunder_ext: RAW:" in texts[-1]
    assert "result and mutated input match eager: True" in texts[-1]
