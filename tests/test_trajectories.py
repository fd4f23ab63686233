"""Training trajectories in the zoo (issue 35): shipping a finished run's snapshots, loading a checkpoint by index or
by epoch (TransformerLens's ``checkpoint_index`` / ``checkpoint_value``), the emergence analysis over a trajectory, its
figure, the CLI, and the shipped trajectories themselves (once they ship).

Everything but the last group runs on a tiny model trained here with ``TrainConfig.snapshot_epochs`` and exported to
a zoo in a temporary folder (the registry's folders point there for the test: ``WEIGHTS_DIR``, ``TRAJECTORIES_DIR``).
"""

from __future__ import annotations

import json
import lzma
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from safetensors import safe_open

import hooked_clip1d.pretrained as reg
import hooked_clip1d.pretrained.ship as ship
from hooked_clip1d import DataConfig, TrainConfig, build_dataset, evaluate
from hooked_clip1d.analysis.mechanism.report import unseen_probe
from hooked_clip1d.cli.commands import main
from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file, save_model
from hooked_clip1d.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)
SNAPS = (0, 1, 2, 4, 6)
EPOCHS = [0, 1, 2, 6]  # trajectory_schedule(6) among the snapshots: 4 is not in the default schedule


def _train(out: Path, seed: int = 0, epochs: int = 6, snapshots=SNAPS) -> Path:
    tc = TrainConfig(epochs=epochs, batch_size=16, eval_every=2, seed=seed, snapshot_epochs=snapshots)
    Trainer(tiny_config(), D6, tc, out).run(progress=False)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny run with snapshots, exported as zoo model "tiny" and shipped with its trajectory; "plain" is exported
    without one."""
    root = tmp_path_factory.mktemp("zoo")
    run = _train(root / "run")
    other = _train(root / "other", seed=1, snapshots=())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reg.zoo, "WEIGHTS_DIR", root / "weights")
        mp.setattr(reg.zoo, "TRAJECTORIES_DIR", root / "trajectories")
        ship.export_run(run, "tiny", "a tiny test model")
        ship.export_run(other, "plain", "a tiny model without a trajectory")
        rng = torch.get_rng_state()
        target = ship.ship_trajectory(run, "tiny")
        assert torch.equal(rng, torch.get_rng_state())  # the caller's global RNG is left alone
    return {"root": root, "run": run, "other": other, "target": target}


@pytest.fixture
def zoo(built, monkeypatch):
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", built["root"] / "weights")
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", built["root"] / "trajectories")
    return built


def _state(model):
    return model.state_dict()


def _equal(a, b) -> bool:
    sa, sb = _state(a), _state(b)
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# ---- shipping ------------------------------------------------------------------------------------------------------
def test_ship_writes_one_file_and_a_manifest(zoo, tmp_path):
    assert reg.list_trajectories() == ["tiny"]
    assert reg.list_checkpoints("tiny") == EPOCHS
    man = reg.trajectory_manifest("tiny")
    assert man["dtype"] == "float16" and man["final_epoch"] == 6 and man["file"] == "tiny.safetensors.xz"
    assert man["dtypes"] == {"0": "float16", "1": "float16", "2": "float16"}
    assert man["sha256"] == reg.sha256_file(zoo["target"]) and man["bytes"] == zoo["target"].stat().st_size
    assert man["checkpoint_sha256"]["6"] == reg.manifest("tiny")["sha256"]  # the last: the shipped weights file
    unpacked = tmp_path / "unpacked.safetensors"
    unpacked.write_bytes(lzma.decompress(zoo["target"].read_bytes()))
    with safe_open(str(unpacked), "pt") as f:
        keys = list(f.keys())
        dtypes = {f.get_tensor(k).dtype for k in keys}
    assert {k.split(".")[0] for k in keys} == {"epoch_00000", "epoch_00001", "epoch_00002"}  # not the last again
    assert dtypes == {torch.float16}
    assert "epoch_00000.vision.embed.W_E" in keys
    # what it costs: about half the float32 weights per stored checkpoint
    per = reg.manifest("tiny")["bytes"]  # the safetensors bytes (the shipped file is compressed)
    assert man["bytes"] < 0.6 * 3 * per
    assert not [p.name for p in zoo["target"].parent.iterdir() if p.name.startswith(".")]  # no temp file left


def test_precision_is_measured_and_recorded(zoo):
    man = reg.trajectory_manifest("tiny")
    prec = man["precision"]
    assert prec["candidates"] == ["float16", "bfloat16", "float32"]
    ds = unseen_probe(build_dataset(D6))
    for e in (0, 1, 2):
        rec = prec["checkpoints"][str(e)]
        kept = {"dtype": "float16", "accepted": True, "images_differing": 0, "why": None}
        assert rec["dtype"] == "float16" and rec["tried"] == [kept]
        measured = rec["metrics"]
        assert measured["float16"] == measured["float32"]
        assert set(measured["float32"]) == {"train", "val_single", "val_seen", "val_unseen", "probe_unseen"}
        # the recorded accuracies are those of the stored weights, and of the float32 snapshot
        stored = reg.load_model("tiny", checkpoint_value=e)
        assert evaluate(stored, ds, splits=list(ds.splits)) == measured["float16"]
        snap = load_model_file(zoo["run"] / "snapshots" / f"epoch_{e:05d}.safetensors")
        assert evaluate(snap, ds, splits=list(ds.splits)) == measured["float32"]
    assert man["emergence"]["max_change_from_float32"] < 0.05


def test_precision_falls_back_when_float16_cannot_hold_a_weight(zoo, tmp_path):
    """A weight past float16's range refuses float16 for that checkpoint (recorded); the next precision that keeps
    its accuracies stores it, and the other checkpoints stay float16."""
    run = tmp_path / "run"
    shutil.copytree(zoo["run"], run)
    snap = run / "snapshots" / "epoch_00001.safetensors"
    model = load_model_file(snap)
    with torch.no_grad():
        model.W_proj[0, 0] = 1e6
    save_model(model, snap, extra={"epoch": 1})
    dest = tmp_path / "trajectories"
    ship.ship_trajectory(run, "tiny", dest=dest)
    man = json.loads((dest / "tiny.json").read_text())
    tried = man["precision"]["checkpoints"]["1"]["tried"]
    assert tried[0] == {"dtype": "float16", "accepted": False, "images_differing": None, "why": "a weight does not fit"}
    assert tried[-1]["accepted"] and [t["dtype"] for t in tried] == ["float16", "bfloat16", "float32"][: len(tried)]
    assert man["dtypes"] == {"0": "float16", "1": tried[-1]["dtype"], "2": "float16"}
    assert man["dtype"] == f"float16 x 2, {tried[-1]['dtype']} x 1"
    stored_file = tmp_path / "unpacked.safetensors"  # the standard format inside the xz container
    stored_file.write_bytes(lzma.decompress((dest / "tiny.safetensors.xz").read_bytes()))
    with safe_open(str(stored_file), "pt") as f:
        assert f.get_tensor("epoch_00001.W_proj").dtype == getattr(torch, tried[-1]["dtype"])
        assert f.get_tensor("epoch_00002.W_proj").dtype == torch.float16
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reg.zoo, "TRAJECTORIES_DIR", dest)
        stored = torch.tensor(1e6).to(getattr(torch, tried[-1]["dtype"])).item()
        assert reg.load_model("tiny", checkpoint_value=1).W_proj[0, 0].item() == stored


def test_explicit_epochs_and_dtypes(zoo, tmp_path):
    dest = tmp_path / "t"
    ship.ship_trajectory(zoo["run"], "tiny", epochs=[0, 4], dtypes=["float32"], dest=dest)
    man = json.loads((dest / "tiny.json").read_text())
    assert man["epochs"] == [0, 4, 6] and man["dtype"] == "float32"  # the last epoch is always added
    with pytest.raises(ValueError, match=r"no snapshot at epochs \[3\]; its snapshots: \[0, 1, 2, 4, 6\]"):
        ship.ship_trajectory(zoo["run"], "tiny", epochs=[0, 3], dest=dest)
    with pytest.raises(ValueError, match="dtypes must be"):
        ship.ship_trajectory(zoo["run"], "tiny", dtypes=["int8"], dest=dest)


def test_snapshots_measured_not_stored_are_recorded_and_read_by_fig11s_history(zoo, tmp_path, monkeypatch, capsys):
    """``metrics_epochs``: a snapshot whose weights the budget cannot store keeps its float32 accuracies (and its
    file's sha256) in the manifest; Fig. 11's fine history reads them where the history and the checkpoints have
    none (Fig. 11a, the full model's phases: pre-registration of 2026-12-01)."""
    from hooked_clip1d.pretrained.trajectories import file_sha256, snapshot_metrics
    from hooked_clip1d.reproduce.readings import fine_history, measured_epochs

    dest = tmp_path / "traj"
    ship.ship_trajectory(zoo["run"], "tiny", epochs=[0, 2], dest=dest, metrics_epochs="all")
    man = json.loads((dest / "tiny.json").read_text())
    assert man["epochs"] == [0, 2, 6] and man["snapshot_metrics"]["epochs"] == [1, 4]  # stored ones not measured
    snap = zoo["run"] / "snapshots" / "epoch_00001.safetensors"
    assert man["snapshot_metrics"]["snapshot_sha256"]["1"] == file_sha256(snap)
    final = load_model_file(zoo["run"] / "model.safetensors")
    ds = unseen_probe(build_dataset(final.data_config))
    assert snapshot_metrics(man)[1] == evaluate(load_model_file(snap).eval(), ds, splits=list(ds.splits))
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", dest)
    fine, added = fine_history(reg.load_model("tiny"), "tiny")
    assert 1 in added and fine["seen"][fine["epoch"].index(1)] == snapshot_metrics(man)[1]["val_seen"]["acc"]
    assert measured_epochs(reg.load_model("tiny"), "tiny", added) == [1]  # 4 is in the history; 0 is stored
    assert main(["list", "--checkpoints", "tiny"]) == 0  # listed apart from the checkpoints (no index: no weights)
    out = capsys.readouterr().out
    assert "2 snapshots' accuracies recorded" in out and out.count("(accuracies only)") == 2
    assert main(["list", "--checkpoints", "tiny", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["epoch"] for r in listed["snapshot_accuracies"]] == [1, 4] and len(listed["checkpoints"]) == 3
    for bad, says in (([2], "stored as a checkpoint"), ([3], "not a snapshot"), ("some", "or 'all'")):
        with pytest.raises(ValueError, match=says):
            ship.ship_trajectory(zoo["run"], "tiny", epochs=[0, 2], dest=tmp_path / "x", metrics_epochs=bad)
    plain = tmp_path / "plain"  # without metrics_epochs the manifest is as before
    ship.ship_trajectory(zoo["run"], "tiny", epochs=[0, 2], dest=plain)
    assert "snapshot_metrics" not in json.loads((plain / "tiny.json").read_text())
    # a recorded accuracy without a split Fig. 11 reads is refused by name, not a bare KeyError (session 42)
    del man["snapshot_metrics"]["metrics"]["1"]["val_unseen"]
    (dest / "tiny.json").write_text(json.dumps(man))
    with pytest.raises(ValueError, match=r"snapshot epoch 1 records no \['val_unseen'\] accuracy"):
        fine_history(reg.load_model("tiny"), "tiny")


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"x": {"val_seen": {"acc": 0.5}}}, "entry 'x' is not an epoch"),
        ({"5": [0.5]}, "entry '5' is not an epoch"),
        ({"5": {"val_seen": {"acc": float("nan")}}}, r"epoch 5, val_seen: accuracy nan is not a number in \[0, 1\]"),
        ({"5": {"val_seen": {"acc": 1.5}}}, "epoch 5, val_seen: accuracy 1.5 is not"),
        ({"5": {"val_seen": {"acc": True}}}, "epoch 5, val_seen: accuracy True is not"),
        ({"5": {"val_seen": {}}}, "epoch 5, val_seen: accuracy None is not"),
        ({"5": {"val_seen": 0.5}}, "epoch 5, val_seen: accuracy None is not"),
    ],
)
def test_snapshot_metrics_refuses_what_would_move_a_threshold(entry, says):
    """A hand-edited or corrupt ``snapshot_metrics`` is refused by name (session 42): a NaN skipped, or an accuracy
    out of range, would move the epoch a threshold is first reached at, and Fig. 11a's order check with it."""
    from hooked_clip1d.pretrained.trajectories import snapshot_metrics

    with pytest.raises(ValueError, match="trajectory 'm': snapshot_metrics: " + says):
        snapshot_metrics({"name": "m", "snapshot_metrics": {"metrics": entry}})


def test_a_stale_trajectory_is_refused_where_it_is_read(zoo, tmp_path, monkeypatch, capsys):
    """Weights exported again without their trajectory shipped again: the trajectory's numbers are another run's, so
    reading it is refused by name (session 42), not merged into Fig. 11's history without a word; the zoo's listing
    still lists, marking it."""
    weights, trajs = tmp_path / "weights", tmp_path / "trajectories"
    shutil.copytree(zoo["root"] / "weights", weights)
    shutil.copytree(zoo["root"] / "trajectories", trajs)
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", weights)
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", trajs)
    assert reg.list_checkpoints("tiny") == EPOCHS
    doctored = json.loads((weights / "tiny.json").read_text())
    (weights / "tiny.json").write_text(json.dumps({**doctored, "epochs": 5}))  # the same weights, another epoch
    with pytest.raises(reg.StaleTrajectoryError, match=r"last checkpoint \(epoch 6, .*\(epoch 5, "):
        reg.list_checkpoints("tiny")
    ship.export_run(zoo["other"], "tiny", "another run exported over tiny")
    with pytest.raises(ValueError, match=r"'tiny''s trajectory is stale: its last checkpoint .* is not the shipped"):
        reg.list_checkpoints("tiny")
    assert main(["list"]) == 0
    assert "[trajectory: stale, ship it again]" in capsys.readouterr().out
    assert main(["list", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["tiny"]["checkpoints"] is None and "is stale" in listed["tiny"]["trajectory_stale"]


def test_ship_refuses_a_mislabelled_snapshot_and_a_scheduled_one_missing(zoo, tmp_path):
    """``ship_trajectory`` reads each snapshot's own metadata (session 42): another epoch's file under this epoch's
    name would be recorded at the wrong epoch; with ``metrics_epochs="all"`` a snapshot the run scheduled and lost
    is refused, not read as an epoch never measured (a list ships without it)."""
    run = tmp_path / "run"
    shutil.copytree(zoo["run"], run)
    snaps = run / "snapshots"
    lost = snaps / "epoch_00001.safetensors"
    kept = lost.read_bytes()
    lost.unlink()
    with pytest.raises(ValueError, match=r"scheduled snapshots at epochs \[1\] that are missing"):
        ship.ship_trajectory(run, "tiny", epochs=[0, 2], dest=tmp_path / "t", metrics_epochs="all")
    ship.ship_trajectory(run, "tiny", epochs=[0, 2], dest=tmp_path / "t", metrics_epochs=[4])  # named: shipped
    lost.write_bytes((snaps / "epoch_00002.safetensors").read_bytes())  # epoch 2's weights under epoch 1's name
    with pytest.raises(CheckpointError, match="labelled epoch 1 by its name but holds the weights of epoch 2"):
        ship.ship_trajectory(run, "tiny", epochs=[0, 2], dest=tmp_path / "u")
    lost.write_bytes(kept)
    from hooked_clip1d.pretrained.ship_measure import check_run_snapshots
    from hooked_clip1d.pretrained.trajectories import run_snapshots

    config = json.loads((run / "config.json").read_text())
    check_run_snapshots(run_snapshots(run), config)  # the run's own: accepted
    other = {**config, "data_config": {**config["data_config"], "seed": config["data_config"]["seed"] + 1}}
    with pytest.raises(CheckpointError, match="is not a snapshot of this run: its data_config differs"):
        check_run_snapshots(run_snapshots(run), other)


def test_fine_history_refuses_an_evaluation_without_an_accuracy(zoo):
    """A None in the history's single/seen/unseen accuracies is an error (session 42): skipped, it would move the
    epoch a threshold is first reached at, and could break a tie the order check must fail on."""
    from hooked_clip1d.reproduce.readings import fine_history

    m = reg.load_model("tiny")
    m.manifest["history"]["seen"][1] = None
    gap = m.manifest["history"]["epoch"][1]
    with pytest.raises(ValueError, match=rf"history has evaluations without an accuracy: .*'seen': \[{gap}\]"):
        fine_history(m, "tiny")


def test_first_epoch_refuses_a_nan_and_skips_a_missing_evaluation():
    """A NaN accuracy is an error, not an epoch where the level is not reached (session 42): skipped, it could break
    a tie and make an order check pass ("ties fail"); a None is an epoch without that evaluation."""
    from hooked_clip1d.reproduce.readings import first_epoch

    hist = {"epoch": [0, 100, 200], "single": [0.2, 0.97, 1.0], "seen": [0.1, float("nan"), 0.99]}
    assert first_epoch(hist, "single", 0.95) == 100
    with pytest.raises(ValueError, match=r"'seen' accuracy is not finite at epochs \[100\]"):
        first_epoch(hist, "seen", 0.95)
    assert first_epoch({"epoch": [0, 5], "seen": [None, 0.96]}, "seen", 0.95) == 5


@pytest.mark.heavy
def test_the_size_budget_is_enforced_before_anything_is_written(zoo, tmp_path):
    (tmp_path / "other.safetensors").write_bytes(b"x" * 30_000)  # another trajectory already shipped
    with pytest.raises(ValueError, match=r"past the budget of 0.04 MB \(the others: 0.0 MB\): ship fewer checkpoints"):
        ship.ship_trajectory(zoo["run"], "tiny", dest=tmp_path, budget_mb=0.04)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.safetensors"]  # nothing written, no temp file
    ship.ship_trajectory(zoo["run"], "tiny", dest=tmp_path, budget_mb=1)


def test_ship_refuses_a_zoo_model_not_exported_from_the_run(zoo, tmp_path):
    with pytest.raises(ValueError, match="was not exported from .*export this run first"):
        ship.ship_trajectory(zoo["run"], "plain", dest=tmp_path)
    with pytest.raises(KeyError, match="unknown pretrained model 'nope'"):
        ship.ship_trajectory(zoo["run"], "nope", dest=tmp_path)
    with pytest.raises(FileNotFoundError, match="has no snapshots/"):
        ship.ship_trajectory(zoo["other"], "plain", dest=tmp_path)
    unfinished = tmp_path / "unfinished"
    shutil.copytree(zoo["run"], unfinished)
    (unfinished / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="the run has not finished"):
        ship.ship_trajectory(unfinished, "tiny", dest=tmp_path)
    assert not list(tmp_path.glob("*.json"))  # nothing written by a refused shipment


# ---- loading -------------------------------------------------------------------------------------------------------
def test_last_checkpoint_is_the_shipped_model_bit_for_bit(zoo):
    shipped = reg.load_model("tiny")
    for kw in ({"checkpoint_index": -1}, {"checkpoint_index": 3}, {"checkpoint_value": 6}):
        m = reg.load_model("tiny", **kw)
        assert _equal(m, shipped), kw
        assert m.manifest["checkpoint"] == {"index": 3, "epoch": 6, "epochs": EPOCHS, "final": True, "dtype": "float32"}
        assert reg.model_name(m) == "tiny"


def test_checkpoints_are_the_snapshots_at_the_stored_precision(zoo):
    for i, e in enumerate(EPOCHS[:-1]):
        m = reg.load_model("tiny", checkpoint_index=i)
        snap = load_model_file(zoo["run"] / "snapshots" / f"epoch_{e:05d}.safetensors")
        for k, v in _state(m).items():
            assert v.dtype == torch.float32 and torch.equal(v, _state(snap)[k].half().float()), (e, k)
        assert not m.training and m.data_config == D6
        assert m.manifest["epochs"] == e and m.manifest["checkpoint"]["dtype"] == "float16"
        measured = reg.trajectory_manifest("tiny")["precision"]["checkpoints"][str(e)]["metrics"]["float16"]
        assert m.manifest["metrics"] == {k: v for k, v in measured.items() if k != "probe_unseen"}
        assert reg.model_name(m) == f"tiny @ epoch {e}"
        assert all(h <= e for h in m.manifest["history"]["epoch"])
    init = tiny_config()  # epoch 0 is the untrained model (the trainer's seed), rounded to float16
    from hooked_clip1d import CLIP1D

    fresh = CLIP1D(init, seed=0)
    for k, v in _state(reg.load_model("tiny", checkpoint_value=0)).items():
        assert torch.equal(v, _state(fresh)[k].half().float()), k


def test_load_trajectory_reads_every_checkpoint_once(zoo):
    rng = torch.get_rng_state()
    ckpts = reg.load_trajectory("tiny")
    assert torch.equal(rng, torch.get_rng_state())
    assert [e for e, _ in ckpts] == EPOCHS
    for e, m in ckpts:
        assert _equal(m, reg.load_model("tiny", checkpoint_value=e))
    assert [e for e, _ in reg.load_trajectory("tiny", epochs=[6, 0])] == [0, 6]


def test_errors_list_what_exists(zoo):
    listing = r"the trajectory has epochs \[0, 1, 2, 6\] \(indexes 0..3\)"
    with pytest.raises(reg.NoTrajectoryError, match=rf"no checkpoint index 4; {listing}"):
        reg.load_model("tiny", checkpoint_index=4)
    with pytest.raises(ValueError, match=rf"no checkpoint at epoch 4; {listing}"):
        reg.load_model("tiny", checkpoint_value=4)
    # both given: the value, as TransformerLens 4.3 loads it (3.x loaded the index); a warning where they disagree
    assert reg.load_model("tiny", checkpoint_index=0, checkpoint_value=0).cfg.checkpoint_value == 0
    with pytest.warns(UserWarning, match="name different checkpoints; the value is loaded"):
        m = reg.load_model("tiny", checkpoint_index=0, checkpoint_value=6)
    assert (m.cfg.checkpoint_index, m.cfg.checkpoint_value) == (3, 6)
    with pytest.raises(TypeError, match="checkpoint_index must be an int"):
        reg.load_model("tiny", checkpoint_index=True)
    with pytest.raises(ValueError, match="'plain' ships no training trajectory; models with one: tiny"):
        reg.load_model("plain", checkpoint_index=0)
    with pytest.raises(ValueError, match="'plain' ships no training trajectory"):
        reg.list_checkpoints("plain")
    with pytest.raises(KeyError, match="known models: .*'tiny'"):
        reg.list_checkpoints("nope")
    with pytest.raises(reg.NoTrajectoryError, match=r"no checkpoint at epochs \[5\]"):
        reg.load_trajectory("tiny", epochs=[0, 5])


def test_a_tampered_trajectory_is_refused(zoo, tmp_path, monkeypatch):
    traj = tmp_path / "trajectories"
    shutil.copytree(zoo["root"] / "trajectories", traj)
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", traj)
    blob = bytearray((traj / "tiny.safetensors.xz").read_bytes())
    blob[-3] ^= 0xFF
    (traj / "tiny.safetensors.xz").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="sha256 .* does not match its manifest"):
        reg.load_model("tiny", checkpoint_index=0)
    reg.load_model("tiny", checkpoint_index=-1)  # the last is the shipped weights file, untouched


def test_run_directories_have_checkpoints_too(zoo):
    run = zoo["run"]
    assert reg.list_checkpoints(run) == list(SNAPS)
    m = reg.resolve_model(str(run), checkpoint_value=4)
    assert _equal(m, load_model_file(run / "snapshots" / "epoch_00004.safetensors"))
    assert [e for e, _ in reg.load_trajectory(run, epochs=[0, 6])] == [0, 6]
    with pytest.raises(ValueError, match="one model file, with no checkpoints"):
        reg.resolve_model(str(run / "model.safetensors"), checkpoint_index=0)
    with pytest.raises(ValueError, match="folder without snapshots"):
        reg.list_checkpoints(zoo["other"])
    # load_model takes the run directory as resolve_model does (it refused it without a checkpoint: session 30)
    assert _equal(reg.load_model(str(run)), reg.resolve_model(str(run)))
    assert _equal(reg.load_model(run / "model.safetensors"), load_model_file(run / "model.safetensors"))
    assert not reg.load_model(str(run)).training


# ---- emergence -----------------------------------------------------------------------------------------------------
def test_emergence_rows_recorded_at_shipping_equal_a_recomputation(zoo):
    stored = reg.trajectory_emergence("tiny")
    assert [r["epoch"] for r in stored.rows] == EPOCHS
    again = reg.trajectory_emergence("tiny", recompute=True)
    assert again.rows == stored.rows and again.windows == stored.windows
    # measured once a process (the invariance audit reruns x13 seven times); a caller's edit does not leak into it
    again.rows[0]["loss"] = -1.0
    cached = reg.trajectory_emergence("tiny", recompute=True)
    assert cached.rows == stored.rows and cached.rows is not again.rows
    row = stored.rows[0]
    for key in (
        "loss",
        "single",
        "seen",
        "unseen",
        "probe",
        "p_left",
        "p_right",
        "ep_std",
        "ep_spearman",
        "invariant",
        "xwx_share",
        "qk_rank",
        "exposure",
        "checks",
    ):
        assert key in row, key
    assert row["exposure"] == 0.0 and stored.rows[-1]["exposure"] > 0
    assert set(stored.windows) >= {"generalizes", "picture"}
    sub = reg.trajectory_emergence("tiny", epochs=[0, 6])
    assert [r["epoch"] for r in sub.rows] == [0, 6]


def test_emergence_figure_follows_the_conventions(zoo):
    import matplotlib.pyplot as plt
    import numpy as np

    from hooked_clip1d.visualization.dynamics import plot_checkpoints, plot_emergence

    fig = plot_emergence(reg.trajectory_emergence("tiny"))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 5 and all(ax.get_xscale() == "symlog" for ax in panels)
    assert panels[0].get_xlim()[0] < 0  # epoch 0 is drawn, not lost to a log axis
    for ax in fig.axes:
        for line in ax.get_lines():
            x, y = (np.asarray(v, dtype=float) for v in line.get_data())
            if len(y) == 2 and y[0] == y[1] and tuple(x) == (0.0, 1.0) and y[0] != 0:  # a reference line
                assert not line.get_label().startswith("_") or y[0] == -0.9, line.get_label()
    texts = {t.get_text() for ax in panels for t in ax.get_legend().get_texts()}
    assert "unseen-pair accuracy" in texts and "P(left object)" in texts and not texts & {"acc", "p_left", "ep_std"}
    plt.close(fig)
    fig = plot_checkpoints(reg.load_trajectory("tiny", epochs=[0, 2, 6]))
    assert [ax.get_title() for ax in fig.axes[:3]] == ["epoch 0", "epoch 2", "epoch 6"]
    plt.close(fig)


def test_attention_page_steps_through_the_checkpoints(zoo, tmp_path):
    from hooked_clip1d.visualization.attention import save_html
    from hooked_clip1d.visualization.dynamics import show_attention_over_checkpoints

    ckpts = reg.load_trajectory("tiny")
    view = show_attention_over_checkpoints(ckpts, image="C . 5 . . 6 . . . . .", heads=[1])
    page = save_html(view, tmp_path / "steps.html").read_text()
    assert [f'"epoch {e} L0H1"' in page for e in EPOCHS] == [True] * 4
    assert "unpkg.com" not in page and '"maskUpperTri": false' in page


# ---- command line --------------------------------------------------------------------------------------------------
def test_cli_list_eval_and_analyze_take_checkpoints(zoo, tmp_path, capsys):
    assert main(["list", "--checkpoints", "tiny", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["epoch"] for r in listed["checkpoints"]] == EPOCHS and listed["dtype"] == "float16"
    assert main(["list", "--json"]) == 0
    rows = {r["name"]: r["checkpoints"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {"tiny": EPOCHS, "plain": None}
    assert main(["list"]) == 0
    assert "[trajectory: 4 checkpoints]" in capsys.readouterr().out
    assert main(["list", "--checkpoints", str(zoo["run"])]) == 0
    assert "epoch 4" in capsys.readouterr().out

    assert main(["eval", "--model", "tiny", "--checkpoint-index", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    want = reg.load_model("tiny", checkpoint_index=1).manifest["metrics"]
    assert {k: v["acc"] for k, v in res.items()} == pytest.approx({k: v["acc"] for k, v in want.items()}, abs=1e-6)
    assert main(["eval", "--model", "tiny", "--checkpoint-value", "5"]) == 2
    assert "no checkpoint at epoch 5; the trajectory has epochs [0, 1, 2, 6]" in capsys.readouterr().err
    assert main(["eval", "--model", "plain", "--checkpoint-value", "0"]) == 2
    assert "ships no training trajectory; models with one: tiny" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: one or the other
        main(["eval", "--model", "tiny", "--checkpoint-index", "0", "--checkpoint-value", "0"])
    capsys.readouterr()

    out = tmp_path / "heads"
    assert main(["analyze", "heads", "--model", "tiny", "--checkpoint-value", "2", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "tiny @ epoch 2"


@pytest.mark.heavy
def test_cli_analyze_dynamics(zoo, tmp_path, capsys):
    out = tmp_path / "dyn"
    assert main(["analyze", "dynamics", "--model", "tiny", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "tiny: 4 checkpoints, epochs 0..6" in table and "generalizes" in table
    record = json.loads((out / "dynamics.json").read_text())
    assert [r["epoch"] for r in record["data"]["rows"]] == EPOCHS and record["data"]["show"] == [0, 2, 6]
    for f in ("dynamics_emergence.png", "dynamics_checkpoints.png", "dynamics_attention_steps.html"):
        assert (out / f).exists(), f
    assert main(["analyze", "dynamics", "--model", "plain", "--out", str(out)]) == 2
    assert "'plain' ships no training trajectory; models with one: tiny" in capsys.readouterr().err
    assert main(["analyze", "dynamics", "--model", "tiny", "-o", "show=[3]", "--out", str(out)]) == 2
    assert "option show: no checkpoint at epochs [3]" in capsys.readouterr().err


def test_trajectory_accuracies_merge_the_three_sources(zoo, tmp_path, monkeypatch):
    """``trajectory_accuracies``: the history's evaluations, then the stored checkpoints' accuracies (measured on the
    stored weights) and the snapshots recorded without weights, each row naming its source; the history wins where
    two give an epoch (as Fig. 11's fine history)."""
    from hooked_clip1d.pretrained.trajectories import snapshot_metrics, stored_metrics

    dest = tmp_path / "traj"
    ship.ship_trajectory(zoo["run"], "tiny", epochs=[0, 2], dest=dest, metrics_epochs="all")
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", dest)
    rows = reg.trajectory_accuracies("tiny")
    h = reg.manifest("tiny")["history"]
    assert [r["epoch"] for r in rows] == sorted({0, 1, *h["epoch"]})
    by = {r["epoch"]: r for r in rows}
    man = reg.trajectory_manifest("tiny")
    assert by[0]["source"] == "checkpoint" and by[0]["seen"] == stored_metrics(man, 0)["val_seen"]["acc"]
    assert by[1]["source"] == "snapshot" and by[1]["unseen"] == snapshot_metrics(man)[1]["val_unseen"]["acc"]
    for i, e in enumerate(h["epoch"]):
        assert by[e]["source"] == "history" and by[e]["single"] == h["single"][i]
    weights = tmp_path / "weights"  # a gap in the history is refused by name, not printed or drawn as a number
    shutil.copytree(zoo["root"] / "weights", weights)
    doctored = json.loads((weights / "tiny.json").read_text())
    doctored["history"]["seen"][1] = None
    (weights / "tiny.json").write_text(json.dumps(doctored))
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", weights)
    cut = {**doctored, "history": {k: v[:-1] for k, v in h.items()}}  # the last epoch: the shipped model's own
    (weights / "tiny.json").write_text(json.dumps(cut))
    last = reg.trajectory_accuracies("tiny")[-1]
    assert last["source"] == "checkpoint" and last["unseen"] == doctored["metrics"]["val_unseen"]["acc"]
    (weights / "tiny.json").write_text(json.dumps(doctored))
    gap = (h["epoch"][1], "history", "seen")
    with pytest.raises(ValueError, match=re.escape(f"not numbers in [0, 1] (epoch, source, split): [{gap}]")):
        reg.trajectory_accuracies("tiny")


def test_cli_analyze_dynamics_without_mechanism_rows(tmp_path, capsys):
    """A trajectory whose mechanism rows were not measured (a RoPE tower; the full model next) gave only an error;
    `analyze dynamics` now reports its accuracies along the training and when Fig. 11's levels are first reached
    (session 42), and refuses by name the options that need the rows."""
    name = "rope-ntot20-n2-15"
    assert main(["analyze", "dynamics", "--model", name, "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "no mechanism rows: the mechanism report needs the paper's simplified vision tower" in table
    data = json.loads((tmp_path / "dynamics.json").read_text())["data"]
    rows = reg.trajectory_accuracies(name)
    assert data["rows"] == rows and (tmp_path / "dynamics_accuracies.png").exists()
    want = next(r["epoch"] for r in rows if r["unseen"] >= 0.8)
    assert data["first_reached"]["unseen"] == want and f"unseen >= 0.8 at epoch {want}" in table
    late = [r["unseen"] for r in rows[-20:]]  # the end of training, beside its last number (a trough here)
    assert data["last_rows"]["unseen"] == {"min": min(late), "max": max(late), "mean": sum(late) / len(late)}
    assert f"unseen {min(late):.2f}-{max(late):.2f}" in table
    assert main(["analyze", "dynamics", "--model", name, "-o", "show=[0]", "--out", str(tmp_path)]) == 2
    assert "option(s) ['show'] need the mechanism rows" in capsys.readouterr().err
    assert main(["analyze", "dynamics", "--model", name, "-o", "epochs=[0,7]", "--out", str(tmp_path)]) == 2
    assert "no recorded accuracies at epochs [7]" in capsys.readouterr().err
    assert main(["analyze", "dynamics", "--model", name, "-o", "epochs=[0,100,10000]", "--out", str(tmp_path)]) == 0
    assert [r["epoch"] for r in json.loads((tmp_path / "dynamics.json").read_text())["data"]["rows"]] == [0, 100, 10000]


def test_cli_ship_trajectory(zoo, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", tmp_path)
    args = ["ship-trajectory", str(zoo["run"]), "--name", "tiny", "--epochs", "0,2,6", "--tolerance-images", "1"]
    assert main([*args, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["epochs"] == [0, 2, 6] and res["dtype"] == "float16" and (tmp_path / "tiny.safetensors.xz").exists()
    assert json.loads((tmp_path / "tiny.json").read_text())["precision"]["tolerance_images"] == 1
    with pytest.raises(ValueError, match=r"tolerance \(images\) must be an int >= 0"):
        ship.ship_trajectory(zoo["run"], "tiny", dest=tmp_path, tolerance_images=-1)
    assert main(["ship-trajectory", str(zoo["run"]), "--name", "tiny", "--epochs", "0,x"]) == 2
    assert "--epochs must be a comma-separated list" in capsys.readouterr().err


def test_list_checkpoints_reads_manifests_without_importing_torch(zoo):
    import subprocess
    import sys

    code = (
        "import sys, pathlib; import hooked_clip1d.pretrained as reg; "
        f"reg.zoo.WEIGHTS_DIR = pathlib.Path({str(zoo['root'] / 'weights')!r}); "
        f"reg.zoo.TRAJECTORIES_DIR = pathlib.Path({str(zoo['root'] / 'trajectories')!r}); "
        "from hooked_clip1d.cli.commands import main; main(['list', '--checkpoints', 'tiny']); "
        "sys.stderr.write(str('torch' in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip().endswith("False"), r.stderr


# ---- the shipped trajectories --------------------------------------------------------------------------------------
def test_docs_zoo_states_the_trajectories_and_their_size():
    """docs/zoo.md holds the trajectory table (`hooked-clip1d list --markdown`), with the size each adds."""
    zoo_md = (ROOT / "docs" / "zoo.md").read_text()
    assert reg.trajectory_table() in zoo_md


def test_shipped_trajectories_stay_within_budget():
    """The budget is the package's size (ship.TRAJECTORY_BUDGET_MB says why it is 33 MB since 2026-12-01: a GPU
    window sends the slim tree, without the trajectories, so its room no longer bounds them)."""
    from hooked_clip1d.pretrained.ship import TRAJECTORY_BUDGET_MB

    total = sum(p.stat().st_size for p in reg.zoo.TRAJECTORIES_DIR.glob("*") if p.is_file())
    assert TRAJECTORY_BUDGET_MB == 33.0  # raised only with its reason restated there
    assert total <= TRAJECTORY_BUDGET_MB * 1e6, f"the shipped trajectories add {total / 1e6:.1f} MB (budget 33 MB)"


@pytest.mark.parametrize("name", reg.list_trajectories())
def test_a_shipped_trajectory(name):
    """>= 20 checkpoints from epoch 0 to the last for the flagships, whose figures read their trajectories (Fig. 11,
    x18); a trained control's >= 9 and another mechanism model's >= 5, sparse by design (docs/zoo.md: the working
    tree's room in a GPU window); the last is the shipped model; epoch 0 is at chance on unseen pairs; every
    stored checkpoint loads and its sha256 holds; the accuracies at the stored precision are float32's (within the
    recorded tolerance in images, where one was given)."""
    epochs = reg.list_checkpoints(name)
    man = reg.trajectory_manifest(name)
    from hooked_clip1d.pretrained.trajectories import snapshot_metrics
    from hooked_clip1d.reproduce.core import FLAGSHIP, FULL, STANDARD_LOSS  # Fig. 11 and x18 read their trajectories

    if name == FULL:  # ~2.9 MB a checkpoint: epoch 0 stored, every other snapshot's accuracies recorded (Fig. 11a)
        assert len(epochs) >= 2 and {1, 2, 5, 10, 20, 50} <= set(snapshot_metrics(man))
    else:
        assert len(epochs) >= (20 if name in (FLAGSHIP, STANDARD_LOSS) else 9 if name.startswith("control-") else 5)
    assert epochs[0] == 0 and epochs[-1] == reg.manifest(name)["epochs"]
    assert _equal(reg.load_model(name, checkpoint_index=-1), reg.load_model(name))
    from hooked_clip1d.pretrained.trajectories import stored_metrics

    at0 = stored_metrics(man, 0)
    assert at0["val_unseen"]["acc"] <= 0.05 and at0["probe_unseen"]["acc"] <= 0.05  # chance: 1 / n_captions
    tolerance = man["precision"]["tolerance_images"]  # 0: equal; the controls' 2 (at chance, on near-ties)
    for e in epochs[:-1]:
        stored, full = stored_metrics(man, e), man["precision"]["checkpoints"][str(e)]["metrics"]["float32"]
        if tolerance == 0:
            assert stored == full, e
        for split, m in stored.items():
            for k in ("acc", "relaxed", "label_set"):
                if m[k] is not None:
                    assert abs(m[k] - full[split][k]) * m["n"] <= tolerance + 1e-6, (e, split, k)
    assert len(reg.load_trajectory(name)) == len(epochs)
    if "not_run" in man["emergence"]:  # a model the mechanism report cannot read (a RoPE tower): it says why
        with pytest.raises(ValueError, match="the emergence analysis was not run when it was shipped"):
            reg.trajectory_emergence(name)
        words = ("rope", "n_layers=2", "n_layers=4")  # a RoPE, 2-layer or the full (4-block LayerNorm) tower
        assert any(w in man["emergence"]["not_run"] for w in words)
    else:
        assert [r["epoch"] for r in reg.trajectory_emergence(name).rows] == epochs


@pytest.mark.heavy
def test_a_trajectory_past_the_part_size_ships_in_parts_and_loads_the_same(zoo, tmp_path, monkeypatch):
    """A trajectory over ``PART_BYTES`` is stored in several files of whole checkpoints (no tracked file over the
    repository's size limit); every checkpoint loads as from the one-file trajectory, and a re-ship leaves no stale
    part behind."""

    dest = tmp_path / "trajectories"
    monkeypatch.setattr(ship, "PART_BYTES", 1)  # one checkpoint per file
    ship.ship_trajectory(zoo["run"], "tiny", dest=dest)
    man = json.loads((dest / "tiny.json").read_text())
    files = [man["file"], *(p["file"] for p in man["parts"])]
    assert files == ["tiny.safetensors.xz", "tiny.part1.safetensors.xz", "tiny.part2.safetensors.xz"]
    assert man["bytes"] == sum((dest / f).stat().st_size for f in files)
    assert all(p["sha256"] == reg.sha256_file(dest / p["file"]) for p in man["parts"])
    for e in EPOCHS:
        with monkeypatch.context() as mp:
            mp.setattr(reg.zoo, "TRAJECTORIES_DIR", dest)
            parted = reg.load_model("tiny", checkpoint_value=e)
        assert _equal(parted, reg.load_model("tiny", checkpoint_value=e)), e
    monkeypatch.setattr(ship, "PART_BYTES", 10**9)
    ship.ship_trajectory(zoo["run"], "tiny", dest=dest)
    assert sorted(p.name for p in dest.iterdir()) == ["tiny.json", "tiny.safetensors.xz"]


def test_trajectory_files_are_xz_and_the_older_uncompressed_format_still_loads(zoo, tmp_path, monkeypatch):
    """Trajectory files are xz-compressed safetensors (the working tree travels to a GPU window within 64 MiB): a
    file unpacked by hand (``xz -d``) with its manifest pointing at it loads the same; a truncated file, or one that
    claims to unpack past the cap, is refused by name, not read."""
    from hooked_clip1d.pretrained import trajectories as tj

    traj = tmp_path / "trajectories"
    shutil.copytree(zoo["root"] / "trajectories", traj)
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", traj)
    packed = reg.load_model("tiny", checkpoint_index=0)
    man = json.loads((traj / "tiny.json").read_text())
    assert man["file"] == "tiny.safetensors.xz" and tj.trajectory_file(traj, "tiny").name == "tiny.safetensors.xz"
    old = traj / "tiny.safetensors"
    old.write_bytes(lzma.decompress((traj / man["file"]).read_bytes()))
    (traj / man["file"]).unlink()
    (traj / "tiny.json").write_text(json.dumps({**man, "file": old.name, "sha256": reg.sha256_file(old)}))
    assert reg.list_trajectories() == ["tiny"] and tj.trajectory_file(traj, "tiny") == old
    assert _equal(reg.load_model("tiny", checkpoint_index=0), packed)
    cut = tmp_path / "cut.safetensors.xz"
    cut.write_bytes(lzma.compress(old.read_bytes())[:-40])
    with pytest.raises(CheckpointError, match="truncated or unpacks past"):
        tj.read_trajectory_file(cut, reg.sha256_file(cut))
    monkeypatch.setattr(tj, "MAX_UNPACKED_BYTES", 1000)
    whole = tmp_path / "whole.safetensors.xz"
    whole.write_bytes(lzma.compress(old.read_bytes()))
    with pytest.raises(CheckpointError, match="unpacks past 1000 bytes"):
        tj.read_trajectory_file(whole, reg.sha256_file(whole))


def test_repack_keeps_the_chosen_checkpoints_bit_for_bit_and_their_rows(zoo, tmp_path, monkeypatch):
    """``repack_trajectory`` (making room without a training run): the kept checkpoints load as before, the dropped
    ones are gone, the rows of the kept ones are the shipped rows, windows recomputed over them, the drop recorded;
    an epoch the trajectory lacks is refused before anything is written."""
    traj = tmp_path / "trajectories"
    shutil.copytree(zoo["root"] / "trajectories", traj)
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", traj)
    before = {e: reg.load_model("tiny", checkpoint_value=e) for e in EPOCHS}
    old = json.loads((traj / "tiny.json").read_text())
    with pytest.raises(ValueError, match=r"no checkpoint at epochs \[3\]"):
        ship.repack_trajectory("tiny", [0, 3])
    assert json.loads((traj / "tiny.json").read_text()) == old
    ship.repack_trajectory("tiny", [0, 2])
    assert reg.list_checkpoints("tiny") == [0, 2, 6]
    for e in (0, 2, 6):
        assert _equal(reg.load_model("tiny", checkpoint_value=e), before[e]), e
    with pytest.raises(Exception, match="no checkpoint at epoch 1"):
        reg.load_model("tiny", checkpoint_value=1)
    man = json.loads((traj / "tiny.json").read_text())
    assert man["source"]["repacked"]["dropped"] == [1]
    assert set(man["precision"]["checkpoints"]) == {"0", "2"} and set(man["checkpoint_sha256"]) == {"0", "2", "6"}
    if "rows" in old["emergence"]:
        assert man["emergence"]["rows"] == [r for r in old["emergence"]["rows"] if r["epoch"] != 1]
    assert sorted(p.name for p in traj.iterdir() if p.name.startswith("tiny")) == ["tiny.json", "tiny.safetensors.xz"]
    ship.repack_trajectory("tiny", [2])  # a second repack adds to the record of what was dropped
    assert json.loads((traj / "tiny.json").read_text())["source"]["repacked"]["dropped"] == [0, 1]


def test_every_shipped_file_is_package_data():
    """A file the zoo ships must match a ``package-data`` pattern, or a non-editable install leaves it out (the xz
    trajectory files did, until this test): checked on every file under pretrained/."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "hooked_clip1d"
    ]
    pkg = ROOT / "hooked_clip1d"
    folders = [pkg / "pretrained" / d for d in ("weights", "trajectories", "circuits")]
    files = [p for folder in folders for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    shipped = [p.relative_to(pkg).as_posix() for p in files]
    left_out = [f for f in shipped if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert shipped and not left_out, f"not in pyproject's package-data (a wheel would leave them out): {left_out}"


def test_fine_history_of_an_earlier_checkpoint_reads_its_own_history_alone():
    """A checkpoint before the last carries the history cut at its epoch; the trajectory's later epochs are not its
    past, so none is merged in (session 43, found in a review: they were)."""
    from hooked_clip1d.pretrained import list_checkpoints
    from hooked_clip1d.reproduce.readings import fine_history, measured_epochs

    name = "simplified-ntot20-n2-10"
    epoch = list_checkpoints(name)[-2]
    m = reg.load_model(name, checkpoint_value=epoch)
    fine, added = fine_history(m, name)
    assert added == [] and fine["epoch"] == m.manifest["history"]["epoch"] and max(fine["epoch"]) <= epoch
    assert measured_epochs(m, name, added) == []


def test_every_model_a_paper_figure_reads_ships_a_trajectory_or_is_named_exempt():
    """Issue 49 item 3 (pinned in session 45): a zoo model read by one of the paper's zoo-model figures ships its
    training trajectory, so its checkpoints load by ``checkpoint_index`` / ``checkpoint_value``. Exempt, by name:
    Fig. 22's pruned model and its unretrained parent, read at epoch 10,000 only and trained under the recipe before
    the default (named variants kept as they were, issue 48 item 4). Sweep figures read their sweeps' runs."""
    from hooked_clip1d.pretrained import list_trajectories
    from hooked_clip1d.reproduce.core import FIGURES

    exempt = {"fig22": {"simplified-ntot20-n2-10-no-qk-bias", "pruned-keep-h2h3-ntot20-n2-10"}}
    have = set(list_trajectories())
    missing = {
        k: sorted(set(s.models) - have - exempt.get(k, set()))
        for k, s in FIGURES.items()
        if not s.beyond_paper and s.sweep is None
    }
    assert {k: v for k, v in missing.items() if v} == {}
    assert all(m not in have for ms in exempt.values() for m in ms)  # an exemption that ships one: drop it
