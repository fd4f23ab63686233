"""A new user's bad inputs and the caller's state: each test guards one reliability item of issue 38.

- a wrong ``names_filter`` is an error naming the argument and what it accepts (tower and whole model);
- ``train`` / ``train_fast`` / ``BatchedTrainer`` give the caller's global torch RNG back, also when they raise;
- a model/data config mismatch leaves no half-created run directory (Python API and ``hooked-clip1d train``);
- ``run_analysis`` leaves the caller's model in the mode it had, also when the analysis raises;
- the caption "17 is on the left of 17" is refused by the text tower and by the vocabulary;
- a model file whose metadata was edited gives a ``CheckpointError`` naming the problem, not a raw JSON error.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import make_model, tiny_config
from safetensors import safe_open
from safetensors.torch import save_file

import hooked_clip1d.pretrained as reg
from hooked_clip1d import BatchedTrainer, DataConfig, Member, TrainConfig, Vocabulary, train, train_fast
from hooked_clip1d.cli import analyze as cli_analyze
from hooked_clip1d.cli.analyze import run_analysis
from hooked_clip1d.cli.commands import main
from hooked_clip1d.model.checkpoint import CheckpointError, content_digest, load_model_file, save_model
from hooked_clip1d.training import batched as batched_mod
from hooked_clip1d.training import group_io
from hooked_clip1d.training import trainer as trainer_mod
from hooked_clip1d.training.rundir import RunDirBusy, RunLock

DATA = DataConfig(n_labels=6, n_heldout=2, n2=2)
ONE_EPOCH = TrainConfig(epochs=1, batch_size=16)


# ---- names_filter ---------------------------------------------------------------------------------------------------
ACCEPTS = r"names_filter must be a hook name, a list of hook names or a callable \(name -> bool\)"


def _as_a_user_runs_it(method):
    """The method without the test suite's jaxtyping/beartype wrapper (``tests/typecheck.py``),
    which would refuse a wrongly typed argument before our own check runs: a user's Python has no such wrapper."""
    return inspect.unwrap(method)


@pytest.mark.parametrize("bad", [123, 2.5, [0, 1]], ids=["int", "float", "list-of-ints"])
def test_a_wrong_names_filter_is_named(bad, simplified_model, images, captions):
    """Once ``names_filter=123`` gave "'int' object is not iterable"."""
    vision = simplified_model.vision
    with pytest.raises(TypeError, match=ACCEPTS + f".*got {type(bad).__name__}"):
        _as_a_user_runs_it(type(vision).run_with_cache)(vision, images, names_filter=bad)
    with pytest.raises(TypeError, match=ACCEPTS + f".*got {type(bad).__name__}"):
        _as_a_user_runs_it(type(simplified_model).run_with_cache)(simplified_model, images, captions, names_filter=bad)
    with pytest.raises(TypeError, match="names_filter"):  # with the suite's type checking too
        vision.run_with_cache(images, names_filter=bad)


def test_every_accepted_names_filter_still_works(simplified_model, images, captions):
    vision = simplified_model.vision
    run = _as_a_user_runs_it(type(vision).run_with_cache)
    for nf in ("hook_embed", ["hook_embed"], ("hook_embed",), lambda n: n == "hook_embed"):
        _, cache = run(vision, images, names_filter=nf)
        assert list(cache.keys()) == ["hook_embed"]
    run_clip = _as_a_user_runs_it(type(simplified_model).run_with_cache)
    for nf in ("hook_logits", ["hook_logits"], lambda n: n == "hook_logits"):
        _, cache = run_clip(simplified_model, images, captions, names_filter=nf)
        assert list(cache.keys()) == ["hook_logits"]


# ---- the caller's global RNG ----------------------------------------------------------------------------------------
@pytest.fixture
def caller_rng():
    """Seed the global RNG with a value no trainer uses; yields a check that it is still in that state."""
    outer = torch.get_rng_state()
    torch.manual_seed(987_654)
    state = torch.get_rng_state()
    yield lambda: torch.equal(torch.get_rng_state(), state)
    torch.set_rng_state(outer)


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


@pytest.mark.parametrize("engine", ["train", "train_fast", "BatchedTrainer"])
def test_training_gives_the_callers_rng_back(engine, tmp_path, caller_rng):
    if engine == "train":
        train(tiny_config(), DATA, ONE_EPOCH, tmp_path / "run", progress=False)
    elif engine == "train_fast":
        train_fast(tiny_config(), DATA, ONE_EPOCH, tmp_path / "run", progress=False)
    else:
        BatchedTrainer([Member(tiny_config(), DATA, ONE_EPOCH)], None).run(progress=False)
    assert caller_rng()


def test_trainer_gives_the_rng_back_when_its_directory_is_busy(tmp_path, caller_rng):
    """``Trainer`` seeds the global RNG before it takes the run lock: a busy directory once kept the seed."""
    (tmp_path / "run").mkdir()
    lock = RunLock(tmp_path / "run").acquire()
    try:
        for fn in (train, train_fast):
            with pytest.raises(RunDirBusy):
                fn(tiny_config(), DATA, ONE_EPOCH, tmp_path / "run", progress=False)
            assert caller_rng(), fn.__name__
    finally:
        lock.release()


def test_batched_engine_gives_the_rng_back_when_it_refuses_a_group(tmp_path, caller_rng):
    """Refusals after the members' models are seeded: a setting the stacked engine does not implement, a bad
    checkpoint interval."""
    ablated = tiny_config(vision_overrides={"ablated_terms": ("EP",)})
    with pytest.raises(ValueError, match="batched trainer does not implement"):
        train_fast(ablated, DATA, ONE_EPOCH, tmp_path / "run", progress=False)
    assert caller_rng()
    with pytest.raises(ValueError, match="group_checkpoint_every"):
        BatchedTrainer([Member(tiny_config(), DATA, ONE_EPOCH)], None, group_checkpoint_every=0)
    assert caller_rng()


@pytest.mark.parametrize("engine", ["train", "train_fast"])
@pytest.mark.parametrize("where", ["initial snapshot", "evaluation"])
def test_training_gives_the_rng_back_when_a_run_raises(engine, where, tmp_path, monkeypatch, caller_rng):
    """A failure while training (here: writing the epoch-0 snapshot, or evaluating) gives the caller's RNG back."""
    if where == "initial snapshot":
        monkeypatch.setattr(trainer_mod if engine == "train" else batched_mod, "save_snapshot", _boom)
    else:  # the batched engine evaluates its members in group_io
        monkeypatch.setattr(trainer_mod if engine == "train" else group_io, "evaluate", _boom)
    fn = train if engine == "train" else train_fast
    tc = TrainConfig(epochs=2, batch_size=16, snapshot_epochs=(0,) if where == "initial snapshot" else ())
    with pytest.raises(RuntimeError, match="boom"):
        fn(tiny_config(), DATA, tc, tmp_path / "run", progress=False)
    assert caller_rng()


# ---- config mismatches leave no run directory -----------------------------------------------------------------------
MISMATCHED = DataConfig(n_labels=7, n_heldout=2, n2=2)  # the model has 6 labels


@pytest.mark.parametrize("engine", ["train", "train_fast", "BatchedTrainer"])
def test_a_config_mismatch_leaves_no_run_directory(engine, tmp_path):
    out = tmp_path / "new" / "run"
    with pytest.raises(ValueError, match="model n_labels=6 but data n_labels=7"):
        if engine == "train":
            train(tiny_config(), MISMATCHED, ONE_EPOCH, out, progress=False)
        elif engine == "train_fast":
            train_fast(tiny_config(), MISMATCHED, ONE_EPOCH, out, progress=False)
        else:
            BatchedTrainer([Member(tiny_config(), MISMATCHED, ONE_EPOCH)], out)
    assert not (tmp_path / "new").exists()


def test_cli_train_config_mismatch_leaves_no_run_directory(tmp_path, capsys):
    """On the command line a model/data mismatch comes from ``--init-from`` a model of another label count; a
    setting the batched engine does not implement is refused as early."""
    save_model(make_model(), tmp_path / "six.safetensors")  # 6 labels
    out = tmp_path / "new" / "run"
    data = ["--n-heldout", "2", "--n2", "2", "--epochs", "1", "--no-progress"]
    assert (
        main(["train", "--out", str(out), "--init-from", str(tmp_path / "six.safetensors"), "--n-labels", "7", *data])
        == 2
    )
    assert "--init-from model has n_labels=6 but --n-labels is 7" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    args = ["train", "--out", str(out), "--n-labels", "6", "--engine", "batched", "--ablate-vision-terms", "EP", *data]
    assert main(args) == 2
    assert "batched trainer does not implement" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


# ---- run_analysis leaves the model's mode -------------------------------------------------------------------------
def _modes(model: torch.nn.Module) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def _analysable(seed: int = 0):
    model = make_model(seed=seed)
    model.data_config = DATA
    return model


@pytest.fixture(scope="module")
def heads_in_eval_mode(tmp_path_factory):
    return run_analysis("heads", _analysable().eval(), out_dir=tmp_path_factory.mktemp("ref"))["data"]


@pytest.mark.parametrize("mode", ["train", "eval", "mixed"])
def test_run_analysis_leaves_the_models_mode(mode, tmp_path, heads_in_eval_mode):
    model = _analysable()
    if mode == "train":
        model.train()
    elif mode == "mixed":  # e.g. a user sampling dropout in one tower only
        model.eval()
        model.vision.train()
    before = _modes(model)
    res = run_analysis("heads", model, out_dir=tmp_path / mode)
    assert _modes(model) == before
    # and the analysis itself ran in eval mode: its numbers are those of the model in eval mode (no dropout)
    assert res["data"] == heads_in_eval_mode


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_run_analysis_leaves_the_models_mode_when_it_raises(mode, tmp_path, monkeypatch):
    model = _analysable().train(mode == "train")
    seen = []

    def failing(m, options):
        seen.append(m.training)
        raise RuntimeError("boom")

    monkeypatch.setitem(cli_analyze.FAMILIES, "heads", dataclasses.replace(cli_analyze.FAMILIES["heads"], run=failing))
    with pytest.raises(RuntimeError, match="boom"):
        run_analysis("heads", model, out_dir=tmp_path)
    assert seen == [False] and model.training == (mode == "train")
    assert all(m.training == (mode == "train") for m in model.modules())


# ---- a caption naming one label twice -------------------------------------------------------------------------------
TWICE = ["17 is on the left of 17", "17 is on the right of 17"]


@pytest.mark.parametrize("text", TWICE)
def test_a_caption_with_one_label_twice_is_refused(text):
    vocab = Vocabulary(20)
    with pytest.raises(ValueError, match=f"cannot parse caption '{text}'.*two different labels, got 17 twice"):
        vocab.text_to_caption(text)
    model = reg.load_model(reg.DEFAULT_MODEL)
    with pytest.raises(ValueError, match=f"cannot parse caption '{text}'.*two different labels"):
        model.text.to_tokens([text])
    ok = vocab.text_to_caption(text.replace("of 17", "of 19"))  # the same sentence with two labels is fine
    assert vocab.caption_to_text(ok) == text.replace("of 17", "of 19")


def test_vocabulary_refuses_building_a_caption_with_one_label_twice():
    vocab = Vocabulary(20)
    for build in (vocab.left_caption, vocab.right_caption):
        with pytest.raises(ValueError, match="two different labels, got 17 twice"):
            build(17, 17)
    model = reg.load_model(reg.DEFAULT_MODEL)  # hand-built ids reach the tower's own check
    with pytest.raises(ValueError, match="labels X != Y"):
        model.text(torch.tensor([[17, vocab.left_of, 17, vocab.eot]]))


# ---- edited model files ---------------------------------------------------------------------------------------------
def _edit_metadata(src: Path, dst: Path, edit, keep_digest: bool) -> None:
    """Copy ``src`` to ``dst`` with its safetensors metadata edited; ``keep_digest=False`` recomputes the digest, as
    a tool that knows the format would (so the file gets past the digest and its content is checked)."""
    with safe_open(str(src), "pt") as f:
        meta, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    edit(meta)
    if not keep_digest:
        meta["digest"] = content_digest(tensors, meta)
    save_file(tensors, str(dst), metadata=meta)


EDITS = {
    "truncated JSON": (lambda m: m.update(model_config=m["model_config"][:-1]), "metadata 'model_config' is not valid"),
    "not an object": (lambda m: m.update(model_config="[1, 2]"), "invalid model_config"),
    "wrong field type": (
        lambda m: m.update(model_config=m["model_config"].replace('"n_heads": 2', '"n_heads": "two"')),
        r"invalid model_config: [\s\S]*n_heads",  # our ValueError, or jaxtyping's TypeCheckError in the tests
    ),
    "data config JSON": (lambda m: m.update(data_config="{"), "metadata 'data_config' is not valid JSON"),
    "no model config": (lambda m: m.pop("model_config"), "metadata has no 'model_config'"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_model_file_with_edited_metadata_is_refused_clearly(edit, tmp_path, capsys):
    model = make_model()
    save_model(model, tmp_path / "m.safetensors", DATA)
    fn, message = EDITS[edit]
    for keep_digest, match in ((True, "was modified after it was written"), (False, message)):
        dst = tmp_path / f"edited-{keep_digest}.safetensors"
        _edit_metadata(tmp_path / "m.safetensors", dst, fn, keep_digest)
        with pytest.raises(CheckpointError, match=match) as info:
            load_model_file(dst)
        assert not isinstance(info.value, json.JSONDecodeError) and str(dst) in str(info.value)
        assert main(["eval", "--model", str(dst)]) == 2  # the command line: a usage error, no traceback
        err = capsys.readouterr().err
        assert "Traceback" not in err and "JSONDecodeError" not in err and str(dst) in err


def test_a_shipped_model_with_an_edited_manifest_is_refused_clearly(tmp_path, monkeypatch):
    for f in (f"{reg.DEFAULT_MODEL}.json", reg.weights_file(reg.DEFAULT_MODEL).name):
        shutil.copy(reg.zoo.WEIGHTS_DIR / f, tmp_path / f)
    manifest = tmp_path / f"{reg.DEFAULT_MODEL}.json"
    manifest.write_text(manifest.read_text()[:-20])  # an edit that broke the JSON
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ValueError, match=f"the manifest '{manifest}' of '{reg.DEFAULT_MODEL}' is not valid JSON") as e:
        reg.load_model(reg.DEFAULT_MODEL)
    assert not isinstance(e.value, json.JSONDecodeError)
