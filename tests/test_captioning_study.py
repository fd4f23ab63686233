"""x22-captioning (reproduce/captioning_study.py, the paper's Open Question 4): the pre-registered rule names each
answer and refuses missing runs; Fisher's exact test; an unfinished sweep is not run; a tiny sweep of captioners is
read end to end, as a null-control draw (untrained, epoch 0) and as a finished sweep with its ten untrained
captioners, against x17's recorded (b')."""

from __future__ import annotations

import shutil

import pytest

from hooked_clip1d.reproduce import FIGURES
from hooked_clip1d.reproduce.captioning_study import (
    QUESTIONS,
    RECIPE,
    _finite_row,
    _x_captioning,
    by_rule,
    captioning_decision,
    contrastive_rows,
    fisher_exact,
)
from hooked_clip1d.reproduce.controls import null_rows

SEEDS = (0, 1, 2, 6, 7, 8)
SPEC = f"""
name = "captioning-tiny"
[model]
preset = "simplified"
objective = "captioning"
d_model = 16
d_head = 4
[data]
n_labels = 8
n_heldout = 3
n2 = 3
[train]
epochs = 1
[grid]
recipe = ["{RECIPE}"]
seed = {list(SEEDS)}
"""


def test_fisher_exact_is_the_two_sided_test_and_refuses_what_is_not_a_count():
    assert fisher_exact(6, 6, 0, 6) == pytest.approx(2 / 924)  # the one most extreme table each way
    assert fisher_exact(6, 6, 1, 6) == pytest.approx(0.01515, abs=1e-5) and fisher_exact(5, 6, 1, 6) > 0.05
    assert fisher_exact(0, 6, 6, 6) == fisher_exact(6, 6, 0, 6)  # two-sided: symmetric
    with pytest.raises(ValueError, match="more successes than trials"):
        fisher_exact(7, 6, 0, 6)
    with pytest.raises(ValueError, match=r"b must be a count"):
        fisher_exact(1, 6, True, 6)


def test_the_rule_names_each_answer_and_refuses_a_missing_run():
    assert by_rule(2, 2, ("forms", "does not form")) == "forms"
    assert by_rule(1, 0, ("forms", "does not form")) == "does not form"
    assert by_rule(1, 3, ("forms", "does not form")) == "mixed"
    yes = {c: True for c in QUESTIONS}
    d = captioning_decision({s: yes for s in SEEDS}, {s: yes for s in SEEDS}, ["generalizes"])
    assert d["answers"]["generalizes"] == "generalizes" and d["answers"]["fig4c_split"] == "not counted"
    assert d["objective"]["generalizes"]["verdict"] == "no difference shown"  # never "the same"
    with pytest.raises(ValueError, match=r"the captioner at seeds \(0, 1, 2, 6, 7, 8\); missing: \[8\]"):
        captioning_decision({s: yes for s in SEEDS[:-1]}, {s: yes for s in SEEDS}, [])
    without_whole = {c: v for c, v in yes.items() if c != "mechanism_v2"}
    with pytest.raises(ValueError, match=r"lack the checks \['mechanism_v2'\]"):
        captioning_decision({s: yes for s in SEEDS}, {s: without_whole for s in SEEDS}, [])
    with pytest.raises(ValueError, match="not the study's"):
        captioning_decision({s: yes for s in SEEDS}, {s: yes for s in SEEDS}, ["picture"])


def test_the_contrastive_comparison_is_x17s_b_prime():
    finals, lives = contrastive_rows()
    assert sorted(finals) == sorted(lives) == list(SEEDS)
    assert [sum(finals[s]["checks"][c] for s in SEEDS) for c in QUESTIONS] == [6, 5, 0, 5, 0]  # as pre-registered
    assert sorted(lives.values()) == [9500] + [10000] * 5


def test_an_unfinished_sweep_is_not_run_and_a_doubled_seed_is_an_error(tmp_path):
    rows = [{"recipe": RECIPE, "seed": s, "epochs": 10000 if s < 6 else 4500, "path": str(tmp_path)} for s in SEEDS]
    out = _x_captioning(rows)
    assert out.not_run.startswith("3 of the six") and not any(ok for _, ok in out.checks)
    with pytest.raises(ValueError, match=r"more than one run for seeds \[0\]"):
        _x_captioning([*rows, rows[0]])
    with pytest.raises(ValueError, match=r"seed 1's probe at epoch 10000 is nan, not finite"):
        _finite_row(1, {"epoch": 10000, "loss": 0.1, "probe": float("nan"), "single": 1, "seen": 1, "unseen": 1})
    assert FIGURES["x22-captioning"].sweep == "captioning" and FIGURES["x22-captioning"].beyond_paper


@pytest.mark.heavy
def test_a_tiny_sweep_is_read_as_a_null_draw_and_as_a_finished_sweep(tmp_path):
    spec = tmp_path / "t.toml"
    spec.write_text(SPEC)
    rows = null_rows(spec, seed=0, init_std=None, workdir=tmp_path / "runs")
    draw = _x_captioning(rows)  # a null-control draw: read at epoch 0, no null of its own
    assert not draw.not_run and not any(ok for _, ok in draw.checks)
    assert draw.numbers["null"] == [] and set(draw.numbers["lifetimes"]) == {str(s) for s in SEEDS}
    for r in rows:  # the same untrained weights standing as finished runs: the reader's own null is read too
        snaps = tmp_path / "runs" / r["run"] / "snapshots"
        shutil.copy(snaps / "epoch_00000.safetensors", snaps / "epoch_10000.safetensors")
        r["epochs"] = 10000
    out = _x_captioning(rows)
    d = out.numbers["decision"]
    assert len(out.numbers["null"]) == 10 and d["answers"]["generalizes"] == "does not generalize"
    assert d["objective"]["generalizes"] == {
        "captioner": 0,
        "contrastive": 6,
        "of": 6,
        "p": pytest.approx(2 / 924),
        "verdict": "differs",
    }
    assert len(out.table) == 2 + 12 + 1 and not any(ok for _, ok in out.checks)
