"""Every notebook in ``notebooks/`` runs headless (nbclient) on small inputs, as CI runs them.

``SYNERGY_SMALL=1`` switches each notebook to small sizes and ``SYNERGY_NB_OUT`` sends its
sweep folders to a temporary directory.  A notebook ends with asserts on what it computed,
so a wrong result fails here, not only a crash.  The stored notebooks must carry no
outputs (they are stripped before commit) and import only the public API.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: Modules a notebook may import from (the public API); names starting with "_" never.
PUBLIC = {
    "synergy_opt.check",
    "synergy_opt.generate",
    "synergy_opt.io",
    "synergy_opt.mechanisms",
    "synergy_opt.profiles",
    "synergy_opt.sim",
    "synergy_opt.sweep",
    "synergy_opt.types",
}
CELL_TIMEOUT_S = 600


def test_the_notebooks_are_there() -> None:
    assert {p.stem for p in NOTEBOOKS} >= {
        "round_gaps",
        "paper_reproduction",
        "cpu_gpu_ratio",
        "gpu_generations",
    }


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs_and_public_imports_only(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs kept"
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("synergy_opt"):
                assert node.module in PUBLIC, f"{path.name}: imports {node.module}"
                assert not any(a.name.startswith("_") for a in node.names), path.name
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith("synergy_opt") or a.name in PUBLIC, a.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_on_small_inputs(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYNERGY_SMALL", "1")
    monkeypatch.setenv("SYNERGY_NB_OUT", str(tmp_path))
    monkeypatch.setenv("SYNERGY_WORKERS", "2")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any failure
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Traceback" not in text
    images = sum(
        "image/png" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    assert images >= 1, f"{path.name}: expected its plots in the outputs"
