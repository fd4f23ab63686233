"""Sweeps: spec parsing and routing, grouping, results table, resume, the example specs, and the Ray runner."""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from hooked_clip1d import build_dataset, evaluate
from hooked_clip1d.model.checkpoint import load_model_file
from hooked_clip1d.sweeps.runner import format_results, load_spec, plan_groups, results_table, run_sweep

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sweeps"
ROOT_SWEEPS = Path(__file__).resolve().parent.parent / "hooked_clip1d" / "sweeps"
TINY = EXAMPLES / "tiny.toml"


def _weights(out: Path, run: str) -> dict[str, torch.Tensor]:
    return load_model_file(out / "runs" / run / "model.safetensors").state_dict()


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def tiny_done(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("sweep") / "tiny"
    rows = run_sweep(TINY, out, progress=False)
    return out, rows


def test_spec_expands_the_grid_and_routes_keys():
    spec = load_spec(
        text="""
name = "t"
[model]
preset = "full"
d_mlp = 64
init_std = 0.02
[model.text]
positional = "rope"
[data]
n_heldout = 3
[train]
epochs = 4
lr = 3e-4
[grid]
n_labels = [8, 12]
d_image = [10, 12]
seed = [0, 1]
"train.weight_decay" = [0.1]
"vision.pruned_heads" = [[[0, 1]]]
[run]
max_group_size = 3
"""
    )
    assert spec.name == "t" and len(spec.runs) == 8
    r = spec.runs[-1]
    assert r.name == "n_labels-12_d_image-12_seed-1_train-weight_decay-0.1_vision-pruned_heads-0-1"
    assert (r.model_cfg.n_labels, r.data_cfg.n_labels, r.model_cfg.text.n_labels) == (12, 12, 12)
    assert (r.data_cfg.d_image, r.model_cfg.vision.d_image, r.model_cfg.vision.n_ctx) == (12, 12, 13)
    assert (r.train_cfg.seed, r.data_cfg.seed) == (1, 0)  # "seed" is the training seed
    assert (r.train_cfg.weight_decay, r.train_cfg.lr, r.train_cfg.epochs) == (0.1, 3e-4, 4)
    assert r.model_cfg.vision.pruned_heads == ((0, 1),) and r.model_cfg.text.pruned_heads == ()
    assert (r.model_cfg.vision.d_mlp, r.model_cfg.vision.init_std, r.model_cfg.text.positional) == (64, 0.02, "rope")
    assert r.model_cfg.vision.positional == "learned" and r.data_cfg.n_heldout == 3
    assert spec.run["max_group_size"] == 3 and spec.run["dropout_rng"] == "fast"
    # different d_image -> different shapes -> different groups; at most 3 per group
    groups = plan_groups(spec.runs, spec.run["max_group_size"])
    assert sorted(len(g) for g in groups) == [1, 1, 3, 3]
    assert all(len({g0.model_cfg.vision.d_image for g0 in g}) == 1 for g in groups)


@pytest.mark.parametrize(
    "text, match",
    [
        ("[grid]\nbogus = [1]", "bogus"),
        ("[grid]\nd_model = [16]\n[grid2]\nx = 1", "unknown top-level"),
        ("[grid]\nn2 = []", "non-empty list"),
        ("[grid]\nn2 = 3", "non-empty list"),
        ("[grid]\n'model.n2' = [3]", "model has no field 'n2'"),
        ("[grid]\n'optim.lr' = [1]", "unknown section"),
        ("[run]\nthreads_per_group = 2", "unknown \\[run\\] setting"),
        ("[run]\ndropout_rng = 'exact'", "dropout_rng"),
        ("[model]\npreset = 'huge'", "unknown preset"),
        ("[grid\nn2 = [1]", "not valid TOML"),
        ("[grid]\nn2 = [5, 5]", "more than once"),
        ("[data]\nn_labels = 3", "n_pair"),
    ],
)
def test_bad_specs_name_the_problem(text, match):
    with pytest.raises(ValueError, match=match):
        load_spec(text=text)


def test_example_specs_parse():
    fig3 = load_spec(EXAMPLES / "fig3_small.toml")
    assert len(fig3.runs) >= 12
    assert {r.model_cfg.n_labels for r in fig3.runs} == {10, 15, 20, 25}
    assert {r.data_cfg.n2 for r in fig3.runs} == {5, 10, 15}
    assert len(plan_groups(fig3.runs, fig3.run["max_group_size"])) == 1  # one batched group of 12
    assert len(load_spec(TINY).runs) == 4


def test_sweep_writes_checkpoints_and_a_results_table(tiny_done):
    out, rows = tiny_done
    names = ["n_labels-6_seed-0", "n_labels-6_seed-1", "n_labels-7_seed-0", "n_labels-7_seed-1"]
    assert [r["run"] for r in rows] == names
    for r in rows:
        assert r["epochs"] == 3 and r["steps"] == 3 * (4 if r["n_labels"] == 6 else 5)
        model = load_model_file(Path(r["path"]) / "model.safetensors")
        assert model.cfg.n_labels == r["n_labels"] and model.data_config.n2 == 2
        # the table's accuracies are those of the saved weights, measured again here
        again = evaluate(model, build_dataset(model.data_config))
        for split in ("train", "val_single", "val_seen", "val_unseen"):
            assert r[f"{split}.acc"] == again[split]["acc"], split
            shown = {k: v for k, v in again[split].items() if f"{split}.{k}" in r}
            assert {k: r[f"{split}.{k}"] for k in shown} == shown and "label_set" in shown, split
    saved = json.loads((out / "results.json").read_text())
    assert saved["sweep"] == "tiny" and saved["runs"] == rows
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [t["run"] for t in table] == [r["run"] for r in rows]
    assert float(table[0]["val_unseen.acc"]) == pytest.approx(rows[0]["val_unseen.acc"])
    assert (out / "spec.toml").read_text() == TINY.read_text()
    assert "n_labels-7_seed-1" in format_results(rows)
    # seeds differ -> different models; the batched group equals what each run alone would give (see test_batched)
    assert not _same_weights(_weights(out, "n_labels-6_seed-0"), _weights(out, "n_labels-6_seed-1"))


def test_finished_sweep_is_not_retrained(tiny_done):
    out, rows = tiny_done
    model_file = out / "runs" / rows[0]["run"] / "model.safetensors"
    before = model_file.stat().st_mtime_ns
    again = run_sweep(TINY, out, progress=False)
    assert again == rows and model_file.stat().st_mtime_ns == before


def test_interrupted_sweep_resumes_bit_exactly(tiny_done, tmp_path):
    out_full, _ = tiny_done
    out = tmp_path / "tiny"
    partial = run_sweep(TINY, out, progress=False, max_steps=7)  # stops mid-run, checkpointed
    assert partial == [] and results_table(load_spec(TINY), out) == []
    assert any((out / "groups").rglob("group_checkpoint.safetensors"))
    rows = run_sweep(TINY, out, progress=False)
    assert len(rows) == 4
    for r in rows:
        assert _same_weights(_weights(out, r["run"]), _weights(out_full, r["run"])), r["run"]


def test_max_seconds_stops_every_group_resumably(tiny_done, tmp_path, monkeypatch):
    """A sweep given a time budget (a GPU lent in 10-minute commands) checkpoints when it is spent; the next call
    ends with the uninterrupted weights."""
    import types

    import hooked_clip1d.sweeps.pool as pool_mod
    import hooked_clip1d.sweeps.runner as sweep_mod

    out_full, _ = tiny_done
    out = tmp_path / "tiny"
    now = time.time()
    for mod in (sweep_mod, pool_mod):  # the groups start in time,
        monkeypatch.setattr(mod, "time", types.SimpleNamespace(time=lambda: now))
    partial = run_sweep(TINY, out, progress=False, max_seconds=1e-6)  # then find it spent after their first chunk
    monkeypatch.undo()
    assert partial == [] and any((out / "groups").rglob("group_checkpoint.safetensors"))
    assert run_sweep(TINY, out, progress=False, max_seconds=1e-6) == []  # spent before a group starts: untouched
    rows = run_sweep(TINY, out, progress=False)
    assert len(rows) == 4
    for r in rows:
        assert _same_weights(_weights(out, r["run"]), _weights(out_full, r["run"])), r["run"]
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="max_seconds"):
            run_sweep(TINY, tmp_path / "bad", max_seconds=bad)


def test_sweep_refuses_a_used_out_dir_without_resume_and_a_changed_spec(tiny_done, tmp_path):
    out, _ = tiny_done
    with pytest.raises(FileExistsError, match="resume"):
        run_sweep(TINY, out, progress=False, resume=False)
    changed = tmp_path / "changed.toml"
    changed.write_text(TINY.read_text().replace("epochs = 3", "epochs = 4"))
    with pytest.raises(ValueError, match="different sweep spec"):
        run_sweep(changed, out, progress=False)
    good = (out / "spec.toml").read_text()
    (out / "spec.toml").write_text("name = [")
    try:
        with pytest.raises(ValueError, match="not a readable sweep spec"):
            run_sweep(TINY, out, progress=False)
    finally:
        (out / "spec.toml").write_text(good)  # tiny_done is shared with later tests
    with pytest.raises(ValueError, match="runner"):
        run_sweep(TINY, tmp_path / "x", runner="slurm")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_sweep(tmp_path / "missing.toml", tmp_path / "y")
    with pytest.raises(ValueError, match="dropout_rng = 'fast'"):  # tiny.toml draws matched dropout
        run_sweep(TINY, tmp_path / "z", compile=True)
    with pytest.raises(ValueError, match="cudagraphs=True needs compile"):
        run_sweep(TINY, tmp_path / "z", cudagraphs=True)


def test_compile_override_keeps_the_spec_and_its_out_dir(tiny_done):
    out, rows = tiny_done
    # an execution setting: the finished sweep is recognized as the same spec, nothing reruns
    assert run_sweep(TINY, out, progress=False, compile=False) == rows


@pytest.mark.slow  # starting a local Ray cluster and its workers takes 15-70 s here
def test_ray_runner_gives_the_local_results(tiny_done, tmp_path):
    ray = pytest.importorskip("ray")
    out_local, rows_local = tiny_done
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rows = run_sweep(TINY, tmp_path / "ray", progress=False, runner="ray")
    finally:
        ray.shutdown()
    assert [r["run"] for r in rows] == [r["run"] for r in rows_local]
    for r in rows:
        assert _same_weights(_weights(tmp_path / "ray", r["run"]), _weights(out_local, r["run"])), r["run"]
    shutil.rmtree(tmp_path / "ray")


def test_sweep_resumes_after_a_comment_only_edit_of_its_spec(tmp_path):
    out = tmp_path / "tiny"
    run_sweep(TINY, out, progress=False, max_steps=7)
    edited = tmp_path / "tiny.toml"
    edited.write_text(
        "# a note added after the sweep started\n" + TINY.read_text().replace("epochs = 3", "epochs = 3  # same")
    )
    rows = run_sweep(edited, out, progress=False)
    assert len(rows) == 4 and (out / "spec.toml").read_text() == edited.read_text()


@pytest.mark.heavy
def test_workers_train_groups_at_once_with_the_one_at_a_time_weights(tmp_path):
    pairs = tmp_path / "tiny.toml"  # the tiny sweep in two groups of two
    pairs.write_text(TINY.read_text().replace("max_group_size = 4", "max_group_size = 2"))
    assert len(plan_groups(load_spec(pairs).runs, 2)) == 2
    out_local = tmp_path / "one"
    rows_local = run_sweep(pairs, out_local, progress=False)
    (tmp_path / "w").mkdir()  # the same groups (the plan a first start saved), trained two at a time
    for f in ("spec.toml", "plan.json"):
        shutil.copy(out_local / f, tmp_path / "w" / f)
    rows = run_sweep(pairs, tmp_path / "w", progress=False, workers=2)
    assert [r["run"] for r in rows] == [r["run"] for r in rows_local]
    for r in rows:
        assert _same_weights(_weights(tmp_path / "w", r["run"]), _weights(out_local, r["run"])), r["run"]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="workers"):
            run_sweep(TINY, tmp_path / "bad", workers=bad)
    with pytest.raises(ValueError, match="local runner"):
        run_sweep(TINY, tmp_path / "bad", workers=2, runner="ray")


def test_a_grown_spec_resumes_in_place_and_keeps_finished_runs(tiny_done, tmp_path):
    """Adding a seed to a finished sweep's grid trains only the new runs; the finished ones are not touched."""
    src, rows = tiny_done
    out = tmp_path / "grown"
    shutil.copytree(src, out)
    grown = tmp_path / "grown.toml"
    grown.write_text(TINY.read_text().replace("seed = [0, 1]", "seed = [0, 1, 2]"))
    before = {r["run"]: (out / "runs" / r["run"] / "model.safetensors").stat().st_mtime_ns for r in rows}
    plan_before = json.loads((out / "plan.json").read_text())
    new_rows = run_sweep(grown, out, progress=False)
    assert {r["run"] for r in new_rows} == set(before) | {"n_labels-6_seed-2", "n_labels-7_seed-2"}
    for name, t in before.items():
        assert (out / "runs" / name / "model.safetensors").stat().st_mtime_ns == t, name
    plan = json.loads((out / "plan.json").read_text())
    assert plan[: len(plan_before)] == plan_before  # the old groups keep their names and members
    # a spec that changes a finished run is still refused
    changed = tmp_path / "changed.toml"
    changed.write_text(grown.read_text().replace("epochs = 3", "epochs = 4"))
    with pytest.raises(ValueError, match="may only add runs"):
        run_sweep(changed, out, progress=False)


def test_a_fresh_group_never_retrains_a_finished_member(tiny_done, tmp_path):
    """A group without a group checkpoint (e.g. regrouped) skips members that have finished instead of wiping them."""
    src, rows = tiny_done
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    for g in (out / "groups").iterdir():
        (g / "group_checkpoint.safetensors").unlink(missing_ok=True)
    plan = json.loads((out / "plan.json").read_text())
    done, redo = plan[0][1][:2]  # two members of one group: one finished, one to train again
    for f in ("summary.json", "model.safetensors"):
        (out / "runs" / redo / f).unlink()
    model = out / "runs" / done / "model.safetensors"
    t = model.stat().st_mtime_ns
    again = run_sweep(TINY, out, progress=False)
    assert [r["run"] for r in again] == [r["run"] for r in rows]
    assert model.stat().st_mtime_ns == t and (out / "runs" / redo / "model.safetensors").exists()


def test_a_finished_run_trained_with_another_recipe_is_an_error_not_a_result(tiny_done, tmp_path):
    """Runs trained before a default changed are refused by name, never reported as the new spec's results."""
    src, rows = tiny_done
    out = tmp_path / "old"
    shutil.copytree(src, out)
    cfg_path = out / "runs" / rows[0]["run"] / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["train_config"]["no_decay"] = []  # as if trained under the pre-study default
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(
        ValueError, match=r"train_config.no_decay: trained with \[\], the spec asks \['cls', 'logit_scale'\]"
    ):
        results_table(load_spec(TINY), out)


def test_plans_for_several_workers_balance_the_groups():
    """Fig. 4a's 36 runs for 2 workers: two groups of equal estimated cost (one worker alone used to train a group of
    the 32 longest runs while the other finished 4 short ones), every run once, longest group first."""
    from hooked_clip1d.sweeps.runner import group_cost, planned_steps

    runs = load_spec(Path(__file__).parents[1] / "hooked_clip1d" / "sweeps" / "fig4a.toml").runs
    one = plan_groups(runs, 32)
    assert [len(g) for g in one] == [32, 4]
    for workers in (2, 3):
        groups = plan_groups(runs, 32, workers=workers)
        assert len(groups) == workers and sorted(r.name for g in groups for r in g) == sorted(r.name for r in runs)
        costs = [group_cost([planned_steps(r) for r in g]) for g in groups]
        assert costs == sorted(costs, reverse=True) and costs[-1] / costs[0] > 0.95, costs
    assert len(plan_groups(runs[:1], 32, workers=2)) == 1  # never an empty group
    assert max(len(g) for g in plan_groups(runs, 5, workers=2)) <= 5
    with pytest.raises(ValueError, match="workers"):
        plan_groups(runs, 32, workers=0)


def test_plans_keep_long_runs_together_when_that_costs_less():
    """Spreading Fig. 4a's three longest runs (1.17 M steps) over two workers makes both groups pay the per-step
    overhead for 1.17 M steps; with ``pack_long`` they stay together where ``group_cost`` (a + bK) says that costs
    less. Not the default: step times measured by group size favour spreading."""
    from hooked_clip1d.sweeps.runner import _makespan, _spread, group_cost, planned_steps

    runs = load_spec(Path(__file__).parents[1] / "hooked_clip1d" / "sweeps" / "fig4a.toml").runs
    steps = {r.name: planned_steps(r) for r in runs}
    longest = sorted(runs, key=lambda r: steps[r.name], reverse=True)
    groups = plan_groups(runs, 32, workers=2, pack_long=True)
    spread = _spread(longest, steps, 2, 32)
    assert [sorted(r.name for r in g) for g in plan_groups(runs, 32, workers=2)] == [
        sorted(r.name for r in g) for g in spread
    ]  # the default: spread (a + bK favours packing; step times measured by group size do not)
    assert sorted(max(steps[r.name] for r in g) for g in spread) == [1_170_000, 1_170_000]
    assert sorted(max(steps[r.name] for r in g) for g in groups) == [650_000, 1_170_000]
    assert _makespan(groups, steps) < 0.97 * _makespan(spread, steps)
    costs = [group_cost([steps[r.name] for r in g]) for g in groups]
    assert costs[-1] / costs[0] > 0.99, costs


def test_status_says_how_far_a_sweep_has_come_without_training_it(tmp_path, capsys):
    """`sweep --status`: model-steps done, groups with their active members, finished runs, and who holds the lock;
    it trains nothing and refuses a folder that holds no sweep."""
    from hooked_clip1d.cli.commands import main
    from hooked_clip1d.sweeps.status import sweep_status
    from hooked_clip1d.training.rundir import RunLock

    spec = EXAMPLES / "tiny.toml"
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--status"]) == 2  # a clear one-line error
    assert "holds no sweep (no spec.toml)" in capsys.readouterr().err
    run_sweep(spec, out, progress=False, max_steps=5)  # one group of 4, stopped after 5 of its 6 or 9 steps
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert main(["sweep", str(spec), "--out", str(out), "--status", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before  # nothing written
    steps = {r["run"]: r["steps"] for r in st["rows"]}
    assert st["model_steps_planned"] == sum(steps.values()) and st["runs"] == 4 and st["running"] is None
    assert st["model_steps"] == 4 * 5 and st["runs_finished"] == 0  # from the group checkpoint, not the metrics
    (g,) = st["groups"]
    assert (g["runs"], g["active"], g["step"], g["steps"]) == (4, 4, 5, max(steps.values()))
    assert g["left_s"] > 0  # at the group's own pace so far
    with RunLock(out, "sweep directory"):  # as a running sweep holds it
        assert sweep_status(spec, out)["running"]["pid"] == os.getpid()
    with pytest.raises(ValueError, match="holds the sweep 'tiny', not 'fig4a'"):
        sweep_status(ROOT_SWEEPS / "fig4a.toml", out)
    run_sweep(spec, out, progress=False)
    st = sweep_status(spec, out)
    assert st["model_steps"] == st["model_steps_planned"] and st["runs_finished"] == 4
    assert st["groups"][0]["active"] == 0 and st["groups"][0]["left_s"] == 0
    assert all(r["unseen"] is not None for r in st["rows"])
    assert main(["sweep", str(spec), "--out", str(out), "--status"]) == 0
    assert "not running; " in capsys.readouterr().out


def test_run_groups_refuses_an_unknown_runner():
    from hooked_clip1d.sweeps.pool import run_groups

    with pytest.raises(ValueError, match="runner must be 'local' or 'ray', got 'slurm'"):
        run_groups([], runner="slurm")


def test_every_shipped_sweep_spec_loads_and_the_zoo_retrains_group_names_are_the_plans():
    import re

    from hooked_clip1d.sweeps.runner import _saved_plan
    from hooked_clip1d.sweeps.spec import SPECS_DIR

    specs = sorted(SPECS_DIR.glob("*.toml"))
    assert len(specs) >= 20
    for path in specs:
        assert load_spec(path).runs, path.name
    zoo = SPECS_DIR / "zoo-distinct.toml"
    spec = load_spec(zoo)
    named = re.findall(r"\b(g\d{3}-[0-9a-f]{8})\b", zoo.read_text())
    plan = [g for g, _ in _saved_plan(Path("/nonexistent"), spec.runs, spec.run["max_group_size"])]
    assert sorted(set(named)) == sorted(plan) and len(plan) == 15  # its comment names the plan's groups (a seed each)


def test_fig4a_distinct_is_fig4as_grid_under_the_default_recipe():
    """The pre-registration of 2026-12-02 (docs/fidelity.md): fig4a-distinct.toml is Fig. 4a's grid unchanged (the
    same cells, seeds, data and model settings, epochs) under the default recipe; fig4a.toml keeps its record's
    recipe (no query/key biases, the standard loss). A default that moves later does not move this spec: it names
    the recipe."""
    from pathlib import Path

    from hooked_clip1d.settings.configs import TrainConfig
    from hooked_clip1d.settings.recipes import DEFAULT_RECIPE

    root = Path(__file__).resolve().parents[1] / "hooked_clip1d/sweeps"
    old, new = load_spec(root / "fig4a.toml"), load_spec(root / "fig4a-distinct.toml")
    cells = lambda s: sorted((r.params["n_labels"], r.params["n2"], r.params["seed"]) for r in s.runs)  # noqa: E731
    assert cells(old) == cells(new) and len(new.runs) == 36
    by_cell = {(r.params["n_labels"], r.params["n2"], r.params["seed"]): r for r in old.runs}
    default = TrainConfig()
    assert default.negatives == "distinct" and {r.params["recipe"] for r in new.runs} == {DEFAULT_RECIPE}
    recipe_fields = {"negatives", "no_decay", "frozen"}  # where the two recipes differ (weight decay 0.2 in both)
    for r in new.runs:
        o = by_cell[(r.params["n_labels"], r.params["n2"], r.params["seed"])]
        assert r.data_cfg == o.data_cfg and r.model_cfg.to_dict() == o.model_cfg.to_dict()
        t, to = r.train_cfg.to_dict(), o.train_cfg.to_dict()
        assert {k for k in t if t[k] != to[k]} == recipe_fields and t["epochs"] == 10_000
        assert {k: t[k] for k in recipe_fields} == {k: default.to_dict()[k] for k in recipe_fields}
        assert (o.train_cfg.negatives, tuple(o.train_cfg.frozen)) == ("all", ("qk_bias",))
    assert {k: v for k, v in new.run.items() if k != "max_group_size"} == {
        k: v for k, v in old.run.items() if k != "max_group_size"
    }  # batching: 12 a group here, 32 there (the amendment of 2026-12-02 says what that changes)


def test_the_captioning_study_is_x17s_b_prime_with_the_captioning_objective():
    """The pre-registration of 2026-12-02 (docs/fidelity.md, x22): captioning.toml is x17's arm (b') run for run (the
    same seeds, data, recipe and snapshots) but the objective and eval_every; the six train as one batched group
    (the amendment of 2026-12-02, session 48, before any run: (b') trained batched too)."""
    from dataclasses import replace
    from pathlib import Path

    from hooked_clip1d.sweeps.runner import plan_groups

    root = Path(__file__).resolve().parents[1] / "hooked_clip1d/sweeps"
    cap, neg = load_spec(root / "captioning.toml"), load_spec(root / "negatives.toml")
    recipe = "cls-exempt-init002-temp-nodecay-distinct"  # x17's (b'), the default recipe
    b_prime = {r.train_cfg.seed: r for r in neg.runs if r.params["recipe"] == recipe}
    assert sorted(r.train_cfg.seed for r in cap.runs) == sorted(b_prime) == [0, 1, 2, 6, 7, 8]
    for r in cap.runs:
        b = b_prime[r.train_cfg.seed]
        assert r.model_cfg.objective == "captioning" and replace(r.model_cfg, objective="contrastive") == b.model_cfg
        assert r.data_cfg == b.data_cfg and r.params["recipe"] == b.params["recipe"]
        t, tb = r.train_cfg.to_dict(), b.train_cfg.to_dict()
        assert {k for k in t if t[k] != tb[k]} == {"eval_every"} and (t["eval_every"], t["epochs"]) == (500, 10_000)
    assert [[r.train_cfg.seed for r in g] for g in plan_groups(cap.runs)] == [[0, 1, 2, 6, 7, 8]]
