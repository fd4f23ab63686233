"""SIGTERM and Ctrl-C stop a training at a safe point with a checkpoint (Trainer, batched group, sweep and its
workers), and resuming then gives the uninterrupted weights."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from hooked_clip1d import DataConfig
from hooked_clip1d.model.checkpoint import load_model_file, read_tensors
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.rundir import TrainingInterrupted, stop_on_signal, stop_requested
from hooked_clip1d.training.trainer import TrainConfig, Trainer

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)
ROOT = Path(__file__).resolve().parent.parent


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _recorded(sig: signal.Signals, timeout: float = 5.0) -> signal.Signals | None:
    """``stop_requested()`` once the handler has run (Python runs a signal's handler at the main thread's next check,
    not inside ``os.kill``)."""
    deadline = time.monotonic() + timeout
    while stop_requested() != sig and time.monotonic() < deadline:
        time.sleep(0.001)
    return stop_requested()


def test_the_first_signal_is_recorded_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signal():
        assert stop_requested() is None
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, not fatal
        assert _recorded(signal.SIGTERM) == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM is ignored (SIGKILL still kills)
        with stop_on_signal():  # nested (a sweep's group): the outer block's record stays
            assert stop_requested() == signal.SIGTERM
        assert stop_requested() == signal.SIGTERM
    assert stop_requested() is None and signal.getsignal(signal.SIGTERM) is before


@pytest.fixture
def default_sigint():
    """Ctrl-C as an interactive shell leaves it: a process started in the background by a shell without job control
    (``nohup cmd &`` in a script, as a CI runner may) inherits SIGINT ignored, which ``stop_on_signal`` keeps."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_a_second_ctrl_c_interrupts_at_once_and_ignored_signals_stay_ignored(default_sigint):
    with pytest.raises(KeyboardInterrupt), stop_on_signal():
        os.kill(os.getpid(), signal.SIGINT)
        assert _recorded(signal.SIGINT) == signal.SIGINT
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # not reached: the handler raises first
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a sweep's worker process
    try:
        with stop_on_signal():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


class _SignalledTrainer(Trainer):
    """A Trainer that sends itself SIGTERM when it evaluates epoch ``at``: a signal from outside, at a known time."""

    at = 2

    def evaluate(self):
        if self.epoch == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().evaluate()


def test_sigterm_stops_the_trainer_with_a_checkpoint_and_resume_is_bit_exact(tmp_path):
    tc = TrainConfig(epochs=4, batch_size=16, eval_every=1, checkpoint_every=3, keep_snapshots=True)
    straight = Trainer(tiny_config(), D6, tc, tmp_path / "straight").run(progress=False)
    with pytest.raises(TrainingInterrupted, match="SIGTERM at epoch 2/4") as e:
        _SignalledTrainer(tiny_config(), D6, tc, tmp_path / "stopped").run(progress=False)
    assert e.value.signum == signal.SIGTERM and "resume" in str(e.value)
    _, meta = read_tensors(tmp_path / "stopped" / "checkpoint.safetensors")
    assert meta["train_state"]["epoch"] == 2  # off the checkpoint_every=3 schedule: saved because of the signal
    assert not (tmp_path / "stopped" / "snapshots" / "epoch_00002.safetensors").exists()  # snapshots keep theirs
    assert not (tmp_path / "stopped" / ".lock").exists() and stop_requested() is None
    resumed = Trainer(tiny_config(), D6, tc, tmp_path / "stopped", resume=True).run(progress=False)
    _same(resumed.model.state_dict(), straight.model.state_dict())


class _SignalledGroup(BatchedTrainer):
    def _write_metrics(self, i, epoch):
        if (i, epoch) == (0, 2):
            os.kill(os.getpid(), signal.SIGTERM)
        return super()._write_metrics(i, epoch)


def test_sigterm_stops_a_batched_group_with_a_checkpoint_and_resume_is_bit_exact(tmp_path):
    tc = TrainConfig(epochs=5, batch_size=16, eval_every=1, checkpoint_every=5)
    members = [
        Member(tiny_config(), D6, tc, name="a"),
        Member(tiny_config(), D6, dataclasses.replace(tc, seed=1), name="b"),
    ]
    full = BatchedTrainer(members, tmp_path / "full").run(progress=False)
    with pytest.raises(TrainingInterrupted, match="group stopped by SIGTERM at step 8/20"):
        _SignalledGroup(members, tmp_path / "part").run(progress=False)
    assert (tmp_path / "part" / "group_checkpoint.safetensors").exists() and stop_requested() is None
    BatchedTrainer(members, tmp_path / "part", resume=True).run(progress=False)
    for name, run in zip("ab", full, strict=True):
        _same(load_model_file(tmp_path / "part" / name / "model.safetensors").state_dict(), run.model.state_dict())


@pytest.mark.slow  # 40 s on 2 cores (three interpreters import torch and TransformerLens): run with -m slow
def test_sigterm_to_a_sweep_with_two_workers_checkpoints_both_groups_and_exits_143(tmp_path):
    """The end-to-end path of `kill <pid>` on a long sweep: the sweep process forwards the signal to its workers,
    each checkpoints its group and stops, and the command says how to resume."""
    spec = tmp_path / "long.toml"  # two groups that would train for minutes
    text = (ROOT / "examples" / "sweeps" / "tiny.toml").read_text()
    spec.write_text(text.replace("epochs = 3", "epochs = 100000").replace("max_group_size = 4", "max_group_size = 2"))
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "hooked_clip1d",
        "sweep",
        str(spec),
        "--out",
        str(out),
        "--workers",
        "2",
        "--threads",
        "1",
        "--no-progress",
    ]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    try:
        deadline = time.time() + 240
        runs = out / "runs"
        while time.time() < deadline and len(list(runs.glob("*/metrics.jsonl"))) < 4:  # every member trains
            time.sleep(0.5)
        assert p.poll() is None, p.stderr.read()
        time.sleep(1.0)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err
    groups = sorted((out / "groups").glob("*/group_checkpoint.safetensors"))
    assert len(groups) == 2
    for g in groups:
        _, meta = read_tensors(g)
        assert meta["group_state"]["step"] > 0
    assert not list(out.rglob(".lock"))  # every lock released
    assert all(json.loads(ln) for f in runs.glob("*/metrics.jsonl") for ln in f.read_text().splitlines())
