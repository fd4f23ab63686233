"""Sparse autoencoders on any hook point: collect activations, train a small SAE, splice it back in.

``SparseAutoencoder`` is a ``HookedRootModule`` with its own hook points (``hook_sae_acts_pre``,
``hook_sae_acts_post``, ``hook_sae_recons``), SAELens-style names and layout (``W_enc [d_in, d_sae]``,
``W_dec [d_sae, d_in]``, ``b_dec`` subtracted before encoding): ReLU with an L1 penalty, or top-k (``k`` set).
``collect_activations`` gathers a hook's activations over inputs (one position, or all), ``train_sae`` fits an SAE
and reports reconstruction (MSE, fraction of variance unexplained) and sparsity (mean L0), and ``hooks.splice_hook``
(defined in ``hooks``, re-exported here) returns a hook that replaces the activation by its reconstruction, so
accuracy with the SAE in the loop is one ``evaluate(..., vision_hooks=[("hook_pooled", splice_hook(sae))])`` away.

Example:
    >>> from hooked_clip1d import load_model, build_dataset, evaluate
    >>> m = load_model("simplified-ntot20-n2-10")
    >>> ds = build_dataset(m.data_config)
    >>> acts = collect_activations(m.vision, "hook_pooled", ds.splits["train"].images)
    >>> sae, report = train_sae(acts, d_sae=64, k=8, steps=300, seed=0)
    >>> report["l0"] <= 8
    True
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint


class SparseAutoencoder(HookedRootModule):
    """``acts = act_fn((x - b_dec) @ W_enc + b_enc)``, ``recons = acts @ W_dec + b_dec``; ``k``: keep the top k."""

    def __init__(self, d_in: int, d_sae: int, k: int | None = None, seed: int = 0):
        super().__init__()
        if d_in < 1 or d_sae < 1 or (k is not None and not 1 <= k <= d_sae):
            raise ValueError(f"SparseAutoencoder needs d_in, d_sae >= 1 and 1 <= k <= d_sae; got {d_in}, {d_sae}, {k}")
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(d_sae, d_in, generator=gen)
        W = W / W.norm(dim=-1, keepdim=True)
        self.W_dec = nn.Parameter(W)  # unit-norm decoder rows
        self.W_enc = nn.Parameter(W.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        self.k = k
        self.hook_sae_acts_pre = HookPoint()  # [batch, d_sae]
        self.hook_sae_acts_post = HookPoint()  # [batch, d_sae]
        self.hook_sae_recons = HookPoint()  # [batch, d_in]
        self.setup()

    def encode(self, x: Float[torch.Tensor, "batch d_in"]) -> Float[torch.Tensor, "batch d_sae"]:
        pre = self.hook_sae_acts_pre((x - self.b_dec) @ self.W_enc + self.b_enc)
        if self.k is None:
            return self.hook_sae_acts_post(F.relu(pre))
        top = pre.topk(self.k, dim=-1)
        return self.hook_sae_acts_post(torch.zeros_like(pre).scatter(-1, top.indices, F.relu(top.values)))

    def decode(self, acts: Float[torch.Tensor, "batch d_sae"]) -> Float[torch.Tensor, "batch d_in"]:
        return self.hook_sae_recons(acts @ self.W_dec + self.b_dec)

    def forward(self, x: Float[torch.Tensor, "batch d_in"]) -> Float[torch.Tensor, "batch d_in"]:
        return self.decode(self.encode(x))


@torch.no_grad()
def collect_activations(
    encoder: Any, hook_name: str, tokens: Int[torch.Tensor, "n pos"], pos: int | None = None
) -> Float[torch.Tensor, "n_rows d"]:
    """The activations of ``encoder`` (a tower) at ``hook_name`` over ``tokens``: ``[n, d]`` for a pooled hook or
    at position ``pos``; ``[n * pos, d]`` (every position) for a per-position hook with ``pos=None``."""
    _, cache = encoder.run_with_cache(tokens, names_filter=hook_name)
    act = cache[hook_name]
    if act.ndim == 3:
        act = act[:, pos] if pos is not None else act.reshape(-1, act.shape[-1])
    elif act.ndim != 2:
        raise ValueError(f"{hook_name!r} has shape {list(act.shape)}; an SAE needs [batch, d] or [batch, pos, d]")
    return act.detach().float()


def train_sae(
    acts: Float[torch.Tensor, "n d_in"],
    d_sae: int,
    *,
    k: int | None = None,
    l1: float = 1e-3,
    steps: int = 2000,
    lr: float = 1e-3,
    batch_size: int = 256,
    seed: int = 0,
) -> tuple[SparseAutoencoder, dict[str, float]]:
    """Fit an SAE to ``acts`` (Adam; ReLU + ``l1`` penalty, or top-``k``; decoder rows kept at unit norm).

    Returns the SAE (eval mode) and ``{"mse", "fvu", "l0", "dead"}`` on all of ``acts``: mean squared error, the
    fraction of variance unexplained, mean number of active features, and the fraction of features never active.
    """
    if acts.ndim != 2 or acts.shape[0] < 2:
        raise ValueError(f"train_sae needs activations [n >= 2, d], got {list(acts.shape)}")
    if not torch.isfinite(acts).all():
        raise ValueError("train_sae: the activations are not finite")
    sae = SparseAutoencoder(acts.shape[1], d_sae, k=k, seed=seed)
    with torch.no_grad():
        sae.b_dec.copy_(acts.mean(0))
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = acts[torch.randint(0, acts.shape[0], (min(batch_size, acts.shape[0]),), generator=gen)]
        z = sae.encode(x)
        loss = F.mse_loss(sae.decode(z), x)
        if k is None:
            loss = loss + l1 * z.abs().sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            sae.W_dec.div_(sae.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8))
    sae.eval()
    with torch.no_grad():
        z = sae.encode(acts)
        rec = sae.decode(z)
        mse = F.mse_loss(rec, acts).item()
        fvu = ((rec - acts).pow(2).sum() / (acts - acts.mean(0)).pow(2).sum()).item()
        report = {
            "mse": mse,
            "fvu": fvu,
            "l0": (z > 0).float().sum(-1).mean().item(),
            "dead": (z.max(0).values <= 0).float().mean().item(),
        }
    return sae, report
