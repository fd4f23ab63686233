"""Per-head attention roles (Paper Sec. 4-6, Fig. 4c, 5c-d, 6; App. F).

- ``cls_object_bias``: which object the vision CLS token attends to most, per head (Fig. 4c).
- ``label_pe_deltas`` and ``classify_head_roles``: for each two-object image and head, the right-minus-left
  difference of the CLS-row attention logits from the label-specific term ``E W_QK E^T`` (Δlabel) and from the
  positional cross term ``E W_QK P^T`` (Δp.e.), and the relational / label-specific classification (Fig. 5c, d).
- ``text_eot_bias``: the EOT row of the text tower's attention per head, averaged over captions, and how often
  the first-mentioned object (the subject) gets more attention than the second (Fig. 6).
- ``pair_captions``: the two-object captions of a dataset's unseen (held-out) label pairs, the Fig. 6 inputs.

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8), seed=0).eval()
    >>> ds = build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3))
    >>> bias = cls_object_bias(m.vision, ds.splits["val_unseen"])
    >>> sorted(bias)
    ['left', 'other', 'right']
    >>> bias["left"].shape
    torch.Size([1, 4])
    >>> roles = classify_head_roles(label_pe_deltas(m.vision, ds.splits["val_unseen"]))
    >>> roles["relational"].shape
    torch.Size([4])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Int

from hooked_clip1d.analysis.hooks import Hooks, check_eval
from hooked_clip1d.data.dataset import Dataset, Split
from hooked_clip1d.model.encoders import HookedEncoder, HookedTextEncoder, HookedVisionEncoder


def to_jsonable(obj: Any) -> Any:
    """Tensors -> (nested) lists, tuples -> lists, recursively through dicts and lists (for ``json.dumps``).

    Example:
        >>> to_jsonable({"a": torch.tensor([1.0, 2.0]), "b": (1, torch.tensor(3))})
        {'a': [1.0, 2.0], 'b': [1, 3]}
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float | int | str | bool) or obj is None:
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"to_jsonable: cannot convert {type(obj).__name__}")


def cls_query_meeting(vision: HookedVisionEncoder, key: str) -> Float[torch.Tensor, "head d_head"]:
    """Layer 0's CLS query as it meets key component ``key`` (``"E"``: the token embeddings, ``"P"``: the positional
    embeddings) in the tower's scores: ``(W_E[CLS] + W_pos[0]) W_Q + b_Q`` less the parts whose term the tower removes
    in its own forward pass (``cfg.ablated_terms``: with ``EP`` removed the token part never meets a key position).
    Layer 0 without LayerNorm, learned positions (its input is ``W_E + W_pos`` exactly).

    Example:
        >>> from hooked_clip1d import VisionConfig
        >>> enc = HookedVisionEncoder(VisionConfig(n_labels=5, init_seed=0, ablated_terms=("EP",))).eval()
        >>> a = enc.blocks[0].attn
        >>> q = torch.einsum("m,hmd->hd", enc.W_pos[0], a.W_Q) + a.b_Q  # EP removed: the P and bias parts
        >>> bool(torch.allclose(cls_query_meeting(enc, "P"), q))
        True
    """
    if key not in ("E", "P"):
        raise ValueError(f"key must be 'E' or 'P', got {key!r}")
    attn = vision.blocks[0].attn
    parts = {
        "E": torch.einsum("m,hmd->hd", vision.W_E[vision.cfg.vocab.cls], attn.W_Q),
        "P": torch.einsum("m,hmd->hd", vision.W_pos[0], attn.W_Q),
        "B": attn.b_Q,
    }
    gone = set(vision.cfg.ablated_terms or ())
    return sum((part for q, part in parts.items() if q + key not in gone), torch.zeros_like(attn.b_Q))


def two_object_images(model: HookedVisionEncoder, split: Split) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two-object images of ``split``, their input positions (pixel + 1) [n, 2] and labels [n, 2].

    Example:
        >>> from hooked_clip1d import DataConfig, VisionConfig, build_dataset
        >>> from hooked_clip1d.model.encoders import HookedVisionEncoder
        >>> ds = build_dataset(DataConfig(n_labels=6, n_heldout=2, n2=2))
        >>> enc = HookedVisionEncoder(VisionConfig(n_labels=6))
        >>> images, pos, labels = two_object_images(enc, ds.splits["val_unseen"])
        >>> images.shape[0] == pos.shape[0] == labels.shape[0], pos.shape[1]
        (True, 2)
    """
    if not isinstance(split, Split):
        raise TypeError(f"expected a data.Split (e.g. dataset.splits['val_unseen']), got {type(split).__name__}")
    pair = split.is_pair
    if not bool(pair.any()):
        raise ValueError(f"split {split.name!r} has no two-object images")
    model.validate_tokens(split.images[pair])  # a split of another vocabulary (e.g. 25 labels): named, not IndexError
    dev = model.W_E.device
    return split.images[pair].to(dev), split.positions[pair].to(dev) + 1, split.objects[pair].to(dev)


@torch.no_grad()
def cls_object_bias(model: HookedVisionEncoder, split: Split, fwd_hooks: Hooks = ()) -> dict[str, torch.Tensor]:
    """For each layer and head, the fraction of two-object images whose CLS row attends most to the left object,
    to the right object, or to another token (``left``, ``right``, ``other``: each [n_layers, n_heads]). A pruned
    head (``cfg.pruned_heads``: its output is zeroed, its pattern read by nothing) is NaN in all three."""
    if not isinstance(model, HookedVisionEncoder):
        raise TypeError("cls_object_bias needs the vision tower (model.vision)")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    images, pos, _ = two_object_images(model, split)
    _, cache = model.run_with_cache(images, names_filter=lambda n: n.endswith("hook_pattern"), fwd_hooks=fwd_hooks)
    L = model.cfg.n_layers
    cls_rows = torch.stack([cache["pattern", layer][:, :, 0, :] for layer in range(L)])  # [L, b, h, k]
    top = cls_rows.argmax(-1)  # [L, b, h]
    left = (top == pos[None, :, 0, None]).float().mean(1)
    right = (top == pos[None, :, 1, None]).float().mean(1)
    out = {"left": left, "right": right, "other": (1 - left - right).clamp(min=0.0)}
    for layer, head in model.cfg.pruned_heads:  # near-zero weights' argmax was reported as a side (other = 1.0)
        for v in out.values():
            v[layer, head] = float("nan")
    return out


# ---- Fig. 5c, d: label-specific vs positional contributions ---------------------------------------------------------
def _check_embedding_layer(model: HookedEncoder, layer: int, what: str) -> None:
    cfg = model.cfg
    if isinstance(layer, bool) or layer != 0:  # False == 0 named hook "blocks.False..."
        raise ValueError(
            f"{what} is defined at layer 0, where the residual is exactly token + positional embedding; "
            f"got layer={layer}"
        )
    if cfg.normalization_type is not None:
        raise ValueError(
            f"{what} needs a tower without LayerNorm (LN mixes token and position non-linearly); "
            f"this tower has normalization_type={cfg.normalization_type!r}"
        )
    if cfg.positional != "learned":
        raise ValueError(
            f"{what} needs learned additive positional embeddings (the p.e. in E W_QK P^T); this tower has "
            f"positional={cfg.positional!r} (for RoPE see hooked_clip1d.analysis.mechanism.rope)"
        )


@torch.no_grad()
def label_pe_deltas(model: HookedEncoder, split: Split, layer: int = 0) -> dict[str, torch.Tensor]:
    """Δlabel and Δp.e. of every two-object image of ``split`` and every head (Fig. 5c).

    With E the token and P the positional embeddings of the image, Δlabel is the right-minus-left difference of the
    CLS row of ``E W_Q W_K^T E^T`` at the two object positions and Δp.e. that of ``E W_Q W_K^T P^T`` (query from
    the CLS token embedding, key from the objects' positional embeddings), both divided by sqrt(d_head) as the
    scores at ``hook_attn_scores`` are. Positive values favour the right object.

    Returns ``delta_label``, ``delta_pe`` and ``delta_score`` (the right-minus-left difference of the full scores)
    [n, n_heads] floats; ``attends_right`` [n, n_heads] bool (the CLS row gives the right object more attention than
    the left one); ``objects`` and ``positions`` [n, 2] (left/right labels and pixel indices).
    """
    if not isinstance(model, HookedVisionEncoder):
        raise TypeError("label_pe_deltas needs the vision tower (model.vision)")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    _check_embedding_layer(model, layer, "the Δlabel / Δp.e. decomposition")
    images, pos, objs = two_object_images(model, split)
    names = ("hook_embed", "hook_pos_embed", f"blocks.{layer}.attn.hook_attn_scores")
    _, cache = model.run_with_cache(images, names_filter=lambda n: n in names)
    E, P = cache["hook_embed"], cache["hook_pos_embed"]  # [n, p, dm]
    attn = model.blocks[layer].attn
    scale = model.cfg.attn_scale
    q_cls = torch.einsum("bm,hmd->bhd", E[:, 0], attn.W_Q)  # query from the CLS token embedding only
    ar = torch.arange(len(images), device=images.device)
    gone = set(model.cfg.ablated_terms or ()) if layer == 0 else set()  # terms the tower removes itself (e.g. EP)

    def right_minus_left(X: torch.Tensor, term: str) -> torch.Tensor:
        k = torch.einsum("bpm,hmd->bhpd", X, attn.W_K)  # [n, h, p, dh]
        logits = torch.einsum("bhd,bhpd->bhp", q_cls, k) / scale  # CLS row [n, h, p]
        diff = logits[ar, :, pos[:, 1]] - logits[ar, :, pos[:, 0]]
        return torch.zeros_like(diff) if term in gone else diff  # a removed term contributes nothing

    scores = cache["attn_scores", layer][:, :, 0]  # [n, h, p]
    d_score = scores[ar, :, pos[:, 1]] - scores[ar, :, pos[:, 0]]
    return {
        "delta_label": right_minus_left(E, "EE"),
        "delta_pe": right_minus_left(P, "EP"),
        "pruned": pruned_mask(model, layer),
        "delta_score": d_score,
        "attends_right": d_score > 0,
        "objects": objs,
        "positions": pos - 1,
    }


def classify_head_roles(deltas: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Relational vs label-specific attention per image and head, from ``label_pe_deltas`` output (Fig. 5d; its
    tensors or ``to_jsonable``'s lists).

    An (image, head) is *relational* when ``|Δlabel| < |Δp.e.|`` and the sign of Δp.e. matches the head's
    geometric direction, i.e. the side its positional gradient favours on most images (majority sign of Δp.e.;
    +1 = right, -1 = left). Otherwise it is *label-specific*. Sec. 5 notes that P(relational) should be close to
    ``|P(left) - P(right)|`` of ``cls_object_bias`` (Fig. 4c), which ``prefer_gap`` reports from the same images.

    Returns per head [n_heads] (NaN for the heads ``deltas["pruned"]`` marks): ``direction`` (+1/-1), ``relational``,
    ``label_specific``, ``relational_left`` and ``relational_right`` (``|Δlabel| < |Δp.e.|`` with Δp.e. < 0 / > 0,
    whatever the head's direction), ``prefer_right`` (fraction of images whose CLS row prefers the right object) and
    ``prefer_gap`` (``|2 prefer_right - 1|``); and ``relational_mask`` [n, n_heads] bool.

    Example:
        >>> d = {"delta_label": torch.tensor([[0.1], [2.0]]), "delta_pe": torch.tensor([[1.0], [0.5]]),
        ...      "attends_right": torch.tensor([[True], [True]])}
        >>> classify_head_roles(d)["relational"].tolist()
        [0.5]
    """
    try:
        dl, dp = deltas["delta_label"], deltas["delta_pe"]
    except KeyError as e:
        raise ValueError(f"classify_head_roles needs label_pe_deltas output; missing {e}") from None
    dl, dp = torch.as_tensor(dl), torch.as_tensor(dp)  # to_jsonable's nested lists too
    if dl.shape != dp.shape or dl.ndim != 2:
        raise ValueError(
            f"delta_label and delta_pe must both be [n, n_heads]; got {tuple(dl.shape)}, {tuple(dp.shape)}"
        )
    pruned = torch.as_tensor(deltas.get("pruned", torch.zeros(dl.shape[1], dtype=torch.bool)), dtype=torch.bool)
    sgn = torch.sign(dp)
    vote = sgn.sum(0)
    direction = torch.where(vote != 0, torch.sign(vote), torch.sign(dp.sum(0)))
    direction = torch.where(direction == 0, torch.ones_like(direction), direction)
    dominant = dl.abs() < dp.abs()
    relational = dominant & (sgn == direction)
    out = {
        "direction": direction,
        "relational": relational.float().mean(0),
        "label_specific": 1 - relational.float().mean(0),
        "relational_left": (dominant & (dp < 0)).float().mean(0),
        "relational_right": (dominant & (dp > 0)).float().mean(0),
        "relational_mask": relational,
    }
    if "attends_right" in deltas:
        pr = torch.as_tensor(deltas["attends_right"]).float().mean(0)
        out["prefer_right"] = pr
        out["prefer_gap"] = (2 * pr - 1).abs()
    if pruned.any():  # a pruned head's role read from near-zero weights (85 % "relational"): NaN, not a number
        for key, v in out.items():
            if key != "relational_mask":
                out[key] = v.float().masked_fill(pruned, float("nan"))
    return out


def pruned_mask(model: HookedEncoder, layer: int = 0) -> torch.Tensor:
    """[n_heads] bool: which heads of ``layer`` the tower prunes (``cfg.pruned_heads``: their output is zeroed).

    >>> from hooked_clip1d import VisionConfig
    >>> pruned_mask(HookedVisionEncoder(VisionConfig(n_labels=5, pruned_heads=((0, 1),)))).tolist()
    [False, True, False, False]
    """
    mask = torch.zeros(model.cfg.n_heads, dtype=torch.bool)
    for lay, head in model.cfg.pruned_heads:
        if lay == layer:
            mask[head] = True
    return mask


# ---- Fig. 6: the text tower's EOT -> word attention ---------------------------------------------------------------
def pair_captions(dataset: Dataset, which: str = "unseen", relation: str = "left") -> Int[torch.Tensor, "n 4"]:
    """Two-object captions of ``dataset``'s caption table whose labels are both held out (``which="unseen"``) or
    both in the training pairs (``"seen"``), with relation ``"left"`` or ``"right"`` (Fig. 6 uses unseen, left).

    Example:
        >>> from hooked_clip1d import DataConfig, build_dataset
        >>> caps = pair_captions(build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3)))
        >>> caps.shape  # 3 * 2 ordered pairs of the held-out labels 6..8
        torch.Size([6, 4])
    """
    if not isinstance(dataset, Dataset):  # a Split has no caption table (bare AttributeError 'vocab' before)
        raise TypeError(f"pair_captions takes the whole Dataset (build_dataset(...)), got {type(dataset).__name__}")
    if which not in ("unseen", "seen"):
        raise ValueError(f"which must be 'unseen' or 'seen', got {which!r}")
    if relation not in ("left", "right"):
        raise ValueError(f"relation must be 'left' or 'right', got {relation!r}")
    v, caps = dataset.vocab, dataset.captions
    rel = v.left_of if relation == "left" else v.right_of
    n_pair = dataset.config.n_pair
    a, b = caps[:, 0], caps[:, 2]
    held = (a > n_pair) & (b > n_pair) if which == "unseen" else (a <= n_pair) & (b <= n_pair) & (a > 0) & (b > 0)
    out = caps[(caps[:, 1] == rel) & held]
    if len(out) == 0:
        raise ValueError(
            f"the caption table has no {which}-pair {relation!r} captions "
            f"(caption_mode={dataset.config.caption_mode!r})"
        )
    return out


@torch.no_grad()
def text_eot_bias(
    model: HookedEncoder, captions: Int[torch.Tensor, "n 4"], fwd_hooks: Hooks = ()
) -> dict[str, torch.Tensor]:
    """The readout (EOT) row of the text tower's attention per layer and head over two-object captions (Fig. 6).

    Returns ``mean`` and ``std`` [n_layers, n_heads, pos] of the EOT row over the captions (Fig. 6b, c), and
    ``first`` / ``second`` [n_layers, n_heads]: the fraction of captions in which the first-mentioned object (the
    subject, position 0) / the second-mentioned object (position 2) gets more attention than the other one.
    ``first - second`` > 0 is the paper's "leftward" bias of a head.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> caps = m.text.to_tokens(["4 is on the left of 5", "5 is on the left of 4"])
        >>> r = text_eot_bias(m.text, caps)
        >>> r["mean"].shape, bool(((r["first"] + r["second"]) == 1).all())
        (torch.Size([1, 4, 4]), True)
    """
    if not isinstance(model, HookedTextEncoder):
        raise TypeError("text_eot_bias needs the text tower (model.text)")
    check_eval(model)  # dropout would draw the global RNG (and move what is read)
    captions = model.to_tokens(captions)
    v = model.cfg.vocab
    is_pair = (captions[:, 1] == v.left_of) | (captions[:, 1] == v.right_of)
    if not bool(is_pair.all()):
        i = int((~is_pair).nonzero()[0, 0])
        raise ValueError(
            f"text_eot_bias needs two-object captions ('X is on the left/right of Y'); caption {i} is "
            f"{v.caption_to_text(captions[i].cpu())!r}"
        )
    _, cache = model.run_with_cache(captions, names_filter=lambda n: n.endswith("hook_pattern"), fwd_hooks=fwd_hooks)
    ro = model.readout_positions(captions)
    ar = torch.arange(len(captions), device=captions.device)
    rows = torch.stack([cache["pattern", layer][ar, :, ro] for layer in range(model.cfg.n_layers)])  # [L, n, h, k]
    first = (rows[..., 0] > rows[..., 2]).float().mean(1)
    second = (rows[..., 2] > rows[..., 0]).float().mean(1)
    std = rows.std(1, unbiased=False)
    return {"mean": rows.mean(1), "std": std, "first": first, "second": second}
