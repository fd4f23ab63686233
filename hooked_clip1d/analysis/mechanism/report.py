"""The paper's EP-gradient mechanism as one report per model, the CLS-row identifiability tools, and a probe set.

``mechanism_report(model)`` measures, on a 1-layer learned-position vision tower, every signature the paper uses
(Fig. 4c head bias, Fig. 5d relational share, Fig. 5e / 16 / 17 ablations, Fig. 13 XW_QKX^T share, Fig. 14 EP
monotonicity) plus the CLS-row quantities that decide between training recipes, on the paper's unseen-pair split and
on ``unseen_probe`` (every ordered unseen pair at every position pair: 20 x 45 = 900 images for Ntot = 20).
``mechanism_checks(report)`` states the pass criteria of the recipe study (``reproduce x8-recipe``); they were
written before its runs.
``gradient_sources`` finds, at any layer, the score terms that give the CLS row its monotonic gradient along the
image (``reproduce x5-two-layer``); ``single_head_mechanism`` reads a single-head sweep run's head bias and EP
gradient (``reproduce fig21``, ``x7-single-head-seeds``); ``spearman_position`` is their rank correlation.

**The CLS row is not identifiable.** CLS only ever sits at position 0 and position 0 only ever holds CLS, so the
model sees ``W_E[CLS] + W_pos[0]`` only. The paper's split of the CLS query into an "E" and a "P" part is a choice
of coordinates made by the optimiser (with weight decay on both rows their difference decays to 0 and EP equals PP
on the CLS row). ``move_cls_embedding`` moves the sum between the two rows (outputs unchanged, the paper's term
ablations changed); ``ablate_cls_key_position`` removes the key-position part of the CLS query as a whole, which
no such move can change. ``layer0_cls_position_rows`` is the same row at layer 0 of a deeper tower, and
``cls_label_pe_deltas`` reads Fig. 5c's Δlabel / Δp.e. with the whole CLS query (App. I's T and Π).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    >>> ds = unseen_probe(build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3)))
    >>> len(ds.splits["probe_unseen"])  # 3 x 2 ordered held-out pairs x 45 position pairs
    270
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float

from hooked_clip1d.analysis.hooks import Hook, check_eval
from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations
from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores, row_std_shares
from hooked_clip1d.analysis.mechanism.heads import (
    classify_head_roles,
    cls_object_bias,
    cls_query_meeting,
    label_pe_deltas,
    pruned_mask,
    two_object_images,
)
from hooked_clip1d.data.dataset import Dataset, Split, build_dataset
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.model.encoders import HookedVisionEncoder
from hooked_clip1d.settings.checks import check_int

PROBE = "probe_unseen"
FIG4B_IMAGE = "C . . 17 . . 19 . . . ."  # Fig. 4b's first image: the unseen pair (17, 19)

# the ablation conditions of the report: the paper's (Fig. 5e, 16, 17) and the CLS-query-invariant one
ABLATIONS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "EP": ("EP",),
    "PE": ("PE",),
    "PP": ("PP",),
    "BP": ("BP",),
    "EP+PE+PP+BP+VP": ("EP", "PE", "PP", "BP", "VP"),
}


def spearman_position(y: torch.Tensor) -> torch.Tensor:
    """Rank correlation of each row of ``y`` [..., n] with 0..n-1, ties given their average rank.

    A flat row has no ordering: its correlation is 0 (not the arbitrary +-1 that argsort ranks give). A row holding
    a NaN has none either: its correlation is NaN (a NaN compares false with everything, so its ranks were made up).

    Example:
        >>> y = torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 1.0, 1.0]])
        >>> spearman_position(y).round(decimals=6).tolist()
        [1.0, -1.0, 0.0]
        >>> round(spearman_position(torch.tensor([1.0, 1.0, 2.0])).item(), 4)  # ties share rank 0.5
        0.866
        >>> spearman_position(torch.tensor([float("nan"), 1.0, 2.0, 3.0])).item()
        nan
    """
    y = y.to(torch.float64)
    n = y.shape[-1]
    # average rank: (number of values below) + (number of equal values - 1) / 2
    below = (y[..., None, :] < y[..., :, None]).sum(-1).to(torch.float64)
    equal = (y[..., None, :] == y[..., :, None]).sum(-1).to(torch.float64)
    ranks = below + (equal - 1) / 2
    x = torch.arange(n, dtype=torch.float64)
    rc, xc = ranks - ranks.mean(-1, keepdim=True), x - x.mean()
    denom = rc.norm(dim=-1) * xc.norm()
    rho = torch.where(denom > 0, (rc * xc).sum(-1) / denom.clamp_min(1e-300), torch.zeros_like(denom))
    return torch.where(y.isnan().any(-1), torch.full_like(rho, float("nan")), rho)


def gradient_sources(model: CLIP1D, images: torch.Tensor, layer: int, top: int = 3) -> list[dict[str, Any]]:
    """The (query component, key component) terms whose CLS row varies most monotonically along the image at
    ``layer``: per head, the ``top`` terms by std(row) x |Spearman(row, position)| of the image-averaged CLS row.

    Components are those of ``decompose_attention_scores`` (embed, pos_embed, earlier heads' outputs, ...); each
    head's entry is ``{"head": h, "terms": [{"q", "k", "spearman", "std"}, ...]}``, best term first.

    Example:
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2, init_std=1.0)
        >>> model = CLIP1D(cfg, seed=0).eval()
        >>> src = gradient_sources(model, model.vision.to_tokens(["C . 1 . . 2 . . . . ."]), layer=0, top=2)
        >>> [s["head"] for s in src], [len(s["terms"]) for s in src], sorted(src[0]["terms"][0])
        ([0, 1], [2, 2], ['k', 'q', 'spearman', 'std'])
    """
    top = check_int(top, "top (terms per head)")
    check_clip(model, "gradient_sources")
    _, cache = model.vision.run_with_cache(images)
    dec = decompose_attention_scores(model.vision, cache, layer=layer, query_pos=0)
    rows = dec.terms()[:, :, :, :, 0, 1:].mean(2)  # [q_comp, k_comp, head, pixel]: CLS row over pixel keys
    rho, std = spearman_position(rows), rows.std(-1)
    score = (std * rho.abs()).nan_to_num(0.0)
    out = []
    for h in range(rows.shape[2]):
        flat = score[:, :, h].flatten().argsort(descending=True)[:top]
        terms = []
        for i in flat.tolist():
            a, b = divmod(i, rows.shape[1])
            terms.append(
                {
                    "q": dec.q_labels[a],
                    "k": dec.k_labels[b],
                    "spearman": float(rho[a, b, h]),
                    "std": float(std[a, b, h]),
                }
            )
        out.append({"head": h, "terms": terms})
    return out


def unseen_probe(dataset: Dataset) -> Dataset:
    """``dataset`` plus a split ``probe_unseen``: every ordered pair of held-out labels at every position pair.

    The paper's ``val_unseen`` has ``n_val`` position pairs per ordered pair (100 images for Ntot = 20), and its
    accuracy moves by about +-0.03 between evaluations; the probe has all of them (900 images), so the mechanism
    checks are not decided by which positions were drawn. Captions: the left caption (and the right one in
    ``left_right`` mode), rows of ``dataset.captions``.
    """
    cfg = dataset.config
    vocab = dataset.vocab
    index = {tuple(c.tolist()): i for i, c in enumerate(dataset.captions)}
    images, targets, objects, positions = [], [], [], []
    for x, y in itertools.permutations(range(cfg.n_pair + 1, cfg.n_labels + 1), 2):
        t = [index[tuple(vocab.left_caption(x, y).tolist())]]
        if cfg.caption_mode == "left_right":
            t.append(index[tuple(vocab.right_caption(x, y).tolist())])
        for p1, p2 in itertools.combinations(range(cfg.d_image), 2):
            img = [vocab.cls] + [0] * cfg.d_image
            img[p1 + 1], img[p2 + 1] = x, y
            images.append(img)
            targets.append(t + [-1] * (2 - len(t)))
            objects.append((x, y))
            positions.append((p1, p2))
    split = Split(
        name=PROBE,
        images=torch.tensor(images, dtype=torch.long),
        targets=torch.tensor(targets, dtype=torch.long),
        objects=torch.tensor(objects, dtype=torch.long),
        positions=torch.tensor(positions, dtype=torch.long),
    )
    return dataclasses.replace(dataset, splits={**dataset.splits, PROBE: split})


def check_clip(model: object, what: str) -> None:
    """Raise ``TypeError`` naming ``what`` unless ``model`` is a whole ``CLIP1D`` (a tower is not: the moves and
    reports read both towers and the head).

    Example:
        >>> from hooked_clip1d import CLIPConfig
        >>> check_clip(CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5)).vision, "fold_query_bias")
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: fold_query_bias needs a CLIP1D (the whole model), got a HookedVisionEncoder; ...
    """
    if not isinstance(model, CLIP1D):
        raise TypeError(
            f"{what} needs a CLIP1D (the whole model), got a {type(model).__name__}; pass the CLIP, not its tower"
        )


def check_simplified_tower(vision: HookedVisionEncoder) -> None:
    """Raise ``ValueError`` unless ``vision`` is the paper's simplified tower (1 layer, attention only, no LayerNorm,
    learned positions): what the CLS-row tools and the reparametrisations of ``analysis.mechanism.reparametrize`` need.

    Example:
        >>> from hooked_clip1d import VisionConfig
        >>> check_simplified_tower(HookedVisionEncoder(VisionConfig(n_labels=5)))
    """
    if not isinstance(vision, HookedVisionEncoder):  # the text tower has no CLS row: its "CLS row" is the subject's
        raise TypeError(f"expected the vision tower (model.vision), got {type(vision).__name__}")
    cfg = vision.cfg
    if cfg.n_layers != 1 or cfg.normalization_type is not None or not cfg.attn_only or cfg.positional != "learned":
        raise ValueError(
            "the mechanism report needs the paper's simplified vision tower (1 layer, attention only, no LayerNorm, "
            f"learned positions); got n_layers={cfg.n_layers}, normalization_type={cfg.normalization_type!r}, "
            f"attn_only={cfg.attn_only}, positional={cfg.positional!r}"
        )


def cls_query(vision: HookedVisionEncoder) -> torch.Tensor:
    """The CLS query of layer 0, ``(W_E[CLS] + W_pos[0]) W_Q + b_Q`` [head, d_head]: the same for every image."""
    check_simplified_tower(vision)
    attn = vision.blocks[0].attn
    x = vision.W_E[vision.cfg.vocab.cls] + vision.W_pos[0]
    return torch.einsum("m,hmd->hd", x, attn.W_Q) + attn.b_Q


@torch.no_grad()
def cls_position_rows(vision: HookedVisionEncoder) -> torch.Tensor:
    """The key-position part of every head's CLS scores over the pixels, ``q_CLS . (W_pos[j] W_K) / attn_scale``
    for pixel keys j = 1..d_image [head, pixel], with ``q_CLS`` the whole CLS query (E, P and bias parts together).

    The paper's EP + PP + BP terms of the CLS row (App. I's form), the same for every image. Unlike EP alone it is
    the same under every reparametrisation of ``analysis.mechanism.reparametrize`` (up to a constant added to a row,
    which
    changes neither its rank correlation with position nor its spread).

    Example:
        >>> from hooked_clip1d import VisionConfig
        >>> cls_position_rows(HookedVisionEncoder(VisionConfig(n_labels=5, init_seed=0)).eval()).shape
        torch.Size([4, 10])
    """
    check_simplified_tower(vision)
    q = cls_query_meeting(vision, "P")  # [h, dh]: the whole query, less what the tower removes itself (EP, ...)
    attn = vision.blocks[0].attn
    k_pos = torch.einsum("pm,hmd->hpd", vision.W_pos[1:], attn.W_K)  # [h, pixel, dh]
    return torch.einsum("hd,hpd->hp", q, k_pos) / vision.cfg.attn_scale


def _check_layer0(vision: HookedVisionEncoder, what: str) -> None:
    cfg = vision.cfg
    if not isinstance(vision, HookedVisionEncoder):
        raise TypeError(f"{what} needs the vision tower (model.vision), got {type(vision).__name__}")
    if cfg.normalization_type is not None or cfg.positional != "learned":
        raise ValueError(
            f"{what} reads layer 0, whose input must be W_E + W_pos exactly (no LayerNorm, learned positions); got "
            f"normalization_type={cfg.normalization_type!r}, positional={cfg.positional!r}"
        )


@torch.no_grad()
def layer0_cls_position_rows(vision: HookedVisionEncoder) -> Float[torch.Tensor, "head pixel"]:
    """``cls_position_rows`` at layer 0 of a vision tower of any depth (no LayerNorm, learned positions): the
    key-position part ``q_CLS . (W_pos[j] W_K) / attn_scale`` of layer 0's CLS scores over the pixel keys, with
    ``q_CLS = (W_E[CLS] + W_pos[0]) W_Q + b_Q`` the whole CLS query (Fig. 23's layer 0 in App. I's form).

    In a 1-layer tower it equals ``cls_position_rows``; in a deeper one it is the row of layer 0 only (the CLS
    query of layer 0 is the same for every image, as the input of layer 0 is ``W_E + W_pos``).

    Example:
        >>> from hooked_clip1d import VisionConfig
        >>> enc = HookedVisionEncoder(VisionConfig(n_labels=5, n_layers=2, init_seed=0)).eval()
        >>> layer0_cls_position_rows(enc).shape
        torch.Size([4, 10])
    """
    _check_layer0(vision, "layer0_cls_position_rows")
    attn = vision.blocks[0].attn
    q = cls_query_meeting(vision, "P")  # [h, dh]: less the terms the tower removes itself
    k_pos = torch.einsum("pm,hmd->hpd", vision.W_pos[1:], attn.W_K)  # [h, pixel, dh]
    return torch.einsum("hd,hpd->hp", q, k_pos) / vision.cfg.attn_scale


@torch.no_grad()
def cls_label_pe_deltas(vision: HookedVisionEncoder, split: Split) -> dict[str, torch.Tensor]:
    """Fig. 5c's Δlabel and Δp.e. in App. I's form: both read with the whole CLS query
    ``q_CLS = (W_E[CLS] + W_pos[0]) W_Q + b_Q`` (layer 0), not the CLS token embedding alone.

    For a two-object image with label x at pixel a and y at pixel b > a, ``Δlabel = q_CLS . (W_E[y] - W_E[x]) W_K``
    and ``Δp.e. = q_CLS . (W_pos[b] - W_pos[a]) W_K`` (right minus left, over ``attn_scale``): App. I's T and Π with
    the sign flipped. ``b_K`` cancels, so ``Δlabel + Δp.e.`` is the head's whole CLS logit difference
    (``delta_score``), and no output-preserving reparametrisation of ``analysis.mechanism.reparametrize`` changes
    either part
    (``label_pe_deltas``' EP-only Δp.e. goes to 0 when ``W_E[CLS]`` moves into ``W_pos[0]``). Same keys as
    ``heads.label_pe_deltas``, so ``heads.classify_head_roles`` reads it.

    Example:
        >>> from hooked_clip1d import VisionConfig, DataConfig, build_dataset
        >>> enc = HookedVisionEncoder(VisionConfig(n_labels=8, init_seed=0)).eval()
        >>> d = cls_label_pe_deltas(enc, build_dataset(DataConfig(n_labels=8, n_heldout=3, n2=3)).splits["val_unseen"])
        >>> bool(torch.allclose(d["delta_label"] + d["delta_pe"], d["delta_score"], atol=1e-5))
        True
    """
    _check_layer0(vision, "cls_label_pe_deltas")
    check_eval(vision)  # dropout would draw the global RNG (and move what is read)
    images, pos, objs = two_object_images(vision, split)  # token positions (+1 for CLS)
    attn = vision.blocks[0].attn
    q_E, q_P = cls_query_meeting(vision, "E"), cls_query_meeting(vision, "P")  # [h, dh]: less the removed terms
    kE = torch.einsum("vm,hmd->vhd", vision.W_E, attn.W_K)  # [vocab, h, dh]
    kP = torch.einsum("pm,hmd->phd", vision.W_pos, attn.W_K)  # [n_ctx, h, dh]
    s = vision.cfg.attn_scale
    d_label = torch.einsum("hd,nhd->nh", q_E, kE[objs[:, 1]] - kE[objs[:, 0]]) / s
    d_pe = torch.einsum("hd,nhd->nh", q_P, kP[pos[:, 1]] - kP[pos[:, 0]]) / s
    _, cache = vision.run_with_cache(images, names_filter="blocks.0.attn.hook_attn_scores")
    scores = cache["attn_scores", 0][:, :, 0]  # [n, h, k]
    ar = torch.arange(len(images), device=images.device)
    d_score = scores[ar, :, pos[:, 1]] - scores[ar, :, pos[:, 0]]
    return {
        "delta_label": d_label,
        "delta_pe": d_pe,
        "delta_score": d_score,
        "attends_right": d_score > 0,
        "objects": objs,
        "positions": pos - 1,
        "pruned": pruned_mask(vision),
    }


def ablate_cls_key_position(vision: HookedVisionEncoder) -> list[Hook]:
    """Hooks removing the key-position part of the CLS query's scores over the pixels: ``q_CLS . (W_pos[j] W_K)``
    for pixel keys j >= 1, with ``q_CLS`` the whole CLS query (E, P and bias parts together).

    On the CLS row over the pixels this equals the paper's EP + PP + BP ablation, and it does not depend on how
    ``W_E[CLS] + W_pos[0]`` is split between the two rows (``move_cls_embedding`` leaves it unchanged).

    Example:
        >>> from hooked_clip1d import VisionConfig
        >>> enc = HookedVisionEncoder(VisionConfig(n_labels=5, init_seed=0)).eval()
        >>> [name for name, _ in ablate_cls_key_position(enc)]
        ['blocks.0.attn.hook_attn_scores']
    """
    term = cls_position_rows(vision)  # [h, pixel]

    def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
        scores = scores.clone()
        scores[:, :, 0, 1:] -= term.to(scores.dtype)
        return scores

    return [("blocks.0.attn.hook_attn_scores", hook)]


def move_cls_embedding(model: CLIP1D, into: str = "token", fraction: float = 1.0) -> CLIP1D:
    """A copy of ``model`` with ``fraction`` of ``S = W_E[CLS] + W_pos[0]`` in ``W_E[CLS]`` (``into="token"``) or in
    ``W_pos[0]`` (``into="position"``) and the rest in the other row. Every output is unchanged (exactly so for
    ``fraction`` 1, up to float rounding otherwise); the paper's E/P term ablations are not.

    Example:
        >>> from hooked_clip1d import CLIPConfig
        >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
        >>> moved = move_cls_embedding(m, "position")
        >>> float(moved.vision.W_E[m.cfg.vision.vocab.cls].detach().abs().max())
        0.0
    """
    check_clip(model, "move_cls_embedding")
    if into not in ("token", "position"):
        raise ValueError(f"into must be 'token' or 'position', got {into!r}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    check_simplified_tower(model.vision)
    out = copy.deepcopy(model)
    cls = out.cfg.vision.vocab.cls
    with torch.no_grad():
        W_E, W_pos = out.vision.embed.W_E, out.vision.pos_embed.W_pos
        s = W_E[cls] + W_pos[0]
        main, rest = (s * fraction, s - s * fraction) if fraction < 1 else (s, torch.zeros_like(s))
        W_E[cls], W_pos[0] = (main, rest) if into == "token" else (rest, main)
    return out


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, list):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


@torch.no_grad()
def mechanism_report(model: CLIP1D, dataset: Dataset | None = None) -> dict[str, Any]:
    """Every mechanism signature of one model (JSON-able, rounded to 4 decimals); see the module docstring.

    Keys: ``acc`` (per split: accuracy / label-set under each ablation of ``ABLATIONS`` and ``CLS-key-position``),
    ``p_left`` / ``p_right`` / ``relational`` per head (on the probe), ``xwx_share`` per head (CLS-row std share,
    probe images), ``ep_spearman`` per head (EP's CLS row over the pixels, Fig. 4b's image), ``row_std`` (EP, PP,
    BP, EE CLS-row std per head, probe mean), ``norms`` (``W_E[CLS]``, ``W_pos[0]``, their sum, ``b_Q`` per head,
    ``(W_E[CLS] + W_pos[0]) W_Q`` per head), ``cls_cos`` (cosine of ``W_E[CLS]`` and ``W_pos[0]``), ``kp_spearman`` /
    ``kp_std`` (rank correlation with position and std of ``cls_position_rows`` per head: the whole-CLS-query form of
    Fig. 14) and ``temperature`` (CLIP's inverse temperature, clamped).
    """
    if model.training:
        raise ValueError("mechanism_report needs the model in eval mode (call model.eval())")
    vision = model.vision
    check_simplified_tower(vision)
    ds = unseen_probe(dataset if dataset is not None else build_dataset(model.data_config))
    splits = ["val_unseen", PROBE]
    abl = evaluate_ablations(model, ds, ABLATIONS, splits=splits)
    acc = {
        s: {k: [c["metrics"][s]["acc"], c["metrics"][s]["label_set"]] for k, c in abl["conditions"].items()}
        for s in splits
    }
    from hooked_clip1d.evaluation import evaluate

    inv = evaluate(model, ds, splits=splits, vision_hooks=ablate_cls_key_position(vision))
    for s in splits:
        acc[s]["CLS-key-position"] = [inv[s]["acc"], inv[s]["label_set"]]

    probe = ds.splits[PROBE]
    bias = cls_object_bias(vision, probe)
    roles = classify_head_roles(label_pe_deltas(vision, probe))
    _, cache = vision.run_with_cache(probe.images)
    dec = decompose_attention_scores(vision, cache, layer=0)
    shares = row_std_shares(dec.weight_bias_terms(), query_pos=0)
    xwx = shares["share"][shares["terms"].index("XWX")]
    tp = dec.token_position_terms()
    row_std = {t: tp[t][:, :, 0, 1:].std(-1, unbiased=False).mean(0).tolist() for t in ("EE", "EP", "PP", "BP")}

    img = vision.to_tokens(FIG4B_IMAGE) if model.cfg.n_labels >= 19 else probe.images[:1]
    _, c1 = vision.run_with_cache(img)
    ep_row = decompose_attention_scores(vision, c1, layer=0).token_position_terms()["EP"][0, :, 0, 1:]
    attn = vision.blocks[0].attn
    cls = vision.cfg.vocab.cls
    e, p = vision.W_E[cls], vision.W_pos[0]
    kp = cls_position_rows(vision)
    report = {
        "acc": acc,
        "p_left": bias["left"][0].tolist(),
        "p_right": bias["right"][0].tolist(),
        "relational": roles["relational"].tolist(),
        "xwx_share": xwx.tolist(),
        "ep_spearman": spearman_position(ep_row).tolist(),
        "row_std": row_std,
        "norms": {
            "W_E_cls": e.norm().item(),
            "W_pos_0": p.norm().item(),
            "cls_sum": (e + p).norm().item(),
            "b_Q": attn.b_Q.norm(dim=-1).tolist(),
            "x_cls_W_Q": torch.einsum("m,hmd->hd", e + p, attn.W_Q).norm(dim=-1).tolist(),
        },
        "cls_cos": torch.nn.functional.cosine_similarity(e, p, dim=0).item(),
        "kp_spearman": spearman_position(kp).tolist(),
        "kp_std": kp.std(-1, unbiased=False).tolist(),
        "temperature": model.temperature_scale().item() if model.cfg.objective == "contrastive" else None,
    }
    return _round(report)


def mechanism_checks(report: dict[str, Any], split: str = PROBE, qk_bias: bool = True) -> list[tuple[str, bool]]:
    """The recipe study's pass criteria (written before its runs) on one ``mechanism_report``.

    ``qk_bias=False`` (``b_Q`` held at 0) leaves out the Fig. 13 check, which then holds by construction.

    Example:
        >>> r = {"acc": {"s": {"baseline": [0.9, 1.0], "EP": [0.5, 0.9], "PE": [0.9, 1], "PP": [0.9, 1],
        ...      "BP": [0.9, 1], "EP+PE+PP+BP+VP": [0.5, 0.9], "CLS-key-position": [0.5, 0.9]}},
        ...      "p_left": [0.8, 0.2], "p_right": [0.2, 0.8], "relational": [0.6, 0.6], "xwx_share": [0.8, 0.8],
        ...      "ep_spearman": [0.95, -0.95], "row_std": {"EP": [2, 2], "PP": [1, 1], "BP": [1, 1], "EE": [1, 1]}}
        >>> all(ok for _, ok in mechanism_checks(r, "s"))
        True
    """
    a = report["acc"][split]
    base, base_ls = a["baseline"]
    ep, ep_ls = a["EP"]
    all_acc, all_ls = a["EP+PE+PP+BP+VP"]
    gap = [abs(left - right) for left, right in zip(report["p_left"], report["p_right"], strict=True)]
    rs = report["row_std"]
    checks = [
        ("Fig. 4a: unseen-pair accuracy >= 0.8", base >= 0.8),
        (
            "Fig. 4c: a left-biased and a right-biased head (each >= 0.6)",
            max(report["p_left"]) >= 0.6 and max(report["p_right"]) >= 0.6,
        ),
        (
            "Fig. 5d: some head relational on >= 50% and relational share = |P(L) - P(R)| within 0.15 in every head",
            max(report["relational"]) >= 0.5
            and all(abs(r - g) <= 0.15 for r, g in zip(report["relational"], gap, strict=True)),
        ),
        ("Fig. 5e: ablating EP gives 0.3-0.7 and lowers accuracy by >= 0.15", 0.3 <= ep <= 0.7 and base - ep >= 0.15),
        (
            "Fig. 16: the EP ablation removes the side, not the labels (accuracy -0.15 or more, label-set >= 0.8)",
            base - ep >= 0.15 and ep_ls >= 0.8,
        ),
        ("Fig. 5e: EP is the score term whose ablation hurts most", ep <= min(a[k][0] for k in ("PE", "PP", "BP"))),
        (
            "Fig. 14: EP's CLS row is monotonic in every head (|Spearman| >= 0.9)",
            min(map(abs, report["ep_spearman"])) >= 0.9,
        ),
        (
            "EP's CLS-row std exceeds PP's and BP's in every head",
            all(e > max(p, b) for e, p, b in zip(rs["EP"], rs["PP"], rs["BP"], strict=True)),
        ),
        (
            "Fig. 17: ablating every positional term gives 0.3-0.7 with label-set >= 0.8",
            0.3 <= all_acc <= 0.7 and all_ls >= 0.8,
        ),
    ]
    if qk_bias:
        checks.append(("Fig. 13: XW_QKX^T share >= 0.7 in every head", min(report["xwx_share"]) >= 0.7))
    return checks


# the checks that decide whether a recipe shows the paper's mechanism (the "Fig. 4c, 5d, 5e, 13 and 14")
CORE_CHECKS = ("Fig. 4c", "Fig. 5d", "Fig. 5e", "Fig. 13", "Fig. 14")


def core_checks_hold(checks: list[tuple[str, bool]]) -> bool:
    """Whether every check named by ``CORE_CHECKS`` holds (a check left out, e.g. Fig. 13 without ``b_Q``, is
    not counted)."""
    return all(ok for name, ok in checks if name.startswith(CORE_CHECKS))


def run_mechanism_history(run_dir: str | Path, every: int = 1000) -> dict[int, dict[str, Any]]:
    """``mechanism_report`` of a run's kept snapshots (``snapshots/epoch_NNNNN.safetensors``, written with
    ``TrainConfig.keep_snapshots``) at every ``every`` epochs and the latest one, by epoch.

    Reports are cached in ``run_dir/mechanism.json`` (keyed by epoch and the snapshot's size and mtime), so a
    second call computes only new snapshots.
    """
    from hooked_clip1d.files import atomic_write_text
    from hooked_clip1d.model.checkpoint import load_model_file

    every = check_int(every, "run_mechanism_history: every (epochs)")
    run_dir = Path(run_dir)
    snaps = sorted((run_dir / "snapshots").glob("epoch_*.safetensors"))
    if not snaps:
        raise FileNotFoundError(f"{str(run_dir)!r} has no snapshots/ (train with keep_snapshots=True)")
    by_epoch = {int(p.stem.split("_")[1]): p for p in snaps}
    last = max(by_epoch)
    wanted = [e for e in sorted(by_epoch) if e % every == 0 or e == last]
    cache_path = run_dir / "mechanism.json"
    cache: dict[str, Any] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    out: dict[int, dict[str, Any]] = {}
    changed = False
    for e in wanted:
        st = by_epoch[e].stat()
        key = f"{e}:{st.st_size}:{int(st.st_mtime)}"
        if key not in cache:
            cache[key] = mechanism_report(load_model_file(by_epoch[e]).eval())
            changed = True
        out[e] = cache[key]
    if changed:
        atomic_write_text(cache_path, json.dumps(cache))
    return out


def single_head_mechanism(row: dict[str, Any], image: str = FIG4B_IMAGE) -> dict[str, Any] | None:
    """For a sweep run with a 1-layer, 1-head vision encoder: its CLS -> object bias on unseen pairs (Fig. 4c's
    statistic) and the rank correlation of EP's CLS row with position on ``image`` (Fig. 14's). Where the run's
    weights are gone, the reading the row carries (``mechanism``: a record's row, measured when they were there), or
    None if it carries none.

    ``row`` is the run's row of a sweep's results table (``sweep.results_table``): its ``path`` (the run folder,
    with ``model.safetensors``) and ``weight_decay``.

    Example:
        >>> single_head_mechanism({"weight_decay": 0.2, "path": "/no/such/run"}) is None  # weights gone
        True
        >>> kept = {"left": 0.0, "right": 1.0, "ep_spearman": 1.0}
        >>> single_head_mechanism({"weight_decay": 0.2, "path": "/no/such/run", "mechanism": kept})["right"]
        1.0
    """
    from hooked_clip1d.model.checkpoint import load_model_file

    if "weight_decay" not in row:
        raise KeyError(f"single_head_mechanism reads a weight-decay sweep's results row; this one has {sorted(row)}")
    path = Path(row.get("path", "")) / "model.safetensors"
    if "path" not in row or not path.exists():
        kept = row.get("mechanism")
        if not kept:
            return None
        reading = {k: float(kept[k]) for k in ("left", "right", "ep_spearman")}
        return {"weight_decay": float(row["weight_decay"]), **reading}
    model = load_model_file(path)
    bias = cls_object_bias(model.vision, build_dataset(model.data_config).splits["val_unseen"])
    _, cache = model.vision.run_with_cache(model.vision.to_tokens(image))
    ep = decompose_attention_scores(model.vision, cache, layer=0).token_position_terms()["EP"][0, 0, 0, 1:]
    return {
        "weight_decay": float(row["weight_decay"]),
        "left": float(bias["left"][0, 0]),
        "right": float(bias["right"][0, 0]),
        "ep_spearman": float(spearman_position(ep[None])[0]),
    }
