"""The interpretability ecosystem beside the package (issue 45, item 2): TransformerLens 3.x and 4.x, SAELens's SAE
format, nnsight, ``collect_activations`` on every hook point, and trajectories under TransformerLens's checkpoint
conventions (with two robustness items: a half-deleted trajectory, a destination that cannot be written).

The SAELens and nnsight tests skip where those packages are not installed (SAELens needs transformer-lens<4): CI
runs them in a second environment with transformer-lens 3.x, SAELens and nnsight (``.ci/run``).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

import hooked_clip1d
import hooked_clip1d.pretrained as reg
import hooked_clip1d.pretrained.ship as ship
from hooked_clip1d import DataConfig, TrainConfig, load_model
from hooked_clip1d.analysis.hooks import splice_hook
from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder, collect_activations, train_sae
from hooked_clip1d.cli.commands import main
from hooked_clip1d.model.tl_compat import TL_VERSION, remove_batch_dim
from hooked_clip1d.training.trainer import Trainer

FLAGSHIP = "simplified-ntot20-n2-10"
IMAGES = ["C . . 17 . . 19 . . . .", "C . . 19 . . 17 . . . .", "C 3 . . . . . . . . 5"]
CAPTIONS = ["17 is on the left of 19", "19 is on the left of 17", "3 is on the left of 5"]


@pytest.fixture(scope="module")
def flagship():
    m = load_model(FLAGSHIP)
    return m, m.vision.to_tokens(IMAGES), m.text.to_tokens(CAPTIONS)


# ---- TransformerLens 3.x and 4.x ----------------------------------------------------------------------------------
def test_the_installed_transformer_lens_is_in_the_supported_range():
    import tomllib

    deps = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    pin = next(r for r in deps["dependencies"] if r.startswith("transformer-lens"))
    assert pin == "transformer-lens>=3.3,<5" and (3, 3) <= TL_VERSION < (5, 0), (pin, TL_VERSION)


def test_run_with_cache_without_the_batch_dim_on_every_hook(flagship):
    """TL 3.x's own remove_batch_dim raised an IndexError on hook_pooled (no position axis); ours gives TL 4's
    cache on both: each activation of a batch of one without its batch axis, pos_slice on the position axis."""
    m, images, _ = flagship
    _, full = m.vision.run_with_cache(images[:1])
    _, one = m.vision.run_with_cache(images[:1], remove_batch_dim=True)
    assert list(one.keys()) == list(full.keys())
    for k in full.keys():
        assert torch.equal(one[k], full[k][0]), k
    assert one["hook_pooled"].shape == (m.cfg.vision.d_model,)
    assert one["pattern", 0].shape == (4, 11, 11)
    _, sliced = m.vision.run_with_cache(images[:1], remove_batch_dim=True, pos_slice=0)
    assert sliced["blocks.0.attn.hook_z"].shape == (1, 4, 32)  # position axis kept, cut to position 0
    assert sliced["blocks.0.hook_resid_post"].shape == (1, m.cfg.vision.d_model)
    assert torch.equal(sliced["hook_pooled"], one["hook_pooled"])  # no position axis: untouched
    # the helper alone: a batch of two keeps its batch axis, as in TL 4
    assert remove_batch_dim({"hook_pooled": torch.zeros(2, 3)})["hook_pooled"].shape == (2, 3)


# ---- collect_activations on every hook point -----------------------------------------------------------------------
@pytest.mark.parametrize("tower", ["vision", "text"])
def test_collect_activations_takes_every_hook_point(full_model, images, captions, tower):
    enc = getattr(full_model, tower)
    tokens = images if tower == "vision" else captions
    n, cfg_before = tokens.shape[0], enc.cfg
    for name in enc.hook_names():
        rows = collect_activations(enc, name, tokens)
        assert rows.ndim == 2 and rows.dtype == torch.float32 and rows.shape[0] % n == 0, name
        # a flagged hook point (hook_result, the split inputs) is turned on for its run only: configs given back
        assert enc.cfg is cfg_before and all(m.cfg is cfg_before for m in enc.modules() if "cfg" in m.__dict__)
    z = collect_activations(enc, "blocks.0.attn.hook_z", tokens)  # every head flattened, SAELens's hook_z layout
    assert z.shape == (n * tokens.shape[1], enc.cfg.n_heads * enc.cfg.d_head)


def test_collect_activations_rows_are_the_cached_activations(flagship):
    m, images, captions = flagship
    _, cache = m.vision.run_with_cache(images)
    z = cache["blocks.0.attn.hook_z"]  # [n, pos, head, d_head]
    assert torch.equal(collect_activations(m.vision, "blocks.0.attn.hook_z", images, pos=0, head=3), z[:, 0, 3])
    assert torch.equal(collect_activations(m.vision, "blocks.0.attn.hook_z", images, pos=0), z[:, 0].flatten(-2))
    assert torch.equal(collect_activations(m.vision, "blocks.0.attn.hook_z", images, head=1), z[:, :, 1].flatten(0, 1))
    pattern = cache["pattern", 0]  # [n, head, query, key]
    got = collect_activations(m.vision, "blocks.0.attn.hook_pattern", images, pos=0, head=3)
    assert torch.equal(got, pattern[:, 3, 0])  # the CLS row of head 3
    assert torch.equal(collect_activations(m.vision, "hook_pooled", images), cache["hook_pooled"])
    # hook_result: off by default, turned on for the run, then off again
    assert "blocks.0.attn.hook_result" in m.vision.inactive_hook_names()
    res = collect_activations(m.vision, "blocks.0.attn.hook_result", images, pos=0)
    assert res.shape == (3, 4 * m.cfg.vision.d_model)
    assert "blocks.0.attn.hook_result" in m.vision.inactive_hook_names()
    # the whole CLIP: a tower's hook by its CLIP name, and a head hook on (images, captions)
    assert torch.equal(
        collect_activations(m, "text.hook_pooled", captions), collect_activations(m.text, "hook_pooled", captions)
    )
    logits = collect_activations(m, "hook_logits", (images, captions))
    assert torch.allclose(logits, m(images, captions), atol=0, rtol=0)


def test_collect_activations_refuses_what_a_hook_does_not_have(flagship):
    m, images, _ = flagship
    with pytest.raises(ValueError, match="'hook_pooled' has no position axis"):
        collect_activations(m.vision, "hook_pooled", images, pos=0)
    with pytest.raises(ValueError, match="'blocks.0.hook_resid_post' has no head axis"):
        collect_activations(m.vision, "blocks.0.hook_resid_post", images, head=0)
    with pytest.raises(IndexError, match="head=4 is out of range for 'blocks.0.attn.hook_z', which has 4"):
        collect_activations(m.vision, "blocks.0.attn.hook_z", images, head=4)
    with pytest.raises(IndexError, match="pos=11 is out of range"):
        collect_activations(m.vision, "blocks.0.attn.hook_z", images, pos=11)
    with pytest.raises(TypeError, match="head must be an int"):
        collect_activations(m.vision, "blocks.0.attn.hook_z", images, head=True)
    with pytest.raises(KeyError, match="did you mean"):
        collect_activations(m.vision, "blocks.0.attn.hook_zz", images)
    with pytest.raises(ValueError, match="give tokens=\\(images, captions\\)"):
        collect_activations(m, "hook_logits", images)
    with pytest.raises(KeyError, match="CLIP1D has no hook point 'blocks.0.attn.hook_z'"):
        collect_activations(m, "blocks.0.attn.hook_z", images)


# ---- SAELens's SAE format ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained_saes(flagship):
    """Two SAEs trained by the package on the flagship: top-k on the CLS read-out, ReLU+L1 on hook_z (every head,
    at CLS)."""
    from hooked_clip1d import build_dataset

    m, _, _ = flagship
    imgs = build_dataset(m.data_config).splits["train"].images[:400]
    pooled = collect_activations(m.vision, "hook_pooled", imgs)
    z = collect_activations(m.vision, "blocks.0.attn.hook_z", imgs, pos=0)
    topk, _ = train_sae(pooled, d_sae=64, k=8, steps=150, seed=0)
    relu, _ = train_sae(z, d_sae=48, l1=1e-3, steps=150, seed=1)
    return {"topk": (topk, pooled, "hook_pooled"), "relu": (relu, z, "blocks.0.attn.hook_z")}


def test_the_sae_lens_format_round_trips_without_sae_lens(trained_saes, tmp_path):
    sae, acts, hook = trained_saes["topk"]
    folder = sae.save_sae_lens(tmp_path / "sae", hook_name=hook, model_name=f"{FLAGSHIP}/vision")
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and cfg["k"] == 8 and (cfg["d_in"], cfg["d_sae"]) == (128, 64)
    assert cfg["metadata"]["hook_name"] == hook and cfg["reshape_activations"] == "none"
    back = SparseAutoencoder.load_sae_lens(folder)
    assert torch.equal(back(acts), sae(acts)) and back.metadata["model_name"] == f"{FLAGSHIP}/vision"
    assert sorted(p.name for p in folder.iterdir()) == ["cfg.json", "sae_weights.safetensors"]  # no temp files
    relu, z, zhook = trained_saes["relu"]
    zcfg = relu.sae_lens_config(hook_name=zhook)
    assert zcfg["architecture"] == "standard" and zcfg["reshape_activations"] == "hook_z"
    assert relu.sae_lens_config(hook_name=zhook, hook_head_index=3)["reshape_activations"] == "none"


def test_a_bad_sae_lens_folder_is_refused_naming_the_problem(trained_saes, tmp_path):
    sae, _, hook = trained_saes["topk"]
    with pytest.raises(FileNotFoundError, match="cfg.json' is missing"):
        SparseAutoencoder.load_sae_lens(tmp_path)
    folder = sae.save_sae_lens(tmp_path / "sae", hook_name=hook)
    cfg = json.loads((folder / "cfg.json").read_text())
    for change, msg in [
        ({"architecture": "jumprelu"}, "architecture 'jumprelu' is not supported"),
        ({"normalize_activations": "layer_norm"}, "normalize_activations='layer_norm' is not supported"),
        ({"d_in": 127}, "W_enc has shape \\[128, 64\\], cfg says \\[127, 64\\]"),
    ]:
        (folder / "cfg.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(ValueError, match=msg):
            SparseAutoencoder.load_sae_lens(folder)
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="is a file"):
        sae.save_sae_lens(tmp_path / "file")


@pytest.mark.parametrize("which", ["topk", "relu"])
def test_an_sae_trained_here_loads_in_sae_lens_with_identical_outputs_and_back(trained_saes, which, tmp_path):
    sae_lens = pytest.importorskip("sae_lens")
    ours, acts, hook = trained_saes[which]
    folder = ours.save_sae_lens(tmp_path / "ours", hook_name=hook, model_name=FLAGSHIP)
    theirs = sae_lens.SAE.load_from_disk(folder)
    assert type(theirs).__name__ == {"topk": "TopKSAE", "relu": "StandardSAE"}[which]
    x = acts if which == "topk" else acts.unflatten(-1, (4, 32))  # a hook_z SAE takes [..., n_heads, d_head]
    with torch.no_grad():
        out = theirs(x)
        assert torch.equal(out.reshape(acts.shape), ours(acts))
        assert torch.equal(theirs.encode(x), ours.encode(acts))
    _, cache = theirs.run_with_cache(x)
    assert torch.equal(cache["hook_sae_acts_post"], ours.encode(acts).detach())
    # and back: SAELens's own save, read here
    theirs.save_model(tmp_path / "theirs")
    again = SparseAutoencoder.load_sae_lens(tmp_path / "theirs")
    assert torch.equal(again(acts), ours(acts)) and again.metadata["hook_name"] == hook
    # in memory, both ways
    assert torch.equal(ours.to_sae_lens(hook_name=hook)(x).reshape(acts.shape), ours(acts))
    assert torch.equal(SparseAutoencoder.from_sae_lens(theirs)(acts), ours(acts))


def test_an_sae_lens_sae_splices_into_a_tower_as_ours_does(flagship, trained_saes):
    sae_lens = pytest.importorskip("sae_lens")
    m, images, _ = flagship
    ours, _, hook = trained_saes["topk"]
    theirs = sae_lens.SAE.from_dict(ours.sae_lens_config(hook_name=hook))
    theirs.load_state_dict(ours.state_dict())
    a = m.vision.run_with_hooks(images, fwd_hooks=[(hook, lambda act, hook: theirs(act))])
    b = m.vision.run_with_hooks(images, fwd_hooks=[(hook, splice_hook(ours))])
    assert torch.equal(a, b)
    fresh = sae_lens.TopKSAE(sae_lens.TopKSAEConfig(d_in=128, d_sae=32, k=4))  # SAELens's init, not ours
    x = collect_activations(m.vision, hook, images)
    with torch.no_grad():
        assert torch.equal(SparseAutoencoder.from_sae_lens(fresh)(x), fresh(x))
    jump = sae_lens.JumpReLUSAE(sae_lens.JumpReLUSAEConfig(d_in=128, d_sae=32))
    with pytest.raises(ValueError, match="architecture 'jumprelu' is not supported"):
        SparseAutoencoder.from_sae_lens(jump)


def test_sae_lens_default_top_k_with_decoder_norm_rescaling_both_ways(flagship, tmp_path):
    """SAELens's top-k training default (rescale_acts_by_decoder_norm=True): a fresh TopKSAE with non-unit decoder
    rows, through the on-disk format and in memory, gives SAELens's outputs and features here, bit for bit."""
    sae_lens = pytest.importorskip("sae_lens")
    m, images, _ = flagship
    x = collect_activations(m.vision, "hook_pooled", images)
    theirs = sae_lens.TopKSAE(sae_lens.TopKSAEConfig(d_in=128, d_sae=32, k=4, rescale_acts_by_decoder_norm=True))
    with torch.no_grad():
        theirs.W_dec.mul_(torch.linspace(0.2, 3.0, 32)[:, None])  # decoder rows of many norms: the rescale matters
        theirs.b_enc.normal_(0, 0.1)
    theirs.save_model(tmp_path / "theirs")
    for ours in (SparseAutoencoder.load_sae_lens(tmp_path / "theirs"), SparseAutoencoder.from_sae_lens(theirs)):
        assert ours.rescale_acts_by_decoder_norm and ours.k == 4
        with torch.no_grad():
            assert torch.equal(ours.encode(x), theirs.encode(x)) and torch.equal(ours(x), theirs(x))
    back = SparseAutoencoder.from_sae_lens(theirs).to_sae_lens(hook_name="hook_pooled")
    with torch.no_grad():
        assert torch.equal(back(x), theirs(x))


def test_spliced_caches_features_under_sae_lens_names_and_the_error_term_matches_sae_lens(flagship):
    """SAE in the loop: with the error term the model's outputs are unchanged and the cached features are SAELens's
    ``hook_sae_acts_post`` of the same SAE (its own use_error_term forward gives the same output)."""
    pytest.importorskip("sae_lens")
    m, images, _ = flagship
    x = collect_activations(m.vision, "hook_pooled", images)
    ours, _ = train_sae(x, d_sae=32, k=4, steps=50, seed=0)
    theirs = ours.to_sae_lens(hook_name="hook_pooled")
    with warnings.catch_warnings():  # SAELens 6.x would have it set through HookedSAETransformer.add_sae
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs.use_error_term = True
    with ours.spliced(m.vision, "hook_pooled", error_term=True):
        out, cache = m.vision.run_with_cache(images)
    with torch.no_grad():
        assert torch.allclose(out, theirs(x), atol=1e-5) and torch.allclose(out, m.vision(images), atol=1e-5)
        _, their_cache = theirs.run_with_cache(x)
    assert torch.equal(cache["hook_pooled.hook_sae_acts_post"], their_cache["hook_sae_acts_post"])
    assert torch.allclose(cache["hook_pooled.hook_sae_error"], their_cache["hook_sae_error"], atol=1e-6)


# ---- nnsight -------------------------------------------------------------------------------------------------------
def test_nnsight_reads_the_same_activations_as_the_hooks(flagship):
    """nnsight wraps each tower and the whole CLIP with no adapter: the hook points are modules, so nnsight reads
    (and writes) the activations the package's hooks see, bit for bit."""
    nnsight = pytest.importorskip("nnsight")
    m, images, captions = flagship
    logits_before = m(images, captions)
    _, cache = m.run_with_cache(images, captions)
    for tower, tokens in (("vision", images), ("text", captions)):
        wrapped = nnsight.NNsight(getattr(m, tower))
        with wrapped.trace(tokens):  # nnsight reads in the order the forward pass runs
            pattern = wrapped.blocks[0].attn.hook_pattern.output.save()
            z = wrapped.blocks[0].attn.hook_z.output.save()
            pooled = wrapped.hook_pooled.output.save()
        tc = getattr(cache, tower)
        assert torch.equal(z, tc["blocks.0.attn.hook_z"]) and torch.equal(pattern, tc["pattern", 0])
        assert torch.equal(pooled, tc["hook_pooled"])
    clip = nnsight.NNsight(m)
    with clip.trace(images, captions):
        vz = clip.vision.blocks[0].attn.hook_z.output.save()
        tp = clip.text.blocks[0].attn.hook_pattern.output.save()
        logits = clip.hook_logits.output.save()
    assert torch.equal(vz, cache.vision["blocks.0.attn.hook_z"]) and torch.equal(tp, cache.text["pattern", 0])
    assert torch.equal(logits, cache["hook_logits"])
    # an intervention: zeroing head 3 through nnsight equals zeroing it with a hook
    wrapped = nnsight.NNsight(m.vision)
    with wrapped.trace(images):
        wrapped.blocks[0].attn.hook_z.output[:, :, 3] = 0.0
        edited = wrapped.output.save()

    def zero_head_3(z, hook):
        z[:, :, 3] = 0.0
        return z

    assert torch.equal(edited, m.vision.run_with_hooks(images, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_3)]))
    assert torch.equal(m(images, captions), logits_before)  # the model is as it was


# ---- trajectories, TransformerLens's way ---------------------------------------------------------------------------
D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    """A tiny run with snapshots, exported as zoo model "tiny" and shipped with its trajectory (a temporary zoo)."""
    root = tmp_path_factory.mktemp("zoo")
    tc = TrainConfig(epochs=4, batch_size=16, eval_every=2, seed=0, snapshot_epochs=(0, 1, 2, 4))
    Trainer(tiny_config(), D6, tc, root / "run").run(progress=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reg.zoo, "WEIGHTS_DIR", root / "weights")
        mp.setattr(reg.zoo, "TRAJECTORIES_DIR", root / "trajectories")
        ship.export_run(root / "run", "tiny", "a tiny test model")
        ship.ship_trajectory(root / "run", "tiny")
    return root


@pytest.fixture
def zoo(tiny_zoo, monkeypatch):
    monkeypatch.setattr(reg.zoo, "WEIGHTS_DIR", tiny_zoo / "weights")
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", tiny_zoo / "trajectories")
    return tiny_zoo


def test_list_checkpoints_is_top_level_and_gives_labels_with_their_type(zoo):
    assert hooked_clip1d.list_checkpoints is reg.list_checkpoints and "list_checkpoints" in hooked_clip1d.__all__
    labels = hooked_clip1d.list_checkpoints("tiny")
    assert labels == [0, 1, 2, 4] and labels.label_type == "epoch"  # a list as before, with its type
    assert hooked_clip1d.get_checkpoint_labels("tiny") == ([0, 1, 2, 4], "epoch")  # TransformerLens's form
    run_labels = hooked_clip1d.list_checkpoints(zoo / "run")
    assert run_labels == [0, 1, 2, 4] and run_labels.label_type == "epoch"


def test_loaded_checkpoints_carry_transformer_lens_checkpoint_fields(zoo):
    for kw, index, value in [
        ({"checkpoint_index": 1}, 1, 1),
        ({"checkpoint_value": 2}, 2, 2),
        ({"checkpoint_index": -1}, 3, 4),
    ]:
        for m in (reg.load_model("tiny", **kw), reg.load_model(str(zoo / "run"), **kw)):
            fields = {k: m.manifest[k] for k in ("from_checkpoint", "checkpoint_index", "checkpoint_value")}
            assert fields == {"from_checkpoint": True, "checkpoint_index": index, "checkpoint_value": value}
            assert m.manifest["checkpoint_label_type"] == "epoch"
            assert m.manifest["checkpoint"]["epoch"] == value  # the older entry stays
            cfg = m.cfg  # on the loaded config, as TransformerLens's cfg carries them
            assert (cfg.from_checkpoint, cfg.checkpoint_index, cfg.checkpoint_value) == (True, index, value)
            assert cfg.checkpoint_label_type == "epoch" and "checkpoint_index" not in cfg.to_dict()
    assert reg.model_name(reg.load_model(str(zoo / "run"), checkpoint_index=1)) == f"{zoo / 'run'} @ epoch 1"
    plain = reg.load_model("tiny")
    assert "from_checkpoint" not in plain.manifest  # a plain load is as before
    assert (plain.cfg.from_checkpoint, plain.cfg.checkpoint_index, plain.cfg.checkpoint_value) == (False, None, None)


def test_a_snapshot_whose_metadata_disagrees_with_its_label_is_refused(zoo):
    """A copy of another epoch's file under this epoch's name, or a file from another run, is refused by name."""
    from hooked_clip1d.model.checkpoint import CheckpointError

    run = zoo / "run"  # the session's tiny zoo: every change is undone
    snaps = run / "snapshots"
    backup = (snaps / "epoch_00001.safetensors").read_bytes()
    shutil.copy(snaps / "epoch_00002.safetensors", snaps / "epoch_00001.safetensors")
    try:
        with pytest.raises(CheckpointError, match="labelled epoch 1 by its name but holds the weights of epoch 2"):
            reg.load_model(str(run), checkpoint_value=1)
    finally:
        (snaps / "epoch_00001.safetensors").write_bytes(backup)
    saved = (run / "config.json").read_text()
    cfg = json.loads(saved)
    cfg["model_config"]["vision"]["init_seed"] = 12345
    (run / "config.json").write_text(json.dumps(cfg))
    try:
        with pytest.raises(CheckpointError, match="not a snapshot of this run: its model_config differs"):
            reg.load_model(str(run), checkpoint_value=1)
    finally:
        (run / "config.json").write_text(saved)


def test_a_trajectory_with_its_main_file_deleted_names_the_missing_file(zoo, tmp_path, monkeypatch, capsys):
    traj = tmp_path / "trajectories"
    shutil.copytree(zoo / "trajectories", traj)
    monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", traj)
    (traj / "tiny.safetensors.xz").unlink()
    for call in (lambda: reg.list_checkpoints("tiny"), lambda: reg.load_model("tiny", checkpoint_index=0)):
        with pytest.raises(
            FileNotFoundError, match=r"of 'tiny' is incomplete: its file '.*tiny\.safetensors\.xz' is missing"
        ):
            call()
    assert main(["eval", "--model", "tiny", "--checkpoint-index", "0"]) == 2  # one line, no traceback
    err = capsys.readouterr().err
    assert "tiny.safetensors.xz' is missing" in err and "Traceback" not in err
    shutil.copy(zoo / "trajectories" / "tiny.safetensors.xz", traj)
    (traj / "tiny.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"its manifest '.*tiny\.json' is missing"):
        reg.list_checkpoints("tiny")


def _unwritable_folder(tmp_path: Path) -> Path | None:
    """A folder this process cannot create a file in: a read-only one for a normal user; for root (which ignores
    permission bits) a pseudo-filesystem that refuses new files to everyone: /sys, else /proc (a container may let
    root write /sys); None where none refuses (then the case skips)."""
    import tempfile

    if os.geteuid() != 0:
        d = tmp_path / "locked"
        d.mkdir()
        d.chmod(0o500)
        return d
    for d in (Path("/sys"), Path("/proc")):
        try:  # the operation the destination check itself tries
            fd, tmp = tempfile.mkstemp(prefix=".hc1d-probe.", dir=d)
        except OSError:
            return d
        os.close(fd)
        os.unlink(tmp)
    return None


@pytest.mark.parametrize("case", ["unwritable", "a file"])
def test_ship_trajectory_checks_its_destination_before_measuring(zoo, tmp_path, capsys, monkeypatch, case):
    """The destination is checked before any snapshot is read: in a copy of the run whose snapshots and final
    weights are corrupt, the error is still the destination's (a measurement first would fail on the weights)."""
    run = tmp_path / "run"
    shutil.copytree(zoo / "run", run)
    for f in [*(run / "snapshots").glob("*.safetensors"), run / "model.safetensors"]:
        f.write_bytes(b"not a safetensors file")
    out = tmp_path / "out"
    out.mkdir()
    if case == "unwritable":
        dest = _unwritable_folder(out)
        if dest is None:
            pytest.skip("no folder here refuses this process's writes")
        dest, exc, msg = dest / "trajectories", PermissionError, "is not writable"
    else:
        (out / "f").write_text("")
        dest, exc, msg = out / "f", NotADirectoryError, "is a file, not a folder"
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(exc, match=msg):
        ship.ship_trajectory(run, "tiny", dest=dest)
    with pytest.raises(exc, match=msg):
        ship.export_run(run, "tiny2", "x", dest=dest)
    assert sorted(p.name for p in out.iterdir()) == before  # nothing left behind
    if case == "a file":  # the command line: one line naming the folder, exit 2
        monkeypatch.setattr(reg.zoo, "TRAJECTORIES_DIR", dest)
        assert main(["ship-trajectory", str(run), "--name", "tiny"]) == 2
        err = capsys.readouterr().err
        assert "is a file, not a folder" in err and str(dest) in err and "Traceback" not in err
