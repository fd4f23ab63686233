"""The analysis families of ``hooked-clip1d analyze``, each a function ``(model, options) -> Report`` declared
with ``@family``. A new family is one decorated function here, built only from ``cli.family_api`` (``Report``,
``family`` and the option helpers), ``hooked_clip1d.analysis`` and ``hooked_clip1d.visualization``; ``cli.analyze``
(the command: option checks, the listing, ``run_analysis``) imports this module, which fills ``FAMILIES``.

Example:
    >>> from hooked_clip1d.cli.family_api import FAMILIES
    >>> "attention" in FAMILIES and FAMILIES["ablate"].options["layer"].startswith("the attention layer")
    True
"""

from __future__ import annotations

import json
from typing import Any

import torch

from hooked_clip1d.analysis.mechanism.heads import to_jsonable
from hooked_clip1d.cli.family_api import (
    Report,
    family,
    first_pair_image,
    flag_option,
    image_caption,
    model_dataset,
    pair_split,
)
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.settings.checks import check_int

# what a family says of a captioning model's text tower where it would run it on captions alone
CAPTIONER_TEXT = "a captioning model's decoder reads the image through its prefix; model.captioning"


def _text_alone(model: CLIP1D) -> bool:
    """Whether a family may run the text tower on captions alone: not on a captioner, whose decoder reads the image
    (its text-tower parts are reported as not run, ``CAPTIONER_TEXT``)."""
    return model.cfg.objective == "contrastive"


def _decoder_attention(model: CLIP1D, image: str, caption: str) -> list[dict[str, Any]]:
    """A captioner's decoder attention on ``image`` and ``caption``, per layer: its inputs' names (``image`` at
    position 0, then the caption's first three tokens) and each head's pattern [head][query][key], causal; the row
    of position 2 (input rel) is the one that predicts Y, where the relation must be read from the image."""
    images, captions = model.vision.to_tokens([image]), model.text.to_tokens([caption])
    names = [f"text.blocks.{i}.attn.hook_pattern" for i in range(model.text.cfg.n_layers)]
    _, cache = model.run_with_cache(images, captions, names_filter=names)
    tokens = ["image", *model.text.to_str_tokens(captions[0])[:3]]
    return [{"tokens": tokens, "pattern": cache[n][0].tolist()} for n in names]


# ---- analyses -------------------------------------------------------------------------------------------------------
@family(
    "attention",
    what="attention patterns of both towers on one image and caption (Fig. 4b); a captioner's decoder on both",
    data="the first unseen-pair validation image (val_unseen) and its caption (an image given alone: its own caption)",
    options={
        "image": "the image, e.g. 'C . . 17 . . 19 . . . .'",
        "caption": "the caption, e.g. '17 is on the left of 19'",
    },
)
def _attention(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.pretrained import model_name
    from hooked_clip1d.visualization.attention import attention_view, plot_attention, show_attention

    ds = model_dataset(model)
    vocab = model.vision.cfg.vocab
    img = opts.get("image") or vocab.image_to_text(first_pair_image(ds))
    cap = opts.get("caption") or vocab.caption_to_text(image_caption(vocab, img))  # the image's own caption
    figs, data, lines, pages = {}, {}, [], {}
    towers = [("vision", img), ("text", cap)]
    short = {"is on the left of": "left", "is on the right of": "right", "in the image": "in-img"}
    if not _text_alone(model):  # the decoder on the image and its caption, not the text tower alone
        towers = towers[:1]
        data["text"] = {"not_run": CAPTIONER_TEXT}
        lines.append(f"text tower alone: not run ({CAPTIONER_TEXT}); the decoder reading the image:")
        for layer, view in enumerate(_decoder_attention(model, img, cap)):
            data[f"decoder_L{layer}"] = view
            lines.append(f"decoder layer {layer}, image {img!r}, caption {cap!r}, row of the position predicting Y:")
            lines.append("  head  " + " ".join(f"{short.get(t, t):>6.6}" for t in view["tokens"][:3]))
            lines += [
                f"  {h:<5} " + " ".join(f"{v:>6.2f}" for v in row[2][:3]) for h, row in enumerate(view["pattern"])
            ]
    for tower, x in towers:
        enc = getattr(model, tower)
        for layer in range(enc.cfg.n_layers):
            view = attention_view(model, x, layer=layer, tower=tower)
            figs[f"{tower}_L{layer}"] = plot_attention(model, x, layer=layer, tower=tower)
            heading = f"{model_name(model)}: {tower} tower, layer {layer}, input {x!r}"
            pages[f"{tower}_L{layer}"] = (show_attention(model, x, layer=layer, tower=tower), heading)
            data[f"{tower}_L{layer}"] = {"tokens": view.tokens, "pattern": view.pattern}
            row = view.pattern[:, 0 if tower == "vision" else -1]
            lines.append(f"{tower} layer {layer}, input {x!r}, {'CLS' if tower == 'vision' else 'last'} row:")
            lines.append("  head  " + " ".join(f"{short.get(t, t):>6.6}" for t in view.tokens))
            lines += [f"  {h:<5} " + " ".join(f"{v:>6.2f}" for v in row[h].tolist()) for h in range(row.shape[0])]
    return Report("\n".join(lines), data, figs, pages)


@family(
    "decompose",
    what="weight-bias and token-position score decompositions, CLS-row std shares (Fig. 5a, 12-14)",
    data="the unseen-pair validation images (val_unseen)",
    options={"layer": "the attention layer (default 0)"},
)
def _decompose(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores, row_std_shares
    from hooked_clip1d.visualization.decomposition import plot_row_profiles, plot_std_shares, plot_term_maps

    ds = model_dataset(model)
    split = ds.splits["val_unseen"]
    layer = check_int(opts.get("layer", 0), "option layer", minimum=0)  # int() read 0.9 as 0
    _, cache = model.vision.run_with_cache(split.images[split.is_pair])
    dec = decompose_attention_scores(model.vision, cache, layer=layer)
    wb, tp = dec.weight_bias_terms(), dec.token_position_terms()
    sh_wb, sh_tp = row_std_shares(wb, query_pos=0), row_std_shares(tp, query_pos=0)
    tokens = model.vision.token_strs(split.images[split.is_pair][0])
    figs = {
        "weight_bias_maps": plot_term_maps(wb, tokens=tokens),
        "token_position_maps": plot_term_maps(tp, [t for t in ("EE", "EP", "PE", "PP") if t in tp], tokens=tokens),
        "cls_row_profiles": plot_row_profiles(tp, tokens=tokens),
        "weight_bias_shares": plot_std_shares(sh_wb),
        "token_position_shares": plot_std_shares(sh_tp),
    }
    n_heads = model.vision.cfg.n_heads
    lines = [f"vision layer {layer}: share of each term in the CLS-row std across keys (unseen-pair images)"]
    lines.append(f"{'term':<8}" + "".join(f"{'head ' + str(h):>9}" for h in range(n_heads)))
    for sh in (sh_wb, sh_tp):
        for i, t in enumerate(sh["terms"]):
            lines.append(f"{t:<8}" + "".join(f"{v:>9.3f}" for v in sh["share"][i].tolist()))
        lines.append("")
    data = {
        "layer": layer,
        "weight_bias_shares": {"terms": sh_wb["terms"], "share": sh_wb["share"], "std": sh_wb["std"]},
        "token_position_shares": {"terms": sh_tp["terms"], "share": sh_tp["share"], "std": sh_tp["std"]},
        "q_components": list(dec.q_labels),
        "k_components": list(dec.k_labels),
    }
    return Report("\n".join(lines).rstrip(), data, figs)


@family(
    "ablate",
    what="term ablations EP, PE, PP, BP, VP and combinations (Fig. 5e, 16, 17)",
    data="validation splits val_seen and val_unseen",
    options={
        "layer": "the attention layer whose terms are ablated (default 0)",
        "ln_scale": "live: through LayerNorm at each forward pass's own scale (TL's apply_ln_to_stack convention); "
        "needed by a tower with LayerNorm, e.g. the full model (default: none, the simplified model's towers)",
    },
)
def _ablate(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations, format_ablations
    from hooked_clip1d.visualization.decomposition import plot_ablations

    layer = check_int(opts.get("layer", 0), "option layer", minimum=0)
    ln_scale = opts.get("ln_scale")
    if ln_scale not in (None, "live"):
        raise ValueError(f"option ln_scale must be live, got {ln_scale!r}")
    if ln_scale is None and model.vision.cfg.normalization_type is not None:  # the library names its keyword
        raise ValueError(
            f"the vision tower has LayerNorm (normalization_type={model.vision.cfg.normalization_type!r}): a term is "
            "only defined with a fixed LN scale; add -o ln_scale=live (each forward pass's own scale, TL's "
            "apply_ln_to_stack convention)"
        )
    res = evaluate_ablations(model, model_dataset(model), layer=layer, ln_scale=ln_scale)
    return Report(format_ablations(res), res, {"ablations": plot_ablations(res, splits=("val_seen", "val_unseen"))})


def _pairs(model: CLIP1D, opts: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    from hooked_clip1d.analysis.metrics import pair_inputs

    ds = model_dataset(model)
    return pair_inputs(pair_split(ds, opts), ds.vocab)


def _fmt_rows(title: str, cols: list[str], rows: dict[str, list[float]]) -> list[str]:
    lines = [title, f"{'':<22}" + "".join(f"{c:>10.10}" for c in cols)]
    lines += [f"{k:<22.22}" + "".join(f"{v:>10.3f}" for v in vals) for k, vals in rows.items()]
    return lines + [""]


def _interchange_table(itf: dict[str, Any]) -> str:
    """``InterchangeResult.fractions()`` as text: one line per intervention and layer (heads as columns), "n/a"
    where an intervention does not apply (a position swap without learned positions), then the two beliefs."""

    def num(x: float | None) -> str:
        return f"{'n/a':>7}" if x is None else f"{x:>7.3f}"

    lines = ["text interchange: fraction of the base -> counterfactual belief shift each intervention produces"]
    for key in ("slot_swap", "position_id_swap", "eot_pattern"):
        value = itf.get(key)
        per_layer = value if isinstance(value, list) else [value]
        for layer, v in enumerate(per_layer):
            name = key if len(per_layer) == 1 and not isinstance(value, list) else f"{key}, layer {layer}"
            lines.append(f"  {name:<28} {num(v)}")
    for layer, heads in enumerate(itf.get("eot_pattern_heads") or []):
        cells = " ".join(f"h{h} {num(v)}" for h, v in enumerate(heads))
        lines.append(f"  {f'eot_pattern per head, L{layer}':<28} {cells}")
    base, swapped = itf["base_belief"], itf["counterfactual_belief"]
    lines.append(f"beliefs (logit differences): base {base:.3f}, counterfactual {swapped:.3f}")
    return "\n".join(lines)


@family(
    "patching",
    what="mirror-swap / caption-swap patching, text interchange, attention knockout",
    data="the unseen-pair validation images and captions (val_unseen unless -o split=...)",
    options={"split": "the split of the image/caption pairs: train, val_seen, val_unseen (default)"},
)
def _patching(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.interventions.interchange import text_interchange
    from hooked_clip1d.analysis.interventions.knockout import knockout_sweep
    from hooked_clip1d.analysis.interventions.patching import caption_swap_patching, mirror_swap_patching
    from hooked_clip1d.visualization import patching as vp

    imgs, caps = _pairs(model, opts)
    L = model.vision.cfg.n_layers
    ms = mirror_swap_patching(model, imgs, caps)
    z_names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    heads = mirror_swap_patching(model, imgs, caps, hook_names=z_names, sets=["cls"], heads=True)
    kv = knockout_sweep(model, imgs, caps, tower="vision")
    fr, hf = ms.fraction(), heads.fraction()
    lines = _fmt_rows(
        "mirror-swap patching (image mirrored => relation flips): fraction of the belief shift recovered",
        ms.set_names,
        {lab: fr[i].tolist() for i, lab in enumerate(ms.labels)},
    )
    lines += _fmt_rows(
        "per head, patching z at CLS from the mirrored image",
        [f"head {h}" for h in range(hf.shape[-1])],
        {heads.labels[i]: hf[i, 0].tolist() for i in range(len(heads.labels))},
    )
    figs = {
        "mirror_map": vp.plot_patching_map(ms),
        "mirror_bars": vp.plot_recovery_bars(ms),
        "mirror_heads": vp.plot_patching_map(heads),
        "knockout_vision": vp.plot_knockout(kv),
    }
    data: dict[str, Any] = {
        "mirror_swap": ms.to_dict(),
        "mirror_swap_heads_cls": heads.to_dict(),
        "knockout_vision": kv.to_dict(),
    }
    knockout = ["attention knockout: fraction of the belief retained with each attention edge cut"]
    knockout += [f"  vision {n:<28} {r:>7.3f}" for n, r in zip(kv.names, kv.retained().tolist(), strict=True)]
    if not _text_alone(model):
        lines += knockout
        lines.append(f"caption-swap patching, text interchange, text knockout: not run ({CAPTIONER_TEXT})")
        data |= {k: {"not_run": CAPTIONER_TEXT} for k in ("caption_swap", "interchange", "knockout_text")}
        return Report("\n".join(lines).rstrip(), data, figs)
    cs = caption_swap_patching(model, imgs, caps)
    it = text_interchange(model, imgs, caps)
    kt = knockout_sweep(model, imgs, caps, tower="text")
    cf = cs.fraction()
    lines += _fmt_rows(
        "caption-swap patching (text tower)", cs.set_names, {lab: cf[i].tolist() for i, lab in enumerate(cs.labels)}
    )
    lines += knockout
    lines += [f"  text   {n:<28} {r:>7.3f}" for n, r in zip(kt.names, kt.retained().tolist(), strict=True)]
    itf = it.fractions()
    lines += ["", _interchange_table(itf)]
    figs |= {
        "caption_map": vp.plot_patching_map(cs),
        "interchange": vp.plot_interchange(it),
        "knockout_text": vp.plot_knockout(kt),
    }
    data |= {"caption_swap": cs.to_dict(), "interchange": itf, "knockout_text": kt.to_dict()}
    return Report("\n".join(lines).rstrip(), data, figs)


@family(
    "probes",
    what="linear probes of positions, labels and relation per depth, with shuffled controls",
    data="a random sample of 3000 two-object images (-o n=...; probes tested on held-out images)",
    options={"n": "images sampled (default 3000)", "seed": "sampling seed (default 0)"},
)
def _probes(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.interventions.probes import probe_sweep, probe_targets
    from hooked_clip1d.analysis.metrics import pair_grid
    from hooked_clip1d.visualization.patching import plot_probe_accuracy

    v = model.vision.cfg.vocab
    imgs, objs, _ = pair_grid(v)
    n = check_int(opts.get("n", 3000), "option n (images sampled)")
    seed = check_int(opts.get("seed", 0), "option seed", minimum=0)
    idx = torch.randperm(len(imgs), generator=torch.Generator().manual_seed(seed))[:n]
    imgs, objs = imgs[idx], objs[idx]
    rel = torch.full_like(objs[:, 0], v.left_of)
    caps = torch.stack([objs[:, 0], rel, objs[:, 1], torch.full_like(rel, v.eot)], -1)
    sweeps = {}
    towers = [
        (model.vision, imgs, ("left_pos", "right_pos", "left_label", "right_label", "relation")),
        (model.text, caps, ("subject", "object", "relation")),
    ]
    captioner = not _text_alone(model)
    for tower, toks, targets in towers[:1] if captioner else towers:
        name = "vision" if tower is model.vision else "text"
        for t in targets:
            sweeps[f"{name} {t}"] = probe_sweep(tower, toks, probe_targets(tower, toks, t), position="readout")
    depth = next(iter(sweeps.values())).labels
    lines = [f"linear probes at the readout token (held-out accuracy per depth; control = shuffled labels), {n} images"]
    lines.append(f"{'target':<20}" + "".join(f"{d:>12.12}" for d in depth) + f"{'chance':>9}{'control':>9}")
    for k, sw in sweeps.items():
        ctrl = sw.control_acc.max().item() if sw.control_acc is not None else float("nan")
        lines.append(
            f"{k:<20}" + "".join(f"{a:>12.3f}" for a in sw.test_acc.tolist()) + f"{sw.chance:>9.3f}{ctrl:>9.3f}"
        )
    data: dict[str, Any] = {k: sw.to_dict() for k, sw in sweeps.items()}
    if captioner:
        lines.append(f"text tower: not run ({CAPTIONER_TEXT})")
        data["text"] = {"not_run": CAPTIONER_TEXT}
    return Report("\n".join(lines), data, {"probes": plot_probe_accuracy(sweeps)})


@family(
    "steering",
    what="spatial IDs and steering a caption's belief by adding ID differences",
    data="unseen-pair validation images (val_unseen)",
    options={"split": "the split of the image/caption pairs: train, val_seen, val_unseen (default)"},
)
def _steering(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.mechanism.spatial_ids import steer_text, steer_vision, text_role_ids, vision_spatial_ids
    from hooked_clip1d.visualization.patching import plot_spatial_ids, plot_steering_curves

    imgs, caps = _pairs(model, opts)
    alphas = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0]
    curves, data, errors = {}, {}, {}
    for site, ctx in (("object", "single"), ("cls", "single"), ("cls", "pair")):
        ids = vision_spatial_ids(model.vision, site=site, context=ctx)
        for depth in range(len(ids.labels)):
            key = f"vision {site}/{ctx} @ {ids.labels[depth]}"
            try:
                sr = steer_vision(model, imgs, caps, ids, depth, alphas)
            except ValueError as e:  # e.g. RoPE towers have no positional IDs at the embeddings
                errors[key] = str(e)
                continue
            curves[key] = sr
    if _text_alone(model):
        tids = text_role_ids(model.text)
        for depth in range(len(tids.labels)):
            curves[f"text roles @ {tids.labels[depth]}"] = steer_text(model, imgs, caps, tids, depth, alphas)
    else:
        errors["text roles"] = CAPTIONER_TEXT
    lines = ["steering: fraction of the swap's belief shift produced by adding alpha x (ID difference)"]
    lines.append(f"{'site @ depth':<34}" + "".join(f"{'a=' + str(a):>8}" for a in alphas) + f"{'flip@1':>8}")
    for k, sr in curves.items():
        fr, flip = sr.fraction().tolist(), sr.flip_rate().tolist()
        data[k] = {"alphas": alphas, "fraction": fr, "flip_rate": flip}
        lines.append(f"{k:<34.34}" + "".join(f"{x:>8.2f}" for x in fr) + f"{flip[alphas.index(1.0)]:>8.2f}")
    lines += [f"{k}: not run ({e})" for k, e in errors.items()]
    figs = {
        "curves": plot_steering_curves(curves),
        "ids_cls": plot_spatial_ids(vision_spatial_ids(model.vision, site="cls", context="pair")),
    }
    return Report("\n".join(lines), {"steering": data, "not_run": errors}, figs)


@family(
    "heads",
    what="CLS -> object left/right bias, relational vs label-specific heads, text EOT bias (Fig. 4c, 5c-d, 6)",
    data="the unseen-pair validation images and their captions (val_unseen unless -o split=...)",
    options={"split": "a split with two-object images: train, val_seen, val_unseen (default)"},
)
def _heads(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.mechanism.heads import (
        classify_head_roles,
        cls_object_bias,
        label_pe_deltas,
        pair_captions,
        text_eot_bias,
    )
    from hooked_clip1d.visualization.heads import plot_eot_bias, plot_head_roles, plot_label_pe_scatter
    from hooked_clip1d.visualization.plots import plot_head_bias

    ds = model_dataset(model)
    split = pair_split(ds, opts)
    bias = cls_object_bias(model.vision, split)
    figs = {"bias": plot_head_bias(bias, layer=0)}
    eot = None
    if _text_alone(model):
        eot = text_eot_bias(model.text, pair_captions(ds, "unseen" if split.name == "val_unseen" else "seen"))
        figs["eot"] = plot_eot_bias(eot)
    L, H = bias["left"].shape
    lines = ["CLS -> object: fraction of two-object images whose CLS row peaks on the left / right object (Fig. 4c)"]
    lines += [
        f"  L{layer}H{h}: left {bias['left'][layer, h]:.2f}  right {bias['right'][layer, h]:.2f}"
        for layer in range(L)
        for h in range(H)
    ]
    data: dict[str, Any] = {
        "cls_object_bias": bias,
        "text_eot_bias": eot if eot is not None else {"not_run": CAPTIONER_TEXT},
    }
    try:
        deltas = label_pe_deltas(model.vision, split)
        roles = classify_head_roles(deltas)
        figs["delta_scatter"], figs["roles"] = plot_label_pe_scatter(deltas), plot_head_roles(roles)
        data["roles"] = {k: v for k, v in roles.items() if k != "relational_mask"}
        lines += ["relational (|d_label| < |d_pe|, with the head's sign) vs label-specific share (Fig. 5d)"]
        lines += [
            f"  H{h}: relational {roles['relational'][h]:.2f}  label-specific {roles['label_specific'][h]:.2f}"
            for h in range(len(roles["relational"]))
        ]
    except ValueError as e:  # LayerNorm / RoPE towers: the E / P split at the CLS row does not exist
        data["roles"] = {"not_run": str(e)}
        lines.append(f"relational vs label-specific: not run ({e})")
    if eot is None:
        lines.append(f"text EOT row: not run ({CAPTIONER_TEXT})")
        return Report("\n".join(lines), to_jsonable(data), figs)
    first, second = eot["first"], eot["second"]
    lines += ["text EOT row: share of captions where the first / second object gets more attention (Fig. 6)"]
    lines += [
        f"  L{layer}H{h}: first {first[layer, h]:.2f}  second {second[layer, h]:.2f}"
        for layer in range(first.shape[0])
        for h in range(first.shape[1])
    ]
    return Report("\n".join(lines), to_jsonable(data), figs)


@family(
    "alignment",
    what="Procrustes alignment of vision and text label embeddings vs raw cosine (Fig. 7)",
    data="the label embeddings of both towers (no images)",
    options={"center": "center the embeddings before the fit (true/false, default false)"},
)
def _alignment(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment
    from hooked_clip1d.visualization.alignment import plot_alignment

    res = embedding_alignment(model, center=flag_option(opts, "center", False))
    lines = [f"token-embedding alignment, fit on labels {res['fit_labels']}, scored on {res['test_labels']} (Fig. 7)"]
    for k in ("raw", "procrustes", "shuffled"):
        sc = res.get(k)
        if sc:
            lines.append(f"  {k:<11} " + "  ".join(f"{m} {v:.3f}" for m, v in sc.items() if isinstance(v, float)))
    return Report("\n".join(lines), res, {"alignment": plot_alignment(res)})


@family(
    "rope",
    what="RoPE mechanism: consistency rates, Pi_bias, key PCA, effective rank, rho (Fig. 19)",
    data="the unseen-pair validation images (val_unseen)",
    options={},
)
def _rope(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.mechanism.rope import key_effective_rank, rope_mechanism
    from hooked_clip1d.visualization.rope import plot_rope_mechanism

    ds = model_dataset(model)
    if model.vision.cfg.positional != "rope":
        rank = key_effective_rank(model.vision, 0)
        ranks = to_jsonable(rank)
        return Report(
            "not a RoPE vision tower: only the effective rank of W_K (per head, at energy "
            f"{[round(t, 2) for t in ranks['thresholds']]}) is reported: {ranks['rank']}",
            {"effective_rank": ranks},
        )
    res = to_jsonable(rope_mechanism(model.vision, ds.splits["val_unseen"]))
    lines = ["RoPE mechanism on unseen pairs (Fig. 19)", json.dumps(res["consistency"], default=float)[:2000]]
    lines.append("effective rank of W_K: " + json.dumps(res["effective_rank"]))
    return Report("\n".join(lines), res, {"mechanism": plot_rope_mechanism(res)})


@family(
    "attribution",
    what="one attribution method's node or edge scores on the mirror task against exact patching: sign agreement, "
    "Pearson, the largest effects (circuit discovery, beyond the paper)",
    data="two-object images of a split (default val_unseen) vs their mirrors, captions vs their swaps (mirror_task)",
    options={
        "method": "a method of analysis.circuits.methods.METHODS (default AtP+QK: what atp computes by default)",
        "kinds": "node kinds for a node method, e.g. [heads,k,terms] (default: every kind the model has)",
        "split": "the split of the image/caption pairs: train, val_seen, val_unseen (default)",
        "n": "images drawn from the split (default: all)",
        "top": "items listed, largest exact effect first (default 10)",
    },
)
def _attribution(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.analysis.circuits.attribution import agreement
    from hooked_clip1d.analysis.circuits.methods import METHODS
    from hooked_clip1d.analysis.circuits.node_attribution import model_node_kinds
    from hooked_clip1d.analysis.circuits.scores import ground_truth_inputs
    from hooked_clip1d.analysis.circuits.task import mirror_task
    from hooked_clip1d.visualization.circuits import plot_attribution_vs_exact

    name = str(opts.get("method", "AtP+QK"))
    if name not in METHODS or not METHODS[name].estimate or METHODS[name].exact:
        usable = [k for k, m in METHODS.items() if m.estimate and not m.exact]
        raise ValueError(f"unknown method {name!r} for attribution; one of {usable}")
    method = METHODS[name]
    split = pair_split(model_dataset(model), opts).name
    top, n = opts.get("top", 10), opts.get("n")
    for key, v in (("top", top), ("n", n)):
        check_int(v, f"option {key}", none_ok=True)
    images, captions = ground_truth_inputs(model, split, n=n)
    # a captioner's decoder reads the image: its circuit is the vision tower's, scored by the log-likelihood belief
    captioner = not _text_alone(model)
    task = mirror_task(model, images, captions, target="vision" if captioner else "clip")
    if method.unit == "node":
        kinds = opts.get("kinds", model_node_kinds(model))
        if isinstance(kinds, str):  # -o kinds=[heads,k] is not JSON: read it as a list of words
            kinds = [k.strip() for k in kinds.strip("[]").split(",") if k.strip()]
        if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds):
            raise ValueError(f"option kinds must be a list of node kinds, e.g. [heads,k,terms], got {kinds!r}")
        exact = METHODS["exact patching"](task, kinds)
        result = method(task, kinds)
    else:
        if "kinds" in opts:
            raise ValueError(f"{name} scores edges (every edge of the graph): option kinds is for node methods")
        exact = METHODS["path patching"](task)
        result = method(task)
    agree = agreement(result, exact)
    on = result.subset(exact.names)
    head = f"{name} against {exact.method} on the mirror task ({task.n_examples} images of {split})"
    lines = [head]
    if captioner:
        lines.append(
            f"  the vision tower only, its belief log p(caption) - log p(swap); text tower: not run ({CAPTIONER_TEXT})"
        )

    def num(key: str, none: str = "n/a") -> str:
        v = agree.get(key)
        return none if v is None else f"{v:.2f}"

    lines.append(
        f"  over the {agree['n']} items the mirror moves: sign agreement {num('sign_agreement', 'n/a (magnitudes)')}, "
        f"Pearson {num('pearson')}, top-{agree['k']} overlap {num('top_k_overlap')}"
    )
    lines.append(f"  {'item':<34} {exact.method:>15} {name:>15}")
    for item, value in exact.ranked(top):
        lines.append(f"  {item:<34} {value:>+15.4f} {on[item]:>+15.4f}")
    data = {
        "method": name,
        "split": split,
        "n_images": task.n_examples,
        "agreement": agree,
        "exact": exact.as_dict(),
        "scores": on.as_dict(),
    }
    return Report("\n".join(lines), to_jsonable(data), {"vs_exact": plot_attribution_vs_exact(result, exact)})


@family(
    "pruning",
    what="every subset of kept heads, before (with -o epochs=N also after) retraining (App. K, Fig. 22)",
    data="validation splits (before and after retraining)",
    options={
        "kept": "head counts to keep (default 1..H-1), e.g. [1,2]",
        "epochs": "retrain each pruned model this many epochs (default 0: no retraining)",
        "runs_dir": "where the retraining runs go",
        "engine": "retraining engine, batched or standard (default batched)",
    },
)
def _pruning(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.training.retrain import format_sweep, head_subset_sweep
    from hooked_clip1d.visualization.heads import plot_pruning

    H = model.vision.cfg.n_heads * model.vision.cfg.n_layers
    kept = opts.get("kept", list(range(1, H)))
    epochs = check_int(opts.get("epochs", 0), "option epochs", minimum=0)
    out = opts.get("runs_dir")
    engine = opts.get("engine", "batched")
    res = head_subset_sweep(model, kept, epochs=epochs, out_dir=out, resume=True, progress=epochs > 0, engine=engine)
    table = "heads kept, unseen-pair accuracy (val_unseen) before / after retraining\n" + format_sweep(res)
    if epochs == 0:
        table += "\n(after: -o epochs=N retrains each pruned model for N epochs)"
    return Report(table, res, {"pruning": plot_pruning(res)})


@family(
    "dynamics",
    what="the mechanism's emergence along the model's shipped training trajectory: per checkpoint the loss, "
    "accuracies, head bias, EP row, Fig. 13 share, invariant ablation, W_QK rank and decay exposure; when each of "
    "the dynamics study's checks first and last holds; for a tower the mechanism report cannot read (RoPE, two "
    "layers, the full model), the accuracies along the training and when each of Fig. 11's levels is first reached",
    data="the checkpoints of the model's shipped trajectory (`list --checkpoints NAME`); mechanism numbers on the "
    "unseen-pair probe (every unseen ordered pair at every position pair); without them, the accuracies the zoo "
    "records (the history, the stored checkpoints, the snapshots recorded without weights)",
    options={
        "epochs": "only these checkpoints, e.g. [0,100,10000] (default: all)",
        "recompute": "recompute the rows from the weights instead of reading those measured at shipping "
        "(true/false, default false)",
        "show": "the epochs drawn side by side (default: the first, where it first generalizes, the last)",
        "image": "the image of the side-by-side figure and the HTML page (default: two held-out labels)",
    },
)
def _dynamics(model: CLIP1D, opts: dict[str, Any]) -> Report:
    from hooked_clip1d.cli.dynamics_report import dynamics_report  # the body, in a module of its own

    return dynamics_report(model, opts)
