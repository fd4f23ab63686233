"""Why a one-layer vision tower prefers one side consistently (Paper App. I, Fig. 19): the consistency condition
and the two RoPE mechanisms.

For an image with object X at input position a and Y at b > a, the CLS query q (``hook_q`` at position 0, i.e.
C W_Q + b_Q) gives logits S_x, S_y. A head prefers the same *side* whatever the labels when
``(S_x - S_y)(S'_y - S'_x) > 0``, with ' the image with X and Y swapped (Eq. 8). All differences here are
left minus right, as in App. I, and divided by sqrt(d_head) like ``hook_attn_scores``.

- Learned positions (Eq. 8-13): ``S_x - S_y = T + Π`` with ``T = q W_K^T (E_x - E_y)`` and
  ``Π = q W_K^T (P_a - P_b)``; the swapped image gives ``-T + Π``, so the condition is ``|Π| > |T|``.
- RoPE (Eq. 15-23): keys are rotated after projection, ``k_x = R_a (W_K E_x + b_K)``, so
  ``S_x - S_y = T1 + Π_bias`` with ``T1 = q (R_a W_K E_x - R_b W_K E_y)``, ``T2 = q (R_a W_K E_y - R_b W_K E_x)``
  and ``Π_bias = q (R_a - R_b) b_K``; the condition is ``(T1 + Π_bias)(T2 + Π_bias) > 0`` (Eq. 23).
  Mechanism 1 is the bias gradient Π_bias; mechanism 2 is a low-rank W_K putting every label's key near one
  direction v (``W_K E_i ≈ α_i v``, Eq. 24), whose rotated overlap ``ρ_a = q R_a v`` then differs by position.

Fig. 19 panels: (a) ``consistency_condition`` rates (``full`` = Eq. 23, ``no_bias`` = T1 T2 > 0, ``pc1`` = T1 T2 > 0
with keys replaced by their PC1 approximation); (b) ``bias_gradient`` (Π_bias by distance b - a); (c) ``key_pca``;
(d) ``key_effective_rank``; (e) cosines of PC1 with W_K's first right singular vectors (``key_pca``);
(f) ``rho_profile``. ``rope_mechanism`` returns them all.

The analysis is of layer 0, where the residual at each position is the token embedding alone (RoPE) or token plus
positional embedding (learned); queries and keys are read from a cache, so LayerNorm before layer 0 is handled
for RoPE (the key is then that of the normalised embedding). Eq. 8 with learned positions needs no LayerNorm.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8, positional="rope"), seed=0).eval()
    >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    >>> cc = consistency_condition(m.vision, ds.splits["val_unseen"])
    >>> sorted(k for k in cc if k.startswith("rate"))
    ['rate_full', 'rate_no_bias', 'rate_pc1']
    >>> key_effective_rank(m.vision)["rank"].shape  # [n_heads, 3 thresholds]
    torch.Size([4, 3])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hooked_clip1d.analysis.hooks import check_eval
from hooked_clip1d.analysis.mechanism.heads import cls_query_meeting, two_object_images
from hooked_clip1d.data.dataset import Split
from hooked_clip1d.model.encoders import HookedEncoder, HookedVisionEncoder
from hooked_clip1d.model.functional import rotate
from hooked_clip1d.settings.checks import check_label_list


def _check_vision(model: HookedEncoder, what: str) -> None:
    if not isinstance(model, HookedVisionEncoder):
        raise TypeError(f"{what} needs the vision tower (model.vision), got {type(model).__name__}")


def _check_rope(model: HookedEncoder, what: str) -> None:
    _check_vision(model, what)
    if model.cfg.positional != "rope":
        raise ValueError(
            f"{what} analyses rotary position embeddings (App. I.3) and needs a vision tower with "
            f"positional='rope'; this one has positional={model.cfg.positional!r}"
        )


@torch.no_grad()
def _layer0_qk(model: HookedEncoder, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """CLS query [h, dh] and each label's token key before rotation, without b_K, [n_labels, h, dh], read from
    layer 0's ``hook_q``/``hook_k`` on one-object images (label at pixel 0)."""
    v = model.cfg.vocab
    imgs = torch.zeros(len(labels), model.cfg.n_ctx, dtype=torch.long, device=model.W_E.device)
    imgs[:, 0] = v.cls
    imgs[:, 1] = labels
    _, cache = model.run_with_cache(imgs, names_filter=("blocks.0.attn.hook_q", "blocks.0.attn.hook_k"))
    q = cache["q", 0][:, 0]  # [n, h, dh]
    if not torch.allclose(q, q[:1].expand_as(q), atol=1e-5, rtol=1e-5):
        raise ValueError("the layer-0 CLS query depends on the image; the App. I analysis assumes it does not")
    k = cache["k", 0][:, 1] - model.blocks[0].attn.b_K  # position 1 holds the label; RoPE keys are pre-rotation
    return q[0], k


def _rotate(vecs: torch.Tensor, model: HookedEncoder) -> torch.Tensor:
    """``R_a v`` for every input position a: [..., h, dh] -> [..., n_ctx, h, dh]."""
    attn = model.blocks[0].attn
    lead = vecs.shape[:-2]
    flat = vecs.reshape(-1, *vecs.shape[-2:])  # [N, h, dh]
    x = flat[:, None].expand(-1, model.cfg.n_ctx, -1, -1)
    out = rotate(x, attn.rotary_sin[:, None], attn.rotary_cos[:, None])  # tables [n_ctx, 1, rotary_dim]
    return out.reshape(*lead, model.cfg.n_ctx, *vecs.shape[-2:])


def _rot_logits(q: torch.Tensor, vecs: torch.Tensor, model: HookedEncoder) -> torch.Tensor:
    """``q_h . R_a v_h / sqrt(d_head)`` for every position: [..., h, dh] -> [..., n_ctx, h]."""
    return torch.einsum("hd,...phd->...ph", q, _rotate(vecs, model)) / model.cfg.attn_scale


def _pc1(keys: torch.Tensor, center: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per head: explained-variance ratios [h, r], PC1 [h, dh] (sign: mean projection >= 0), alphas [n, h]."""
    X = keys.transpose(0, 1)  # [h, n, dh]
    Xc = X - X.mean(1, keepdim=True) if center else X
    _, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
    ratio = S**2 / (S**2).sum(-1, keepdim=True).clamp_min(1e-30)
    v = Vh[:, 0]  # [h, dh]
    alpha = torch.einsum("hnd,hd->nh", X, v)
    flip = torch.where(alpha.mean(0) < 0, -1.0, 1.0)
    return ratio, v * flip[:, None], alpha * flip


@torch.no_grad()
def consistency_condition(model: HookedEncoder, split: Split, pca_center: bool = True) -> dict[str, torch.Tensor]:
    """Per two-object image of ``split`` and head: the App. I decomposition of the CLS logit difference and whether
    the consistency condition holds; rates per head (Fig. 19a).

    Learned positions (Eq. 8): ``T``, ``Pi``, ``holds`` ([n, h]) and ``rate`` ([h]).
    RoPE (Eq. 23): ``T1``, ``T2``, ``Pi_bias``, ``holds_full`` / ``holds_no_bias`` / ``holds_pc1`` and the rates
    ``rate_full`` / ``rate_no_bias`` / ``rate_pc1`` (PC1 of the keys of the labels in ``split``, centred when
    ``pca_center``). Both: ``score_diff`` [n, h], the left-minus-right logits of the actual forward pass (equal to
    ``T + Pi`` or ``T1 + Pi_bias``), ``prefer_left`` [h] (how often the head's CLS logit is larger on the left
    object), ``objects`` and ``positions`` (pixel indices) [n, 2].
    """
    _check_vision(model, "consistency_condition")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    cfg = model.cfg
    if cfg.positional == "none":
        raise ValueError("consistency_condition needs positional information; this tower has positional='none'")
    images, pos, objs = two_object_images(model, split)
    _, cache = model.run_with_cache(images, names_filter="blocks.0.attn.hook_attn_scores")
    ar = torch.arange(len(images), device=images.device)
    row = cache["attn_scores", 0][:, :, 0]  # [n, h, k]
    a, b = pos[:, 0], pos[:, 1]
    score_diff = row[ar, :, a] - row[ar, :, b]
    out: dict[str, torch.Tensor] = {"score_diff": score_diff, "prefer_left": (score_diff > 0).float().mean(0)}
    out["objects"], out["positions"] = objs, pos - 1
    x, y = objs[:, 0], objs[:, 1]
    if cfg.positional == "learned":
        if cfg.normalization_type is not None:
            raise ValueError(
                "Eq. 8 splits the logit into token and position parts, which LayerNorm mixes; this tower has "
                f"normalization_type={cfg.normalization_type!r}"
            )
        W_K, s = model.blocks[0].attn.W_K, cfg.attn_scale
        _layer0_qk(model, x[:1])  # refuses a CLS query that depends on the image
        q_E, q_P = cls_query_meeting(model, "E"), cls_query_meeting(model, "P")  # less the terms the tower removes
        kE = torch.einsum("nm,hmd->nhd", model.W_E, W_K)  # [vocab, h, dh]
        kP = torch.einsum("pm,hmd->phd", model.W_pos, W_K)  # [n_ctx, h, dh]
        T = torch.einsum("hd,nhd->nh", q_E, kE[x] - kE[y]) / s
        Pi = torch.einsum("hd,nhd->nh", q_P, kP[a] - kP[b]) / s
        holds = (T + Pi) * (-T + Pi) > 0
        out.update(T=T, Pi=Pi, holds=holds, rate=holds.float().mean(0))
        return out
    labels = torch.unique(objs)
    q, keys = _layer0_qk(model, labels)  # keys [n_lab, h, dh]
    idx = {int(lab): i for i, lab in enumerate(labels.tolist())}
    xi = torch.tensor([idx[int(t)] for t in x], device=x.device)
    yi = torch.tensor([idx[int(t)] for t in y], device=y.device)
    S_tok = _rot_logits(q, keys, model)  # [n_lab, n_ctx, h]: q R_p W_K E_i
    b_K = model.blocks[0].attn.b_K
    S_bias = _rot_logits(q, b_K, model)  # [n_ctx, h]
    T1 = S_tok[xi, a] - S_tok[yi, b]
    T2 = S_tok[yi, a] - S_tok[xi, b]
    Pi_bias = S_bias[a] - S_bias[b]
    _, v, alpha = _pc1(keys, pca_center)  # v [h, dh], alpha [n_lab, h]
    rho = _rot_logits(q, v, model)  # [n_ctx, h]
    T1p = alpha[xi] * rho[a] - alpha[yi] * rho[b]
    T2p = alpha[yi] * rho[a] - alpha[xi] * rho[b]
    holds = {
        "full": (T1 + Pi_bias) * (T2 + Pi_bias) > 0,
        "no_bias": T1 * T2 > 0,
        "pc1": T1p * T2p > 0,
    }
    out.update(T1=T1, T2=T2, Pi_bias=Pi_bias)
    for k, h in holds.items():
        out[f"holds_{k}"] = h
        out[f"rate_{k}"] = h.float().mean(0)
    return out


@torch.no_grad()
def bias_gradient(model: HookedEncoder) -> dict[str, torch.Tensor]:
    """Mechanism 1: ``Π_bias(a, b) = q (R_a - R_b) b_K`` for every pair of pixel positions a < b (Fig. 19b).

    Returns ``matrix`` [h, d_image, d_image] (pixel indices; NaN where a >= b), ``distance`` [d_image - 1]
    (1..d_image-1) and ``mean`` / ``std`` [h, d_image - 1] over the pairs at each distance b - a.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, positional="rope"), seed=0).eval()
        >>> bias_gradient(m.vision)["mean"].shape
        torch.Size([4, 9])
    """
    _check_rope(model, "bias_gradient")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    q, _ = _layer0_qk(model, torch.tensor([1], device=model.W_E.device))
    S_bias = _rot_logits(q, model.blocks[0].attn.b_K, model)[1:]  # pixels only: [D, h]
    D = S_bias.shape[0]
    M = S_bias[:, None, :] - S_bias[None, :, :]  # [a, b, h]
    pa, pb = torch.meshgrid(torch.arange(D), torch.arange(D), indexing="ij")
    upper = (pb > pa).to(M.device)
    matrix = torch.where(upper[..., None], M, torch.full_like(M, float("nan"))).permute(2, 0, 1)
    dist = torch.arange(1, D)
    means, stds = [], []
    for d in dist.tolist():
        vals = M[(pb - pa == d).to(M.device)]  # [D - d, h]
        means.append(vals.mean(0))
        stds.append(vals.std(0, unbiased=False))
    return {"matrix": matrix, "distance": dist, "mean": torch.stack(means, -1), "std": torch.stack(stds, -1)}


def _labels(model: HookedEncoder, labels: Sequence[int] | torch.Tensor | Split) -> torch.Tensor:
    n = model.cfg.n_labels
    if isinstance(labels, Split):
        objs = labels.objects
        labs = torch.unique(objs[objs > 0])
        if labs.numel() < 2:
            raise ValueError(f"need at least 2 labels for a PCA of the keys, got {labs.tolist()}")
        if bool(((labs < 1) | (labs > n)).any()):  # a split of a larger vocabulary
            raise ValueError(f"labels must be in 1..{n}, got {labs.tolist()}")
    else:  # a repeat would weigh its key twice in the PCA and the profile; a float or bool be truncated or read 0/1
        given = labels.flatten() if isinstance(labels, torch.Tensor) else labels
        labs = torch.tensor(check_label_list(given, n, "labels", need=2), dtype=torch.long)
    return labs.to(model.W_E.device)


@torch.no_grad()
def key_pca(
    model: HookedEncoder, labels: Sequence[int] | torch.Tensor | Split, center: bool = True
) -> dict[str, torch.Tensor]:
    """PCA of the token keys ``W_K E_i`` (no bias, before rotation) of ``labels`` (or a split's labels), per head
    (Fig. 19c, e).

    Returns ``explained_variance_ratio`` [h, r], ``pc1`` [h, d_head] (the Eq. 24 direction v), ``alpha``
    [n_labels, h] (each key's projection on v, sign chosen so their mean is >= 0), ``labels``, and
    ``cos_singular`` [h, 2]: |cos| of PC1 with the first two right singular vectors (u1, u2) of ``W_K[h]``
    ([d_model, d_head]), i.e. whether the keys' low dimension is inherited from a low-rank W_K.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, positional="rope"), seed=0).eval()
        >>> r = key_pca(m.vision, [1, 2, 3, 4, 5])
        >>> r["explained_variance_ratio"].sum(-1).allclose(torch.ones(4))
        True
    """
    _check_rope(model, "key_pca")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    labs = _labels(model, labels)
    _, keys = _layer0_qk(model, labs)
    ratio, v, alpha = _pc1(keys, center)
    _, _, Vh = torch.linalg.svd(model.blocks[0].attn.W_K, full_matrices=False)  # [h, dh, dh]
    cos = torch.einsum("hd,hkd->hk", v, Vh[:, :2]).abs()
    return {"labels": labs, "explained_variance_ratio": ratio, "pc1": v, "alpha": alpha, "cos_singular": cos}


@torch.no_grad()
def key_effective_rank(
    model: HookedEncoder, layer: int = 0, thresholds: Sequence[float] = (0.9, 0.95, 0.99)
) -> dict[str, torch.Tensor]:
    """Effective rank of each head's ``W_K`` (Fig. 19d): the fewest singular values whose squares (energy) reach
    each threshold of the total. Works on any tower and layer (it reads only weights).

    Returns ``cumulative`` [h, min(d_model, d_head)] (cumulative energy fraction), ``thresholds`` and ``rank``
    [h, len(thresholds)] (ints).

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
        >>> key_effective_rank(m.vision, thresholds=[1.0])["rank"].flatten().tolist()  # a random W_K: full rank
        [32, 32, 32, 32]
    """
    if not 0 <= layer < model.cfg.n_layers:
        raise ValueError(f"layer must be in 0..{model.cfg.n_layers - 1}, got {layer}")
    th = torch.tensor([float(t) for t in thresholds])
    if th.numel() == 0 or not bool(((th > 0) & (th <= 1)).all()):  # NaN fails both comparisons: refused too
        raise ValueError(f"thresholds must be in (0, 1], got {list(thresholds)}")
    S = torch.linalg.svdvals(model.blocks[layer].attn.W_K.detach().float().cpu())  # [h, r]
    energy = S**2
    cum = energy.cumsum(-1) / energy.sum(-1, keepdim=True).clamp_min(1e-30)
    # smallest r with cum[r - 1] >= t (a hair of tolerance so that t = 1.0 is reached despite rounding)
    rank = (cum[:, None, :] < th[None, :, None] - 1e-6).sum(-1) + 1
    return {"cumulative": cum, "thresholds": th, "rank": rank.clamp(max=S.shape[-1])}


@torch.no_grad()
def rho_profile(
    model: HookedEncoder, labels: Sequence[int] | torch.Tensor | Split, center: bool = True
) -> dict[str, torch.Tensor]:
    """Mechanism 2 (Fig. 19f): ``ρ_a = q R_a v / sqrt(d_head)`` for each pixel position a (v = PC1 of the keys of
    ``labels``) and the token scalars ``α_i`` of ``W_K E_i ≈ α_i v``. A monotonic ρ with α of one sign makes a
    head prefer one side (Eq. 31).

    Returns ``rho`` [h, d_image], ``alpha`` [n_labels, h] and ``labels``.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, positional="rope"), seed=0).eval()
        >>> rho_profile(m.vision, [1, 2, 3])["rho"].shape
        torch.Size([4, 10])
    """
    _check_rope(model, "rho_profile")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    labs = _labels(model, labels)
    q, keys = _layer0_qk(model, labs)
    _, v, alpha = _pc1(keys, center)
    rho = _rot_logits(q, v, model)[1:].T  # pixels only, [h, D]
    return {"rho": rho, "alpha": alpha, "labels": labs}


def rope_mechanism(
    model: HookedEncoder, split: Split, center: bool = True, thresholds: Sequence[float] = (0.9, 0.95, 0.99)
) -> dict[str, Any]:
    """Every Fig. 19 quantity for a RoPE vision tower on ``split`` (the paper uses the unseen pairs):
    ``consistency`` (``consistency_condition``), ``bias_gradient``, ``key_pca``, ``effective_rank`` and ``rho``.
    ``to_jsonable`` (in ``analysis.mechanism.heads``) turns the result into JSON.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8, positional="rope"), seed=0).eval()
        >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
        >>> sorted(rope_mechanism(m.vision, ds.splits["val_unseen"]))
        ['bias_gradient', 'consistency', 'effective_rank', 'key_pca', 'rho']
    """
    _check_rope(model, "rope_mechanism")
    return {
        "consistency": consistency_condition(model, split, pca_center=center),
        "bias_gradient": bias_gradient(model),
        "key_pca": key_pca(model, split, center=center),
        "effective_rank": key_effective_rank(model, 0, thresholds),
        "rho": rho_profile(model, split, center=center),
    }
