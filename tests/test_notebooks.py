"""The paper walkthrough notebook executes end to end on the shipped model and shows its figures."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_paper_walkthrough_executes():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / "paper_walkthrough.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    assert any("image/png" in o.get("data", {}) for o in outputs), "no cell displayed a PNG figure"


def test_clip_interpretability_notebook_executes():
    """The whole-model notebook (joint patching, caption attributions, an SAE) runs end to end."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / "clip_interpretability.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "sum of attributions == belief: True" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "no cell displayed a PNG figure"
