"""Batched K-model training: each member equals the single-model Trainer; stacked forward = CLIP1D; files; resume."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
import torch
from conftest import randomize_biases, tiny_config

from hooked_clip1d import CLIP1D, DataConfig, VisionConfig, build_dataset
from hooked_clip1d.evaluation import similarity_matrix
from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file, read_tensors
from hooked_clip1d.training.batched import BatchedTrainer, Member, train_fast
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT
from hooked_clip1d.training.members import group_key
from hooked_clip1d.training.run_config import RunConfig
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_adamw import StackedAdamW
from hooked_clip1d.training.stacked_ops import keep_mask
from hooked_clip1d.training.stacked_support import check_supported
from hooked_clip1d.training.trainer import TrainConfig, Trainer

# m = 54 (6 labels, n2=2) and m = 78 (7 labels, n2=2, data seed 3) training pairs: with batch 16 both epochs end
# in a short batch (6 and 14 rows), so the masked loss and per-member matched dropout are exercised.
D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)
D7 = DataConfig(n_labels=7, n_heldout=2, n2=2, seed=3)


def _tc(**kw) -> TrainConfig:
    base = dict(batch_size=16, eval_every=5, checkpoint_every=10)
    base.update(kw)
    return TrainConfig(**base)


def _lines(d) -> list[dict]:
    return [json.loads(ln) for ln in (Path(d) / "metrics.jsonl").read_text().splitlines()]


def _assert_same_model(single: CLIP1D, batched: CLIP1D, dataset, atol: float = 2e-5) -> None:
    """Every weight equal to float tolerance, except b_K; and the same similarities (so b_K does not matter)."""
    a, b = single.state_dict(), batched.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        if k.endswith("attn.b_K"):
            # softmax is shift-invariant per query, so q.b_K never changes a pattern: b_K's gradient is exactly 0
            # in exact arithmetic and pure rounding noise in floats, which Adam scales up to lr-sized random steps.
            # It is not reproducible across implementations and has no effect on any output (checked below).
            continue
        torch.testing.assert_close(b[k], a[k], atol=atol, rtol=1e-4, msg=k)
    # the cosines of a 30-epoch run at lr 1e-3 and decay 2.0: AVX-512 kernels round the two engines' sums apart by up
    # to 1.4e-4 (open_clip's recipe case, 2026-11-29; AVX2 machines stayed under 1e-4), a wrong mask by ~1e-2
    for split in ("train", "val_unseen"):
        torch.testing.assert_close(
            similarity_matrix(batched, dataset, split), similarity_matrix(single, dataset, split), atol=3e-4, rtol=0
        )


@pytest.mark.heavy
def test_members_follow_the_single_model_trainer(tmp_path):
    """Three members with different label counts (padded vocabulary), datasets (short last batches), seeds, lr,
    weight decay and lengths, with dropout 0.1 (matched masks), end where three Trainer runs end."""
    members = [
        Member(tiny_config(), D6, _tc(epochs=60, seed=0)),  # 240 steps
        Member(tiny_config(n_labels=7), D7, _tc(epochs=40, seed=1)),  # 200 steps
        Member(tiny_config(), D6.replace(seed=5), _tc(epochs=25, seed=2, lr=3e-4, weight_decay=0.05)),
    ]
    runs = BatchedTrainer(members, tmp_path / "group", dropout_rng="matched").run(progress=False)
    assert [r.epoch for r in runs] == [60, 40, 25]
    for i, m in enumerate(members):
        single = Trainer(m.model_cfg, m.data_cfg, m.train_cfg, tmp_path / f"single{i}").run(progress=False)
        assert runs[i].step == single.step
        _assert_same_model(single.model, runs[i].model, build_dataset(m.data_cfg))
        got, want = _lines(tmp_path / "group" / f"member{i}"), _lines(tmp_path / f"single{i}")
        assert [(ln["epoch"], ln["step"]) for ln in got] == [(ln["epoch"], ln["step"]) for ln in want]
        for g, w in zip(got, want, strict=True):
            assert g["loss"] == pytest.approx(w["loss"], rel=1e-4)
        assert got[-1]["eval"] == want[-1]["eval"]


def test_full_preset_members_follow_the_trainer(tmp_path):
    members = [Member(tiny_config("full"), D6, _tc(epochs=8, seed=s)) for s in (0, 1)]
    runs = BatchedTrainer(members, tmp_path / "g", dropout_rng="matched").run(progress=False)
    for i, m in enumerate(members):
        single = Trainer(m.model_cfg, m.data_cfg, m.train_cfg, tmp_path / f"s{i}").run(progress=False)
        _assert_same_model(single.model, runs[i].model, build_dataset(D6))


# every config field the stacked forward implements, compared with CLIP1D at random weights (biases included)
VARIANTS = {
    "simplified": ("simplified", {}),
    "rope_partial": ("simplified", dict(positional="rope", rotary_dim=2)),
    "no_positional_2_layers": ("simplified", dict(positional="none", n_layers=2)),
    "pruned_1_layer": ("simplified", dict(vision_overrides={"pruned_heads": ((0, 1),)})),
    "pruned_2_layers": ("simplified", dict(n_layers=2, text_overrides={"pruned_heads": ((1, 0),)})),
    "bidirectional_text": ("simplified", dict(text_overrides={"attention_dir": "bidirectional"})),
    "full": ("full", {}),
    "full_1_layer": ("full", dict(n_layers=1)),
    "full_rope": ("full", dict(positional="rope")),
    "init_std": ("simplified", dict(init_std=0.02)),
    # the open choices of docs/configs.md: weight-tied repeats (Mrep) and post-LN blocks
    "full_tied": ("full", dict(n_layers=4, tied_repeats=2)),
    "full_tied_4x1": ("full", dict(n_layers=3, tied_repeats=3, text_overrides={"pruned_heads": ((1, 0),)})),
    "full_post_ln": ("full", dict(ln_position="post")),
    "full_tied_post_ln": ("full", dict(n_layers=4, tied_repeats=2, ln_position="post")),
    "full_post_ln_1_layer": ("full", dict(n_layers=1, ln_position="post")),
    "ln_attn_only_post": ("simplified", dict(normalization_type="LN", ln_position="post", n_layers=2)),
    "simplified_tied": ("simplified", dict(n_layers=2, tied_repeats=2)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_stacked_loss_and_gradients_equal_clip1d(variant):
    preset, kw = VARIANTS[variant]
    models = []
    for n, seed in ((6, 0), (7, 1)):
        m = CLIP1D(tiny_config(preset, n_labels=n, **kw), seed=seed)
        randomize_biases(m, seed + 10)
        models.append(m.eval())
    st = StackedCLIP(models).eval()
    gen = torch.Generator().manual_seed(0)
    imgs, caps = [], []
    for k, n in enumerate((6, 7)):
        ds = build_dataset(DataConfig(n_labels=n, n_heldout=2, n2=2))
        im, cap = ds.training_pairs()
        idx = torch.randperm(len(im), generator=gen)[:12]
        imgs.append((im[idx], st.remap_tokens(im[idx], k)))
        caps.append((cap[idx], st.remap_tokens(cap[idx], k)))
    images = torch.stack([b for _, b in imgs])
    captions = torch.stack([b for _, b in caps])
    eot = st.tower_cfg["text"].vocab.eot
    readout = (captions == eot).int().argmax(-1)
    for r in (readout, 3):  # a per-caption readout and the static one (every caption's EOT is at 3)
        st.zero_grad()
        losses = st.loss(images, captions, r)
        losses.sum().backward()
        for k, model in enumerate(models):
            model.zero_grad()
            want = model.loss(imgs[k][0], caps[k][0])
            want.backward()
            torch.testing.assert_close(losses[k], want.detach(), atol=1e-5, rtol=1e-5)
            grads = {name: st.to_member(k, name, st.params[name].grad) for name in st.names}
            for name, p in model.named_parameters():
                torch.testing.assert_close(grads[name], p.grad, atol=2e-5, rtol=1e-4, msg=f"{variant}: {name}")


def test_padded_vocabulary_round_trip():
    a = CLIP1D(tiny_config(n_labels=6), seed=0)
    b = CLIP1D(tiny_config(n_labels=9), seed=1)
    st = StackedCLIP([a, b])
    assert st.params["vision.embed.W_E"].shape[:2] == (2, 11)  # 9 labels + background + CLS
    assert st.params["text.embed.W_E"].shape[:2] == (2, 15)
    for k, m in enumerate((a, b)):
        for name, v in st.member_state_dict(k).items():
            assert torch.equal(v, m.state_dict()[name]), name
    # label ids stay, special ids (CLS, relations, EOT) move to the padded vocabulary's positions
    caps = torch.tensor([[1, 7, 2, 11]])  # "1 is on the left of 2" + EOT for 6 labels
    assert st.remap_tokens(caps, 0).tolist() == [[1, 10, 2, 14]]
    assert st.remap_tokens(caps, 1).tolist() == [[1, 7, 2, 11]]


def test_member_files_load_and_resume_with_trainer(tmp_path):
    """Members write Trainer's files; model.safetensors loads; checkpoint.safetensors resumes in Trainer."""
    m = Member(tiny_config(), D6, _tc(epochs=6, seed=0, checkpoint_every=3), name="a")
    run = BatchedTrainer([m], tmp_path / "g", dropout_rng="matched").run(progress=False)[0]
    d = tmp_path / "g" / "a"
    assert {"config.json", "metrics.jsonl", "checkpoint.safetensors", "model.safetensors", "summary.json"} <= {
        p.name for p in d.iterdir()
    }
    loaded = load_model_file(d / "model.safetensors")
    for k, v in run.model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    assert loaded.data_config == D6
    _, meta = read_tensors(d / "checkpoint.safetensors")
    assert meta["train_state"]["epoch"] == 6
    # continue the batched member with the single-model trainer, then compare with one Trainer run of 9 epochs
    more = dataclasses.replace(m.train_cfg, epochs=9)
    cont = Trainer(m.model_cfg, D6, more, d, resume=True).run(progress=False)
    ref = Trainer(m.model_cfg, D6, more, tmp_path / "ref").run(progress=False)
    _assert_same_model(ref.model, cont.model, build_dataset(D6))


@pytest.mark.parametrize("dropout_rng", ["matched", "fast"])
def test_group_resume_is_bit_exact(tmp_path, dropout_rng):
    members = [
        Member(tiny_config(), D6, _tc(epochs=7, seed=0), name="a"),
        Member(tiny_config(n_labels=7), D7, _tc(epochs=4, seed=1), name="b"),
    ]
    full = BatchedTrainer(members, tmp_path / "full", dropout_rng=dropout_rng).run(progress=False)
    part = BatchedTrainer(members, tmp_path / "part", dropout_rng=dropout_rng)
    assert part.run(progress=False, max_steps=13) == []  # stops mid-epoch (13 = 3 epochs of a + 1 step)
    assert part.state.step == 13
    with pytest.raises(FileExistsError, match="resume"):
        BatchedTrainer(members, tmp_path / "part", dropout_rng=dropout_rng)
    resumed = BatchedTrainer(members, tmp_path / "part", resume=True, dropout_rng=dropout_rng)
    assert resumed.state.step == 13
    resumed.run(progress=False, max_steps=10)  # b finishes (20 steps), a goes on
    again = BatchedTrainer(members, tmp_path / "part", resume=True, dropout_rng=dropout_rng)
    assert again.state.active == [0]
    runs = again.run(progress=False)
    assert [r.model for r in runs][0] is not None
    for name, want in (("a", full[0].model), ("b", full[1].model)):
        got = load_model_file(tmp_path / "part" / name / "model.safetensors")
        for k, v in want.state_dict().items():
            assert torch.equal(got.state_dict()[k], v), (name, k)
        assert _lines(tmp_path / "part" / name) == [
            {**ln, "elapsed_s": pytest.approx(ln["elapsed_s"], abs=1e9)} for ln in _lines(tmp_path / "full" / name)
        ]


def test_fast_dropout_is_seeded_and_trains(tmp_path):
    members = [Member(tiny_config(), D6, _tc(epochs=12, seed=s)) for s in (0, 1)]
    a = BatchedTrainer(members, None, dropout_rng="fast").run(progress=False)
    b = BatchedTrainer(members, None, dropout_rng="fast").run(progress=False)
    for x, y in zip(a, b, strict=True):
        for k, v in x.model.state_dict().items():
            assert torch.equal(v, y.model.state_dict()[k]), k
    first = CLIP1D(tiny_config(), seed=0).eval()
    ds = build_dataset(D6)
    im, cap = ds.training_pairs()
    assert a[0].model.loss(im, cap).item() < first.loss(im, cap).item() - 0.1


def test_keep_mask_statistics():
    torch.manual_seed(0)
    m = keep_mask((400, 500), 0.9, torch.float32)
    assert m.unique().tolist() == pytest.approx([0.0, 1 / 0.9])
    assert (m > 0).float().mean().item() == pytest.approx(0.9, abs=0.003)
    assert m.mean().item() == pytest.approx(1.0, abs=0.004)


def test_stacked_adamw_equals_torch_adamw_per_member():
    torch.manual_seed(0)
    init = torch.randn(3, 4, 5)
    lrs, wds = [1e-3, 3e-3, 1e-2], [0.2, 0.0, 0.5]
    p = torch.nn.Parameter(init.clone())
    opt = StackedAdamW([p], lr=lrs, weight_decay=wds)
    singles = [torch.nn.Parameter(init[k].clone()) for k in range(3)]
    sopts = [torch.optim.AdamW([s], lr=lr, weight_decay=wd) for s, lr, wd in zip(singles, lrs, wds, strict=True)]
    for _ in range(5):
        g = torch.randn(3, 4, 5)
        p.grad = g.clone()
        opt.step()
        for k in range(3):
            singles[k].grad = g[k].clone()
            sopts[k].step()
    for k in range(3):
        torch.testing.assert_close(p.detach()[k], singles[k].detach(), atol=1e-6, rtol=1e-6)
    assert float(opt.state[0]["step"]) == 5


def test_group_key_and_refusals(tmp_path):
    a = Member(tiny_config(), D6, _tc(epochs=1))
    wider = Member(tiny_config(d_model=32), D6, _tc(epochs=1))
    assert group_key(a.model_cfg, a.data_cfg, a.train_cfg) != group_key(wider.model_cfg, D6, wider.train_cfg)
    with pytest.raises(ValueError, match="cannot train in one group"):
        BatchedTrainer([a, wider], None)
    with pytest.raises(ValueError, match="d_model"):
        StackedCLIP([CLIP1D(a.model_cfg), CLIP1D(wider.model_cfg)])
    with pytest.raises(TypeError, match="Member"):
        BatchedTrainer([a.model_cfg], None)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="n_labels"):
        BatchedTrainer([Member(tiny_config(n_labels=7), D6, _tc(epochs=1))], None)
    with pytest.raises(ValueError, match="compile=True needs dropout_rng='fast'"):
        BatchedTrainer([a], None, dropout_rng="matched", compile=True)
    with pytest.raises(FileNotFoundError, match="no group checkpoint"):
        BatchedTrainer([a], tmp_path / "nothing", resume=True)
    with pytest.raises((ValueError, TypeError), match="dropout_rng"):  # TypeError: the test-time beartype hook
        StackedCLIP([CLIP1D(a.model_cfg)], dropout_rng="exact")  # type: ignore[arg-type]
    check_supported(tiny_config("full"))


@dataclasses.dataclass(frozen=True)
class _FutureVisionConfig(VisionConfig):
    """A config field the stacked forward does not know (as if one were added to EncoderConfig later)."""

    new_switch: int = 0


def test_unknown_config_fields_are_refused_unless_default():
    cfg = tiny_config()
    fields = {f.name: getattr(cfg.vision, f.name) for f in dataclasses.fields(cfg.vision) if f.init}
    ok = dataclasses.replace(cfg, vision=_FutureVisionConfig(**fields))
    check_supported(ok)  # the new field at its default: nothing changes
    bad = dataclasses.replace(cfg, vision=_FutureVisionConfig(**fields, new_switch=1))
    with pytest.raises(ValueError, match="new_switch=1"):
        check_supported(bad)
    with pytest.raises(ValueError, match="new_switch"):
        StackedCLIP([CLIP1D(bad)])


def test_train_fast_writes_a_trainer_run_and_resumes(tmp_path):
    cfg, tc = tiny_config(), _tc(epochs=5, seed=3)
    full = train_fast(cfg, D6, tc, tmp_path / "full", progress=False)
    assert full.epoch == 5 and (tmp_path / "full" / "model.safetensors").exists()
    assert [ln["epoch"] for ln in _lines(tmp_path / "full")] == [5]
    # interrupted mid-run (as by Ctrl-C after a group checkpoint), then resumed
    part = BatchedTrainer([Member(cfg, D6, tc)], tmp_path / "part", member_dirs=[tmp_path / "part"])
    part.run(progress=False, max_steps=9)
    with pytest.raises(FileExistsError):
        train_fast(cfg, D6, tc, tmp_path / "part", progress=False)
    resumed = train_fast(cfg, D6, tc, tmp_path / "part", progress=False, resume=True)
    for k, v in full.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[k], v), k


def test_cudagraphs_needs_compile():
    m = Member(tiny_config(), D6, TrainConfig(epochs=1, batch_size=16))
    with pytest.raises(ValueError, match="cudagraphs=True needs compile=True"):
        BatchedTrainer([m], None, dropout_rng="fast", cudagraphs=True)


def test_stacked_parameters_live_on_the_requested_device():
    # bug (first GPU run, 2026-11-24): StackedCLIP took its device from the members' model config ("cpu"), so a
    # BatchedTrainer with TrainConfig(device="cuda") trained CPU parameters on CUDA batches and failed at step 1
    ms = [CLIP1D(tiny_config(), seed=s) for s in (0, 1)]
    st = StackedCLIP(ms, device="meta")
    assert st.device == torch.device("meta")
    assert {p.device.type for p in st.parameters()} == {"meta"}
    assert st.max_logit_scale.device.type == "meta"
    assert st.stack("W_proj", [m.state_dict()["W_proj"] for m in ms]).device.type == "meta"
    assert StackedCLIP(ms).device == torch.device("cpu")  # default: the members' config device


def test_stacked_adamw_decay_factors():
    # on a GPU the factors are made full-shape (one multi-tensor launch instead of ~150 per full-model step on an
    # H100, 2 of its 8 ms; not testable without CUDA); on the CPU they broadcast (less memory read) and decay right
    ps = [torch.nn.Parameter(torch.randn(3, 4, 5)), torch.nn.Parameter(torch.randn(3, 2))]
    masks = [torch.ones(3, 4, 5), None]
    opt = StackedAdamW(ps, lr=[1e-3] * 3, weight_decay=[0.1, 0.2, 0.3], decay_masks=masks)
    assert [d.shape for d in opt._decay] == [(3, 4, 5), (3, 1)]  # a mask is full-shape already; else broadcast
    ref = [p.detach() * (1 - 1e-3 * torch.tensor([0.1, 0.2, 0.3]).view(-1, *[1] * (p.ndim - 1))) for p in ps]
    for p in ps:
        p.grad = torch.zeros_like(p)
    opt.step()  # zero gradients: only the decay moves the weights
    for p, r in zip(ps, ref, strict=True):
        torch.testing.assert_close(p.detach(), r)


def test_deadline_stops_within_a_step_and_resumes_bit_exact(tmp_path):
    # bug: the deadline (sweep --max-seconds) and stop signals were polled once per chunk of up to 512 steps, minutes
    # for a full-model group on a CPU: a 20 s budget ran past 10 minutes. Now they are polled after every step.
    members = [Member(tiny_config(), D6, _tc(epochs=3, seed=0), name="a")]
    full = BatchedTrainer(members, tmp_path / "full", dropout_rng="fast").run(progress=False)
    part = BatchedTrainer(members, tmp_path / "part", dropout_rng="fast")
    assert part.run(progress=False, deadline=time.time() - 1) == []
    assert part.state.step == 1  # one step, not the whole chunk (the 12 steps of the run)
    resumed = BatchedTrainer(members, tmp_path / "part", resume=True, dropout_rng="fast")
    assert resumed.state.step == 1
    resumed.run(progress=False)
    got = load_model_file(tmp_path / "part" / "a" / "model.safetensors")
    for k, v in full[0].model.state_dict().items():
        assert torch.equal(got.state_dict()[k], v), k


def test_graph_step_refuses_what_it_cannot_capture():
    # the whole-step CUDA graph (graph_step.py) runs only on a GPU; on the CPU it must say why, not fall back
    m = Member(tiny_config(), D6, TrainConfig(epochs=1, batch_size=16))
    with pytest.raises(ValueError, match="graph_step=True needs a CUDA device"):
        BatchedTrainer([m], None, dropout_rng="fast", graph_step=True)
    # issue 51 item 4: a compiled loss is captured inside the step's graph; inductor's own CUDA graphs cannot nest
    with pytest.raises(ValueError, match="graph_step=True needs a CUDA device"):
        BatchedTrainer([m], None, dropout_rng="fast", graph_step=True, compile=True)
    with pytest.raises(ValueError, match="not cudagraphs=True"):
        BatchedTrainer([m], None, dropout_rng="fast", graph_step=True, compile=True, cudagraphs=True)


def _one_run_spec(tmp_path, compile_line: str = ""):
    """A sweep spec of one tiny run (simplified, 6 labels, one epoch, the fast dropout stream) in ``tmp_path``;
    ``compile_line`` adds to its [run] table."""
    spec = tmp_path / "s.toml"
    spec.write_text(
        'name = "s"\n[model]\npreset = "simplified"\n[data]\nn_labels = 6\nn_heldout = 2\nn2 = 2\n'
        "[train]\nepochs = 1\n[grid]\nseed = [0]\n"
        f'[run]\n{compile_line}dropout_rng = "fast"\n'
    )
    return spec


def test_sweep_graph_step_replaces_the_specs_compile_and_takes_a_requested_one(tmp_path):
    # fig4a.toml compiles (the CPU's fastest step) and the GPU queue runs it with --graph-step: the call's execution
    # setting wins over the spec's; --graph-step --compile is the compiled whole step (inductor's kernels captured in
    # the step's graph, issue 51 item 4); --graph-step --cudagraphs is refused (a graph inside a graph)
    from hooked_clip1d.sweeps.runner import run_sweep

    spec = _one_run_spec(tmp_path, compile_line="compile = true\n")
    with pytest.raises(ValueError, match="not cudagraphs=True"):
        run_sweep(spec, tmp_path / "out", progress=False, graph_step=True, compile=True, cudagraphs=True)
    for i, compile_ in enumerate((True, None)):  # compiled whole step, or the spec's compile dropped
        with pytest.raises(ValueError, match="graph_step=True needs a CUDA device"):  # on to the GPU check
            run_sweep(spec, tmp_path / f"out{i}", progress=False, graph_step=True, compile=compile_)


def test_sweep_streams_reaches_the_stacked_model(tmp_path):
    # bug: the sweep pool called trainer.model.use_streams() after BatchedTrainer's attribute proxies were removed
    # (an AttributeError); it reads trainer.state.model, so on a CPU the two-stream mode says why it cannot run
    from hooked_clip1d.sweeps.runner import run_sweep

    spec = _one_run_spec(tmp_path)
    with pytest.raises(ValueError, match="use_streams needs a CUDA device"):
        run_sweep(spec, tmp_path / "out", progress=False, streams=True)


@pytest.mark.parametrize("shared_query", [True, False])
def test_attention_dropout_drops_pattern_weights_like_the_single_model(shared_query):
    """The stacked forward's attention-probability dropout (``attn_dropout``) equals the single model's pattern
    with the same mask applied: for the one-block shortcut (readout an int) and the general path (a readout
    tensor), with random biases so that b_V's share of a dropped pattern (its weights no longer sum to 1) counts."""
    cfg = tiny_config(attn_dropout=0.4, dropout=0.0)
    model = CLIP1D(cfg, seed=0)
    randomize_biases(model)
    st = StackedCLIP([model], "fast").train()
    B, P, H = 6, cfg.vision.n_ctx, cfg.vision.n_heads
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vision.n_labels + 1, (1, B, P), generator=gen)
    tokens[:, :, 0] = cfg.vision.n_labels + 1  # CLS
    readout = 0 if shared_query else torch.zeros(1, B, dtype=torch.long)
    torch.manual_seed(7)
    got = st.tower("vision", tokens, readout)[0]
    torch.manual_seed(7)  # the same draw: the mask of the pattern, [K, B, P, H] (shortcut) or [K, B, H, P]
    mask = keep_mask((1, B, P, H) if shared_query else (1, B, H, P), 0.6, torch.float32)[0]
    mask = mask.transpose(1, 2) if shared_query else mask  # [B, H, P]: the CLS row of each head

    def drop_cls_row(pattern, hook):
        pattern = pattern.clone()
        pattern[:, :, 0] = pattern[:, :, 0] * mask
        return pattern

    model.eval()
    want = model.vision.run_with_hooks(tokens[0], fwd_hooks=[("blocks.0.attn.hook_pattern", drop_cls_row)])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)  # the pooled CLS output [B, d_model]
    assert not torch.allclose(got, st.eval().tower("vision", tokens, readout)[0], atol=1e-3)  # it did drop


def test_attention_dropout_is_refused_with_matched_dropout():
    model = CLIP1D(tiny_config(attn_dropout=0.1), seed=0)
    with pytest.raises(ValueError, match="attn_dropout and embed_dropout need dropout_rng='fast'"):
        StackedCLIP([model], "matched")


@pytest.mark.parametrize("dropout_rng", ["matched", "fast"])
def test_a_finished_group_continues_from_its_members_checkpoints(tmp_path, dropout_rng):
    """A finished group keeps only its members' Trainer-format checkpoints; the batched engine continues them to
    more epochs (weights, AdamW state, data order, dropout stream) bit-exactly like one uninterrupted run, and
    refuses members that stopped at different steps or were trained otherwise."""
    members = [
        Member(tiny_config(), D6, _tc(epochs=4, seed=s, checkpoint_every=2), name=n) for s, n in ((0, "a"), (1, "b"))
    ]
    longer = [dataclasses.replace(m, train_cfg=dataclasses.replace(m.train_cfg, epochs=6)) for m in members]
    full = BatchedTrainer(longer, tmp_path / "full", dropout_rng=dropout_rng).run(progress=False)
    BatchedTrainer(members, tmp_path / "part", dropout_rng=dropout_rng).run(progress=False)
    assert (tmp_path / "part" / GROUP_CHECKPOINT).exists()  # from before the last steps: the members are newer
    more = BatchedTrainer(longer, tmp_path / "part", resume=True, dropout_rng=dropout_rng)
    assert more.state.step == 4 * 4 and not (tmp_path / "part" / "a" / "summary.json").exists()  # 4 steps an epoch
    more.run(progress=False)
    for name, want in (("a", full[0].model), ("b", full[1].model)):
        got = load_model_file(tmp_path / "part" / name / "model.safetensors")
        for k, v in want.state_dict().items():
            assert torch.equal(got.state_dict()[k], v), (name, k)
        first, *rest = _lines(tmp_path / "part" / name)
        assert first["epoch"] == 4  # the 4-epoch run's final evaluation stays; then the same lines as one run,
        ref = _lines(tmp_path / "full" / name)
        rest[0]["loss"] = ref[0]["loss"]  # except the first one's loss, a mean over the steps since the continuation
        assert rest == [{**ln, "elapsed_s": pytest.approx(ln["elapsed_s"], abs=1e9)} for ln in ref]
    other = [dataclasses.replace(m, train_cfg=dataclasses.replace(m.train_cfg, lr=1e-3)) for m in longer]
    with pytest.raises(CheckpointError, match=r"train_config.lr: saved 0.0001, now 0.001"):
        BatchedTrainer(other, tmp_path / "part", resume=True, dropout_rng=dropout_rng)


def test_finished_members_that_stopped_at_different_steps_do_not_continue_together(tmp_path):
    a = Member(tiny_config(), D6, _tc(epochs=2, seed=0), name="a")  # 4 steps an epoch
    b = Member(tiny_config(n_labels=7), D7, _tc(epochs=2, seed=1), name="b")  # 5 steps an epoch
    BatchedTrainer([a, b], tmp_path / "g").run(progress=False)
    more = [dataclasses.replace(m, train_cfg=dataclasses.replace(m.train_cfg, epochs=3)) for m in (a, b)]
    with pytest.raises(CheckpointError, match=r"stopped at different steps \[8, 10\]"):
        BatchedTrainer(more, tmp_path / "g", resume=True)


@pytest.mark.parametrize("value, shown", [("1", False), ("0", True)])
def test_both_engines_bars_follow_tqdm_disable(tmp_path, monkeypatch, capsys, value, shown):
    """A bar made with an explicit ``disable=not progress`` ignored ``TQDM_DISABLE``: the long runs' logs filled with
    bars though the lane set it (found 2026-11-30). Both engines now ask ``settings.progress.bar_disabled``."""
    monkeypatch.setenv("TQDM_DISABLE", value)
    cfg, tc = tiny_config(), _tc(epochs=2, seed=3)
    train_fast(RunConfig(cfg, D6, tc), tmp_path / "fast", progress=True)
    Trainer(RunConfig(cfg, D6, tc), tmp_path / "single").run(progress=True)
    err = capsys.readouterr().err
    assert ("train" in err) is shown and ("step/s" in err or "epoch/s" in err or "it/s" in err) is shown, err
