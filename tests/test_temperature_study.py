"""x16-temperature end to end on a tiny sweep untrained (the runner's null control path): nothing generalizes, so
the hypothesis is not supported and the default stays; the decision rule itself is in its doctest."""

from __future__ import annotations

import pytest

from hooked_clip1d.reproduce.controls import null_rows
from hooked_clip1d.reproduce.temperature_study import _x_temperature

SPEC = """
name = "temperature-tiny"
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
recipe = ["cls-exempt-init002", "cls-exempt-init002-temp100"]
seed = [0, 6]
"""


@pytest.mark.heavy
def test_untrained_sweep_supports_nothing(tmp_path):
    spec = tmp_path / "t.toml"
    spec.write_text(SPEC)
    rows = null_rows(spec, seed=0, init_std=0.02, workdir=tmp_path / "runs")
    out = _x_temperature(rows)
    d = out.numbers["decision"]
    assert d["verdict"] == "refuted" and d["default"] == "cls-exempt-init002"
    assert not any(ok for _, ok in out.checks)
    assert out.numbers["null_passes"]["generalizes"] == 0 and len(out.numbers["null"]) == 10
    assert len(out.table) == 2 + 4 + 1  # header, rule, 2 arms x 2 seeds, the null row
    assert "untrained (10 init seeds)" in out.table[-1]
    assert len({tuple(n["kp_std"]) for n in out.numbers["null"]}) == 10  # ten distinct draws, not one
    # the "at some snapshot" count across the threshold grid (verdicts v3 item 4): 9 points, each arm's runs counted
    grid = out.numbers["threshold_grid"]
    assert len(grid) == 9 and all(set(g) == set(out.numbers["arms"]) for g in grid.values())
    assert all(0 <= n <= 2 for g in grid.values() for n in g.values())
    assert "across the threshold grid" in out.summary


def test_a_sweep_with_none_of_the_arms_is_an_error_naming_it():
    """With no run of the study's arms the reading ended in a bare StopIteration (the null's first path)."""
    with pytest.raises(ValueError, match="x16-temperature: no finished run of the study's arms"):
        _x_temperature([{"recipe": "some-other-recipe", "seed": 0, "path": "nowhere"}])
