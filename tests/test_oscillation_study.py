"""x19-rope-oscillation (reproduce/oscillation_study.py): the reader of a run's late evaluations refuses what it cannot
read, the rule reads a finished sweep of real run folders (metrics histories and snapshots written here), an
unfinished sweep is not run, and the untrained null never passes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig
from hooked_clip1d.model.checkpoint import save_model
from hooked_clip1d.reproduce import FIGURES
from hooked_clip1d.reproduce.oscillation_study import (
    ARMS,
    DECIDING_SEEDS,
    LATE_EPOCHS,
    LATE_SNAPSHOTS,
    _x_oscillation,
    late_unseen,
    oscillation_decision,
)


def _history(run: Path, accs: list[float], loss: float = 0.01, n: int = 100) -> None:
    run.mkdir(parents=True, exist_ok=True)
    lines = [
        {"epoch": e, "loss": loss, "eval": {"val_unseen": {"n": n, "acc": a}}}
        for e, a in zip(LATE_EPOCHS, accs, strict=True)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_late_unseen_refuses_a_short_a_doubled_or_a_wrong_history(tmp_path):
    _history(tmp_path / "ok", [0.9] * 20)
    assert late_unseen(tmp_path / "ok")[0] == [0.9] * 20
    text = (tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "metrics.jsonl").write_text("\n".join(text[:-1]))
    with pytest.raises(ValueError, match="one evaluation at each of epochs 8,100-10,000.*10000: 0"):
        late_unseen(tmp_path / "short")
    (tmp_path / "twice").mkdir()  # a resumed run that wrote an epoch twice
    (tmp_path / "twice" / "metrics.jsonl").write_text("\n".join([*text, text[-1]]))
    with pytest.raises(ValueError, match="10000: 2"):
        late_unseen(tmp_path / "twice")
    _history(tmp_path / "nan", [0.9] * 19 + [math.nan])
    with pytest.raises(ValueError, match="no unseen-pair accuracy of 100 items at epochs \\[10000\\]"):
        late_unseen(tmp_path / "nan")
    _history(tmp_path / "n", [0.9] * 20, n=50)
    with pytest.raises(ValueError, match="of 100 items"):
        late_unseen(tmp_path / "n")
    with pytest.raises(FileNotFoundError, match="no metrics history"):
        late_unseen(tmp_path / "none")


def test_the_rule_refuses_a_missing_run_and_names_each_outcome():
    def runs(classes, t1=20.0, t2=30.0):
        t = {"r1": t1, "r2": t2}
        return {(a, s): {"class": classes[a], "t_late": [t.get(a, 100.0)] * 5} for a in classes for s in DECIDING_SEEDS}

    hn = dict(r0="oscillates", r1="oscillates", r2="steady", r3="oscillates", r4="steady")
    assert oscillation_decision(runs(hn))["verdict"] == "H-N supported"
    mixed = dict(hn, r4="oscillates")
    assert oscillation_decision(runs(mixed))["verdict"] == "not explained by these arms"
    ht = dict(hn, r1="steady", r2="oscillates", r4="oscillates")
    assert oscillation_decision(runs(ht))["verdict"] == "not explained by these arms"  # r2 oscillates below the clamp
    assert oscillation_decision(runs(ht, t2=100.0))["verdict"] == "H-T supported"  # ... at the clamp: allowed
    unmoved = oscillation_decision(runs(hn, t1=99.0))
    assert (
        unmoved["verdict"] == "r1 did not move T"
        and unmoved["pair_reading"] == "at T = 100, the masked negatives are needed"
    )
    partial = runs(hn)
    del partial[("r2", 3)]
    with pytest.raises(ValueError, match=r"missing: \[\('r2', 3\)\]"):
        oscillation_decision(partial)


def _tiny_model(logit_scale: float) -> CLIP1D:
    cfg = CLIPConfig.from_preset("simplified", n_labels=5, d_image=5, d_model=8, d_head=2)
    m = CLIP1D(cfg, seed=0).eval()
    with torch.no_grad():
        m.logit_scale.fill_(logit_scale)
    return m


def _finished_sweep(tmp_path: Path, pattern: dict[str, tuple[list[float], float]]) -> list[dict]:
    rows = []
    for recipe, arm in ARMS.items():
        accs, t = pattern[arm]
        model = _tiny_model(math.log(t))
        for s in DECIDING_SEEDS:
            run = tmp_path / f"{arm}-{s}"
            _history(run, accs)
            for e in LATE_SNAPSHOTS:
                save_model(model, run / "snapshots" / f"epoch_{e:05d}.safetensors", extra={"epoch": e})
            rows.append({"recipe": recipe, "seed": s, "epochs": 10000, "path": str(run)})
    return rows


def test_a_finished_sweep_is_read_by_the_rule(tmp_path):
    swing, flat = [1.0, 0.4] * 10, [0.97] * 20
    pattern = {"r0": (swing, 100.0), "r1": (flat, 20.0), "r2": (flat, 30.0), "r3": (swing, 100.0), "r4": (swing, 100.0)}
    out = _x_oscillation(_finished_sweep(tmp_path, pattern))
    assert out.numbers["decision"]["verdict"] == "H-T supported" and all(ok for _, ok in out.checks)
    r1 = out.numbers["runs"]["r1/1"]
    assert r1["class"] == "steady" and r1["t_late"] == pytest.approx([20.0] * 5, rel=1e-5)
    assert out.numbers["runs"]["r0/2"]["troughs"] == list(range(1, 19, 2))
    assert len(out.table) == 2 + 15 and out.numbers["spearman_range_t"] > 0.5


def test_an_unfinished_sweep_is_not_run(tmp_path):
    rows = [{"recipe": r, "seed": s, "epochs": 4200, "path": str(tmp_path)} for r in ARMS for s in DECIDING_SEEDS]
    out = _x_oscillation(rows)
    assert out.not_run and not any(ok for _, ok in out.checks)


def null_outcome(sweep: str, reader, workdir: Path):
    """A late-swing study's reading of its sweep's untrained draws (x19's, x21's: ``controls.null_rows``)."""
    from hooked_clip1d.reproduce.controls import null_rows
    from hooked_clip1d.reproduce.core import SWEEPS_DIR

    return reader(null_rows(SWEEPS_DIR / f"{sweep}.toml", seed=0, init_std=None, workdir=workdir))


@pytest.mark.heavy
def test_the_untrained_null_never_passes(tmp_path):
    out = null_outcome("rope-oscillation", _x_oscillation, tmp_path)
    assert out.numbers["decision"]["verdict"] == "not shown to replicate (0 of 3)"
    assert not any(ok for _, ok in out.checks)
    assert FIGURES["x19-rope-oscillation"].sweep == "rope-oscillation"


def test_class_boundaries_are_inclusive_and_a_mean_of_one_half_is_not_low():
    from hooked_clip1d.reproduce.oscillation_study import classify_run

    assert classify_run([0.95, 0.65] * 10)["class"] == "oscillates"  # O = 0.30 exactly, 10 troughs
    assert classify_run([0.95] * 10 + [0.8] * 10)["class"] == "steady"  # O = 0.15 exactly
    half = [0.57, 0.43, 0.51, 0.49, 0.44, 0.56, 0.5, 0.5, 0.53, 0.47] * 2  # mean 0.5 as k/100 readings
    assert classify_run(half)["class"] == "steady"
    assert classify_run([0.49] * 20)["class"] == "low"


def test_the_rule_refuses_bad_inputs_and_reads_r1_at_two_of_three_seeds():
    base = dict(r0="oscillates", r1="steady", r2="steady", r3="oscillates", r4="oscillates")
    runs = {(a, s): {"class": c, "t_late": [100.0] * 5} for a, c in base.items() for s in DECIDING_SEEDS}
    for s in (1, 2):  # r1 moved T at two seeds of three: it counts
        runs[("r1", s)]["t_late"] = [20.0] * 5
    assert oscillation_decision(runs)["verdict"] == "H-T supported"
    runs[("r1", 2)]["t_late"] = [20.0] * 4 + [60.0]  # one late snapshot at 60: only one seed moved it
    d = oscillation_decision(runs)
    assert d["verdict"] == "r1 did not move T" and d["pair_reading"] == "at T = 100, they are not"
    for bad in (
        {"class": "oscillates", "t_late": []},
        {"class": "oscillates", "t_late": [math.nan] * 5},
        {"class": "wobbly", "t_late": [100.0] * 5},
    ):
        with pytest.raises(ValueError, match="finite late T values"):
            oscillation_decision({**runs, ("r2", 1): bad})


def test_a_non_finite_temperature_and_a_doubled_run_are_errors(tmp_path):
    swing = [1.0, 0.4] * 10
    rows = _finished_sweep(tmp_path, {a: (swing, 100.0) for a in ("r0", "r1", "r2", "r3", "r4")})
    with pytest.raises(ValueError, match=r"more than one run for \(arm, seed\) \[\('r0', 1\)\]"):
        _x_oscillation([*rows, rows[0]])
    bad = _tiny_model(1000.0)  # a finite weight whose exp is not (a NaN weight is refused by the file loader)
    save_model(bad, Path(rows[0]["path"]) / "snapshots" / "epoch_09000.safetensors", extra={"epoch": 9000})
    with pytest.raises(ValueError, match=r"inverse temperature is not finite: \(100\.0+\d*, inf\)"):
        _x_oscillation(rows)


def test_the_cpu_queue_trains_the_study_plans_groups():
    """tools/cpu/long_runs.sh names the rope-oscillation groups by the plan's names (a renamed spec changes them), or,
    once the study was read (2026-12-01), none: a lane left in the queue retrains it on a new machine (2026-12-02)."""
    import re

    from hooked_clip1d.sweeps.runner import _saved_plan, load_spec
    from hooked_clip1d.sweeps.spec import SPECS_DIR

    text = (Path(__file__).resolve().parents[1] / "tools/cpu/long_runs.sh").read_text()
    lanes = re.findall(r'^  "(lane\d+\|[^"]*)"$', text, flags=re.M)  # the LANES entries
    queued = [g for lane in lanes for g in re.findall(r"\brope-oscillation:(g\d{3}-[0-9a-f]{8})\b", lane)]
    spec = load_spec(SPECS_DIR / "rope-oscillation.toml")
    plan = [g for g, _ in _saved_plan(Path("/nonexistent"), spec.runs, spec.run["max_group_size"])]
    assert sorted(queued) in (sorted(plan), []) and len(spec.runs) == len(ARMS) * len(DECIDING_SEEDS)
