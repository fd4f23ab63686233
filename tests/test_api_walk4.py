"""A fourth and a fifth walk through the public API (session 32: training, sweeps, the registry, evaluation, the
reproduce machinery; then TransformerLens interop, circuits, probes): each case below trained, loaded or judged
something other than what was asked without a word, or left the caller's state changed; now it is refused by name,
warned about, or left alone."""

from __future__ import annotations

import dataclasses
import gc
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import REFUSAL_SNIPPET

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset, evaluate, load_model
from hooked_clip1d.training import RunConfig, TrainConfig, Trainer, train

CFG = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
DATA = DataConfig(n_labels=6, n_heldout=2, n2=2)
ROOT = Path(__file__).resolve().parents[1]


def tiny_run(**train: object) -> RunConfig:
    return RunConfig(CFG, DATA, TrainConfig(**{"epochs": 2, "batch_size": 16, **train}))  # type: ignore[arg-type]


def test_starting_weights_of_another_config_are_refused(tmp_path):
    """``init_model`` replaced the run's model config: a recipe's dropout (0.1) trained as 0.0, another width was
    trained and recorded, without a word. Now the configs must agree (the towers' init seeds aside)."""
    from hooked_clip1d.training.members import Member

    drop = RunConfig.from_recipe("cls-exempt-init002-attndrop", CFG, DATA, TrainConfig(epochs=1, batch_size=16))
    with pytest.raises(ValueError, match=r"init_model's config is not the run's .*attn_dropout: the model has 0.0"):
        train(drop, tmp_path / "a", progress=False, init_model=CLIP1D(CFG))
    wide = CLIPConfig.from_preset("simplified", n_labels=6, d_model=32, d_head=8, n_heads=2)
    with pytest.raises(ValueError, match=r"config is not the run.s .*d_model: the model has 32, the run 16"):
        Member.from_run(tiny_run(), init_model=CLIP1D(wide, seed=0))
    assert not (tmp_path / "a").exists()  # refused before anything was written
    # the run's own config, seeded differently: accepted (given weights are not drawn)
    run = train(tiny_run(epochs=1), tmp_path / "b", progress=False, init_model=CLIP1D(CFG, seed=7))
    assert run.model.cfg.vision.d_model == 16


def test_the_cli_refuses_a_recipe_whose_dropout_the_loaded_model_would_drop(tmp_path, capsys):
    from hooked_clip1d.cli import main

    train(tiny_run(epochs=1), tmp_path / "src", progress=False)
    args = ["train", "--n-labels", "6", "--n-heldout", "2", "--n2", "2", "--epochs", "1", "--batch-size", "16"]
    args += ["--init-from", str(tmp_path / "src"), "--out", str(tmp_path / "x"), "--no-progress"]
    assert main([*args, "--recipe", "cls-exempt-init002-attndrop"]) != 0
    assert "--recipe cls-exempt-init002-attndrop sets attn_dropout=0.1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_restarted_run_does_not_keep_the_killed_runs_snapshots(tmp_path, capsys):
    """A run killed before its first checkpoint restarted from epoch 0 but kept the killed run's snapshots, which
    then loaded as the new run's trajectory (epochs 3 and 10 of a 2-epoch run)."""
    from hooked_clip1d.pretrained import list_checkpoints

    d = tmp_path / "run"
    train(tiny_run(lr=1e-2, snapshot_epochs=(0, 1, 2)), d, progress=False)
    for f in ("checkpoint.safetensors", "model.safetensors", "summary.json"):  # as if killed before them
        (d / f).unlink()
    train(tiny_run(epochs=1, snapshot_epochs=(0,)), d, progress=False)
    assert list(list_checkpoints(d)) == [0]
    assert "removed the snapshots of epochs [0, 1, 2]" in capsys.readouterr().err


def test_a_resumed_run_warns_about_snapshot_epochs_it_can_no_longer_make(tmp_path):
    d = tmp_path / "run"
    run = tiny_run(snapshot_epochs=(2,))
    train(run, d, progress=False)
    more = dataclasses.replace(run, train=dataclasses.replace(run.train, epochs=4, snapshot_epochs=(0, 1, 3, 4)))
    with pytest.warns(UserWarning, match=r"snapshots of epochs \[0, 1\] asked for were not kept"):
        train(more, d, resume=True, progress=False)


def test_evaluate_refuses_a_dataset_drawn_otherwise_than_the_models():
    """Another data seed: 53 of its 100 single-object validation images were the flagship's training images."""
    m = load_model("simplified-ntot20-n2-10")
    with pytest.raises(ValueError, match=r"drawn with seed=1 but the model's training data with seed=0"):
        evaluate(m, build_dataset(dataclasses.replace(m.data_config, seed=1)), splits=["val_seen"])
    with pytest.raises(ValueError, match=r"n2=3 .* n2=10: its splits \['val_single'\]"):
        evaluate(m, build_dataset(dataclasses.replace(m.data_config, n2=3)), splits=["val_single", "val_unseen"])
    evaluate(m, build_dataset(dataclasses.replace(m.data_config, seed=1)), splits=["val_unseen"])  # never trained on


PLAIN = (
    """
import warnings
from hooked_clip1d import CLIPConfig, DataConfig
from hooked_clip1d.training import RunConfig, TrainConfig
from hooked_clip1d.training.batched import BatchedTrainer
from hooked_clip1d.training.members import Member
from hooked_clip1d.pretrained import load_trajectory, trajectory_emergence
from hooked_clip1d.sweeps.runner import run_sweep
from hooked_clip1d.sweeps.spec import TINY_SPEC
"""
    + REFUSAL_SNIPPET
    + """
C = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
D = DataConfig(n_labels=6, n_heldout=2, n2=2)
ms = [Member.from_run(RunConfig(C, D, TrainConfig(epochs=2, batch_size=16, seed=s))) for s in (0, 1)]
for e in ([1.9, 5.5], "100", [True]):
    print(refusal(lambda: load_trajectory("simplified-ntot20-n2-10", epochs=e)))
    print(refusal(lambda: trajectory_emergence("simplified-ntot20-n2-10", epochs=e)))
print(refusal(lambda: BatchedTrainer(ms, None, amp="no")))
print(refusal(lambda: BatchedTrainer(ms, None, group_checkpoint_every=1.5)))
print(refusal(lambda: run_sweep(TINY_SPEC, "/nonexistent/o", progress=False, max_steps=1.5, threads=1)))
tc = TrainConfig(betas=[0.9, 0.98])
print(tc.betas, tc == TrainConfig(betas=(0.9, 0.98)), hash(tc) == hash(TrainConfig(betas=(0.9, 0.98))))
"""
)


@pytest.mark.heavy  # >= 4 s on 2 cores (measured 2026-11-30)
def test_what_the_type_checkers_refuse_is_refused_without_them_too():
    """Run in a plain interpreter (the tests' jaxtyping + beartype refuse these calls before the package's checks):
    floats in trajectory epochs were truncated (1.9 loaded epoch 1) and a string read digit by digit ("100": epochs
    0 and 1); ``BatchedTrainer(amp="no")`` trained in bfloat16; a float max_steps or group_checkpoint_every gave a
    bare TypeError deep in the engine; ``TrainConfig(betas=[...])`` kept an unhashable list."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True, check=True).stdout.splitlines()
    for line in out[:6]:
        assert line.startswith("ValueError: ") and "epochs must be a list of ints >= 0" in line, line
    assert "amp must be True or False" in out[6]
    assert "group_checkpoint_every (steps) must be an int >= 1 or None, got 1.5" in out[7]
    assert "run_sweep: max_steps must be an int >= 1 or None, got 1.5" in out[8]
    assert out[9] == "(0.9, 0.98) True True"


def test_a_sweep_specs_run_table_is_type_checked(tmp_path):
    """``amp = "false"`` trained in bfloat16 (a non-empty string is true)."""
    from hooked_clip1d.sweeps.spec import load_spec

    base = (ROOT / "hooked_clip1d" / "sweeps" / "tiny.toml").read_text()
    for line, msg in (
        ('amp = "false"', r"run.amp must be true or false, got 'false'"),
        ('compile = "no"', r"run.compile must be true or false"),
        ('threads = "2"', r"run.threads must be an int >= 1 or None"),
        ("threads = 0", r"run.threads must be an int >= 1 or None, got 0"),
    ):
        p = tmp_path / "s.toml"
        p.write_text(base + f"\n[run]\n{line}\n")
        with pytest.raises(ValueError, match=msg):
            load_spec(p)


def test_batched_trainer_refuses_a_max_steps_that_trains_nothing(tmp_path):
    from hooked_clip1d.training.batched import BatchedTrainer
    from hooked_clip1d.training.members import Member

    t = BatchedTrainer([Member.from_run(tiny_run(seed=s)) for s in (0, 1)], tmp_path / "g")
    with pytest.raises(ValueError, match=r"max_steps must be an int >= 1 or None, got 0"):
        t.run(progress=False, max_steps=0)  # returned [] without training or a word
    t.release_locks()


def test_a_trainer_built_and_dropped_without_running_leaves_its_folder_unlocked(tmp_path):
    """The lock was released only by ``run()``: a Trainer built to look at its model held the folder until the
    process ended."""
    d = tmp_path / "run"
    t = Trainer(tiny_run(), d)
    del t
    gc.collect()
    with Trainer(tiny_run(), d) as t2:  # a context manager too
        assert t2.model.cfg.vision.d_model == 16
    Trainer(tiny_run(), d).close()
    train(tiny_run(), d, progress=False)


def test_a_substitute_model_given_in_python_is_left_as_it_was():
    """``reproduce(fig, models=model)`` put the caller's model in eval mode and wrote a manifest on it."""
    from hooked_clip1d.reproduce.controls import substitute

    m = load_model("simplified-ntot20-n2-10")
    del m.manifest
    m.train()
    got = substitute("simplified-ntot20-n2-10", m)
    assert m.training and not hasattr(m, "manifest")
    assert not got.training and got.manifest["name"] == "a CLIP1D given in Python"


def test_the_results_page_says_when_a_record_was_made_on_a_substitute(tmp_path):
    from hooked_clip1d.reproduce.results_page import build_results_page

    rec = json.loads((ROOT / "docs" / "records" / "fig11.json").read_text())
    rec["substituted"] = {"simplified-ntot20-n2-10": "untrained:3"}
    (tmp_path / "res" / "fig11").mkdir(parents=True)
    (tmp_path / "res" / "fig11" / "fig11.json").write_text(json.dumps(rec))
    for png in rec["plots"]:
        shutil.copy(ROOT / "docs" / "figures" / png, tmp_path / "res" / "fig11" / png)
    page = build_results_page(tmp_path / "res", tmp_path / "docs" / "results.md").read_text()
    assert "(1 of them made on substitute models (`--model`), not the zoo's)" in page
    assert "(on a substitute model)" in page
    assert "- **Substituted:** made on untrained:3 in place of `simplified-ntot20-n2-10`" in page


def test_a_compressed_model_file_loads_by_its_path(tmp_path):
    """``export_run`` writes NAME.safetensors.xz; loading that path said the file was corrupt."""
    from hooked_clip1d.pretrained import resolve_model
    from hooked_clip1d.pretrained.ship import export_run

    train(tiny_run(), tmp_path / "run", progress=False)
    p = export_run(tmp_path / "run", "tiny-x", "a test model", dest=tmp_path / "zoo")
    assert str(p).endswith(".safetensors.xz")
    got, want = load_model(str(p)), resolve_model(tmp_path / "run")
    assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), want.state_dict().values(), strict=True))


def test_a_name_that_is_both_a_zoo_model_and_a_folder_here_is_refused(tmp_path, monkeypatch):
    """``load_model(name)`` read the zoo's model, ``load_model(name, checkpoint_index=-1)`` and ``resolve_model``
    (every CLI command) the folder: one name, two models."""
    from hooked_clip1d.pretrained import list_checkpoints, resolve_model

    monkeypatch.chdir(tmp_path)
    name = "simplified-ntot20-n2-10"
    train(tiny_run(snapshot_epochs=(0, 2)), name, progress=False)
    for load in (load_model, resolve_model, list_checkpoints, lambda n: load_model(n, checkpoint_index=-1)):
        with pytest.raises(ValueError, match=r"names both a shipped model and a folder here .* give the folder as"):
            load(name)
    assert resolve_model(f"./{name}").cfg.n_labels == 6 and resolve_model(Path(name)).cfg.n_labels == 6
    assert list(list_checkpoints(f"./{name}")) == [0, 2]


# ---- the fifth walk (TransformerLens interop, circuits, probes; a helper) -------------------------------------------
@pytest.fixture(scope="module")
def flagship_pairs():
    from hooked_clip1d.analysis.metrics import pair_inputs

    m = load_model("simplified-ntot20-n2-10")
    ds = build_dataset(m.data_config)
    return (m, *pair_inputs(ds.splits["val_unseen"], ds.vocab, n=8))


def test_a_reused_task_reads_its_clean_run_under_the_hooks_and_weights_of_the_moment(flagship_pairs):
    """The clean outputs were cached once: under a head-zeroing hook a reused task gave the zeroed head an effect of
    -1.37 and head 0 one 100x too big (a fresh task: 0.0 and -0.01); a weight edit was ignored likewise."""
    from hooked_clip1d.analysis import exact_patching, mirror_task

    m, imgs, caps = flagship_pairs
    task = mirror_task(m, imgs, caps, target="vision")
    exact_patching(task)  # the clean run cached without hooks

    def zero_h1(z, hook):
        z = z.clone()
        z[:, :, 1] = 0
        return z

    with m.vision.hooks(fwd_hooks=[("blocks.0.attn.hook_z", zero_h1)]):
        reused = exact_patching(task).as_dict()
        fresh = exact_patching(mirror_task(m, imgs, caps, target="vision")).as_dict()
    assert reused == pytest.approx(fresh, abs=1e-6) and abs(reused["vision.L0.H1"]) < 1e-6
    w = m.vision.blocks[0].attn.W_V
    saved = w.detach().clone()
    try:
        with torch.no_grad():
            w[1] = 0  # head 1's values: an edit after the task was built
        edited = exact_patching(task).as_dict()
        assert edited == pytest.approx(exact_patching(mirror_task(m, imgs, caps, target="vision")).as_dict(), abs=1e-6)
    finally:
        with torch.no_grad():
            w.copy_(saved)


def test_a_towers_cache_keeps_hook_pooled_whole_and_refuses_what_it_cannot_do(flagship_pairs):
    """``pos_slice`` cut ``hook_pooled`` [batch, d_model] along its batch axis (TL's dim -2 rule): -1 kept the last
    image's readout only; ``remove_batch_dim`` accepted a batch of two given as text; ``incl_bwd`` gave a bare
    autograd error."""
    v = flagship_pairs[0].vision
    texts = ["C . . 17 . . 19 . . . .", "C . . 19 . . 17 . . . .", "C 1 . . . . . . . 2 ."]
    out, cache = v.run_with_cache(v.to_tokens(texts), pos_slice=-1)
    assert cache["hook_pooled"].shape == (3, 128) and torch.equal(cache["hook_pooled"], out)
    assert cache["blocks.0.hook_resid_post"].shape == (3, 1, 128) and cache["blocks.0.attn.hook_z"].shape == (
        3,
        1,
        4,
        32,
    )
    _, one = v.run_with_cache(v.to_tokens(texts[:1]), remove_batch_dim=True, pos_slice=0)
    assert one["hook_pooled"].shape == (128,) and one["blocks.0.hook_resid_post"].shape == (1, 128)
    for call in (lambda: v.run_with_cache(texts[:2], remove_batch_dim=True),
                 lambda: v.run_with_cache(tokens=v.to_tokens(texts[:2]), remove_batch_dim=True)):  # fmt: skip
        with pytest.raises(ValueError, match=r"remove_batch_dim=True needs a batch of one input .* batch of 2"):
            call()
    with pytest.raises(ValueError, match=r"run_with_cache\(incl_bwd=True\) needs a scalar output"):
        v.run_with_cache(v.to_tokens(texts), incl_bwd=True)


def test_clip_hooks_leave_the_callers_own_head_hooks(flagship_pairs):
    """``CLIP1D.hooks`` / ``run_with_hooks`` / ``run_with_cache`` removed every hook on the head's hook points on
    exit, the caller's own ``hook_logits`` hook included."""
    m = flagship_pairs[0]
    img = m.vision.to_tokens(["C 1 . 2 . . . . . . ."])
    cap = m.text.to_tokens(["1 is on the left of 2"])
    seen: list[int] = []
    m.hook_logits.add_hook(lambda x, hook: seen.append(1))
    try:
        m.run_with_hooks(img, cap, fwd_hooks=[("hook_logits", lambda x, hook: seen.append(2))])
        m.run_with_cache(img, cap)
        seen.clear()
        m(img, cap)
        assert seen == [1]
    finally:
        m.hook_logits.remove_hooks("both")


def test_circuit_scores_refuse_non_finite_scores():
    """A NaN ranked below everything: roc_auc -0.25, precision_at_k ranked it first, rank_correlation 0.98."""
    from hooked_clip1d.analysis.circuits.scores import precision_at_k, rank_correlation, roc_auc

    nan = float("nan")
    with pytest.raises(ValueError, match=r"roc_auc: 1 of the 3 scores are not finite"):
        roc_auc([nan, 0.1, 0.2], [True, False, False])
    with pytest.raises(ValueError, match=r"precision_at_k: 1 of the 3 scores are not finite"):
        precision_at_k([nan, 0.1, 0.2], [True, False, False])
    with pytest.raises(ValueError, match=r"rank_correlation: 1 of the 3 scores are not finite"):
        rank_correlation([nan, 1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"roc_auc: 3 scores but 2 labels"):
        roc_auc([0.3, 0.1, 0.2], [True, False])


def test_a_probe_position_tensor_is_range_checked(flagship_pairs):
    """-1 in a tensor read the last position (the int -1 is refused); 11 gave a bare IndexError."""
    from hooked_clip1d.analysis.interventions.probes import residual_activations

    v = flagship_pairs[0].vision
    toks = v.to_tokens(["C 1 . 2 . . . . . . .", "C 3 . 4 . . . . . . ."])
    for bad in ([-1, -1], [11, 0]):
        with pytest.raises(ValueError, match=r"position tensor entries must be in 0..10"):
            residual_activations(v, toks, torch.tensor(bad))
    assert residual_activations(v, toks, torch.tensor([0, 10])).shape == (2, 2, 128)
