"""Training (determinism, resume, loss) and checkpoints (round trip, corrupt/foreign files, atomic writes)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import make_model, tiny_config
from safetensors import safe_open
from safetensors.torch import save_file

from hooked_clip1d import CLIP1D, DataConfig, build_dataset, clip_loss
from hooked_clip1d.model.checkpoint import (
    FORMAT,
    CheckpointError,
    atomic_write,
    load_model_file,
    read_tensors,
    save_model,
    save_tensors,
)
from hooked_clip1d.training.trainer import TrainConfig, Trainer, make_optimizer, train

DATA = DataConfig(n_labels=6, n_heldout=2, n2=2)


def _trainer(out_dir, preset="simplified", resume=False, data=DATA, **train_kw) -> Trainer:
    kw = dict(epochs=3, batch_size=16, eval_every=1, checkpoint_every=1)
    kw.update(train_kw)
    return Trainer(tiny_config(preset), data, TrainConfig(**kw), out_dir, resume=resume)


def _assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _metric_lines(out_dir) -> list[dict]:
    return [json.loads(ln) for ln in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]


def _no_tmp_files(d) -> bool:
    return not [n for n in os.listdir(d) if n.endswith(".tmp")]


# ---------------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["simplified", "full"])
def test_training_is_deterministic(tmp_path, preset):
    a = _trainer(tmp_path / "a", preset).run(progress=False)
    b = _trainer(tmp_path / "b", preset).run(progress=False)
    c = _trainer(tmp_path / "c", preset, seed=1).run(progress=False)
    assert a.epoch == b.epoch == 3 and a.step == b.step == 3 * 4  # 54 training pairs, batches of 16
    _assert_same_state(a.model.state_dict(), b.model.state_dict())
    assert any(not torch.equal(v, c.model.state_dict()[k]) for k, v in a.model.state_dict().items())
    # the initial weights are not what came out: training did something
    init = CLIP1D(tiny_config(preset), seed=0).state_dict()
    assert not torch.equal(init["vision.embed.W_E"], a.model.state_dict()["vision.embed.W_E"])
    assert [m["loss"] for m in _metric_lines(tmp_path / "a")] == [m["loss"] for m in _metric_lines(tmp_path / "b")]
    assert not a.model.training


def test_run_writes_its_files(tmp_path):
    run = _trainer(tmp_path, epochs=2, eval_every=1, checkpoint_every=5).run(progress=False)
    names = set(os.listdir(tmp_path))
    assert {"config.json", "metrics.jsonl", "checkpoint.safetensors", "model.safetensors", "summary.json"} <= names
    assert _no_tmp_files(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert {"model_config", "data_config", "train_config", "provenance"} <= set(cfg)
    lines = _metric_lines(tmp_path)
    assert [m["epoch"] for m in lines] == [1, 2]
    assert set(lines[-1]["eval"]) == {"train", "val_single", "val_seen", "val_unseen"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs"] == 2 and summary["final_metrics"] == run.final_metrics
    # the final model file holds the trained weights and the data config
    loaded = load_model_file(tmp_path / "model.safetensors")
    _assert_same_state(loaded.state_dict(), run.model.state_dict())
    assert loaded.data_config == DATA
    # a training checkpoint also loads as a model
    _assert_same_state(load_model_file(tmp_path / "checkpoint.safetensors").state_dict(), run.model.state_dict())


def test_resume_is_bit_exact(tmp_path):
    straight = _trainer(tmp_path / "straight", epochs=3).run(progress=False)
    first = _trainer(tmp_path / "resumed", epochs=2).run(progress=False)
    assert first.epoch == 2
    resumed = _trainer(tmp_path / "resumed", epochs=3, resume=True).run(progress=False)
    assert (resumed.epoch, resumed.step) == (straight.epoch, straight.step)
    _assert_same_state(resumed.model.state_dict(), straight.model.state_dict())
    a, b = _metric_lines(tmp_path / "straight"), _metric_lines(tmp_path / "resumed")
    assert [m["epoch"] for m in b] == [1, 2, 3]  # no duplicated epochs
    assert [(m["epoch"], m["step"], m["loss"], m["eval"]) for m in a] == [
        (m["epoch"], m["step"], m["loss"], m["eval"]) for m in b
    ]


def test_resume_drops_metric_lines_written_after_the_checkpoint(tmp_path):
    straight = _trainer(tmp_path / "straight", epochs=3).run(progress=False)
    _trainer(tmp_path / "crashed", epochs=2).run(progress=False)
    # a crash between writing the epoch-3 metrics line and the epoch-3 checkpoint
    with open(tmp_path / "crashed" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"epoch": 3, "step": 999, "loss": 123.0, "eval": {}}) + "\n")
    resumed = _trainer(tmp_path / "crashed", epochs=3, resume=True).run(progress=False)
    lines = _metric_lines(tmp_path / "crashed")
    assert [m["epoch"] for m in lines] == [1, 2, 3]
    assert lines[-1]["loss"] == _metric_lines(tmp_path / "straight")[-1]["loss"]
    _assert_same_state(resumed.model.state_dict(), straight.model.state_dict())


def test_used_directory_needs_resume(tmp_path):
    _trainer(tmp_path, epochs=1).run(progress=False)
    with pytest.raises(FileExistsError, match="resume"):
        _trainer(tmp_path, epochs=2)
    with pytest.raises(FileExistsError):
        train(tiny_config(), DATA, TrainConfig(epochs=2, batch_size=16), tmp_path, progress=False)


def test_resume_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _trainer(tmp_path / "empty", resume=True)
    _trainer(tmp_path / "run", epochs=1).run(progress=False)
    with pytest.raises(CheckpointError, match="data_config"):
        _trainer(tmp_path / "run", resume=True, data=DATA.replace(seed=1))
    with pytest.raises(CheckpointError, match="train_config"):
        _trainer(tmp_path / "run", resume=True, lr=1e-3)
    with pytest.raises(CheckpointError, match="model_config"):
        Trainer(tiny_config("full"), DATA, TrainConfig(epochs=2, batch_size=16), tmp_path / "run", resume=True)


def test_trainer_rejects_mismatched_configs(tmp_path):
    with pytest.raises(ValueError, match="n_labels"):
        Trainer(tiny_config(), DataConfig(n_labels=7, n_heldout=2, n2=2), TrainConfig(epochs=1), tmp_path)
    with pytest.raises(ValueError, match="d_image"):
        Trainer(
            tiny_config(),
            DataConfig(n_labels=6, n_heldout=2, n1=3, n_val=3, n2=2, d_image=8),
            TrainConfig(epochs=1),
            tmp_path,
        )
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(epochs=0), "epochs"),
        (dict(epochs=-3), "epochs"),
        (dict(epochs=2.5), "epochs"),
        (dict(batch_size=1), "batch_size"),
        (dict(batch_size=0), "batch_size"),
        (dict(eval_every=0), "eval_every"),
        (dict(checkpoint_every=0), "checkpoint_every"),
        (dict(lr=0.0), "lr"),
        (dict(lr=-1e-3), "lr"),
        (dict(weight_decay=-0.1), "weight_decay"),
    ],
)
def test_train_config_rejects_bad_values(kw, field):
    # ValueError from our validation, or jaxtyping's TypeCheckError (a TypeError) for wrongly typed fields
    with pytest.raises((ValueError, TypeError), match=rf"\b{field}\b"):
        TrainConfig(**kw)


def test_train_config_round_trip():
    cfg = TrainConfig(epochs=7, batch_size=8, betas=(0.8, 0.9))
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({"epochs": 2, "bogus": 1})


# ---------------------------------------------------------------------------------------------------------------------
# Loss
# ---------------------------------------------------------------------------------------------------------------------


def test_clip_loss_is_symmetric():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 5, generator=gen) * 3
    labels = torch.arange(5)
    i2t = -logits.log_softmax(-1)[labels, labels].mean()
    t2i = -logits.log_softmax(0)[labels, labels].mean()
    torch.testing.assert_close(clip_loss(logits), 0.5 * (i2t + t2i))
    torch.testing.assert_close(
        clip_loss(logits), 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
    )
    torch.testing.assert_close(clip_loss(logits.T), clip_loss(logits))
    assert not torch.allclose(i2t, t2i)  # so the test above really averages two different terms
    assert clip_loss(torch.eye(4) * 100).item() < 1e-6
    torch.testing.assert_close(clip_loss(torch.zeros(4, 4)), torch.tensor(4.0).log())


def test_model_loss_is_the_symmetric_cross_entropy_of_its_features(simplified_model, dataset):
    """The training loss from the towers' features by hand: normalised image CLS and projected text EOT outputs,
    scaled by exp(logit_scale) clamped at 100, cross-entropy over captions and over images, averaged."""
    images, captions = dataset.training_pairs()
    images, captions = images[:8], captions[:8]
    m = simplified_model
    with torch.no_grad():
        m.logit_scale.fill_(5.0)  # above log(100): the clamp must apply
    img = torch.nn.functional.normalize(m.vision(images), dim=-1)
    txt = torch.nn.functional.normalize(m.text(captions) @ m.W_proj, dim=-1)
    logits = 100.0 * img @ txt.T
    target = torch.arange(8)
    want = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    torch.testing.assert_close(m.loss(images, captions), want)
    torch.testing.assert_close(m(images, captions, return_type="loss"), want)


def test_loss_decreases_when_training(dataset):
    model = CLIP1D(tiny_config("simplified", dropout=0.0, init_std=1.0), seed=0).train()  # fast at N(0, 1)
    opt = make_optimizer(model, TrainConfig(lr=1e-2, weight_decay=0.0))
    images, captions = dataset.training_pairs()
    with torch.no_grad():
        before = model.loss(images, captions).item()
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        idx = torch.randperm(len(images), generator=gen)[:32]
        loss = model.loss(images[idx], captions[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = model.loss(images, captions).item()
    # several images share a caption (e.g. n1 images per label), so the loss cannot reach 0
    assert after < before - 0.5, (before, after)
    assert sum(losses[-5:]) < sum(losses[:5]), losses


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path) -> tuple[CLIP1D, Path]:
    model = make_model("full", seed=3)
    path = tmp_path / "m.safetensors"
    save_model(model, path, data_config=DATA)
    return model, path


def _raw(path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a file, without its content digest: files edited from these are checked as files
    written before digests existed, so each test reaches the validation it is about (digests: test_rundir)."""
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
        meta.pop("digest", None)
        return {k: f.get_tensor(k) for k in f.keys()}, meta


def test_checkpoint_round_trip(saved, images, captions):
    model, path = saved
    loaded = load_model_file(path)
    assert not loaded.training
    assert loaded.cfg == model.cfg
    assert loaded.data_config == DATA
    _assert_same_state(loaded.state_dict(), model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.similarity(images, captions), model.similarity(images, captions), atol=0, rtol=0
        )
        torch.testing.assert_close(loaded(images, captions), model(images, captions), atol=0, rtol=0)
    assert _no_tmp_files(path.parent)
    # saving twice over the same path works and stays atomic
    save_model(loaded, path)
    assert _no_tmp_files(path.parent)
    assert load_model_file(path).data_config == DATA  # the model's own data_config is used when none is given


def test_checkpoint_round_trip_rope_and_no_data_config(tmp_path):
    model = make_model("simplified", seed=4, vision_overrides={"positional": "rope", "rotary_dim": 2})
    save_model(model, tmp_path / "r.safetensors")
    loaded = load_model_file(tmp_path / "r.safetensors")
    assert loaded.cfg.vision.positional == "rope" and loaded.cfg.vision.rotary_dim == 2
    assert loaded.data_config is None
    _assert_same_state(loaded.state_dict(), model.state_dict())


@pytest.mark.parametrize("keep", ["empty", "7_bytes", "9_bytes", "half", "all_but_one"])
def test_truncated_checkpoint(saved, keep):
    _, path = saved
    data = path.read_bytes()
    n = {"empty": 0, "7_bytes": 7, "9_bytes": 9, "half": len(data) // 2, "all_but_one": len(data) - 1}[keep]
    path.write_bytes(data[:n])
    with pytest.raises(CheckpointError, match=r"truncated|corrupt") as info:
        load_model_file(path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)


def test_random_bytes_checkpoint(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(
        torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(0)).byte().numpy().tobytes()
    )
    with pytest.raises(CheckpointError, match=r"truncated|corrupt"):
        load_model_file(path)
    (tmp_path / "text.safetensors").write_text("hello, I am not a checkpoint")
    with pytest.raises(CheckpointError):
        load_model_file(tmp_path / "text.safetensors")


def test_foreign_safetensors_file(tmp_path, saved):
    model, _ = saved
    path = tmp_path / "foreign.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    with pytest.raises(CheckpointError, match="not a hooked_clip1d checkpoint"):
        load_model_file(path)
    save_file({"x": torch.zeros(3)}, str(path), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="not a hooked_clip1d checkpoint"):
        load_model_file(path)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model_file(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError):
        load_model_file(tmp_path)  # a directory


def test_wrong_shape_names_the_key(saved):
    _, path = saved
    tensors, meta = _raw(path)
    tensors["model.vision.blocks.1.attn.W_Q"] = torch.zeros(2, 16, 5)
    save_file(tensors, str(path), metadata=meta)
    with pytest.raises(CheckpointError, match=r"vision\.blocks\.1\.attn\.W_Q"):
        load_model_file(path)


def test_missing_and_unexpected_keys(saved):
    _, path = saved
    tensors, meta = _raw(path)
    del tensors["model.text.ln_final.w"]
    tensors["model.text.extra"] = torch.zeros(2)
    save_file(tensors, str(path), metadata=meta)
    with pytest.raises(CheckpointError, match=r"text\.ln_final\.w") as info:
        load_model_file(path)
    assert "text.extra" in str(info.value)


def test_non_finite_weights(saved):
    _, path = saved
    tensors, meta = _raw(path)
    tensors["model.W_proj"][0, 0] = float("nan")
    save_file(tensors, str(path), metadata=meta)
    with pytest.raises(CheckpointError, match=r"W_proj.*NaN"):
        load_model_file(path)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model_config", None, "model_config"),
        ("model_config", "{not json", "not valid JSON"),
        ("model_config", json.dumps({"vision": {"tower": "vision", "n_layers": 0}}), "model_config"),
        ("model_config", json.dumps([1, 2]), "model_config"),
        ("data_config", json.dumps({"n_labels": 6, "n1": 100}), "data_config"),
        ("data_config", json.dumps({"bogus": 1}), "data_config"),
        ("data_config", json.dumps([1, 2]), "data_config"),
    ],
)
def test_bad_metadata(saved, key, value, match):
    _, path = saved
    tensors, meta = _raw(path)
    if value is None:
        del meta[key]
    else:
        meta[key] = value
    save_file(tensors, str(path), metadata=meta)
    with pytest.raises(CheckpointError, match=match):
        load_model_file(path)


def test_read_tensors_decodes_metadata(saved):
    _, path = saved
    tensors, meta = read_tensors(path)
    assert meta["format"] == FORMAT
    assert meta["data_config"] == DATA.to_dict()
    assert all(k.startswith("model.") for k in tensors)


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path):
    path = tmp_path / "x.safetensors"
    save_tensors(path, {"a": torch.ones(2)}, {"note": "first"})
    before = path.read_bytes()

    def failing(tmp):
        Path(tmp).write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, failing)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["x.safetensors"]
    for i in range(3):
        save_tensors(path, {"a": torch.full((2,), float(i))}, {"i": i})
    assert _no_tmp_files(tmp_path)
    tensors, meta = read_tensors(path)
    assert meta["i"] == 2 and tensors["a"].tolist() == [2.0, 2.0]


def test_dataset_of_the_data_config_rebuilds(saved):
    # what a loaded model needs to evaluate itself: its data config rebuilds the same dataset
    _, path = saved
    loaded = load_model_file(path)
    a, b = build_dataset(loaded.data_config), build_dataset(DATA)
    assert torch.equal(a.splits["val_unseen"].images, b.splits["val_unseen"].images)


def test_atomic_write_uses_normal_file_permissions(tmp_path):
    import os

    from hooked_clip1d.files import atomic_write_text

    atomic_write_text(tmp_path / "x.txt", "hi")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "x.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_saved_models_use_normal_file_permissions(tmp_path):
    import os

    from hooked_clip1d import CLIP1D, CLIPConfig
    from hooked_clip1d.model.checkpoint import save_model

    save_model(
        CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, d_model=8, d_head=2)), tmp_path / "m.safetensors"
    )
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "m.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("engine", ["standard", "batched"])
def test_resume_a_checkpoint_saved_before_a_config_field_existed(tmp_path, engine):
    """Bug: a run saved before EncoderConfig.ablated_terms existed could not be resumed ("model_config differs").
    Saved configs are now read with today's defaults for fields they lack."""
    from hooked_clip1d import CLIPConfig, DataConfig, TrainConfig
    from hooked_clip1d.cli.commands import main
    from hooked_clip1d.model.checkpoint import read_tensors, save_tensors
    from hooked_clip1d.training.batched import BatchedTrainer, Member

    args = [
        "train",
        "--n-labels",
        "6",
        "--n-heldout",
        "2",
        "--n2",
        "2",
        "--no-progress",
        "--engine",
        engine,
        "--out",
        str(tmp_path),
    ]
    if engine == "standard":
        assert main([*args, "--epochs", "1"]) == 0
        ckpt = tmp_path / "checkpoint.safetensors"
    else:  # a 3-epoch group run stopped early, as a killed session leaves it
        m = Member(
            CLIPConfig.from_preset("simplified", n_labels=6),
            DataConfig(n_labels=6, n_heldout=2, n2=2),
            TrainConfig(epochs=3),
        )
        BatchedTrainer([m], tmp_path, member_dirs=[tmp_path]).run(progress=False, max_steps=2)
        ckpt = tmp_path / "group_checkpoint.safetensors"
    tensors, meta = read_tensors(ckpt)
    for c in meta["members"] if engine == "batched" else [meta]:
        for tower in ("vision", "text"):
            del c["model_config"][tower]["ablated_terms"]  # as written before the field existed
    save_tensors(ckpt, tensors, {k: v for k, v in meta.items() if k != "format"})
    assert main([*args, "--epochs", "3", "--resume"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["epochs"] == 3


def test_trainers_take_a_run_config_and_still_the_three_configs(tmp_path):
    """``train``, ``Trainer`` and ``train_fast`` take one ``RunConfig`` (``train(run, out_dir)``); the older
    three-config calls (also with ``resume`` / ``progress`` positional) train the same run; anything else is a
    ``TypeError`` naming the entry point and what it takes."""
    from hooked_clip1d.training.batched import train_fast
    from hooked_clip1d.training.run_config import RunConfig

    run = RunConfig(tiny_config(n_labels=6), DATA, TrainConfig(epochs=1, batch_size=16))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the one signature warns of nothing
        new = train(run, tmp_path / "new", progress=False)
        assert Trainer(run, tmp_path / "t").run(progress=False).step == new.step
        fast = train_fast(run, tmp_path / "fast", progress=False)
    # the older form is deprecated (issue 52: one entry signature) and still trains the same run
    with pytest.warns(DeprecationWarning, match=r"pass train\(RunConfig\(model_cfg, data_cfg, train_cfg\)") as w:
        old = train(run.model, run.data, run.train, tmp_path / "old", False, False)
    assert len(w) == 1
    _assert_same_state(new.model.state_dict(), old.model.state_dict())
    with pytest.warns(DeprecationWarning, match="train_fast"):
        fast_old = train_fast(run.model, run.data, run.train, tmp_path / "fast_old", progress=False)
    _assert_same_state(fast.model.state_dict(), fast_old.model.state_dict())
    with pytest.raises(TypeError, match="train takes a RunConfig"):
        train({"model": 1}, tmp_path / "x")
    with pytest.raises(TypeError, match="at most 4 positional arguments after the run"):
        train(run, tmp_path / "x", False, False, None, 1)
    with pytest.raises(TypeError, match="train_fast takes a RunConfig"):
        train_fast(run.model, tmp_path / "x")
    assert not (tmp_path / "x").exists()
