"""A plain PyTorch version of the 1D CLIP model and its training step, as one would write it in a single file.

It is the baseline of ``bench_training.py``: same shapes and FLOPs as ``hooked_clip1d.CLIP1D`` (d_model, heads,
d_head, layers, MLP, dropout places, text projection, logit scale, symmetric loss) but no hooks, no per-head weight
layout and no input validation; ``PlainCaptioner`` likewise for the captioning objective. It does not share weights
with ours and is not meant to be numerically equal.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

PRESETS = {
    "simplified": dict(n_layers=1, n_heads=4, d_model=128, d_mlp=None, layer_norm=False),
    "full": dict(n_layers=4, n_heads=4, d_model=128, d_mlp=512, layer_norm=True),
}


class Block(nn.Module):
    def __init__(self, d_model, n_heads, d_mlp, layer_norm, causal, n_ctx, dropout):
        super().__init__()
        self.n_heads, self.causal = n_heads, causal
        self.ln1 = nn.LayerNorm(d_model) if layer_norm else nn.Identity()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(n_ctx, n_ctx, dtype=torch.bool)))
        self.mlp = None
        if d_mlp is not None:
            self.ln2 = nn.LayerNorm(d_model) if layer_norm else nn.Identity()
            self.mlp = nn.Sequential(
                nn.Linear(d_model, d_mlp), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_mlp, d_model)
            )

    def attn(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [b, h, n, n]
        if self.causal:
            scores = scores.masked_fill(~self.mask[:n, :n], float("-inf"))
        z = scores.softmax(-1) @ v  # [b, h, n, d_head]
        return self.out(z.transpose(1, 2).reshape(b, n, d))

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        if self.mlp is not None:
            x = x + self.drop(self.mlp(self.ln2(x)))
        return x


class Tower(nn.Module):
    def __init__(self, vocab, n_ctx, causal, n_layers, n_heads, d_model, d_mlp, layer_norm, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(n_ctx, d_model))
        args = (d_model, n_heads, d_mlp, layer_norm, causal, n_ctx, dropout)
        self.blocks = nn.ModuleList([Block(*args) for _ in range(n_layers)])
        self.ln_final = nn.LayerNorm(d_model) if layer_norm else nn.Identity()

    def forward(self, tokens, readout):  # readout: [batch] position to read
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_final(x)[torch.arange(tokens.shape[0]), readout]


class PlainCLIP(nn.Module):
    def __init__(self, preset="simplified", n_labels=20, d_image=10):
        super().__init__()
        cfg = PRESETS[preset]
        self.eot = n_labels + 5  # the caption vocabulary's largest id
        self.vision = Tower(n_labels + 2, d_image + 1, False, **cfg)
        self.text = Tower(n_labels + 6, 4, True, **cfg)
        d = cfg["d_model"]
        self.proj = nn.Parameter(torch.randn(d, d) / math.sqrt(d))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, images, captions):
        img = self.vision(images, torch.zeros(images.shape[0], dtype=torch.long))  # CLS at position 0
        txt = self.text(captions, (captions == self.eot).int().argmax(-1)) @ self.proj  # first EOT
        sim = F.normalize(img, dim=-1) @ F.normalize(txt, dim=-1).T
        return self.logit_scale.clamp(max=math.log(100.0)).exp() * sim

    def loss(self, images, captions):
        logits = self(images, captions)
        labels = torch.arange(logits.shape[0])
        return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


class PlainCaptioner(nn.Module):
    """The captioning objective (``CLIPConfig(objective="captioning")``) written plainly: the vision tower's CLS output
    mapped by a ``[d, d]`` matrix in place of the decoder's first token embedding, the causal decoder's four outputs
    unembedded by a ``[d, vocab]`` matrix into the caption's four tokens, mean token cross-entropy. The same matmul
    FLOPs as ours (314 M per step of 50, fwd + bwd, counted); ours also holds the contrastive head's ``W_proj`` and
    logit scale, which a captioner never reads (16,385 parameters without gradients)."""

    def __init__(self, preset="simplified", n_labels=20, d_image=10):
        super().__init__()
        cfg = PRESETS[preset]
        d, vocab = cfg["d_model"], n_labels + 6
        self.vision = Tower(n_labels + 2, d_image + 1, False, **cfg)
        self.text = Tower(vocab, 4, True, **cfg)
        self.prefix = nn.Parameter(torch.randn(d, d) / math.sqrt(d))
        self.unembed = nn.Parameter(torch.randn(d, vocab) / math.sqrt(d))

    def loss(self, images, captions):
        img = self.vision(images, torch.zeros(images.shape[0], dtype=torch.long))  # CLS at position 0
        x = torch.cat([(img @ self.prefix)[:, None], self.text.embed(captions[:, :3])], 1) + self.text.pos[:4]
        for block in self.text.blocks:
            x = block(x)
        logits = self.text.ln_final(x) @ self.unembed  # [batch, 4, vocab]: position t predicts token t
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), captions.reshape(-1))

    @torch.no_grad()
    def scores(self, images, captions, rows=50_000):
        """Every caption's log-likelihood given every image [images, captions], the plain way: every (image,
        caption) pair decoded whole, in chunks of about ``rows`` pairs (what ``caption_scores`` computes)."""
        img = self.vision(images, torch.zeros(images.shape[0], dtype=torch.long)) @ self.prefix
        emb = self.text.embed(captions[:, :3])
        out, n = [], captions.shape[0]
        for i in range(0, images.shape[0], max(1, rows // n)):
            p = img[i : i + max(1, rows // n)]
            m = p.shape[0]
            x = torch.cat([p.repeat_interleave(n, 0)[:, None], emb.repeat(m, 1, 1)], 1) + self.text.pos[:4]
            for block in self.text.blocks:
                x = block(x)
            logp = (self.text.ln_final(x) @ self.unembed).log_softmax(-1)
            out.append(logp.gather(-1, captions.repeat(m, 1)[..., None])[..., 0].sum(-1).view(m, n))
        return torch.cat(out)


def make_trainer(preset="simplified", n_labels=20, seed=0, captioning=False):
    """(model, optimizer, step) where ``step(images, captions)`` does one AdamW step and returns the loss; with
    ``captioning`` the model is ``PlainCaptioner``."""
    torch.manual_seed(seed)
    model = (PlainCaptioner if captioning else PlainCLIP)(preset, n_labels).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.2)

    def step(images, captions):
        loss = model.loss(images, captions)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


if __name__ == "__main__":
    from hooked_clip1d import DataConfig, build_dataset

    images, captions = build_dataset(DataConfig(n_labels=20, n2=10)).training_pairs()
    model, opt, step = make_trainer("simplified")
    for epoch in range(3):
        perm = torch.randperm(len(images))
        losses = [step(images[i], captions[i]).item() for i in perm.split(50)]
        print(f"epoch {epoch}: mean loss {sum(losses) / len(losses):.4f}")
