"""Every figure labels its reference lines, uses readable legend text, shows a zero bar as zero and, when saved by
``analyze`` or ``reproduce``, names its model and data."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from hooked_clip1d.analysis.interventions.interchange import InterchangeResult  # noqa: E402
from hooked_clip1d.analysis.interventions.knockout import KnockoutResult  # noqa: E402
from hooked_clip1d.analysis.interventions.patching import PatchSweep  # noqa: E402
from hooked_clip1d.visualization import style  # noqa: E402
from hooked_clip1d.visualization.alignment import plot_alignment  # noqa: E402
from hooked_clip1d.visualization.decomposition import plot_ablations  # noqa: E402
from hooked_clip1d.visualization.heads import plot_head_roles, plot_pruning  # noqa: E402
from hooked_clip1d.visualization.patching import plot_interchange, plot_knockout, plot_recovery_bars  # noqa: E402
from hooked_clip1d.visualization.plots import plot_head_bias  # noqa: E402

RAW_KEYS = {"acc", "label_set", "relaxed", "raw", "procrustes", "shuffled"}


def _ablations():
    m = {"val_seen": {"acc": 0.0, "label_set": 1.0}, "val_unseen": {"acc": 0.5, "label_set": 0.0}}
    return {
        "splits": ["val_seen", "val_unseen"],
        "conditions": {"baseline": {"terms": [], "metrics": m}, "EP": {"terms": ["EP"], "metrics": m}},
    }


def _pruning():
    split = {"val_unseen": {"acc": 0.0}}
    return {"runs": [{"kept": [[0, 2]], "before": split, "after": None}], "baseline": {"val_unseen": {"acc": 1.0}}}


def _alignment():
    s = {"matched_cos": 0.0, "unmatched_cos": 0.1, "acc": 0.0}
    return {
        "cos_raw": np.eye(3),
        "cos_procrustes": np.eye(3),
        "fit_labels": [1, 2],
        "test_labels": [3],
        "raw": s,
        "procrustes": s,
        "shuffled": s,
    }


FIGURES = {
    "head_bias": lambda: plot_head_bias({"left": torch.tensor([[0.0, 1.0]]), "right": torch.tensor([[1.0, 0.0]])}),
    "ablations": lambda: plot_ablations(_ablations(), splits=("val_seen", "val_unseen")),
    "head_roles": lambda: plot_head_roles({"relational": [0.0, 0.6], "label_specific": [0.2, 0.1]}),
    "pruning": lambda: plot_pruning(_pruning()),
    "alignment": lambda: plot_alignment(_alignment()),
    "knockout": lambda: plot_knockout(
        KnockoutResult("vision", ["CLS->left"], torch.tensor([[0.0, 0.0]]), torch.tensor([1.0, 1.0]))
    ),
    "recovery": lambda: plot_recovery_bars(
        PatchSweep(
            "vision",
            ["a", "b"],
            ["embed", "after L0"],
            ["all", "cls"],
            False,
            torch.tensor([[[0.0], [1.0]], [[0.0], [0.0]]]),
            torch.tensor([1.0]),
            torch.tensor([0.0]),
        )
    ),
    "interchange": lambda: plot_interchange(
        InterchangeResult(
            torch.tensor([1.0]),
            torch.tensor([-1.0]),
            torch.tensor([[1.0]]),
            None,
            torch.tensor([[0.0]]),
            torch.tensor([[[0.0], [0.0]]]),
        )
    ),
}


@pytest.fixture(params=sorted(FIGURES))
def fig(request) -> Figure:
    f = FIGURES[request.param]()
    yield f
    plt.close(f)


def _horizontal_lines(ax):
    for line in ax.get_lines():
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        if len(y) == 2 and y[0] == y[1] and tuple(x) == (0.0, 1.0):  # axhline: x in axes units
            yield line, float(y[0])


def test_every_reference_line_is_labelled(fig):
    unlabelled = [
        f"y={y}" for ax in fig.axes for line, y in _horizontal_lines(ax) if y != 0 and line.get_label().startswith("_")
    ]
    assert not unlabelled, f"reference lines without a legend label: {unlabelled}"


def test_legends_use_readable_names(fig):
    texts = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()}
    assert texts, "the figure has no legend"
    assert not texts & RAW_KEYS, f"raw keys in a legend: {texts & RAW_KEYS}"


def test_zero_bars_are_drawn(fig):
    # every input above has a zero bar: it must be visible as a flat line at 0 with a "0"
    zero_lines = [
        line
        for ax in fig.axes
        for line in ax.get_lines()
        if len(line.get_ydata()) == 2
        and tuple(np.asarray(line.get_ydata(), float)) == (0.0, 0.0)
        and line.get_linewidth() >= 2
    ]
    zeros = [t for ax in fig.axes for t in ax.texts if t.get_text() == "0"]
    assert zero_lines and zeros


def test_a_bar_too_small_to_see_reads_about_zero():
    """A knockout bar of -0.0003 beside 0.6 was invisible (no bar, no mark)."""
    fig, ax = plt.subplots()
    style.bars(ax, [0, 1, 2], [0.6, -0.0003, 0.0])
    assert sorted(t.get_text() for t in ax.texts) == ["0", "≈0"]
    assert sum(len(line.get_ydata()) == 2 for line in ax.get_lines()) == 2
    plt.close(fig)
    fig, ax = plt.subplots()  # grouped bars, one call per series: the tiny series drawn first is marked too
    style.bars(ax, [0.2, 1.2], [0.002, 0.001], width=0.4)
    style.bars(ax, [-0.2, 0.8], [0.96, 0.9], width=0.4)
    assert [t.get_text() for t in ax.texts] == ["≈0", "≈0"]
    plt.close(fig)


def test_missing_values_read_n_a_not_zero():
    fig, ax = plt.subplots()
    style.bars(ax, [0, 1], [None, float("nan")])
    assert [t.get_text() for t in ax.texts] == ["n/a", "n/a"]
    assert not any(len(line.get_ydata()) == 2 for line in ax.get_lines())
    plt.close(fig)


def test_reference_line_needs_a_label():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="needs a label"):
        style.reference_line(ax, 0.5, "")
    plt.close(fig)


def test_analyze_names_model_and_data_under_each_figure(tmp_path, monkeypatch):
    from hooked_clip1d.cli.analyze import run_analysis

    stamped = []
    real = style.stamp

    def spy(fig, model, data=None):
        stamped.append((model, data))
        return real(fig, model, data)

    monkeypatch.setattr(style, "stamp", spy)
    res = run_analysis("attention", "simplified-ntot20-n2-10", out_dir=tmp_path)
    pngs = [f for f in res["files"] if f.endswith(".png")]
    assert len(stamped) == len(pngs) > 0
    assert all(m == "simplified-ntot20-n2-10" and "val_unseen" in d for m, d in stamped)


def test_footer_sits_below_rotated_tick_labels():
    """A knockout plot's rotated tick label once ran through the footer."""
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.bar(range(3), [1, 2, 3])
    ax.set_xticks(range(3), ["CLS->background", "CLS->objects", "a long rotated label"], rotation=30)
    footer = style.stamp(fig, "m", "some data")
    renderer = fig.canvas.get_renderer()
    assert footer.get_window_extent(renderer).y1 <= ax.get_tightbbox(renderer).y0
    plt.close(fig)


def _overlaps(texts, renderer) -> list[tuple[str, str]]:
    shown = [t for t in texts if t.get_visible() and t.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in shown]
    return [
        (shown[i].get_text(), shown[j].get_text())
        for i in range(len(shown))
        for j in range(i + 1, len(shown))
        if boxes[i].overlaps(boxes[j])
    ]


def test_tick_labels_and_panel_texts_do_not_run_into_each_other(fig):
    """Neighbouring tick labels do not overlap (Fig. 7's bar labels did), nor does a panel's title overlap the
    texts drawn in it (Fig. 7's "fit | test" ran into its title)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        assert not _overlaps(ax.get_xticklabels(), renderer), ax.get_title()
        assert not _overlaps(ax.get_yticklabels(), renderer), ax.get_title()
        assert not _overlaps([ax.title, *ax.texts], renderer), ax.get_title()


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_doctests_leave_no_figure_open_for_the_next(tmp_path):
    """The package's doctests show figure functions without closing what they return; in one worker the 21st open
    figure made matplotlib warn and kept every figure's memory. The ``tests.doctest_figures`` plugin (in addopts)
    closes them after each doctest: 25 doctests of one figure each pass under ``-W error::RuntimeWarning`` with it,
    and fail without it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    mod = tmp_path / "many_figures.py"
    mod.write_text(
        "\n".join(
            f'def f{i}():\n    """\n    >>> import matplotlib.pyplot as plt\n    >>> fig = plt.figure()\n    """\n'
            for i in range(25)
        )
    )
    base = [sys.executable, "-m", "pytest", "-q", "-n0", "-o", "addopts=", "-p", "no:cacheprovider"]
    base += ["--doctest-modules", "-W", "error::RuntimeWarning", str(mod)]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    with_plugin = subprocess.run([*base, "-p", "tests.doctest_figures"], cwd=root, env=env, capture_output=True)
    without = subprocess.run(base, cwd=root, env=env, capture_output=True)
    assert with_plugin.returncode == 0, with_plugin.stdout.decode()[-2000:]
    assert without.returncode != 0 and b"More than 20 figures" in without.stdout
