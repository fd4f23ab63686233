"""Training options the suite did not reach: ``train --ablate-vision-terms`` end to end, and the batched engine's
``amp=True`` (bfloat16 autocast) against fp32."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from hooked_clip1d import CLIP1D, BatchedTrainer, DataConfig, Member, TrainConfig
from hooked_clip1d.cli.commands import main
from hooked_clip1d.model.checkpoint import load_model_file

DATA = DataConfig(n_labels=6, n_heldout=2, n2=2)


# ---- train --ablate-vision-terms ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ep_ablated_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablated") / "run"
    args = [
        "train",
        "--out",
        str(out),
        "--n-labels",
        "6",
        "--n-heldout",
        "2",
        "--n2",
        "2",
        "--epochs",
        "1",
        "--ablate-vision-terms",
        "EP",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    return out


def _cls_row_scores(model: CLIP1D, images: torch.Tensor) -> torch.Tensor:
    _, cache = model.vision.run_with_cache(images, names_filter="blocks.0.attn.hook_attn_scores")
    return cache["attn_scores", 0][:, :, 0]  # [batch, head, key]


def _ep_only_shift(model: CLIP1D, seed: int = 0) -> torch.Tensor:
    """A change of the key positions' embeddings (not CLS's, position 0) that moves only the EP term of the CLS row:
    each key's shift delta_k is orthogonal, through W_K, to the CLS query's positional part P_0 W_Q and to b_Q (so
    PP and BP of the CLS row stay), and E_CLS W_Q . delta_k W_K (EP) is what remains."""
    v, attn = model.vision, model.vision.blocks[0].attn
    P0 = v.pos_embed.W_pos[0]
    # [2H, d_model]: the directions whose dot product with a key position shift would change the CLS row's PP / BP
    kept = torch.cat([torch.einsum("hmd,hd->hm", attn.W_K, q) for q in (P0 @ attn.W_Q, attn.b_Q)])
    basis = torch.linalg.qr(kept.T).Q  # [d_model, 2H], orthonormal
    g = torch.Generator().manual_seed(seed)
    shift = torch.randn(v.pos_embed.W_pos.shape, generator=g)
    shift = shift - (shift @ basis) @ basis.T
    shift[0] = 0.0
    return shift


@torch.no_grad()
def test_train_ablate_vision_terms_removes_ep_from_the_trained_models_forward(ep_ablated_run):
    config = json.loads((ep_ablated_run / "config.json").read_text())
    assert config["model_config"]["vision"]["ablated_terms"] == ["EP"]
    assert config["model_config"]["text"]["ablated_terms"] == []  # the vision tower only
    model = load_model_file(ep_ablated_run / "model.safetensors")
    assert model.cfg.vision.ablated_terms == ("EP",)
    # the same weights without the ablation: the control, in which the shift below does move the scores
    control = CLIP1D(dataclasses.replace(model.cfg, vision=model.cfg.vision.replace(ablated_terms=()))).eval()
    control.load_state_dict(model.state_dict())
    images = torch.stack([model.vision.to_tokens(t)[0] for t in ("C . 1 . . 3 . . . . .", "C 5 . . . . . . . . 2")])
    before, before_control = _cls_row_scores(model, images), _cls_row_scores(control, images)
    shift = 30 * _ep_only_shift(model)  # large: after one epoch from N(0, 0.02), E_CLS W_Q is small
    for m in (model, control):
        m.vision.pos_embed.W_pos.add_(shift)
    # control: the CLS row moves by exactly the EP change, E_CLS W_Q . shift_k W_K / sqrt(d_head)
    attn = model.vision.blocks[0].attn
    q_cls = model.vision.embed.W_E[images[0, 0]] @ attn.W_Q  # [H, d_head]: the CLS token's query (no b_Q, P_0)
    d_ep = torch.einsum("hd,pm,hmd->hp", q_cls, shift, attn.W_K) / model.cfg.vision.d_head**0.5  # [H, pos]
    after_control = _cls_row_scores(control, images)
    assert (after_control - before_control).abs().max() > 1.0
    torch.testing.assert_close(after_control - before_control, d_ep.expand_as(before), atol=1e-4, rtol=1e-4)
    # the EP-ablated model: the CLS row does not move at all
    torch.testing.assert_close(_cls_row_scores(model, images), before, atol=1e-5, rtol=1e-5)


# ---- the batched engine with amp=True -------------------------------------------------------------------------------
def _group(amp: bool) -> BatchedTrainer:
    """Two members (N(0, 0.02) and N(0, 1) embeddings), no dropout, a learning rate at which 5 steps move weights;
    the standard CLIP loss (the head computed by hand below; the tolerances were measured with it)."""
    members = [
        Member(
            tiny_config(dropout=0.0, init_std=std),
            DATA,
            TrainConfig(epochs=5, batch_size=16, seed=i, lr=1e-3, negatives="all"),
        )
        for i, std in enumerate((0.02, 1.0))
    ]
    return BatchedTrainer(members, None, amp=amp)


def test_amp_keeps_the_clip_head_in_fp32():
    """Under bf16 autocast the towers run in bf16 but the projection, cosines and temperature do not: the loss equals
    the head computed by hand in fp32 from the autocast towers' outputs (a bf16 head is ~1e-3 off)."""
    g = _group(amp=True)
    m, imgs, caps = g.state.model, g.state.tables.images[:, :16], g.state.tables.captions[:, :16, :-1]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        img, txt = m.tower("vision", imgs, 0), m.tower("text", caps, g.state.tables.text_readout)
        loss = m.loss(imgs, caps, g.state.tables.text_readout)
        bf16_proj = torch.bmm(txt, m.params["W_proj"])
    assert bf16_proj.dtype == torch.bfloat16  # autocast is on: a matmul in it runs in bf16

    def head(img, txt_proj):
        scale = m.params["logit_scale"].clamp(max=m.max_logit_scale).exp()[:, None, None]
        logits = scale * F.normalize(img.float(), dim=-1) @ F.normalize(txt_proj.float(), dim=-1).transpose(1, 2)
        labels = torch.arange(16)
        return torch.stack([(F.cross_entropy(lg, labels) + F.cross_entropy(lg.T, labels)) / 2 for lg in logits])

    with torch.no_grad():
        fp32_head = head(img, torch.bmm(txt.float(), m.params["W_proj"]))
        bf16_head = head(img, bf16_proj)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, fp32_head, atol=1e-5, rtol=1e-5)
    assert (bf16_head - fp32_head).abs().max() > 1e-4  # the check above can tell the two apart


def test_amp_training_stays_within_tolerance_of_fp32():
    """Stated tolerances: the first step's loss within 1 % of fp32's, and after 5 AdamW steps each weight's update
    within 20 % (relative norm) of fp32's update (measured: <= 0.2 % and <= 8 %). Weights themselves would be a weak
    check: AdamW moves each by at most ~lr a step, whatever the gradient."""
    amp, fp32 = _group(amp=True), _group(amp=False)
    init = [fp32.state.model.member_state_dict(k) for k in range(2)]
    for g in (amp, fp32):
        g.run(progress=False, max_steps=1)
    torch.testing.assert_close(amp.state.loss_sum, fp32.state.loss_sum, rtol=1e-2, atol=0)
    assert not torch.equal(amp.state.loss_sum, fp32.state.loss_sum)  # bf16 is really used
    for g in (amp, fp32):
        g.run(progress=False, max_steps=4)
    assert amp.state.step == fp32.state.step == 5
    for k in range(2):
        got, want = amp.state.model.member_state_dict(k), fp32.state.model.member_state_dict(k)
        for name, w0 in init[k].items():
            d_amp, d_fp32 = got[name] - w0, want[name] - w0
            assert got[name].dtype == torch.float32, name  # the master weights stay fp32
            if d_fp32.norm() == 0:  # frozen (e.g. b_Q, b_K under frozen=("qk_bias",)): frozen under amp too
                assert d_amp.norm() == 0, (k, name)
                continue
            if name.endswith("attn.b_K"):  # b_K shifts a whole score row, which softmax ignores: its gradient is
                # rounding noise, which AdamW scales to ~lr a step in either precision; bound it, don't compare it
                assert d_amp.abs().max() <= 5 * 3 * amp.state.members[0].train_cfg.lr, (k, name)
                continue
            assert (d_amp - d_fp32).norm() <= 0.2 * d_fp32.norm(), (k, name)
