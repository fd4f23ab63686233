"""The example notebooks execute end to end on the shipped model and show their figures (the quickstart in the
default run, tests/test_pretrained_cli.py; these three in the heavy tier, which .ci/run runs after the README's
command)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _execute(name: str) -> list[dict]:
    """Run ``examples/<name>`` end to end; return its code cells' outputs (no cell may raise)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors
    return outputs


def test_notebooks_show_figures_under_any_backend():
    """CI runs with MPLBACKEND=Agg, under which a kernel's plt.show() displays nothing: every notebook that draws
    with pyplot must select the inline backend itself (the bug behind stop 39's red CI)."""
    import nbformat

    for path in sorted(EXAMPLES.glob("*.ipynb")):
        source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        if "plt." in source:
            assert "%matplotlib inline" in source, f"{path.name} draws with pyplot, no inline backend selected"


@pytest.mark.heavy  # 22 s: the default run stays under 5 minutes (4:58 on 2 idle cores, 2026-11-30); .ci/run runs it
def test_paper_walkthrough_executes():
    outputs = _execute("paper_walkthrough.ipynb")
    assert any("image/png" in o.get("data", {}) for o in outputs), "no cell displayed a PNG figure"


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_clip_interpretability_notebook_executes():
    """The whole-model notebook (joint patching, caption attributions, an SAE, circuit discovery) runs end to end, and
    shows the attribution check's warning (issue 45)."""
    outputs = _execute("clip_interpretability.ipynb")
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "sum of attributions == belief: True" in text
    assert "AttributionWarning: AtP disagrees with exact patching" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "no cell displayed a PNG figure"


@pytest.mark.heavy  # 17 s, as above
def test_training_dynamics_notebook_executes():
    """The trajectory notebook (issue 35): emergence figure, checkpoints side by side, the stepping circuitsvis page
    (on the flagship's shipped trajectory, or on a small model it trains when none has shipped)."""
    outputs = _execute("training_dynamics.ipynb")
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "checkpoints at epochs" in text and "no checkpoint at epoch" in text and "offline" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3, "the figures were not displayed"


def test_the_readme_names_the_model_each_notebook_loads():
    """Issue 49 item 6: the README said the notebooks use the flagship while one used ``-no-qk-bias``. Each
    notebook's zoo model (its ``load_model("...")``, ``MODEL = "..."`` or ``NAME = "..."``) is the one the README's
    Notebooks paragraph gives it."""
    import json
    import re

    readme = (ROOT / "README.md").read_text()
    para = readme[readme.index("## Notebooks") :].split("\n- ")[0]
    said = {
        "quickstart": "simplified-ntot20-n2-10",
        "training_dynamics": "simplified-ntot20-n2-10",
        "paper_walkthrough": "simplified-ntot20-n2-10-no-qk-bias",
        "clip_interpretability": "simplified-ntot20-n2-10-no-qk-bias",
    }
    for nb, model in said.items():
        cells = json.loads((ROOT / f"examples/{nb}.ipynb").read_text())["cells"]
        src = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")  # the text may name others
        loaded = set(re.findall(r'(?:load_model\(|^\s*(?:MODEL|NAME) = )"([\w.-]+)"', src, flags=re.M))
        assert loaded == {model}, (nb, loaded)
    said_there = " ".join(para.split())  # the paragraph's line breaks as spaces
    assert "quickstart and the training-dynamics notebook use the flagship `simplified-ntot20-n2-10`" in said_there
    assert "walkthrough and `clip_interpretability` use `simplified-ntot20-n2-10-no-qk-bias`" in said_there
