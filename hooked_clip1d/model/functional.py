"""The maths both model definitions share, as plain functions of tensors (no parameters, no hooks).

``components``/``clip`` (the hooked model: one batch, a hook beside every op) and ``stacked`` (K models on a leading
axis, fused for speed) compute the same function two ways; what they have in common lives here once: LayerNorm
(``layer_norm``, its epsilon), the rotary tables and rotation, the attention-score scale, and the CLIP head (cosine
logits with a clamped temperature, the symmetric contrastive loss). The attention-score terms (E, P, B parts) live
beside this module in ``terms``. Leading dimensions are free: ``[B, ...]`` for the hooked model,
``[K, B, ...]`` for the stacked one.

Example:
    >>> import torch
    >>> img, txt = torch.randn(4, 8), torch.randn(4, 8)
    >>> logits = temperature(torch.tensor(2.0), 4.6) * cosine(img, txt)
    >>> float(symmetric_ce(logits)) > 0, symmetric_ce(torch.stack([logits, logits])).shape
    (True, torch.Size([2]))
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int

LN_EPS = 1e-5  # LayerNorm's epsilon (TransformerLens's and torch's default)


def layer_norm(
    x: Float[torch.Tensor, "*lead d_model"],
    w: torch.Tensor,
    b: torch.Tensor,
    hook_scale: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Float[torch.Tensor, "*lead d_model"]:
    """LayerNorm over the last dim, ``(x - mean) / sqrt(var + LN_EPS) * w + b`` (biased variance, as torch and TL).

    ``w`` and ``b`` broadcast against ``x`` (``[d_model]`` for one model; ``[K, 1, ..., d_model]`` stacked).
    ``hook_scale``: given (the hooked model's ``hook_scale``, fired on the scale ``[..., 1]``), the scale is computed
    explicitly and passed through it, so a hook may read or replace it; without it the same formula runs as torch's
    fused ``F.layer_norm`` kernel (the stacked engine). The two agree to float rounding (~1e-7), each is bit for bit
    what its caller computed before the two were merged here.

    Example:
        >>> x, w, b = torch.randn(2, 3, 8), torch.rand(8), torch.randn(8)
        >>> torch.allclose(layer_norm(x, w, b), layer_norm(x, w, b, hook_scale=lambda s: s), atol=1e-6)
        True
        >>> torch.allclose(layer_norm(x, w, b), F.layer_norm(x, (8,), w, b), atol=1e-6)
        True
    """
    if hook_scale is None:
        return torch.addcmul(b, F.layer_norm(x, (x.shape[-1],), eps=LN_EPS), w)
    x = x - x.mean(-1, keepdim=True)
    scale = hook_scale((x.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt())
    return x / scale * w + b


def attn_scale(d_head: int) -> float:
    """What attention scores are divided by: sqrt(d_head), as in TransformerLens.

    Example:
        >>> attn_scale(16)
        4.0
    """
    return d_head**0.5


def rotary_tables(
    n_ctx: int, rotary_dim: int, base: float | int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX-style (halves) rotary ``sin``, ``cos`` tables [n_ctx, rotary_dim] (TL's ``rotary_adjacent_pairs=False``),
    computed in float64 and cast to ``dtype``.

    Example:
        >>> sin, cos = rotary_tables(3, 4, 10000.0, torch.float32)
        >>> sin.shape, float(cos[0, 0])
        (torch.Size([3, 4]), 1.0)
    """
    freq = base ** (-torch.arange(0, rotary_dim // 2, dtype=torch.float64) * 2 / rotary_dim)
    angles = torch.arange(n_ctx, dtype=torch.float64)[:, None] * freq[None, :]  # [n_ctx, rd/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.sin().to(dtype), angles.cos().to(dtype)


def rotate(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """RoPE: rotate the first ``rotary_dim`` (= ``sin.shape[-1]``) features of ``x`` [..., d_head] by the angles of
    ``sin``/``cos`` (broadcast against ``x[..., :rotary_dim]``); the rest pass through.

    Example:
        >>> sin, cos = rotary_tables(2, 2, 10000.0, torch.float32)
        >>> rotate(torch.tensor([[1.0, 0.0, 5.0]]), sin[1:], cos[1:])  # position 1: by 1 radian
        tensor([[0.5403, 0.8415, 5.0000]])
    """
    rd = sin.shape[-1]
    half = rd // 2
    x_rot, x_pass = x[..., :rd], x[..., rd:]
    flipped = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
    return torch.cat([x_rot * cos + flipped * sin, x_pass], dim=-1)


def cosine(
    a: Float[torch.Tensor, "*lead n d"], b: Float[torch.Tensor, "*lead m d"]
) -> Float[torch.Tensor, "*lead n m"]:
    """Cosine similarity of every row of ``a`` with every row of ``b`` (per leading index)."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).transpose(-1, -2)


def temperature(log_scale: torch.Tensor, max_log_scale: float | torch.Tensor) -> torch.Tensor:
    """CLIP's inverse temperature ``exp(log_scale)``, clamped at ``exp(max_log_scale)`` (per member if stacked)."""
    return log_scale.clamp(max=max_log_scale).exp()


# How the contrastive loss treats two items of a batch whose captions are identical (``TrainConfig.negatives``):
# "all": standard CLIP (each image's only positive is its own caption; an identical caption elsewhere in the batch is
# a negative); "distinct": such a pair is neither a positive nor a negative (masked out in both directions);
# "shared": multi-positive (the targets are spread evenly over the identical captions / their images)
NEGATIVES = ("all", "distinct", "shared")


def same_caption(captions: Int[torch.Tensor, "*lead batch L"]) -> Bool[torch.Tensor, "*lead batch batch"]:
    """``out[..., i, j]``: captions i and j are the same token sequence (the diagonal is True).

    Example:
        >>> same_caption(torch.tensor([[1, 2], [3, 4], [1, 2]])).int()
        tensor([[1, 0, 1],
                [0, 1, 0],
                [1, 0, 1]], dtype=torch.int32)
    """
    return (captions.unsqueeze(-2) == captions.unsqueeze(-3)).all(-1)


def symmetric_ce(
    logits: Float[torch.Tensor, "*lead batch batch"],
    valid: Bool[torch.Tensor, "*lead batch"] | None = None,
    labels: torch.Tensor | None = None,
    same: Bool[torch.Tensor, "*lead batch batch"] | None = None,
    shared: Bool[torch.Tensor, "*lead"] | None = None,
) -> Float[torch.Tensor, "*lead"]:
    """The symmetric CLIP loss (mean of image->text and text->image cross-entropy, targets on the diagonal) of each
    leading index. ``valid``: rows that are real pairs (a short batch padded to size); a padded row weighs 0 and
    a valid image (caption) sees only valid captions (images). ``labels``: ``arange(batch)`` repeated over the
    leading indices, if the caller keeps one (saves a kernel per step).

    ``same`` (``same_caption`` of the batch's captions; None: standard CLIP, ``TrainConfig.negatives="all"``): the
    pairs whose captions are identical. Off its diagonal such a pair is, per leading index, masked out of both
    directions' softmax (``shared`` False: ``negatives="distinct"``) or a positive (``shared`` True:
    ``negatives="shared"``: image i's targets spread evenly over the captions identical to its own, and likewise
    caption i's over their images; its minimum is then the targets' entropy, a constant with no gradient). A leading
    index whose ``same`` is the identity is standard CLIP. With no repeated caption in a batch all three agree.

    Example:
        >>> logits = 10 * torch.eye(3)
        >>> logits[0, 2] = logits[2, 0] = logits[0, 0]  # images 0 and 2 have the same caption: a perfect model
        >>> same = same_caption(torch.tensor([[1, 2], [3, 4], [1, 2]]))
        >>> [round(float(symmetric_ce(logits, same=s, shared=m)), 4) for s, m in
        ...  [(None, None), (same, torch.tensor(False)), (same, torch.tensor(True))]]  # all, distinct, shared
        [0.4621, 0.0001, 0.4621]
    """
    B = logits.shape[-1]
    if same is not None:
        return _masked_symmetric_ce(logits, valid, same, shared)
    if logits.ndim == 2 and valid is None:
        labels = torch.arange(B, device=logits.device)
        return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
    lead = logits.shape[:-2]
    flat = logits.reshape(-1, B, B)
    n = flat.shape[0]
    if labels is None:
        labels = torch.arange(B, device=logits.device).repeat(n)
    if valid is None:
        li = F.cross_entropy(flat.reshape(n * B, B), labels, reduction="none").view(n, B).mean(1)
        lt = F.cross_entropy(flat.transpose(1, 2).reshape(n * B, B), labels, reduction="none").view(n, B).mean(1)
        return (0.5 * (li + lt)).view(lead)
    v = valid.reshape(n, B)
    mask = v[:, :, None] & ~v[:, None, :]  # valid image i, padded caption j
    inf = float("-inf")
    li = F.cross_entropy(flat.masked_fill(mask, inf).reshape(n * B, B), labels, reduction="none")
    lt = F.cross_entropy(flat.transpose(1, 2).masked_fill(mask, inf).reshape(n * B, B), labels, reduction="none")
    w = v.to(logits.dtype)
    return (0.5 * ((li.view(n, B) * w).sum(1) + (lt.view(n, B) * w).sum(1)) / w.sum(1)).view(lead)


def _masked_symmetric_ce(
    logits: torch.Tensor, valid: torch.Tensor | None, same: torch.Tensor, shared: torch.Tensor | None
) -> torch.Tensor:
    """``symmetric_ce`` with identical captions masked out (``shared`` False) or made positives (True)."""
    B = logits.shape[-1]
    lead = logits.shape[:-2]
    flat = logits.reshape(-1, B, B)
    n = flat.shape[0]
    eye = torch.eye(B, dtype=torch.bool, device=logits.device)
    S = same.reshape(n, B, B)
    drop = torch.zeros_like(S)
    if valid is not None:
        v = valid.reshape(n, B)
        S = S & v[:, :, None] & v[:, None, :]
        drop = v[:, :, None] & ~v[:, None, :]  # valid image i, padded caption j
    S = S | eye  # a padded row keeps its own diagonal target (it weighs 0)
    multi = torch.zeros(n, 1, 1, dtype=torch.bool, device=logits.device)
    if shared is not None:
        multi = shared.reshape(n, 1, 1).expand(n, 1, 1).to(torch.bool)
    off = S & ~eye
    drop = drop | (off & ~multi)  # distinct: identical captions leave the softmax
    S_t = S.to(logits.dtype)
    targets = torch.where(multi, S_t / S_t.sum(-1, keepdim=True), eye.to(logits.dtype))  # symmetric, as S is
    zero = targets == 0

    def direction(x: torch.Tensor) -> torch.Tensor:
        lsm = torch.log_softmax(x.masked_fill(drop, float("-inf")), dim=-1)
        return -(targets * lsm.masked_fill(zero, 0.0)).sum(-1)  # [n, B]

    li, lt = direction(flat), direction(flat.transpose(1, 2))
    if valid is None:
        return (0.5 * (li + lt).mean(1)).view(lead)
    w = valid.reshape(n, B).to(logits.dtype)
    return (0.5 * ((li * w).sum(1) + (lt * w).sum(1)) / w.sum(1)).view(lead)
