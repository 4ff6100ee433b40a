"""The analysis notebook executes end to end on demo-scale results.

The runs are the well-formed fake run folders of ``test_tables`` (written
into a temporary folder); the notebook finds them and its results folder
through ``CLAG_RUNS_DIR`` / ``CLAG_RESULTS_DIR``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_tables import write_demo_runs

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"


def _outputs(notebook: nbformat.NotebookNode) -> list[dict]:
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]


def test_notebook_executes_on_demo_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = write_demo_runs(tmp_path / "runs")
    results = tmp_path / "results"
    monkeypatch.setenv("CLAG_RUNS_DIR", str(runs))
    monkeypatch.setenv("CLAG_RESULTS_DIR", str(results))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    outputs = _outputs(notebook)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/markdown", "")) + str(o.get("text", "")) for o in outputs)
    assert "7 finished runs under" in text
    assert "| 20.99 | 25.00 [15.00, 35.00] | +4.01 |" in text  # Table 1 from results/tables: CLAG's LoCoMo 1-5
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 4  # categories, latency, clusters vs tau, the cluster map
    assert (results / "tables" / "table16.md").is_file()
    assert (results / "tables" / "fig_cluster_map.png").is_file()
