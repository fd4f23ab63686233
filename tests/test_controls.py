"""reproduce on any model (run folder, model file, untrained:SEED), the null control and counted checks, replicates."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from hooked_clip1d import reproduce as rp
from hooked_clip1d.cli.commands import main
from hooked_clip1d.model.checkpoint import save_model
from hooked_clip1d.pretrained import load_model, manifest
from hooked_clip1d.reproduce.controls import NULL_SEEDS, counted_checks, substitute, substitutes
from hooked_clip1d.reproduce.core import Outcome
from hooked_clip1d.reproduce.replicates import replicate_runs
from hooked_clip1d.training.trainer import Trainer

FLAGSHIP = rp.FLAGSHIP


def test_untrained_substitute_has_the_zoo_models_config():
    zoo = load_model(FLAGSHIP)
    m = substitute(FLAGSHIP, "untrained:4:1.0")
    assert m.cfg.vision.init_seed == 4 and m.cfg.vision.init_std == m.cfg.text.init_std == 1.0
    assert m.cfg.vision.n_heads == zoo.cfg.vision.n_heads and m.data_config == zoo.data_config
    assert not m.training and m.manifest["epochs"] == 0
    assert m.manifest["metrics"]["val_unseen"]["acc"] < 0.3  # untrained: far from generalizing
    assert m.manifest["history"]["epoch"] == [0]
    assert substitute(FLAGSHIP, "untrained:4").cfg.vision.init_std == zoo.cfg.vision.init_std
    a, b = substitute(FLAGSHIP, "untrained:4"), substitute(FLAGSHIP, "untrained:4")
    assert torch.equal(a.vision.W_E, b.vision.W_E)  # seeded


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("untrained:x", "untrained:SEED"),
        ("untrained:-1", "untrained:SEED"),
        ("untrained:1:0", "INIT_STD a finite number > 0"),
        ("untrained:3:inf", "INIT_STD a finite number > 0"),
        ("/no/such/run", "not a run folder, a model file"),
        ("full-ntot20-n2-10", "cannot stand in for 'simplified-ntot20-n2-10': model text.attn_only"),
        ("simplified-ntot10-n2-5", "model text.n_labels: 10"),
    ],
)
def test_bad_substitutes_are_refused_naming_the_problem(spec, match):
    with pytest.raises(ValueError, match=match):
        substitute(FLAGSHIP, spec)


def test_substitutes_name_the_model_to_replace():
    spec = rp.FIGURES["x6-spatial-ids"]  # four models
    with pytest.raises(ValueError, match="name the one to substitute"):
        substitutes(spec, "simplified-ntot20-n2-10-init002")
    with pytest.raises(ValueError, match="does not use"):
        substitutes(rp.FIGURES["fig4c"], {"rope-ntot20-n2-15": "untrained:0"})
    with pytest.raises(ValueError, match="reads a sweep"):
        substitutes(rp.FIGURES["fig4a"], "untrained:0")
    both = substitutes(spec, "untrained:1")  # an untrained stand-in for every model of the figure
    assert all(m.manifest["name"] == f"untrained:1:{m.cfg.vision.init_std:g}" for m in both.values())


@pytest.mark.heavy
def test_a_training_run_substitutes_with_its_history(tmp_path):
    zoo = load_model(FLAGSHIP)
    tc = manifest(FLAGSHIP)["train_config"]
    from hooked_clip1d.settings import TrainConfig

    cfg = TrainConfig.from_dict({**tc, "epochs": 1, "eval_every": 1, "seed": 9, "snapshot_epochs": []})
    Trainer(zoo.cfg, zoo.data_config, cfg, tmp_path / "run").run(progress=False)
    m = substitute(FLAGSHIP, str(tmp_path / "run"))
    assert m.manifest["history"]["epoch"] == [1] and m.manifest["epochs"] == 1
    rec = rp.reproduce("fig4c", tmp_path / "res", models=str(tmp_path / "run"), controls=False)
    assert rec["substituted"] == {FLAGSHIP: str(tmp_path / "run" / "model.safetensors")}
    with pytest.raises(ValueError, match="reads its sweep's runs"):
        rp.reproduce("fig4a", tmp_path / "res", models="untrained:0", controls=False)


def test_counted_checks_follow_the_preregistered_rule():
    out = Outcome(
        {},
        "",
        [("a", True), ("b", True), ("c", False), ("d", True), ("e", True)],
        {},
        values={"b": (0.9, ">"), "c": (0.1, "<")},
        secondary={"e": "by construction"},
    )
    null = {
        "variants": [
            {
                "model": "u0",
                "checks": {"a": False, "b": True, "c": True, "d": True, "e": False},
                "values": {"b": 0.7, "c": 0.3},
            },
            {
                "model": "u1",
                "checks": {"a": False, "b": True, "c": False, "d": False, "e": False},
                "values": {"b": 0.95, "c": 0.2},
            },
        ]
    }
    rows = {r.text: r for r in counted_checks(out, null)}
    assert (rows["a"].counted, rows["a"].counted_holds, rows["a"].null_passes) == (True, True, 0)
    # restated relative to the null: 0.9 is not beyond the untrained 0.95, so it counts and fails
    assert (rows["b"].counted, rows["b"].counted_holds, rows["b"].null_extreme) == (True, False, 0.95)
    assert rows["c"].counted and rows["c"].beyond_null and rows["c"].counted_holds is False  # fails itself
    assert (rows["d"].counted, rows["d"].counted_holds) == (False, None)  # passes an untrained model, no value
    assert rows["e"].counted is False and rows["e"].secondary == "by construction"
    # a variant that raised cannot show that any check fails
    broken = {"variants": [{"model": "u0", "error": "RuntimeError: x"}]}
    assert not any(r.counted for r in counted_checks(out, broken))


@pytest.mark.heavy
def test_null_control_in_a_record(tmp_path):
    """fig4c with its null control: 10 untrained models, both forms fail on every one; its trained control (the
    flagship's recipe on order-shuffled captions, shipped 2026-11-28) passes the 0.6 split (h0 right 0.67, h2 and h3
    left 0.64 / 0.62, against the flagship's 0.98 / 0.97), which is shown, not counted (restated as Fig. 4c'); Fig.
    4c' counts only once its six fresh runs are trained (none here: an empty sweeps folder)."""
    rec = rp.reproduce("fig4c", tmp_path, controls=True, sweeps_dir=tmp_path / "sweeps")
    assert len(rec["null_control"]["models"]) == len(NULL_SEEDS) == 10
    assert rec["null_control"]["errors"] == {}
    old, restated = rec["checks"]
    assert old["null_passes"] == restated["null_passes"] == 0 and old["null_n"] == 10
    assert not old["counted"] and "restated as Fig. 4c'" in old["secondary"]
    assert old["trained_control"] == {"control-shuffled-distinct-ntot20-n2-10": True}
    assert restated["id"] == "fig4c-dominant-split" and restated["holds"] and not restated["counted"]
    assert restated["fresh_rule"].startswith("not judged: 0 of 6 fresh runs")
    assert rec["verdict"] == "inconclusive"
    saved = json.loads((tmp_path / "fig4c" / "fig4c.json").read_text())
    assert saved["checks"] == rec["checks"]
    # the invariance audit: Fig. 4c reads attention patterns, which no output-preserving move changes
    assert len(rec["invariance_audit"]["applied"]) == 5 and rec["invariance_audit"]["moved"] == {}
    assert all("coordinate_dependent" not in c for c in rec["checks"])


def test_ties_fail_the_order_check():
    """Fig. 11's order check fails when two generalizations are first reached at the same evaluation."""
    model = load_model(FLAGSHIP)
    h = {
        "epoch": [100, 200, 300],
        "step": [1, 2, 3],
        "loss": [1.0, 0.5, 0.2],
        "single": [0.96, 1.0, 1.0],
        "seen": [0.5, 0.98, 1.0],
        "unseen": [0.5, 0.91, 0.95],
        "unseen_label_set": [1.0, 1.0, 1.0],
    }
    model.manifest = {**model.manifest, "history": h}
    out = rp.FIGURES["fig11"].run({FLAGSHIP: model})
    order = "they are reached in the paper's order, strictly (single before seen before unseen; ties fail)"
    assert dict(out.checks)[order] is False
    h["seen"] = [0.5, 0.98, 1.0]
    h["unseen"] = [0.5, 0.5, 0.95]
    out = rp.FIGURES["fig11"].run({FLAGSHIP: model})
    assert all(ok for _, ok in out.checks)


def _fake_run(root, name, train_cfg, model_cfg, data_cfg, model):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(
        json.dumps({"train_config": train_cfg, "model_config": model_cfg, "data_config": data_cfg})
    )
    (d / "summary.json").write_text(json.dumps({"epochs": train_cfg["epochs"]}))
    save_model(model, d / "model.safetensors", model.data_config)
    return d


def test_replicate_runs_are_found_by_recipe_not_by_name(tmp_path):
    man = manifest(FLAGSHIP)
    model = substitute(FLAGSHIP, "untrained:0")
    runs = tmp_path / "fresh-seeds" / "runs"
    tc = dict(man["train_config"])
    good = _fake_run(
        runs, "a", {**tc, "seed": 4, "snapshot_epochs": [0, 5]}, man["model_config"], man["data_config"], model
    )
    _fake_run(runs, "b", {**tc, "seed": 5, "weight_decay": 0.1}, man["model_config"], man["data_config"], model)
    _fake_run(runs, "c", {**tc, "seed": tc["seed"]}, man["model_config"], man["data_config"], model)  # the shipped seed
    other = dict(man["model_config"])
    other["vision"] = {**other["vision"], "init_std": 1.0}
    _fake_run(runs, "d", {**tc, "seed": 6}, other, man["data_config"], model)
    assert replicate_runs(FLAGSHIP, tmp_path) == {4: good}


def test_cli_model_option(tmp_path, capsys):
    assert main(["reproduce", "fig4c", "--model", "untrained:0", "--out", str(tmp_path), "--no-controls"]) == 0
    assert "not reproduced" in capsys.readouterr().out
    assert (
        main(["reproduce", "fig4c", "--model", f"{FLAGSHIP}=untrained:1", "--out", str(tmp_path), "--no-controls"]) == 0
    )
    assert json.loads((tmp_path / "fig4c" / "fig4c.json").read_text())["substituted"] == {FLAGSHIP: "untrained:1:0.02"}
    assert main(["reproduce", "fig4c", "--model", "a", "--model", "b", "--out", str(tmp_path)]) == 2
    assert "each is NAME=SPEC" in capsys.readouterr().err
    assert main(["reproduce", "all", "--model", "untrained:0", "--out", str(tmp_path)]) == 2
    assert "give a figure key, not all" in capsys.readouterr().err


@pytest.mark.heavy
def test_null_control_of_a_figure_with_stated_values(tmp_path):
    """A figure that states its checks' values (fig6: EOT bias per head) gets its null values as numbers, and a check
    some untrained model passes is restated against the untrained extreme (it once crashed comparing a float with a
    (value, direction) pair)."""
    rec = rp.reproduce("fig6", tmp_path, controls=True)
    for c in rec["checks"]:
        assert isinstance(c["null_passes"], int) and c["null_n"] == 10
        if c["null_passes"] and "null_extreme" in c:
            assert isinstance(c["null_extreme"], float) and c["counted"]


def test_absence_checks_count_only_a_trained_fail():
    """An upper bound untrained models meet too (fig21's "stays <= 0.6"): a trained pass says nothing, a trained fail
    is evidence against the claim; where every untrained model fails it, it counts as any check."""
    names = ["stays low", "fails low", "untrained fail"]
    out = Outcome({}, "", [(names[0], True), (names[1], False), (names[2], True)], {}, absence=tuple(names))
    null = {
        "variants": [{"model": f"u{i}", "checks": {names[0]: True, names[1]: True, names[2]: False}} for i in range(2)]
    }
    rows = {r.text: r for r in counted_checks(out, null)}
    assert (rows[names[0]].counted, rows[names[0]].counted_holds, rows[names[0]].absence) == (
        False,
        None,
        True,
    )
    assert (rows[names[1]].counted, rows[names[1]].counted_holds) == (True, False)
    assert (rows[names[2]].counted, rows[names[2]].counted_holds) == (True, True) and rows[names[2]].absence is None


def _tiny_fig4a(tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    from hooked_clip1d.reproduce import core as rp_core

    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(Path(__file__).parent.parent / "examples" / "sweeps" / "tiny.toml", specs / "fig4a-distinct.toml")
    monkeypatch.setattr(rp_core, "SWEEPS_DIR", specs)
    checks = [
        c
        for c, _ in rp.FIGURES["fig4a"]
        .run(
            [{"run": f"r{nt}", "n_labels": nt, "n2": 2, "seed": 0, "epochs": 1, "val_unseen.acc": 0.5} for nt in (6, 7)]
        )
        .checks
    ]
    records = tmp_path / "records"
    records.mkdir()
    rec = {
        "figure": "fig4a",
        "title": "t",
        "paper": "p",
        "command": "hooked-clip1d reproduce fig4a",
        "verdict": "partly",
        "recorded": "2026-11-25",
        "summary": "s",
        "checks": [{"check": checks[0], "holds": False}, {"check": checks[1], "holds": True}],
        "plots": ["fig4a_sweep.png"],
    }
    rec["models"] = ["the flagship"]  # an old record's name for the zoo cell
    (records / "fig4a.json").write_text(json.dumps(rec))
    return records, rec


@pytest.mark.heavy
def test_rejudge_record_adds_the_null_control_to_a_kept_sweep_record(tmp_path, monkeypatch):
    """A record made before the null controls, on a sweep that is not here: its recorded checks judged under a fresh
    null control on the sweep untrained (docs/fidelity.md, second 2026-11-26 amendment)."""
    records, rec = _tiny_fig4a(tmp_path, monkeypatch)
    new = rp.rejudge_record("fig4a", records, tmp_path / "res")
    assert new["rejudged"]["from"] == "the record of 2026-11-25: its checks as recorded"
    assert len(new["null_control"]["models"]) == 10 and new["null_control"]["errors"] == {}
    assert [(c["check"], c["holds"], c["null_n"]) for c in new["checks"]] == [
        (c["check"], c["holds"], 10) for c in rec["checks"]
    ]
    counted = [(c["check"], c["counted_holds"]) for c in new["checks"] if c["counted"]]
    assert new["verdict"] == (rp.verdict_of(counted) if counted else "inconclusive")
    assert json.loads((tmp_path / "res" / "fig4a" / "fig4a.json").read_text()) == new
    assert new["plots"] == rec["plots"] and new["summary"] == rec["summary"]  # the trained side as recorded
    assert new["models"] == list(rp.FIGURES["fig4a"].models)  # today's zoo cells, not the old record's names
    # the page: the re-judged record replaces the kept one and keeps its PNG (made when the sweep was trained)
    from hooked_clip1d.reproduce.results_page import build_results_page

    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "fig4a_sweep.png").write_bytes(b"png")
    text = build_results_page(tmp_path / "res", tmp_path / "results.md").read_text()
    assert "(recorded 2026-11-25; its recorded checks re-judged " in text and "figures/fig4a_sweep.png" in text
    assert "untrained: " in text and "null_control" in json.loads((records / "fig4a.json").read_text())


def test_rejudge_record_refuses_what_it_cannot_judge(tmp_path, monkeypatch):
    records, rec = _tiny_fig4a(tmp_path, monkeypatch)
    with pytest.raises(ValueError, match="reads zoo models, not a sweep"):
        rp.rejudge_record("fig4c", records, tmp_path / "res")
    with pytest.raises(ValueError, match="no record of fig21"):
        rp.rejudge_record("fig21", records, tmp_path / "res")
    with pytest.raises(ValueError, match="unknown figure"):
        rp.rejudge_record("fig99", records, tmp_path / "res")
    own = rec["checks"][0].get("id")
    rec["checks"][0]["id"] = "a-check-the-code-no-longer-has-0000"  # matched by id, named by its sentence
    (records / "fig4a.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="no longer computes: \\['" + re.escape(rec["checks"][0]["check"][:30])):
        rp.rejudge_record("fig4a", records, tmp_path / "res")
    if own is None:  # an old record (no ids): its id is derived from the sentence on load
        del rec["checks"][0]["id"]
    else:
        rec["checks"][0]["id"] = own
    rec["interim"] = {"finished": 1, "runs": 4}  # an early reading: its verdict was capped at partly
    (records / "fig4a.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="early reading of an unfinished sweep"):
        rp.rejudge_record("fig4a", records, tmp_path / "res")
    (records / "fig4a.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        rp.rejudge_record("fig4a", records, tmp_path / "res")
    assert not (tmp_path / "res").exists()  # nothing written for a refused record


@pytest.mark.heavy
def test_rejudge_record_matches_checks_by_id_and_shows_todays_sentence(tmp_path, monkeypatch):
    """A recorded check is found by its stable id, not its sentence (issue 52): a record whose sentence reads
    otherwise (a rewording) is judged as the check with that id and shown with today's sentence."""
    from hooked_clip1d.reproduce.records import check_id

    records, rec = _tiny_fig4a(tmp_path, monkeypatch)
    today = rec["checks"][0]["check"]
    rec["checks"][0] = {**rec["checks"][0], "id": check_id(today), "check": "an older wording of the check"}
    (records / "fig4a.json").write_text(json.dumps(rec))
    new = rp.rejudge_record("fig4a", records, tmp_path / "res")
    assert new["checks"][0]["check"] == today and new["checks"][0]["id"] == check_id(today)
    assert new["checks"][0]["holds"] == rec["checks"][0]["holds"]


def test_cli_rejudge_record_all_takes_the_records_without_a_null_control(tmp_path, monkeypatch, capsys):
    records, _ = _tiny_fig4a(tmp_path, monkeypatch)
    out = tmp_path / "res"
    assert main(["reproduce", "all", "--rejudge-record", str(records), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fig4a"]
    assert "untrained: " in capsys.readouterr().out
    (records / "fig4a.json").write_text((out / "fig4a" / "fig4a.json").read_text())  # now it has one
    assert main(["reproduce", "all", "--rejudge-record", str(records), "--out", str(tmp_path / "res2")]) == 0
    assert not (tmp_path / "res2").exists() and "nothing to re-judge" in capsys.readouterr().out
    assert main(["reproduce", "fig4a", "--rejudge-record", str(records), "--model", "untrained:0"]) == 2
    assert "no --model" in capsys.readouterr().err


def test_every_absence_check_on_the_page_is_marked():
    """The absence rule is for a class of checks (docs/fidelity.md): upper bounds that untrained models meet, on every
    figure that states one: "no bias" / "does not generalize" (Fig. 15). Fig. 20's accuracy ranges from 0 were absence
    checks until verdicts v3 replaced them by one combined failure check (labels kept, order lost), which untrained
    models fail; the ranges are shown, not counted."""
    m20 = "leftright-v1-t1-ntot20-n2-10"
    out = rp.FIGURES["fig20"].run({m20: load_model(m20)})
    assert out.absence == ()
    assert {"val_unseen acc in [0.0, 0.1]", "val_unseen relaxed in [0.0, 0.6]"} <= set(out.secondary)
    combined = out.checks[1][0]
    assert combined.startswith("the failure of Fig. 20b-d") and combined not in out.secondary
    out = rp.FIGURES["fig15"].run({rp.NONGEN: load_model(rp.NONGEN)})
    assert set(out.absence) == {c for c, _ in out.checks} and len(out.absence) == 2
    out = rp.FIGURES["fig4c"].run({FLAGSHIP: load_model(FLAGSHIP)})
    assert out.absence == ()  # a claim that something is there


def test_trained_controls_are_declared_for_the_pre_registered_figures_and_wait_for_their_models():
    """Verdicts v3's table (docs/fidelity.md): each guarded figure names its control; a control not yet in the zoo is
    said, and nothing is counted or removed by it."""
    from hooked_clip1d.reproduce.replicates import TRAINED_CONTROLS, trained_control_runs

    guarded = {
        "fig4c",
        "fig5d",
        "fig5e",
        "fig6",
        "fig8",
        "fig11",
        "fig11a",
        "fig14",
        "fig18",
        "fig19",
        "fig20",
        "fig23",
        "x1-mirror-swap",
        "x6-spatial-ids",
        "x20-layers",  # pre-registered 2026-12-01 (session 44)
    }
    assert set(TRAINED_CONTROLS) == guarded
    for key, table in TRAINED_CONTROLS.items():
        assert set(table) <= set(rp.FIGURES[key].models), key
    with pytest.MonkeyPatch.context() as mp:  # a control not trained yet: said, nothing run
        mp.setitem(TRAINED_CONTROLS, "fig4c", {FLAGSHIP: ("control-not-trained-yet", False)})
        runs, status = trained_control_runs(rp.FIGURES["fig4c"], None)
    assert runs == [] and "'control-not-trained-yet' is not in the zoo yet" in status
    runs, status = trained_control_runs(rp.FIGURES["fig4c"], None)  # shipped 2026-11-28
    assert [label for label, _ in runs] == ["control-shuffled-distinct-ntot20-n2-10"]
    runs, status = trained_control_runs(rp.FIGURES["fig23"], None)  # App. L's control: shipped 2026-11-30
    assert [label for label, _ in runs] == ["control-shuffled-distinct-vision2-ntot25-n2-15"]
    runs, status = trained_control_runs(rp.FIGURES["fig20"], None)  # Fig. 8's model guards Fig. 20: shipped
    assert [label for label, _ in runs] == ["leftright-v1-t2-ntot20-n2-10"]
    out = rp.FIGURES["fig20"].run(runs[0][1])
    assert not dict(out.checks)[out.checks[1][0]]  # a model that generalizes fails the combined failure check


def test_the_page_says_when_a_guarded_figure_lacks_its_trained_control():
    """A figure whose trained control is declared but not trained is judged without it: its summary row and its
    section say so (a 'reproduced' there lacks the guard the pre-registration gave it)."""
    # fig5e: its check counts (every control run fails it), so only the missing control is left to say
    from hooked_clip1d.reproduce.records import load_record
    from hooked_clip1d.reproduce.results_page import _record_section, _why

    rec = load_record(Path(__file__).resolve().parents[1] / "docs" / "records" / "fig5e.json")
    rec.details["trained_control"] = {"status": "not in the zoo yet", "runs": [], "passes": {}}
    assert _why(rec).endswith("; its trained control is not trained yet")
    lines = _record_section(rec, Path("/nonexistent"), Path("/"))
    assert any(line.startswith("- **Trained control:** not in the zoo yet") for line in lines)
    rec.details["trained_control"] = {"status": "1 run(s)", "runs": ["c"], "passes": {}}
    assert "trained control" not in _why(rec)


@pytest.mark.heavy
def test_a_figure_with_two_guarded_models_gets_both_controls_in_each_run(tmp_path, monkeypatch):
    """x1's amendment (docs/fidelity.md, 2026-11-28): several guarded models are replaced together; run k takes each
    control's k-th run (shipped seed first, then the sweep's seeds in seed order) and a control with fewer runs
    repeats its shipped seed."""
    from hooked_clip1d.model.checkpoint import save_model
    from hooked_clip1d.pretrained import manifest
    from hooked_clip1d.reproduce import replicates
    from hooked_clip1d.reproduce.core import FigureSpec, Outcome

    rope, t1, t2 = "rope-ntot20-n2-15", "leftright-v1-t1-ntot20-n2-10", "leftright-v1-t2-ntot20-n2-10"
    ctl = replicates.SHUFFLED_ROPE
    spec = FigureSpec("two", "t", "t", (rope, t1), lambda ms: Outcome({}, "", [], {}))
    monkeypatch.setitem(replicates.TRAINED_CONTROLS, "two", {rope: (ctl, False), t1: (t2, True)})
    man = manifest(ctl)
    for seed, lr in ((5, None), (3, None), (4, 3e-4)):  # other seeds of the RoPE control's config as sweep runs
        run = tmp_path / replicates.CONTROLS_SWEEP / "runs" / f"seed-{seed}"
        run.mkdir(parents=True)
        cfg = {k: man[k] for k in ("model_config", "data_config")}
        train = {**man["train_config"], "seed": seed, **({"lr": lr} if lr else {})}  # seed 4: another recipe
        (run / "config.json").write_text(json.dumps({**cfg, "train_config": train}))
        (run / "summary.json").write_text("{}")
        save_model(load_model(ctl), run / "model.safetensors")
    runs, status = replicates.trained_control_runs(spec, tmp_path)
    assert [label for label, _ in runs] == [
        f"{ctl} + {t2}",
        f"controls/runs/seed-3 + {t2}",  # seed order, not folder order
        f"controls/runs/seed-5 + {t2}",  # not seed 4: trained with another lr, so not this control
    ]
    assert status == f"3 run(s) of {ctl!r}, {t2!r}"
    for _, models in runs:
        assert set(models) == {rope, t1}
        assert models[t1].cfg == load_model(t2).cfg  # Fig. 8's model in Fig. 20's place, as declared (free)
    runs, _ = replicates.trained_control_runs(spec, None)
    assert [label for label, _ in runs] == [f"{ctl} + {t2}"]


def test_x1_is_defined_on_a_model_that_mirroring_does_not_move():
    """x1's restated check (docs/fidelity.md, 2026-11-28): on an untrained model (whose belief mirroring does not
    flip) it fails with its flip rate reported instead of raising, so its null control runs on every draw."""
    from hooked_clip1d.reproduce.controls import substitutes
    from hooked_clip1d.reproduce.spatial_id_studies import mirror_flip_rate

    spec = rp.FIGURES["x1-mirror-swap"]
    out = spec.run(substitutes(spec, "untrained:4"))
    assert [holds for _, holds in out.checks] == [False, False]
    assert all("flips the belief on >= 80 %" in c for c, _ in out.checks)
    for numbers in out.numbers.values():
        assert 0.0 <= numbers["flip_rate"] < 0.8
    assert "fraction not defined" in out.summary
    with pytest.raises(ValueError, match="NaN or an infinity"):
        mirror_flip_rate(torch.tensor([float("nan")]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="equal-length non-empty"):
        mirror_flip_rate(torch.tensor([1.0, 2.0]), torch.tensor([1.0]))


def test_restated_fig4c_split_is_inclusive_and_needs_two_other_heads():
    """Fig. 4c' as pre-registered (docs/fidelity.md, 2026-11-29): thresholds inclusive; the dominant head cannot be
    one of the two others."""
    from hooked_clip1d.reproduce.readings import dominant_split

    assert dominant_split([0.1, 0.6, 0.6, 0.0], [0.9, 0.4, 0.4, 1.0])  # 0.90 and 0.60 pass
    assert not dominant_split([0.1, 0.6, 0.59, 0.0], [0.9, 0.4, 0.41, 0.0])  # one other head at 0.6
    assert not dominant_split([0.95, 0.6, 0.0, 0.0], [0.05, 0.4, 0.0, 0.0])  # the others must take the other side
    assert dominant_split([0.0, 0.7, 0.65, 0.2], [0.95, 0.3, 0.35, 0.8])  # either side may dominate


def _fresh_runs_folder(root: Path, ordered_model, shuffled_model, seeds=(9, 10, 11)) -> Path:
    """A controls-fresh sweep folder: the flagship's configs at ``seeds`` on ordered and shuffled captions."""
    man = manifest(FLAGSHIP)
    runs = root / "controls-fresh" / "runs"
    for order, model in (("ordered", ordered_model), ("shuffled", shuffled_model)):
        for s in seeds:
            data = {**man["data_config"], "caption_order": order}
            _fake_run(runs, f"{order}-{s}", {**man["train_config"], "seed": s}, man["model_config"], data, model)
    return root


def test_fresh_runs_are_the_flagships_recipe_at_the_preregistered_seeds(tmp_path):
    from hooked_clip1d.reproduce.replicates import fresh_runs

    model = substitute(FLAGSHIP, "untrained:0")
    _fresh_runs_folder(tmp_path, model, model, seeds=(3, 9, 10, 11))
    man = manifest(FLAGSHIP)
    other = {**man["train_config"], "seed": 10, "weight_decay": 0.1}  # another recipe at a fresh seed
    _fake_run(tmp_path / "controls-fresh" / "runs", "z", other, man["model_config"], man["data_config"], model)
    found = fresh_runs(FLAGSHIP, tmp_path)
    assert list(found) == [f"{o}:{s}" for o in ("ordered", "shuffled") for s in (9, 10, 11)]  # seed 3 left out
    assert found["shuffled:10"].name == "shuffled-10"


@pytest.mark.heavy
def test_restated_checks_are_judged_on_the_fresh_runs_alone(tmp_path):
    """Fig. 4c' by the rule of docs/fidelity.md (2026-11-29): the flagship as the ordered runs and its order-blind
    control as the shuffled ones give 'reproduced'; the control as every run, 'not reproduced'; five runs, no count;
    a passing untrained draw, 'inconclusive'."""
    from hooked_clip1d.reproduce.readings import DOMINANT_SPLIT_ID, DOMINANT_SPLIT_TEXT
    from hooked_clip1d.reproduce.replicates import SHUFFLED_DISTINCT, apply_fresh_runs

    spec = rp.FIGURES["fig4c"]
    flagship, control = load_model(FLAGSHIP), load_model(SHUFFLED_DISTINCT)
    outcome = spec.run({FLAGSHIP: flagship})
    assert dict(outcome.checks)[DOMINANT_SPLIT_TEXT] and outcome.id_of(DOMINANT_SPLIT_TEXT) == DOMINANT_SPLIT_ID
    null = {"variants": [{"model": f"u{i}", "checks": dict.fromkeys(dict(outcome.checks), False)} for i in NULL_SEEDS]}

    def judged(root: Path, null=null) -> dict:
        rows = counted_checks(outcome, null)
        entry = apply_fresh_runs(rows, spec, null, root)
        row = next(r for r in rows if r.id == DOMINANT_SPLIT_ID)
        return {"counted_holds": None, **row.to_row(), "entry": entry}

    row = judged(_fresh_runs_folder(tmp_path / "a", flagship, control))
    assert (row["fresh_rule"], row["counted"], row["counted_holds"]) == ("reproduced", True, True)
    assert row["fresh_runs"] == {
        **{f"ordered:{s}": True for s in (9, 10, 11)},
        **{f"shuffled:{s}": False for s in (9, 10, 11)},
    }
    assert set(row["entry"]["sensitivity"][DOMINANT_SPLIT_ID]["ordered:9"]) == {
        (0.8, True),
        (0.85, True),
        (0.9, True),
        (0.95, True),
    }
    row = judged(_fresh_runs_folder(tmp_path / "b", control, control))
    assert (row["fresh_rule"], row["counted"], row["counted_holds"]) == ("not reproduced", True, False)
    leaky = {
        "variants": [
            {**v, "checks": {**v["checks"], DOMINANT_SPLIT_TEXT: i == 0}} for i, v in enumerate(null["variants"])
        ]
    }
    row = judged(tmp_path / "a", leaky)
    assert (row["fresh_rule"], row["counted"]) == ("inconclusive", False)  # an untrained draw passes it
    shutil.rmtree(next((tmp_path / "a" / "controls-fresh" / "runs").glob("shuffled-11")))
    row = judged(tmp_path / "a")
    assert row["counted"] is False and row["fresh_rule"].startswith("not judged: 5 of 6 fresh runs")


@pytest.mark.heavy
def test_fig4c_and_5d_count_their_restated_forms_and_show_the_old_ones():
    from hooked_clip1d.reproduce.replicates import FRESH_JUDGED

    flagship = load_model(FLAGSHIP)
    for key in ("fig4c", "fig5d"):
        out = rp.FIGURES[key].run({FLAGSHIP: flagship})
        restated = [c for c, _ in out.checks if out.id_of(c) in FRESH_JUDGED[key]]
        assert len(restated) == 1 and restated[0] not in out.secondary
        old = next(c for c, _ in out.checks if c.startswith(("one head attends most", "some head is relational on")))
        assert "restated as Fig." in out.secondary[old]


def test_two_runs_for_one_fresh_slot_are_an_error(tmp_path):
    from hooked_clip1d.reproduce.replicates import fresh_runs

    model = substitute(FLAGSHIP, "untrained:0")
    _fresh_runs_folder(tmp_path, model, model)
    man = manifest(FLAGSHIP)
    again = {**man["data_config"], "caption_order": "shuffled"}
    _fake_run(tmp_path / "controls-fresh" / "runs", "zz", {**man["train_config"], "seed": 9}, man["model_config"],
              again, model)  # fmt: skip
    with pytest.raises(ValueError, match="two finished runs are shuffled:9"):
        fresh_runs(FLAGSHIP, tmp_path)


@pytest.mark.heavy
def test_a_substituted_model_leaves_the_restated_check_uncounted(tmp_path):
    """Fig. 4c' read on a substituted model: no fresh runs judge it, so it does not count (it used to count by the
    null control alone, under a sentence naming the fresh runs); a NaN stated value is an error."""
    rec = rp.reproduce("fig4c", tmp_path, models="simplified-ntot20-n2-10-standard-loss", controls=True)
    restated = next(c for c in rec["checks"] if c["id"] == "fig4c-dominant-split")
    assert not restated["counted"] and restated["fresh_rule"].startswith("not judged: a substituted model")
    nan = Outcome({}, "", [("v", True)], {}, values={"v": (float("nan"), ">")})
    with pytest.raises(ValueError, match="not a finite number"):
        counted_checks(nan, {"variants": [{"model": "u", "checks": {"v": True}, "values": {"v": 0.5}}]})


def test_guard_record_applies_a_later_control_to_a_kept_record_and_keeps_its_seeds(tmp_path):
    """``guard_record`` (``reproduce FIG --guard-record DIR``): a trained control pre-registered after a record was
    made is applied to the kept record without a rerun, so its seed replicates (not on every machine) stay. Each
    counted check the control passes stops counting; everything else stays as recorded; the verdict is the one its
    checks give. Refused by name: no control, fresh-run-judged figures, a record that has its control already or no
    null control, a record of another figure."""
    import json
    import shutil

    from hooked_clip1d.reproduce import guard_record
    from hooked_clip1d.reproduce.records import load_record

    kept = tmp_path / "records"
    kept.mkdir()
    for f in ("fig11", "fig8", "fig4c"):
        shutil.copy(f"docs/records/{f}.json", kept / f"{f}.json")
    unguarded = json.loads((kept / "fig11.json").read_text())  # as it was before its control (2026-11-28)
    for key in ("trained_control", "rejudged"):
        unguarded.pop(key, None)
    for c in unguarded["checks"]:
        c.pop("trained_control", None)
        if c.pop("control_passes", None):
            c["counted"], c["counted_holds"] = True, c["holds"]
    (kept / "fig11.json").write_text(json.dumps(unguarded))
    before = load_record(kept / "fig11.json")
    assert "trained_control" not in before.details
    rec = guard_record("fig11", kept, tmp_path / "out", tmp_path / "no-sweeps")
    after = load_record(tmp_path / "out" / "fig11" / "fig11.json")
    assert rec["trained_control"]["runs"] == ["control-shuffled-distinct-ntot20-n2-10"]
    assert after.details["replicates"] == before.details["replicates"]
    assert after.details["null_control"] == before.details["null_control"]
    for b, a in zip(before.checks, after.checks, strict=True):
        assert (a.id, a.holds, a.seeds, a.null_passes) == (b.id, b.holds, b.seeds, b.null_passes)
        ctl = a.trained_control["control-shuffled-distinct-ntot20-n2-10"]
        assert a.counted == (b.counted and not ctl)
    assert after.verdict == after.judged() and "trained control pre-registered after it" in rec["rejudged"]["from"]
    # guarded again (e.g. with more control seeds on the machine): from the record as it was, the same outcome
    again = guard_record("fig11", tmp_path / "out" / "fig11", tmp_path / "again", tmp_path / "no-sweeps")
    assert [c["counted"] for c in again["checks"]] == [c.counted for c in after.checks]
    assert again["rejudged"]["before_control"] == rec["rejudged"]["before_control"]
    for key, value, problem in (
        ("substituted", {"x": "untrained:1"}, "was not made on the figure's zoo models"),
        ("models", ["simplified-ntot20-n2-10-standard-loss"], "was not made on the figure's zoo models"),
        ("model_epochs", {"simplified-ntot20-n2-10": 500}, "the zoo's models moved since"),
    ):
        (kept / "moved").mkdir(exist_ok=True)
        (kept / "moved" / "fig11.json").write_text(json.dumps({**unguarded, key: value}))
        with pytest.raises(ValueError, match=problem):
            guard_record("fig11", kept / "moved", tmp_path / "out")
    from hooked_clip1d.reproduce.results_page import _when

    assert "under the trained control pre-registered after it: `hooked-clip1d reproduce fig11 --guard-record" in (
        _when(after)
    )
    with pytest.raises(ValueError, match="fig13 has no pre-registered trained control"):
        guard_record("fig13", kept, tmp_path / "out")
    with pytest.raises(ValueError, match="fig4c's restated checks are judged on fresh runs"):
        guard_record("fig4c", kept, tmp_path / "out")
    with pytest.raises(ValueError, match="already carries a trained control"):
        guard_record("fig8", kept, tmp_path / "out")
    bare = json.loads((kept / "fig11.json").read_text())
    del bare["null_control"]
    for c in bare["checks"]:
        c.pop("counted", None), c.pop("counted_holds", None)
    bare["verdict"] = "partly"
    (kept / "fig11.json").write_text(json.dumps(bare))
    with pytest.raises(ValueError, match="has no null control to keep"):
        guard_record("fig11", kept, tmp_path / "out")
    shutil.copy(kept / "fig8.json", kept / "fig11.json")
    with pytest.raises(ValueError, match="is the record of 'fig8', not of 'fig11'"):
        guard_record("fig11", kept, tmp_path / "out")


def test_every_counted_check_of_a_reproduced_or_partly_figure_names_its_trained_control():
    """Issue 50's done-when, read off the shipped records: each counted check of a paper figure judged reproduced or
    partly carries its trained control's outcome, or its record says why no control guards it (``unguarded``).
    Fig. 7's cross check (the own pair against the control pairs) is the comparison with its control, so the
    record lists it as unguarded with that reason (2026-12-01: a control outcome on it would pass by construction, a
    reviewer's catch)."""
    from hooked_clip1d.reproduce.records import Record
    from hooked_clip1d.reproduce.results_page import _uncontrolled

    records = Path(__file__).resolve().parents[1] / "docs" / "records"
    for path in sorted(records.glob("fig*.json")):
        rec = json.loads(path.read_text())
        if rec["verdict"] not in ("reproduced", "partly"):
            continue
        if _uncontrolled(Record.from_dict(rec)):  # no control ran (Fig. 3's cell): shown, counted in no verdict
            assert all("counted" not in c for c in rec["checks"]), path.name
            continue
        tc = rec.get("trained_control") or {}
        unguarded = set(tc.get("unguarded", {}))
        for c in rec["checks"]:
            if c["counted"]:
                assert c.get("trained_control") or c["check"] in unguarded, (path.name, c["id"])
    from hooked_clip1d.reproduce.text_figs import FIG7_CROSS

    fig7 = json.loads((records / "fig7.json").read_text())
    cross = next(c for c in fig7["checks"] if c["check"] == FIG7_CROSS)
    assert cross["counted"] and not cross.get("trained_control") and FIG7_CROSS in fig7["trained_control"]["unguarded"]


def test_a_figure_without_a_trained_control_says_why_and_cannot_be_guarded(tmp_path):
    """Fig. 4a's two counted checks are sweep trends no trained control guards (``OWN_CONTROLS["fig4a"]``,
    ``trained=False``, 2026-12-02): its record's entry lists both with why and no run, and ``guard_record`` refuses it
    by name instead of running the figure on zoo models (it reads a sweep's rows)."""
    from hooked_clip1d.reproduce.replicates import OWN_CONTROLS
    from hooked_clip1d.reproduce.sweep_figs import FIG4A_MORE, FIG4A_TREND, NO_TREND_CONTROL

    own = OWN_CONTROLS["fig4a"]
    assert not own.trained and own.reader is None and set(own.unguarded) == {FIG4A_TREND, FIG4A_MORE}
    rec = json.loads((Path(__file__).resolve().parents[1] / "docs" / "records" / "fig4a.json").read_text())
    tc = rec["trained_control"]
    assert tc["runs"] == [] and tc["passes"] == {} and set(tc["unguarded"].values()) == {NO_TREND_CONTROL}
    counted = {c["check"] for c in rec["checks"] if c["counted"]}
    assert counted == set(tc["unguarded"])
    with pytest.raises(ValueError, match="fig4a has no pre-registered trained control"):
        rp.guard_record("fig4a", "docs/records", tmp_path / "res")
    assert OWN_CONTROLS["fig7"].trained and OWN_CONTROLS["fig22"].trained
