"""The GPU step's levers that a CPU can prove (issue 36): the flat layout (fused QKV projections read in place, one
fused AdamW call over flat buffers) computes today's per-tensor step bit for bit; the precision flag refuses what a
CPU cannot do. No timing is asserted here (benchmarks/gpu_check.py times the modes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import randomize_biases, tiny_config

from hooked_clip1d import CLIP1D, DataConfig, build_dataset
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.graph_step import matmul_precision, set_flat
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_adamw import StackedAdamW
from hooked_clip1d.training.trainer import TrainConfig

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)
D7 = DataConfig(n_labels=7, n_heldout=2, n2=2, seed=3)
CASES = {
    "full": ("full", {}),
    "full_tied_post_ln": ("full", dict(n_layers=4, tied_repeats=2, ln_position="post")),
    "full_rope_pruned": ("full", dict(positional="rope", vision_overrides={"pruned_heads": ((1, 0),)})),
    "simplified": ("simplified", {}),
    "simplified_2_layers": ("simplified", dict(n_layers=2)),
}


def _batch(st: StackedCLIP) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    imgs, caps = [], []
    for k, d in enumerate((D6, D7)):
        im, cap = build_dataset(d).training_pairs()
        idx = torch.randperm(len(im), generator=gen)[:12]
        imgs.append(st.remap_tokens(im[idx], k))
        caps.append(st.remap_tokens(cap[idx], k))
    return torch.stack(imgs), torch.stack(caps)


def _pair(preset: str, kw: dict) -> list[StackedCLIP]:
    models = []
    for n, seed in ((6, 0), (7, 1)):
        m = CLIP1D(tiny_config(preset, n_labels=n, dropout=0.0, **kw), seed=seed)
        randomize_biases(m, seed + 10)
        models.append(m)
    return [StackedCLIP(models, flat=flat).train() for flat in (False, True)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_parameter_gets_a_gradient(case):
    """The flat step updates every entry; the per-tensor one skips a parameter without a gradient. They agree
    because no parameter of any tower is ever left without one."""
    st, _ = _pair(*CASES[case])
    images, captions = _batch(st)
    st.loss(images, captions, 3).sum().backward()
    assert [n for n, p in zip(st.names, st.flat, strict=True) if p.grad is None] == []


def _close(a: torch.Tensor, b: torch.Tensor, msg: object) -> None:
    """Equal to float rounding: the CPU's fused AdamW kernel computes a tensor's vectorised body and its scalar tail
    with different instructions, so an entry's last bit can depend on where it lies in its tensor (a short one, as
    logit_scale, is all tail), and one flat buffer places entries elsewhere than ~70 tensors do."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8, msg=str(msg))


@pytest.mark.parametrize("case", sorted(CASES))
def test_flat_layout_steps_equal_the_per_tensor_steps(case):
    """The flat layout, with the fused QKV view and the one-call optimizer, against the per-tensor layout: loss and
    gradients bit for bit, then 6 AdamW steps (per-member weight decay: the decay-factor path) to float rounding."""
    per_tensor, flat = _pair(*CASES[case])
    assert flat.flat_data is not None and per_tensor.flat_data is None
    images, captions = _batch(flat)
    opts = [StackedAdamW(list(st.flat), lr=[1e-3, 1e-3], weight_decay=[0.2, 0.05]) for st in (per_tensor, flat)]
    assert opts[0].flat_param is None and opts[1].flat_param is not None
    for step in range(6):
        losses = []
        for st, opt in zip((per_tensor, flat), opts, strict=True):
            loss = st.loss(images, captions, 3)
            opt.zero_grad()
            loss.sum().backward()
            losses.append(loss.detach())
            if step == 0:
                grads = [p.grad.clone() for p in st.flat]
                if st is per_tensor:
                    ref = grads
                else:
                    assert all(torch.equal(a, b) for a, b in zip(ref, grads, strict=True)), case
            opt.step()
        _close(losses[0], losses[1], (case, step))
    for name, a, b in zip(per_tensor.names, per_tensor.flat, flat.flat, strict=True):
        _close(a, b, (case, name))
    for name, sa, sb in zip(per_tensor.names, opts[0].state, opts[1].state, strict=True):
        for k in sa:
            _close(sa[k], sb[k], (case, name, k))


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=[1e-3, 1e-3], weight_decay=[0.1, 0.1]),  # uniform: AdamW's decay inside the fused kernel
        dict(lr=[1e-3, 3e-4], weight_decay=[0.2, 0.0]),  # per-member lr: the unfused formula
        dict(lr=[1e-3, 1e-3], weight_decay=[0.2, 0.1], coupled=True),  # Adam with L2 in the gradient
        dict(lr=[1e-3, 3e-4], weight_decay=[0.2, 0.1], coupled=True),
        dict(lr=[1e-3, 1e-3], weight_decay=[0.2, 0.2], masks=True),  # no_decay / frozen masks
    ],
)
def test_every_optimizer_path_is_the_same_on_flat_buffers(kw):
    kw = dict(kw)
    masks = kw.pop("masks", False)
    per_tensor, flat = _pair("full", {})
    images, captions = _batch(flat)
    opts = []
    for st in (per_tensor, flat):
        dm = gm = None
        if masks:  # decay nothing in the biases, freeze b_K (as TrainConfig.no_decay / frozen do)
            dm = [torch.zeros_like(p) if ".b_" in n else None for n, p in zip(st.names, st.flat, strict=True)]
            gm = [torch.zeros_like(p) if n.endswith("b_K") else None for n, p in zip(st.names, st.flat, strict=True)]
        opts.append(StackedAdamW(list(st.flat), decay_masks=dm, grad_masks=gm, **kw))
    for _ in range(4):
        for st, opt in zip((per_tensor, flat), opts, strict=True):
            opt.zero_grad()
            st.loss(images, captions, 3).sum().backward()
            opt.step()
    for name, a, b in zip(per_tensor.names, per_tensor.flat, flat.flat, strict=True):
        _close(a, b, name)


def test_flat_layout_round_trip_and_refusals():
    per_tensor, flat = _pair("full", {})
    before = [p.detach().clone() for p in flat.flat]
    flat.flat_layout(False)
    assert flat.flat_data is None and all(p.is_contiguous() for p in flat.flat)
    assert all(torch.equal(a, b) for a, b in zip(before, flat.flat, strict=True))
    with pytest.raises(ValueError, match="tile one buffer"):
        StackedAdamW(list(per_tensor.flat), lr=[1e-3] * 2, weight_decay=[0.1] * 2, flat=True)
    # gradients replaced behind the optimizer's back (nn.Module.zero_grad) are taken into the buffer...
    flat.flat_layout(True)
    opt = StackedAdamW(list(flat.flat), lr=[1e-3] * 2, weight_decay=[0.1] * 2)
    images, captions = _batch(flat)
    flat.zero_grad()  # nn.Module's: every .grad to None, so autograd allocates new ones
    flat.loss(images, captions, 3).sum().backward()
    opt.step()  # ... and a missing one is an error naming the cure
    flat.zero_grad()
    with pytest.raises(RuntimeError, match=r"StackedAdamW.zero_grad\(\)"):
        opt.step()


def _members(epochs: tuple[int, ...]) -> list[Member]:
    cfg = tiny_config("full", n_layers=2)
    tc = dict(batch_size=16, eval_every=2, checkpoint_every=2)
    return [
        Member(
            cfg if i % 2 == 0 else tiny_config("full", n_labels=7, n_layers=2),
            D6 if i % 2 == 0 else D7,
            TrainConfig(epochs=e, seed=i, weight_decay=0.1 * (i + 1), **tc),
        )
        for i, e in enumerate(epochs)
    ]


@pytest.mark.heavy
def test_a_batched_group_on_flat_buffers_trains_and_resumes_bit_for_bit(tmp_path):
    """A shrinking group (members of 2, 3 and 4 epochs leave the stack: the layout is rebuilt) on the flat layout
    ends with the per-tensor group's weights (to float rounding); stopped mid-way, saved and resumed on the flat
    layout, it ends bit for bit where the uninterrupted flat group ends."""
    members = _members((2, 3, 4))
    runs = {}
    for flat in (False, True):
        bt = BatchedTrainer(members, tmp_path / f"flat{flat}", dropout_rng="fast")
        set_flat(bt, flat)
        runs[flat] = bt.run(progress=False)
    for a, b in zip(runs[False], runs[True], strict=True):
        sa, sb = a.model.state_dict(), b.model.state_dict()
        for k in sa:
            _close(sa[k], sb[k], k)
    bt = BatchedTrainer(members, tmp_path / "resumed", dropout_rng="fast")
    set_flat(bt, True)
    bt.run(progress=False, max_steps=9)  # member 0 (8 steps) has finished, the others are mid-epoch
    bt = BatchedTrainer(members, tmp_path / "resumed", dropout_rng="fast", resume=True)
    set_flat(bt, True)
    resumed = bt.run(progress=False)
    for a, b in zip(runs[True][1:], resumed, strict=True):
        sa, sb = a.model.state_dict(), b.model.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    lines = [json.loads(x) for x in (tmp_path / "resumed" / "member2" / "metrics.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in (tmp_path / "flatTrue" / "member2" / "metrics.jsonl").read_text().splitlines()]
    assert [ln["loss"] for ln in lines] == [ln["loss"] for ln in want]


def test_precision_flag_refuses_tf32_on_the_cpu():
    with pytest.raises(ValueError, match="CUDA matmul mode"):
        with matmul_precision("tf32", "cpu"):
            pass
    with pytest.raises(ValueError, match="precision must be one of"):
        with matmul_precision("fp16", "cpu"):
            pass
    with matmul_precision("fp32", "cpu"):
        pass


COMPILED = r"""
import json, sys, torch
torch.set_num_threads(1)
from hooked_clip1d import CLIPConfig, DataConfig
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.graph_step import set_flat
from hooked_clip1d.training.trainer import TrainConfig

cfg = CLIPConfig.from_preset("full", n_labels=8, dropout=0.0, d_model=16, d_head=4, n_heads=4, d_mlp=32, n_layers=2)
data = DataConfig(n_labels=8, n_heldout=2, n2=2)
members = [Member(cfg, data, TrainConfig(epochs=3, eval_every=1, seed=s, batch_size=16)) for s in (0, 1)]
losses = {}
for mode in ("eager", "compiled-flat"):
    bt = BatchedTrainer(members, f"{sys.argv[1]}/{mode}", dropout_rng="fast", compile=mode != "eager")
    set_flat(bt, mode != "eager")
    bt.run(progress=False)
    losses[mode] = [json.loads(x)["loss"] for x in open(f"{sys.argv[1]}/{mode}/member1/metrics.jsonl")]
print(json.dumps(losses))
"""


@pytest.mark.slow
def test_the_compiled_step_on_flat_buffers_equals_eager(tmp_path):
    """torch.compile of the stacked loss (as the sweeps run it) on the flat layout trains on the eager per-tensor
    losses: the compiled graph reads parameters that share one buffer (a subprocess: the tests' jaxtyping hook does
    not trace)."""
    run = subprocess.run([sys.executable, "-c", COMPILED, str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    losses = json.loads(run.stdout.strip().splitlines()[-1])
    assert losses["compiled-flat"] == pytest.approx(losses["eager"], rel=1e-4), losses
