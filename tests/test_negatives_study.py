"""x17-negatives end to end on a tiny sweep untrained (the runner's null control path) against the temperature
study's recorded controls: nothing generalizes, so nothing beats its control and the default stays; the rule, the
lifetime test and the threshold grid are in their doctests."""

from __future__ import annotations

import pytest

from hooked_clip1d.reproduce import negatives_study
from hooked_clip1d.reproduce.controls import null_rows
from hooked_clip1d.reproduce.negatives_study import ARMS, CONTROL, _x_negatives, control_rows, lifetime_test

SPEC = """
name = "negatives-tiny"
[model]
preset = "simplified"
d_model = 16
d_head = 4
[data]
n_labels = 8
n_heldout = 3
n2 = 3
[train]
epochs = 1
[grid]
recipe = ["cls-exempt-init002-distinct", "cls-exempt-init002-temp100-shared"]
seed = [0, 6]
"""


@pytest.mark.heavy
def test_untrained_arms_beat_no_control(tmp_path):
    spec = tmp_path / "t.toml"
    spec.write_text(SPEC)
    rows = null_rows(spec, seed=0, init_std=0.02, workdir=tmp_path / "runs")
    out = _x_negatives(rows)
    d = out.numbers["decision"]
    assert d["verdict"] == "refuted" and d["default"] == "cls-exempt-init002"
    assert not any(ok for _, ok in out.checks)
    assert out.numbers["null_passes"]["generalizes"] == 0 and len(out.numbers["null"]) == 10
    assert len(out.table) == 2 + 4 + 1  # header, rule, 2 arms x 2 seeds, the null row
    assert out.numbers["lifetimes"]["cls-exempt-init002/0"] > 0  # the controls' lifetimes come from x16's record
    assert set(out.numbers["threshold_grid"]) == {
        f"std {t} / bias {b}" for t in (0.05, 0.1, 0.2) for b in (0.55, 0.6, 0.7)
    }


def test_the_controls_are_the_temperature_studys_arms():
    finals, life = control_rows()
    assert set(CONTROL) == set(ARMS)
    for recipe in set(CONTROL.values()):
        assert {s for r, s in finals if r == recipe} == {0, 1, 2, 6, 7, 8}
    assert all(v >= 0 for v in life.values())


def test_a_missing_control_record_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(negatives_study, "X16_RECORD", tmp_path / "none.json")
    with pytest.raises(FileNotFoundError, match="controls' record"):
        control_rows(negatives_study.X16_RECORD)
    with pytest.raises(ValueError, match="finite lifetimes"):
        lifetime_test([1.0, float("nan")], [2.0])


def test_reproduce_sweeps_dir_reaches_a_figure_function(monkeypatch, tmp_path):
    """x18 read the false-negatives study's runs from sweeps_home(), not from `reproduce --sweeps-dir`: its check (4)
    read "not on this machine" with the runs in the folder given. A figure function now reads sweeps_root()."""
    from hooked_clip1d.reproduce import FIGURES, FLAGSHIP, FigureSpec, Outcome, reproduce
    from hooked_clip1d.reproduce.core import sweeps_root

    before = sweeps_root()
    seen = []

    def run(models):
        seen.append(sweeps_root())
        return Outcome({}, "s", [("c", True)], {})

    spec = FigureSpec("t-sweeps-root", "t", "t", (FLAGSHIP,), run)
    monkeypatch.setitem(FIGURES, spec.key, spec)
    reproduce(spec.key, out_dir=tmp_path / "out", sweeps_dir=tmp_path / "sw", controls=False)
    assert seen == [tmp_path / "sw"]
    assert sweeps_root() == before  # restored after the figure
