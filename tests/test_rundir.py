"""Run directories under concurrency and crashes (issue: reliability): locks, foreign folders, restarts, resume."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import pytest
import torch
from conftest import tiny_config

from hooked_clip1d import CLIP1D, DataConfig
from hooked_clip1d.training.rundir import RunDirBusy, RunLock, check_run_dir, read_metrics
from hooked_clip1d.training.trainer import TrainConfig, Trainer, train

DATA = DataConfig(n_labels=6, n_heldout=2, n2=2)


def _tc(**kw) -> TrainConfig:
    return TrainConfig(**{**dict(epochs=2, batch_size=16, eval_every=1, checkpoint_every=2), **kw})


def _hold_lock(d) -> subprocess.Popen:
    code = (
        "import sys, time; from hooked_clip1d.training.rundir import RunLock; "
        f"RunLock({str(d)!r}).acquire(); print('locked', flush=True); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_a_second_process_cannot_train_into_a_locked_run(tmp_path):
    p = _hold_lock(tmp_path / "run")
    try:
        with pytest.raises(RunDirBusy, match=f"in use by process {p.pid}"):
            Trainer(tiny_config(), DATA, _tc(), tmp_path / "run")
        assert sorted(x.name for x in (tmp_path / "run").iterdir()) == [".lock"]  # nothing written
    finally:
        p.kill()
        p.wait()


def test_two_trainers_in_one_process_cannot_share_a_directory(tmp_path):
    a = Trainer(tiny_config(), DATA, _tc(), tmp_path / "run")
    with pytest.raises(RunDirBusy):
        Trainer(tiny_config(), DATA, _tc(seed=1), tmp_path / "run")
    a.run(progress=False)
    Trainer(tiny_config(), DATA, _tc(epochs=3), tmp_path / "run", resume=True).run(progress=False)  # free again


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").write_text(json.dumps({"pid": p.pid, "host": __import__("socket").gethostname()}))
    Trainer(tiny_config(), DATA, _tc(), tmp_path / "run").run(progress=False)
    assert "taking over" in capsys.readouterr().err
    assert not (tmp_path / "run" / ".lock").exists()


def test_a_failed_start_leaves_no_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(tiny_config(), DATA, _tc(), tmp_path / "new", resume=True)
    assert not (tmp_path / "new").exists()


def test_foreign_folders_are_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not a hooked_clip1d run directory .*notes.txt"):
        Trainer(tiny_config(), DATA, _tc(), tmp_path / "mine")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"lr": 3}')
    with pytest.raises(FileExistsError, match="config.json"):
        Trainer(tiny_config(), DATA, _tc(), tmp_path / "other")
    assert json.loads((tmp_path / "other" / "config.json").read_text()) == {"lr": 3}  # untouched
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        check_run_dir(tmp_path / "file")


def test_a_run_killed_before_its_first_checkpoint_starts_again(tmp_path, capsys):
    ref = Trainer(tiny_config(), DATA, _tc(epochs=3, checkpoint_every=5), tmp_path / "ref").run(progress=False)
    d = tmp_path / "run"
    Trainer(tiny_config(), DATA, _tc(epochs=3, checkpoint_every=5), d).run(progress=False)
    (d / "checkpoint.safetensors").unlink()  # as if killed after the metrics lines, before the first checkpoint
    (d / "summary.json").unlink()
    (d / "model.safetensors").unlink()
    run = Trainer(tiny_config(), DATA, _tc(epochs=3, checkpoint_every=5), d, resume=True).run(progress=False)
    assert "starting it again from epoch 0" in capsys.readouterr().err
    assert [ln["epoch"] for ln in read_metrics(d / "metrics.jsonl")] == [1, 2, 3]
    torch.testing.assert_close(run.model.vision.W_E, ref.model.vision.W_E)


def test_resume_cleans_stale_temp_files_and_a_cut_last_metrics_line(tmp_path, capsys):
    d = tmp_path / "run"
    Trainer(tiny_config(), DATA, _tc(epochs=2), d).run(progress=False)
    (d / ".checkpoint.safetensors.x1y2.tmp").write_bytes(b"half")
    with open(d / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 3, "st')
    Trainer(tiny_config(), DATA, _tc(epochs=4), d, resume=True).run(progress=False)
    assert not list(d.glob(".*.tmp"))
    assert "cut short" in capsys.readouterr().err
    assert [ln["epoch"] for ln in read_metrics(d / "metrics.jsonl")] == [1, 2, 3, 4]


def test_resume_with_fewer_epochs_says_so(tmp_path):
    Trainer(tiny_config(), DATA, _tc(epochs=2), tmp_path).run(progress=False)
    with pytest.raises(ValueError, match="already trained 2 epochs; epochs=1"):
        Trainer(tiny_config(), DATA, _tc(epochs=1), tmp_path, resume=True)


def test_a_non_finite_loss_stops_the_run_and_names_the_step(tmp_path):
    m = CLIP1D(tiny_config(), seed=0)
    with torch.no_grad():
        m.vision.W_E[1] = float("nan")
    with pytest.raises(FloatingPointError, match="at step 1 "):
        train(tiny_config(), DATA, _tc(), tmp_path / "run", progress=False, init_model=m)
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()


@pytest.mark.parametrize("kw", [dict(lr=float("inf")), dict(lr="1e-4"), dict(epochs=True), dict(threads=-1)])
def test_bad_train_config_values_are_refused(kw):
    with pytest.raises((ValueError, TypeError)):
        TrainConfig(**kw)


def test_training_leaves_the_callers_rng_and_model_alone(tmp_path):
    m = CLIP1D(tiny_config(), seed=5)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    torch.manual_seed(123)
    want = torch.rand(4)
    torch.manual_seed(123)
    train(tiny_config(), DATA, _tc(), tmp_path / "run", progress=False, init_model=m)
    assert torch.equal(torch.rand(4), want)
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    assert m.training  # the caller's model is not switched to eval either


def test_runlock_is_exclusive_and_released():
    import tempfile

    d = tempfile.mkdtemp()
    with RunLock(d) as lock:
        assert lock.held
        with pytest.raises(RunDirBusy):
            RunLock(d).acquire()
    RunLock(d).acquire().release()
    time.sleep(0)


@pytest.mark.parametrize("name", ["../../x", "/abs/path", "a/b", "..", ""])
def test_sweep_names_are_identifiers(name):
    from hooked_clip1d.sweeps.runner import load_spec

    with pytest.raises(ValueError, match="plain identifier"):
        load_spec(text=f'name = "{name}"\n[grid]\nseed = [0]')


def test_sweep_refuses_a_foreign_folder_and_a_busy_one(tmp_path):
    from hooked_clip1d.sweeps.runner import run_sweep

    spec = tmp_path / "s.toml"
    spec.write_text(
        'name = "t"\n[model]\nd_model = 16\nd_head = 4\nn_heads = 2\n[data]\nn_labels = 6\nn_heldout = 2\nn2 = 2\n'
        "[train]\nepochs = 1\nbatch_size = 16\n[grid]\nseed = [0]\n"
    )
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "data.csv").write_text("x")
    with pytest.raises(FileExistsError, match="holds no sweep"):
        run_sweep(spec, tmp_path / "mine", progress=False)
    p = _hold_lock(tmp_path / "busy")
    try:
        with pytest.raises(RunDirBusy, match="sweep directory"):
            run_sweep(spec, tmp_path / "busy", progress=False)
    finally:
        p.kill()
        p.wait()
    rows = run_sweep(spec, tmp_path / "ok", progress=False)
    assert len(rows) == 1 and not (tmp_path / "ok" / ".lock").exists()


def test_batched_group_locks_its_member_directories(tmp_path):
    from hooked_clip1d.training.batched import BatchedTrainer, Member

    bt = BatchedTrainer([Member(tiny_config(), DATA, _tc())], tmp_path / "g", dropout_rng="matched")
    with pytest.raises(RunDirBusy):
        Trainer(tiny_config(), DATA, _tc(), tmp_path / "g" / "member0", resume=True)
    bt.run(progress=False)
    assert not list((tmp_path / "g").rglob(".lock"))


def test_an_edited_file_is_recognised_on_load(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file, save_model

    m = CLIP1D(tiny_config(), seed=0)
    save_model(m, tmp_path / "m.safetensors", DATA)
    load_model_file(tmp_path / "m.safetensors")  # untouched: loads
    with safe_open(str(tmp_path / "m.safetensors"), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    cfg = json.loads(meta["model_config"])
    cfg["vision"]["attention_dir"] = "causal"  # shapes still fit: without the digest this would load silently
    save_file(tensors, str(tmp_path / "edited.safetensors"), metadata={**meta, "model_config": json.dumps(cfg)})
    with pytest.raises(CheckpointError, match="was modified after it was written"):
        load_model_file(tmp_path / "edited.safetensors")
    tensors["model.logit_scale"] = tensors["model.logit_scale"] + 1
    save_file(tensors, str(tmp_path / "edited2.safetensors"), metadata=meta)
    with pytest.raises(CheckpointError, match="was modified"):
        load_model_file(tmp_path / "edited2.safetensors")


def test_loading_a_directory_says_so(tmp_path):
    from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file

    Trainer(tiny_config(), DATA, _tc(epochs=1), tmp_path / "run").run(progress=False)
    with pytest.raises(CheckpointError, match="is a directory.*model.safetensors"):
        load_model_file(tmp_path / "run")


def test_dataset_size_is_refused_before_building():
    with pytest.raises(ValueError, match="59,690,550 images"):
        DataConfig(n_labels=2000)


def test_run_analysis_restores_the_callers_mode(tmp_path):
    from hooked_clip1d import load_model
    from hooked_clip1d.cli.analyze import run_analysis

    m = load_model("simplified-ntot20-n2-10").train()
    run_analysis("heads", m, tmp_path)
    assert m.training


@pytest.mark.heavy
def test_cli_failures_are_one_line_and_write_nothing(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hooked_clip1d",
            "train",
            "--preset",
            "simplified",
            "--n-labels",
            "6",
            "--threads",
            "-1",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "threads" in r.stderr
    assert not (tmp_path / "run").exists()
    r = subprocess.run(f"{sys.executable} -m hooked_clip1d list | head -1", shell=True, capture_output=True, text=True)
    assert "Traceback" not in r.stderr


def test_export_refuses_a_run_in_use_and_a_foreign_config(tmp_path):
    from hooked_clip1d.pretrained.ship import export_run

    d = tmp_path / "run"
    Trainer(tiny_config(), DATA, _tc(epochs=1), d).run(progress=False)
    p = _hold_lock(d)
    try:
        with pytest.raises(RunDirBusy):
            export_run(d, "x", "test", dest=tmp_path / "zoo")
    finally:
        p.kill()
        p.wait()
    assert export_run(d, "x", "test", dest=tmp_path / "zoo").exists()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "config.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not a hooked_clip1d run config"):
        export_run(tmp_path / "foreign", "y", "test", dest=tmp_path / "zoo")
    with pytest.raises(ValueError, match="plain identifier"):
        export_run(d, "../evil", "test", dest=tmp_path / "zoo")


def test_resume_reads_the_runs_own_config_and_names_disagreeing_flags(tmp_path, capsys):
    from hooked_clip1d.cli.commands import main

    out = str(tmp_path / "run")
    base = [
        "train",
        "--preset",
        "simplified",
        "--n-labels",
        "6",
        "--n-heldout",
        "2",
        "--n2",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "3e-4",
        "--epochs",
        "2",
        "--no-progress",
        "--out",
        out,
    ]
    assert main(base) == 0
    # only --resume, --out and a larger --epochs: everything else comes from the run's config.json
    assert main(["train", "--resume", "--out", out, "--epochs", "3", "--no-progress"]) == 0
    assert [ln["epoch"] for ln in read_metrics(tmp_path / "run" / "metrics.jsonl")][-1] == 3
    assert main(["train", "--resume", "--out", out, "--epochs", "4", "--lr", "1e-3"]) == 2
    assert "train_config.lr: the run has 0.0003, the flags say 0.001" in capsys.readouterr().err


def test_resume_flags_are_checked_by_the_one_resume_comparison(tmp_path, capsys):
    """``train --resume`` has no comparison of its own: the run its flags ask for is ``RunConfig.resumed_with`` (the
    saved run with the given flags on top) and what disagrees is ``RunConfig.resume_problems``, worded for the
    command line. So a schedule's epochs are refused at the command line as a checkpoint would refuse them, the
    execution settings may change, and an error names every disagreeing field with both values."""
    from hooked_clip1d.cli.commands import main
    from hooked_clip1d.cli.train import add_train_parser, train_configs
    from hooked_clip1d.training.run_config import RunConfig

    out = str(tmp_path / "run")
    base = ["train", "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--batch-size", "16", "--no-progress"]
    assert main([*base, "--epochs", "2", "--lr-schedule", "warmup_cosine", "--out", out]) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert main(["train", "--resume", "--out", out, "--epochs", "3"]) == 2  # the cosine schedule depends on epochs
    err = capsys.readouterr().err
    assert "train_config.epochs: the run has 2, the flags say 3" in err
    parser = add_train_parser(argparse.ArgumentParser().add_subparsers())
    cfg, data, tc, init = train_configs(
        parser.parse_args(["--resume", "--out", out, "--eval-every", "1", "--threads", "1"])
    )
    assert RunConfig(cfg, data, tc).resume_problems(saved) == [] and init is None
    assert (tc.eval_every, tc.threads, tc.lr_schedule, data.n_labels) == (1, 1, "warmup_cosine", 6)
    with pytest.raises(ValueError) as e:
        train_configs(parser.parse_args(["--resume", "--out", out, "--seed", "3", "--n2", "3"]))
    asked = RunConfig.resumed_with(
        saved,
        RunConfig(*train_configs(parser.parse_args(["--out", "x", "--seed", "3", "--n2", "3"]))[:3]),
        RunConfig(*train_configs(parser.parse_args(["--out", "x"]))[:3]),
    )
    want = asked.resume_problems(saved, "the run has", "the flags say")
    assert str(e.value) == f"--resume {out!r}: flags disagree with the run: " + "; ".join(want)
    assert want == [
        "data_config.n2: the run has 2, the flags say 3",
        "data_config.seed: the run has 0, the flags say 3",
        "train_config.seed: the run has 0, the flags say 3",
    ]


def test_resume_with_a_disagreeing_data_flag_is_an_error(tmp_path, capsys):
    from hooked_clip1d.cli.commands import main

    out = str(tmp_path / "run")
    assert (
        main(
            [
                "train",
                "--n-labels",
                "6",
                "--n-heldout",
                "2",
                "--n2",
                "2",
                "--batch-size",
                "16",
                "--epochs",
                "1",
                "--no-progress",
                "--out",
                out,
            ]
        )
        == 0
    )
    assert main(["train", "--resume", "--out", out, "--n2", "3", "--epochs", "2"]) == 2
    assert "data_config.n2: the run has 2, the flags say 3" in capsys.readouterr().err
