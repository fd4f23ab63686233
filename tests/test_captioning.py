"""The captioning objective (model.captioning; the paper's Open Question 4): the same towers trained as an
autoregressive captioner, scored by each caption's log-likelihood."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset, evaluate
from hooked_clip1d.model import captioning
from hooked_clip1d.model.captioning import caption_loss, caption_scores, token_log_likelihoods

IMAGES = ["C . . 1 . . 2 . . . .", "C . . 2 . . 1 . . . .", "C 3 . . . . . . . . ."]
CAPTIONS = ["1 is on the left of 2", "2 is on the left of 1", "3 is in the image", "1 is on the right of 2"]


def _model(seed: int = 0, objective: str = "captioning") -> CLIP1D:
    cfg = CLIPConfig.from_preset("simplified", n_labels=8, d_model=32, d_head=8)
    return CLIP1D(dataclasses.replace(cfg, objective=objective), seed=seed).eval()


def test_the_objective_is_saved_only_when_it_is_not_contrastive():
    """Every config saved before the field existed reads back as contrastive, and a contrastive config saves the
    same bytes as before it; a captioning config round-trips; an unknown objective is refused by name."""
    cfg = CLIPConfig.from_preset("simplified", n_labels=8)
    assert "objective" not in cfg.to_dict() and CLIPConfig.from_dict(cfg.to_dict()).objective == "contrastive"
    cap = dataclasses.replace(cfg, objective="captioning")
    assert CLIPConfig.from_dict(json.loads(json.dumps(cap.to_dict()))) == cap
    with pytest.raises(ValueError, match="objective must be one of"):
        dataclasses.replace(cfg, objective="autoregressive")


@torch.no_grad()
def test_a_captions_score_is_its_log_likelihood_and_chunks_do_not_change_it(monkeypatch):
    model = _model()
    images, captions = model.vision.to_tokens(IMAGES), model.text.to_tokens(CAPTIONS)
    scores = caption_scores(model, images, captions)
    assert scores.shape == (3, 4) and bool((scores < 0).all())
    for i in range(3):
        for j in range(4):  # the paired loss is the mean token NLL: 4 tokens
            one = caption_loss(model, images[i : i + 1], captions[j : j + 1])
            assert float(scores[i, j]) == pytest.approx(-4 * float(one), rel=1e-5)
    monkeypatch.setattr(captioning, "SCORE_ROWS", 1)  # one pair a chunk
    assert torch.allclose(caption_scores(model, images, captions), scores, atol=1e-6)
    assert torch.equal(model(images, captions), scores)  # the forward's logits are the scores


@torch.no_grad()
def test_the_decoder_is_causal_and_reads_the_image():
    """A token's likelihood depends on the image and the tokens before it only: changing Y leaves the first two
    tokens' log-likelihoods unchanged, and another image changes the first token's."""
    model = _model()
    images = model.vision.to_tokens(IMAGES[:1] * 2)
    a, b = model.text.to_tokens(["1 is on the left of 2", "1 is on the left of 3"]).unbind(0)
    prefix = captioning.image_prefix(model, images)
    ll = token_log_likelihoods(model, prefix, torch.stack([a, b]))
    assert torch.equal(ll[0, :2], ll[1, :2]) and not torch.equal(ll[0, 2], ll[1, 2])
    other = captioning.image_prefix(model, model.vision.to_tokens(IMAGES[2:3]))
    assert not torch.equal(token_log_likelihoods(model, other, a[None])[0, 0], ll[0, 0])


def test_the_loss_has_no_negatives_and_mismatched_batches_are_refused():
    model = _model()
    images, captions = model.vision.to_tokens(IMAGES[:2]), model.text.to_tokens(CAPTIONS[:2])
    with torch.no_grad():
        losses = [float(model.loss(images, captions, negatives=n)) for n in ("all", "distinct", "shared")]
    assert losses[0] == losses[1] == losses[2]  # nothing for the contrastive loss's option to act on
    with pytest.raises(ValueError, match="negatives must be one of"):
        model.loss(images, captions, negatives="none")
    with pytest.raises(ValueError, match="2 images but 3 captions"):
        caption_loss(model, images, model.text.to_tokens(CAPTIONS[:3]))


def test_what_a_captioning_model_lacks_is_refused_by_name():
    """It has no text embedding (its text tower is a decoder), and a contrastive model has no caption decoder."""
    model = _model()
    captions = model.text.to_tokens(CAPTIONS)
    with pytest.raises(ValueError, match="has no text embedding"):
        model.encode_text(captions)
    with pytest.raises(ValueError, match="needs a captioning model"):
        caption_scores(_model(objective="contrastive"), model.vision.to_tokens(IMAGES), captions)


def test_a_hook_on_the_decoders_embedding_sees_the_image_prefix():
    model = _model()
    images, captions = model.vision.to_tokens(IMAGES[:2]), model.text.to_tokens(CAPTIONS[:2])
    seen = {}

    def keep(x, hook):
        seen["embed"] = x.detach().clone()

    with torch.no_grad(), model.text.hooks(fwd_hooks=[("hook_embed", keep)]):
        caption_loss(model, images, captions)
        prefix = captioning.image_prefix(model, images)
    assert torch.equal(seen["embed"][:, 0], prefix)


def test_a_captioning_run_trains_saves_and_loads_as_it_evaluated(tmp_path):
    """The single-run trainer trains it (the loss falls), the run's config says so, and the saved model loads and
    evaluates as the run did."""
    from hooked_clip1d.pretrained import load_model
    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.training.run_config import RunConfig
    from hooked_clip1d.training.trainer import train

    data = DataConfig(n_labels=8, n_heldout=3, n2=3)
    run = train(RunConfig(_model().cfg, data, TrainConfig(epochs=60, eval_every=30)), tmp_path, progress=False)
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and losses[1] < losses[0]
    assert json.loads((tmp_path / "config.json").read_text())["model_config"]["objective"] == "captioning"
    loaded = load_model(tmp_path)
    assert loaded.cfg.objective == "captioning" and hasattr(loaded, "W_U")
    assert evaluate(loaded, build_dataset(data)) == run.final_metrics


def test_the_train_command_trains_a_captioner_on_either_engine(tmp_path, capsys):
    """``hooked-clip1d train --objective captioning`` trains one (its saved model is a captioner), on the batched
    engine too; ``--init-from`` refuses ``--objective`` by name (the loaded model's objective is its own)."""
    from hooked_clip1d.cli.commands import main
    from hooked_clip1d.model.checkpoint import load_model_file

    small = ["--n-labels", "8", "--n-heldout", "3", "--n2", "3", "--epochs", "2", "--no-progress", "--json"]
    out = tmp_path / "run"
    assert main(["train", "--objective", "captioning", "--out", str(out), *small]) == 0
    assert load_model_file(out / "model.safetensors").cfg.objective == "captioning"
    capsys.readouterr()
    batched = ["train", "--objective", "captioning", "--engine", "batched", "--out", str(tmp_path / "b"), *small]
    assert main(batched) == 0 and load_model_file(tmp_path / "b" / "model.safetensors").cfg.objective == "captioning"
    capsys.readouterr()
    assert main(["train", "--objective", "captioning", "--init-from", str(out), "--out", str(tmp_path / "c"), *small])
    assert "drop ['--objective']" in capsys.readouterr().err


@torch.no_grad()
def test_position_0_reads_the_image_alone():
    """Position 0 holds X's id only to keep ids valid (``decoder_inputs``): its whole predicted distribution is the
    same whatever the caption, so the first token's likelihood is p(X | image)."""
    model = _model()
    images = model.vision.to_tokens(IMAGES[:1] * 3)
    captions = model.text.to_tokens(["1 is on the left of 2", "3 is in the image", "5 is on the right of 4"])
    resid = model.text(
        captioning.decoder_inputs(captions),
        return_type="resid",
        validate=False,
        prefix=captioning.image_prefix(model, images),
    )
    dist = (resid @ model.W_U)[:, 0]
    assert torch.equal(dist[0], dist[1]) and torch.equal(dist[0], dist[2])


def test_a_captioning_model_refuses_what_would_misread_it():
    """A review (2026-12-02): text-side analyses ran the decoder on captions alone, and the unused projection and
    temperature answered; each is refused by name now, as is a text tower that is not causal (a position would see
    the token it predicts) and a held temperature (a parameter nothing reads)."""
    from hooked_clip1d.analysis.metrics import caption_belief
    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.training.run_config import RunConfig

    model = _model()
    images, captions = model.vision.to_tokens(IMAGES[:2]), model.text.to_tokens(CAPTIONS[:2])
    with pytest.raises(ValueError, match="captioning model's decoder"):
        model.text(captions)
    with pytest.raises(ValueError, match="captioning model's decoder"):
        model.text.run_with_cache(captions)
    with pytest.raises(ValueError, match="captioning model"):  # its temperature or its decoder, whichever first
        caption_belief(model, images, captions)
    for what in (lambda: model.project_text(torch.zeros(1, 32)), model.temperature_scale):
        with pytest.raises(ValueError, match="has no text embedding, projection or temperature"):
            what()
    cfg = CLIPConfig.from_preset("simplified", n_labels=8, objective="captioning")  # from_preset takes it too
    assert cfg.objective == "captioning"
    with pytest.raises(ValueError, match="needs a causal text tower"):
        CLIPConfig.from_preset(
            "simplified", n_labels=8, objective="captioning", text_overrides={"attention_dir": "bidirectional"}
        )
    with pytest.raises(ValueError, match="has no temperature"):
        RunConfig(cfg, DataConfig(n_labels=8), TrainConfig(fixed_temperature=100.0))


@torch.no_grad()
def test_the_forward_caches_every_pair_and_its_hooks_act(monkeypatch):
    """``model(images, captions)`` decodes every (image, caption) pair in one pass (row i * n_captions + j), so a
    cache holds them all; a hook on ``hook_image_embed`` (the CLS output the prefix maps) changes the scores, and a
    head hook the forward never reaches is refused instead of doing nothing."""
    model = _model()
    images, captions = model.vision.to_tokens(IMAGES), model.text.to_tokens(CAPTIONS)
    monkeypatch.setattr(captioning, "SCORE_ROWS", 2)  # chunking would split these 12 pairs: the forward does not chunk
    scores, cache = model.run_with_cache(images, captions)
    assert cache["text.hook_embed"].shape == (12, 4, 32) and scores.shape == (3, 4)
    assert torch.equal(cache["text.hook_embed"][4 * 2 + 1, 1:], model.text.embed(captions[1:2])[0, :3])
    zeroed = model.run_with_hooks(images, captions, fwd_hooks=[("hook_image_embed", lambda x, hook: x * 0)])
    assert not torch.equal(zeroed, scores) and torch.allclose(zeroed[0], zeroed[1])  # every image reads the same
    with pytest.raises(ValueError, match="never reaches 'hook_text_embed'"):
        model.run_with_hooks(images, captions, fwd_hooks=[("hook_text_embed", lambda x, hook: x)])


def test_a_sweep_batches_captioners_and_they_follow_train(tmp_path):
    """A sweep spec may set ``objective = "captioning"`` (a grid axis too): captioners go to a batched group of their
    own objective, beside the contrastive runs' (``members.group_key``); with matched dropout the swept captioner is
    ``train``'s for the same configs (to float rounding); a second call finds them finished; the batched engine's
    untested execution settings (compile, AMP, CUDA graphs) are refused for captioners by name, not ignored."""
    from hooked_clip1d.pretrained import load_model
    from hooked_clip1d.sweeps.runner import plan_groups, run_sweep
    from hooked_clip1d.sweeps.spec import load_spec
    from hooked_clip1d.training.run_config import RunConfig
    from hooked_clip1d.training.trainer import train

    text = (
        'name = "cap"\n[model]\npreset = "simplified"\nd_model = 16\nd_head = 4\nn_heads = 2\n'
        "[data]\nn_labels = 6\nn_heldout = 2\nn2 = 2\n[train]\nepochs = 2\nbatch_size = 16\n"
        '[grid]\nobjective = ["captioning", "contrastive"]\nseed = [0, 1]\n[run]\ndropout_rng = "matched"\n'
    )
    spec_path = tmp_path / "cap.toml"
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    sizes = sorted((len(g), g[0].model_cfg.objective) for g in plan_groups(spec.runs, max_group_size=8))
    assert sizes == [(2, "captioning"), (2, "contrastive")]
    rows = run_sweep(spec_path, tmp_path / "out", progress=False)
    assert len(rows) == 4 and all((tmp_path / "out/runs" / r["run"] / "summary.json").exists() for r in rows)
    (cap,) = [r for r in spec.runs if r.model_cfg.objective == "captioning" and r.train_cfg.seed == 1]
    alone = train(RunConfig(cap.model_cfg, cap.data_cfg, cap.train_cfg), tmp_path / "alone", progress=False)
    swept = load_model(tmp_path / "out/runs" / cap.name)
    assert swept.cfg.objective == "captioning"
    for (name, a), b in zip(alone.model.state_dict().items(), swept.state_dict().values(), strict=True):
        if not name.endswith("attn.b_K"):  # its gradient is rounding noise (tests/test_batched.py)
            torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-4, msg=name)
    assert run_sweep(spec_path, tmp_path / "out", progress=False) == rows  # finished: nothing retrained
    only = tmp_path / "only.toml"  # captioners alone
    only.write_text(text.replace('"captioning", "contrastive"', '"captioning"').replace('"matched"', '"fast"'))
    with pytest.raises(ValueError, match=r"compile not tested on the captioning loss"):
        run_sweep(only, tmp_path / "out2", progress=False, compile=True)


@pytest.mark.heavy  # 5.4 s on a shared core (2026-12-02); the image belief it reads is tested in the default run
def test_analyze_runs_the_vision_families_on_a_captioner_and_says_what_it_skips(tmp_path, capsys):
    """``analyze heads``, ``attention``, ``patching``, ``probes``, ``steering`` and ``attribution`` on a captioning
    model give the vision tower's part (Fig. 4c's head bias, the CLS row, mirror-swap patching, vision knockout,
    steering and circuit attribution scored by the log-likelihood belief, vision probes) and report the text
    tower's as not run (its decoder reads the image: a run on captions alone means nothing); ``attention`` shows
    the decoder reading the image and the caption instead."""
    from hooked_clip1d.cli.commands import main
    from hooked_clip1d.cli.families import CAPTIONER_TEXT

    run = tmp_path / "run"
    small = ["--n-labels", "8", "--n-heldout", "3", "--n2", "3", "--epochs", "2", "--no-progress"]
    assert main(["train", "--objective", "captioning", "--out", str(run), *small, "--json"]) == 0
    capsys.readouterr()
    assert main(["analyze", "heads", "--model", str(run), "--out", str(tmp_path / "h"), "--json"]) == 0
    heads = json.loads((tmp_path / "h" / "heads.json").read_text())["data"]
    assert heads["text_eot_bias"] == {"not_run": CAPTIONER_TEXT} and len(heads["cls_object_bias"]["left"][0]) == 4
    assert main(["analyze", "attention", "--model", str(run), "--out", str(tmp_path / "a"), "--json"]) == 0
    attention = json.loads((tmp_path / "a" / "attention.json").read_text())["data"]
    assert set(attention) == {"vision_L0", "text", "decoder_L0"} and attention["text"] == {"not_run": CAPTIONER_TEXT}
    decoder = attention["decoder_L0"]  # the decoder on the image and its caption: causal, each row a distribution
    assert decoder["tokens"][0] == "image" and len(decoder["tokens"]) == 4
    pattern = torch.tensor(decoder["pattern"])  # [head, query, key]
    assert torch.allclose(pattern.sum(-1), torch.ones(4, 4)) and not pattern.triu(1).any()
    assert main(["analyze", "patching", "--model", str(run), "--out", str(tmp_path / "p"), "--json"]) == 0
    patching = json.loads((tmp_path / "p" / "patching.json").read_text())["data"]
    assert patching["caption_swap"] == patching["knockout_text"] == {"not_run": CAPTIONER_TEXT}
    assert {"mirror_swap", "mirror_swap_heads_cls", "knockout_vision"} <= set(patching)
    assert main(["analyze", "probes", "--model", str(run), "-o", "n=200", "--out", str(tmp_path / "q"), "--json"]) == 0
    probes = json.loads((tmp_path / "q" / "probes.json").read_text())["data"]
    assert probes["text"] == {"not_run": CAPTIONER_TEXT} and "vision relation" in probes
    assert main(["analyze", "steering", "--model", str(run), "--out", str(tmp_path / "s"), "--json"]) == 0
    steering = json.loads((tmp_path / "s" / "steering.json").read_text())["data"]
    assert steering["not_run"]["text roles"] == CAPTIONER_TEXT and any(
        k.startswith("vision") for k in steering["steering"]
    )
    capsys.readouterr()
    assert main(["analyze", "attribution", "--model", str(run), "-o", "n=4", "--out", str(tmp_path / "t")]) == 0
    assert "the vision tower only, its belief log p(caption) - log p(swap)" in capsys.readouterr().out


def test_a_captioners_image_belief_is_its_log_likelihood_difference_and_patching_reads_it():
    """``image_belief`` (and the metric mirror-swap patching scores) of a captioning model is log p(c | img) -
    log p(swap(c) | img), the difference of its caption scores; the mirrored image's belief patched back in full
    recovers the clean one; ``norm`` other than "live" is refused (no embedding to normalise)."""
    from hooked_clip1d.analysis.interventions.patching import mirror_swap_patching
    from hooked_clip1d.analysis.metrics import image_belief, image_belief_metric, swap_captions

    m = _model(3)
    imgs = m.vision.to_tokens(IMAGES[:2])
    caps = m.text.to_tokens(CAPTIONS[:2])
    swapped = swap_captions(caps, m.text.cfg.vocab)
    scores = caption_scores(m, imgs, torch.cat([caps, swapped]))
    want = torch.stack([scores[i, i] - scores[i, 2 + i] for i in range(2)])
    torch.testing.assert_close(image_belief(m, imgs, caps), want)
    res = mirror_swap_patching(m, imgs, caps, sets=["all"])
    torch.testing.assert_close(res.patched[-1, 0], res.source)  # everything patched after the last block: the source
    with pytest.raises(ValueError, match="no normalised embedding"):
        image_belief_metric(m, caps, norm="frozen", images=imgs)
    with pytest.raises(ValueError, match="no temperature to leave out"):
        image_belief(m, imgs, caps, scale=False)
    from hooked_clip1d.analysis.circuits.task import mirror_task

    task = mirror_task(m, imgs, caps, target="vision")  # circuit discovery on the vision tower, this belief
    torch.testing.assert_close(task.clean_metric(), want)
    with pytest.raises(ValueError, match=r"mirror_task\(target='clip'\): a captioning model's decoder"):
        mirror_task(m, imgs, caps)


def test_a_sweeps_status_reads_a_captioners_own_checkpoint(tmp_path):
    """A captioner trains alone on ``training.Trainer``, which writes a metrics line only every ``eval_every`` epochs:
    between two, ``sweep --status`` reads its progress from the run's own checkpoint (it showed step 0 for a run
    checkpointed at epoch 63 on 2026-12-02). A folder with no plan yet (group None) is read too (it raised under the
    type checks: None passed as a group's name)."""
    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.sweeps.runner import planned_steps
    from hooked_clip1d.sweeps.spec import load_spec
    from hooked_clip1d.sweeps.status import sweep_status
    from hooked_clip1d.training.run_config import RunConfig
    from hooked_clip1d.training.trainer import Trainer

    text = (
        'name = "cap"\n[model]\npreset = "simplified"\nobjective = "captioning"\nd_model = 16\nd_head = 4\n'
        "[data]\nn_labels = 6\nn_heldout = 2\nn2 = 2\n[train]\nepochs = 40\neval_every = 40\nbatch_size = 16\n"
        "[grid]\nseed = [0]\n"
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "spec.toml").write_text(text)
    (r,) = load_spec(tmp_path / "out" / "spec.toml").runs
    run_dir = tmp_path / "out" / "runs" / r.name
    short = TrainConfig.from_dict({**r.train_cfg.to_dict(), "epochs": 10})  # the first 10 epochs of the run
    Trainer(RunConfig(r.model_cfg, r.data_cfg, short), run_dir).run(progress=False)
    for f in ("summary.json", "metrics.jsonl", "model.safetensors"):  # as if stopped at a checkpoint, not evaluated
        (run_dir / f).unlink()
    (row,) = sweep_status(tmp_path / "out" / "spec.toml", tmp_path / "out")["rows"]
    assert row["step"] == planned_steps(r) // 4 and not row["finished"]  # epoch 10 of 40


def test_generation_is_greedy_and_each_token_is_the_most_likely_given_the_ones_before():
    """``generate_captions``: read back through the decoder, every generated token is the argmax of its position's
    distribution given the image and the tokens generated before it (the decoder is causal), the caller's state is
    unchanged, and a contrastive model or a model in train mode is refused by name."""
    from hooked_clip1d.model.captioning import decoder_inputs, generate_captions, image_prefix

    m = _model(5)
    imgs = m.vision.to_tokens(IMAGES)
    rng = torch.get_rng_state()
    gen = generate_captions(m, imgs)
    assert torch.equal(torch.get_rng_state(), rng) and not m.training
    with torch.no_grad():
        resid = m.text(decoder_inputs(gen), return_type="resid", prefix=image_prefix(m, imgs), validate=False)
        logits = resid @ m.W_U
    assert torch.equal(gen, logits.argmax(-1))
    with pytest.raises(ValueError, match="needs a captioning model"):
        generate_captions(_model(objective="contrastive"), imgs)
    with pytest.raises(ValueError, match="eval mode"):
        generate_captions(_model().train(), imgs)


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the study's captioner: one attention-only block, no LayerNorm
        {"preset": "full"},  # 4 pre-LN blocks with MLPs
        {"ln_position": "post"},
        {"positional": "rope"},
        {"pruned_heads": ((0, 1),)},
    ],
    ids=["simplified", "full", "post-ln", "rope", "pruned"],
)
@torch.no_grad()
def test_sharing_the_caption_stems_keys_and_values_gives_every_pairs_scores(changes, monkeypatch):
    """``caption_scores``' chunked path runs positions 0-2 once per (image, stem) and position 3 per pair with the
    stems' cached keys and values: the scores of decoding every pair whole (``chunk=False``), on every decoder the
    package builds; with a hook on the text tower, or in train mode, it decodes every pair (the hook sees them all)."""
    changes = dict(changes)
    preset = changes.pop("preset", "simplified")
    text = {k: changes.pop(k) for k in list(changes)}
    cfg = CLIPConfig.from_preset(preset, n_labels=8, d_model=32, d_head=8)
    if "ln_position" in text:
        cfg = CLIPConfig.from_preset("full", n_labels=8, d_model=32, d_head=8)
    cfg = dataclasses.replace(cfg, objective="captioning", text=cfg.text.replace(**text))
    model = CLIP1D(cfg, seed=3).eval()
    ds = build_dataset(DataConfig(n_labels=8, n2=2, n_heldout=2, n1=2, n_val=2, seed=0))
    images, captions = ds.splits["val_unseen"].images, ds.captions
    assert captioning.shared_stems_apply(model)
    fast = caption_scores(model, images, captions)
    whole = caption_scores(model, images, captions, chunk=False)
    assert fast.shape == whole.shape == (len(images), len(captions))
    assert torch.allclose(fast, whole, atol=1e-5, rtol=1e-5)
    assert torch.allclose(caption_scores(model, images, captions, share_stems=False), whole, atol=1e-6, rtol=1e-6)
    monkeypatch.setattr(captioning, "SCORE_ROWS", 2 * len(captions) + 1)  # two images a chunk, the last one alone
    assert torch.allclose(caption_scores(model, images[:5], captions), fast[:5], atol=1e-6, rtol=1e-6)
    monkeypatch.undo()
    seen = []
    with model.text.hooks(fwd_hooks=[("hook_embed", lambda x, hook: seen.append(x.shape[0]))]):
        assert not captioning.shared_stems_apply(model)
        assert torch.allclose(caption_scores(model, images, captions), whole, atol=1e-5, rtol=1e-5)
    assert seen == [len(images) * len(captions)]  # every pair, in one chunk here
    assert not captioning.shared_stems_apply(model.train()) and captioning.shared_stems_apply(model.eval())
    model.text.blocks[0].train()  # a text module in train mode (the model's flag aside): dropout would draw
    assert not captioning.shared_stems_apply(model)
    model.eval()
    handle = model.text.blocks[0].attn.register_full_backward_hook(lambda *a: None)
    assert not captioning.shared_stems_apply(model)  # a backward hook must see every pair's gradients
    handle.remove()
    assert captioning.shared_stems_apply(model)
