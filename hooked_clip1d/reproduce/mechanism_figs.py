"""The paper's mechanism figures on the zoo's flagship (Sec. 4-5, App. D, E, F): what the model attends to and why.

- Generalization dynamics (``fig11``, ``fig11a``) are in ``dynamics_figs``.
- CLS attention: ``fig4b`` (on a swapped unseen pair), ``fig4c`` (left/right head bias), ``fig15`` (no bias in a
  model that does not generalize, App. F).
- Score decompositions: ``fig13`` (weight-bias terms, App. D, Fig. 12-13), ``fig14`` (token-position terms, the EP
  horizontal gradient, Fig. 5a, 5b, 14, App. E), ``fig5d`` (relational vs label-specific heads), ``fig5e`` (term
  ablations, Fig. 5e, 16, 17).
- Text tower and alignment: ``fig6``, ``fig7`` are in ``text_figs``.

``FIG4B_IMAGES`` is shared with ``pruned_heads`` (Fig. 22), and the readings both use (the whole-CLS-query rows, the
paper's EP reading, the sensitivity steps) are in ``readings``; the figure functions take the model name so
``open_questions`` reruns them on other models. The checks are those of
docs/fidelity.md ("Verdicts v2"): readings invariant to every output-preserving reparametrisation count, the paper's
coordinate-dependent ones and identities are shown as secondary, and thresholds the paper does not state carry a
sensitivity table (``Outcome.sensitivity``, also under ``numbers["sensitivity"]``).
"""

from __future__ import annotations

import torch

from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.reproduce.core import FLAGSHIP, NONGEN, FigureSpec, Outcome, register
from hooked_clip1d.reproduce.readings import (
    BIAS_STEPS,
    COORDINATE,
    DOMINANT_SPLIT_ID,
    DOMINANT_SPLIT_TEXT,
    DOMINANT_STEPS,
    RELATIONAL_ID,
    RELATIONAL_RESTATED,
    RELATIONAL_STEPS,
    RELATIONAL_TEXT,
    RESTATED_4C,
    RESTATED_5D,
    ROW_TEXT,
    STD_STEPS,
    at_least,
    at_most,
    dominant_split,
    ep_gradient_outcome,
    monotonic,
    row_gradient,
    split_heads,
)


def _head_bias_outcome(model: CLIP1D, name: str, expect_bias: bool) -> Outcome:
    from hooked_clip1d.analysis.mechanism.heads import cls_object_bias
    from hooked_clip1d.visualization.plots import plot_head_bias

    ds = build_dataset(model.data_config)
    bias = cls_object_bias(model.vision, ds.splits["val_unseen"])
    left, right = bias["left"][0].tolist(), bias["right"][0].tolist()
    fig = plot_head_bias(bias, layer=0)
    fig.axes[0].set_title(f"{name}: CLS attends most to (unseen pairs)")
    fig.tight_layout()
    strong = [max(left_h, right_h) >= 0.6 for left_h, right_h in zip(left, right, strict=True)]
    heads = ", ".join(f"h{h} L{lv:.2f}/R{rv:.2f}" for h, (lv, rv) in enumerate(zip(left, right, strict=True)))
    n_left, n_right = sum(v >= 0.6 for v in left), sum(v >= 0.6 for v in right)
    if expect_bias:
        name_c = (
            "one head attends most to one side and at least two others to the other side (each on >= 60% of "
            "unseen-pair images; the paper: 1 right, 3 left)"
        )
        checks = [(name_c, split_heads(left, right, 0.6)), (DOMINANT_SPLIT_TEXT, dominant_split(left, right))]
        sensitivity = {
            name_c: [(t, split_heads(left, right, t)) for t in BIAS_STEPS],
            DOMINANT_SPLIT_TEXT: [(t, dominant_split(left, right, t)) for t in DOMINANT_STEPS],
        }
        secondary = {name_c: RESTATED_4C}
        ids = {DOMINANT_SPLIT_TEXT: DOMINANT_SPLIT_ID}
    else:
        checks = [("no head is biased to one side on >= 60% of images (no gradient)", not any(strong))]
        sensitivity, secondary, ids = {}, {}, {}
    numbers = {"left": left, "right": right, "heads_left": n_left, "heads_right": n_right}
    if sensitivity:
        numbers["sensitivity"] = sensitivity
    summary = f"P(left)/P(right) per head: {heads}."
    return Outcome(numbers, summary, checks, {"bias": fig}, sensitivity=sensitivity, secondary=secondary, check_ids=ids)


def fig4c_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    return _head_bias_outcome(models[name], name, expect_bias=True)


def _fig15(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.mechanism.report import cls_position_rows

    name = NONGEN
    model = models[name]
    out = _head_bias_outcome(model, name, expect_bias=False)
    left, right = out.numbers["left"], out.numbers["right"]
    met = model.manifest["metrics"]
    acc, single, seen = (met[s]["acc"] for s in ("val_unseen", "val_single", "val_seen"))
    # the positive requirement: a trained model, not an untrained one
    learned = at_least(single, 0.9) and at_least(seen, 0.9)
    rho, std = row_gradient(cls_position_rows(model.vision))
    rows = monotonic(rho, std)

    def no_bias(level: float) -> bool:
        biased = any(at_least(max(a, b), level) for a, b in zip(left, right, strict=True))
        return learned and not biased and not any(rows)

    c1 = (
        "the model learned its training data (single-object and seen-pair accuracy >= 0.9), yet no head is biased "
        f"to one side on >= 60% of unseen-pair images, nor has a whole-CLS-query key-position row {ROW_TEXT} "
        "(no gradient)"
    )
    c2 = (
        "the model learned its training data (single-object and seen-pair accuracy >= 0.9), yet does not generalize "
        "to unseen pairs (accuracy <= 0.6)"
    )
    out.checks = [(c1, no_bias(0.6)), (c2, learned and at_most(acc, 0.6))]
    out.absence = (c1, c2)  # absence claims; with the positive requirement no untrained model passes them
    out.sensitivity = {c1: [(t, no_bias(t)) for t in BIAS_STEPS]}
    out.numbers.update(
        unseen_acc=acc, single_acc=single, seen_acc=seen, kp_spearman=rho, kp_std=std, sensitivity=out.sensitivity
    )
    out.summary += (
        f" Single-object / seen-pair / unseen-pair accuracy {single:.2f} / {seen:.2f} / {acc:.2f}. Whole-CLS-query "
        "key-position row per head (Spearman, std): "
        + ", ".join(f"h{h} {r:+.2f}/{d:.2f}" for h, (r, d) in enumerate(zip(rho, std, strict=True)))
        + "."
    )
    return out


def fig5e_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations
    from hooked_clip1d.analysis.mechanism.report import ablate_cls_key_position
    from hooked_clip1d.evaluation import evaluate
    from hooked_clip1d.visualization.decomposition import plot_ablations

    model = models[name]
    ds = build_dataset(model.data_config)
    res = evaluate_ablations(model, ds)
    inv = evaluate(model, ds, splits=("val_unseen",), vision_hooks=ablate_cls_key_position(model.vision))
    inv_acc, inv_ls = inv["val_unseen"]["acc"], inv["val_unseen"]["label_set"]
    res["invariant"] = {"acc": inv_acc, "label_set": inv_ls}
    conds = res["conditions"]
    u = {k: (c["metrics"]["val_unseen"]["acc"], c["metrics"]["val_unseen"]["label_set"]) for k, c in conds.items()}
    fig = plot_ablations(res, splits=("val_seen", "val_unseen"))
    ep_acc, ep_ls = u["EP"]
    all_acc, all_ls = u["EP+PE+PP+BP+VP"]
    base = u["baseline"][0]
    # checks of an effect are relative to the baseline: a range the baseline is already in, or a label-set that
    # "survives" an ablation that changed nothing, does not count (a baseline of 0.67 is already "near 0.5")
    invariant = (
        "ablating the CLS query's whole key-position part (invariant to how CLS is split between W_E and W_pos) "
        "gives 0.4-0.6 with label-set >= 0.8, from a baseline >= 0.8"
    )
    checks = [
        (invariant, base >= 0.8 and 0.4 <= inv_acc <= 0.6 and inv_ls >= 0.8),
        (
            "ablating EP brings unseen-pair accuracy near 0.5 (0.3-0.7) from a baseline above 0.7",
            0.3 <= ep_acc <= 0.7 and base > 0.7,
        ),
        ("ablating EP lowers unseen-pair accuracy by at least 0.15", base - ep_acc >= 0.15),
        (
            "the EP ablation removes the side, not the labels (accuracy -0.15 or more, label-set >= 0.8)",
            base - ep_acc >= 0.15 and ep_ls >= 0.8,
        ),
        ("EP is the single score term whose ablation hurts most", ep_acc <= min(u[k][0] for k in ("PE", "PP", "BP"))),
        (
            "ablating all positional terms (attention and value) gives ~0.5 (0.3-0.7) from a baseline above 0.7",
            0.3 <= all_acc <= 0.7 and base > 0.7,
        ),
        (
            "ablating all positional terms removes the side, not the labels (accuracy -0.15 or more, label-set >= 0.8)",
            base - all_acc >= 0.15 and all_ls >= 0.8,
        ),
    ]
    summary = (
        f"invariant (CLS key-position) ablation {inv_acc:.2f}/{inv_ls:.2f}; unseen-pair accuracy / label-set: "
        + "; ".join(f"{k} {a:.2f}/{ls:.2f}" for k, (a, ls) in u.items())
    )
    why = (
        "coordinate-dependent: moving W_E[CLS] + W_pos[0] wholly into one row "
        "(analysis.mechanism.report.move_cls_embedding) "
        "leaves every output unchanged and swaps EP's and PP's ablations; judged by the invariant ablation instead"
    )
    secondary = {c: why for c, _ in checks[1:5]}
    identity = (
        "identity: with every positional term removed the two mirrored images of a pair are the same input, so "
        f"accuracy = label-set / 2 exactly (here {all_acc:.3f} vs {all_ls / 2:.3f})"
    )
    secondary[checks[5][0]] = identity
    secondary[checks[6][0]] = (
        "its accuracy part is the identity above (accuracy = label-set / 2); its label-set part is coordinate-"
        "dependent: what the ablation leaves (W_E alone) changes when W_E[CLS] moves into W_pos[0] or a constant "
        "moves from W_E into W_pos, neither of which changes any output"
    )
    res["identity_residual"] = abs(all_acc - all_ls / 2)  # |accuracy - label-set / 2| with every positional term off

    def invariant_holds(half: float) -> bool:
        return base >= 0.8 and 0.5 - half <= inv_acc <= 0.5 + half and inv_ls >= 0.8

    sensitivity = {invariant: [(h, invariant_holds(h)) for h in (0.05, 0.1, 0.15, 0.2)]}  # half-width around 0.5
    res["sensitivity"] = sensitivity
    return Outcome(res, summary + ".", checks, {"ablation": fig}, secondary=secondary, sensitivity=sensitivity)


# the two images of Fig. 4(b): the unseen pair (17, 19) with positions swapped
FIG4B_IMAGES = ("C . . 17 . . 19 . . . .", "C . . 19 . . 17 . . . .")


def fig4b_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.metrics import object_token_positions
    from hooked_clip1d.visualization.attention import plot_attention

    model = models[name]
    imgs = model.vision.to_tokens(list(FIG4B_IMAGES))
    _, cache = model.vision.run_with_cache(imgs, names_filter=lambda n: n.endswith("hook_pattern"))
    cls = cache["pattern", 0][:, :, 0, :]  # [2, head, key]
    pos = object_token_positions(imgs)  # [2, 2]: input positions of the left / right object (CLS is 0)
    rows = torch.arange(2)[:, None]
    left, right = cls[rows, :, pos[:, :1]].squeeze(1), cls[rows, :, pos[:, 1:]].squeeze(1)  # [2, head]
    right_wins = (right > left).tolist()
    relational = [h for h in range(cls.shape[1]) if right_wins[0][h] == right_wins[1][h]]
    on_objects = (left + right).min().item()
    figs = {f"image{i}": plot_attention(model, FIG4B_IMAGES[i], layer=0) for i in range(2)}
    checks = [
        ("the CLS token attends mostly to the objects (>= 0.5 of its attention, every head)", on_objects >= 0.5),
        ("some head favours the same side in both images (relational, not label-specific)", bool(relational)),
    ]
    side = [f"h{h}: {'R' if right_wins[0][h] else 'L'}/{'R' if right_wins[1][h] else 'L'}" for h in range(cls.shape[1])]
    summary = (
        f"side each head's CLS row favours in the two images ({' vs '.join(FIG4B_IMAGES)}): {', '.join(side)}; "
        f"min attention on the two objects {on_objects:.2f}."
    )
    numbers = {"cls_attention": cls.tolist(), "relational_heads": relational}
    return Outcome(numbers, summary, checks, figs, values={checks[0][0]: (on_objects, ">")})


def _flagship_decomposition(model: CLIP1D):
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores

    ds = build_dataset(model.data_config)
    split = ds.splits["val_unseen"]
    _, cache = model.vision.run_with_cache(split.images[split.is_pair])
    return decompose_attention_scores(model.vision, cache, layer=0)


PAPER_XWX_SHARE = (0.76, 0.77, 0.91, 0.76)  # App. D, Fig. 13: share of XW_QKX^T in the CLS-row std, heads 0-3


def fig13_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores, row_std_shares
    from hooked_clip1d.analysis.mechanism.rope import key_effective_rank
    from hooked_clip1d.visualization.decomposition import plot_std_histograms, plot_std_shares, plot_term_maps

    model = models[name]
    dec = _flagship_decomposition(model)
    wb = dec.weight_bias_terms()
    shares = row_std_shares(wb, query_pos=0)
    xwx = shares["share"][shares["terms"].index("XWX")].tolist()
    fig_img = model.vision.to_tokens(FIG4B_IMAGES[0])
    tokens = model.vision.token_strs(fig_img[0])
    _, cache = model.vision.run_with_cache(fig_img)
    maps = decompose_attention_scores(model.vision, cache, layer=0).weight_bias_terms()
    figs = {
        "shares": plot_std_shares(shares, reference={"XWX": list(PAPER_XWX_SHARE)}),
        "histograms": plot_std_histograms(shares),
        "fig12_terms": plot_term_maps(maps, tokens=tokens, title=f"{name}: weight-bias terms (Fig. 12)"),
    }
    checks = [
        (
            "XW_QKX^T is the largest term in every head",
            all(x == max(col) for x, col in zip(xwx, shares["share"].T.tolist(), strict=True)),
        ),
        (
            "XW_QKX^T's share is in the paper's 0.76-0.91 in every head, with the paper's spread over heads "
            "(max - min >= 0.10)",
            all(0.76 <= x <= 0.91 for x in xwx) and max(xwx) - min(xwx) >= 0.10,
        ),
    ]
    sensitivity = {  # the spread's 0.10 is ours; the range is the paper's
        checks[1][0]: [
            (t, all(0.76 <= x <= 0.91 for x in xwx) and max(xwx) - min(xwx) >= t) for t in (0.05, 0.1, 0.15, 0.2)
        ]
    }
    summary = "XW_QKX^T share of the CLS-row std per head: " + ", ".join(
        f"h{h} {x:.2f} (paper {p:.2f})" for h, (x, p) in enumerate(zip(xwx, PAPER_XWX_SHARE, strict=True))
    )
    rank = [r[1] for r in key_effective_rank(model.vision, 0)["rank"].tolist()]
    notes = (
        f"Effective rank of W_K at 95 % energy per head: {rank}. With rank-1 keys every head reads one residual "
        "direction, so the shares come out alike in every head."
    )
    numbers = {
        "terms": shares["terms"],
        "share": shares["share"].tolist(),
        "std": shares["std"].tolist(),
        "w_k_rank95": rank,
        "sensitivity": sensitivity,
    }
    attn = model.vision.blocks[0].attn
    if not (attn.b_Q.abs().max() > 0 or attn.b_K.abs().max() > 0):  # both checks would hold by construction
        why = (
            f"{name} has no query/key biases (trained with frozen=('qk_bias',)), so every bias "
            "term is 0 and XW_QKX^T is the whole CLS row by construction: the figure's split cannot be measured"
        )
        return Outcome(numbers, summary + ".", checks, figs, notes, not_run=why)
    return Outcome(numbers, summary + ".", checks, figs, notes, sensitivity=sensitivity)


def fig14_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.mechanism.heads import cls_object_bias
    from hooked_clip1d.analysis.mechanism.report import cls_position_rows

    model = models[name]
    out = ep_gradient_outcome(model, name, FIG4B_IMAGES[0])
    rho, std = row_gradient(cls_position_rows(model.vision))
    bias = cls_object_bias(model.vision, build_dataset(model.data_config).splits["val_unseen"])
    side = (bias["right"][0] - bias["left"][0]).tolist()  # > 0: the head favours the right object
    c1 = f"every head's whole-CLS-query key-position row is {ROW_TEXT} along the image"
    c2 = (
        "every head's whole-CLS-query row slopes toward the side it favours (sign of its Spearman = sign of "
        "P(right) - P(left) on unseen pairs)"
    )
    toward = [r * d > 0 for r, d in zip(rho, side, strict=True)]
    out.checks = [(c1, all(monotonic(rho, std))), (c2, all(toward))] + out.checks
    out.sensitivity = {c1: [(t, all(monotonic(rho, std, t))) for t in STD_STEPS]}
    out.numbers.update(kp_spearman=rho, kp_std=std, p_right_minus_left=side, sensitivity=out.sensitivity)
    out.summary = (
        "whole-CLS-query key-position row per head (Spearman / std): "
        + ", ".join(f"h{h} {r:+.2f}/{d:.2f}" for h, (r, d) in enumerate(zip(rho, std, strict=True)))
        + "; P(right) - P(left): "
        + ", ".join(f"{d:+.2f}" for d in side)
        + ". EP alone (secondary): "
        + out.summary
    )
    return out


def fig5d_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    from hooked_clip1d.analysis.mechanism.heads import classify_head_roles, cls_object_bias, label_pe_deltas
    from hooked_clip1d.analysis.mechanism.report import cls_label_pe_deltas
    from hooked_clip1d.visualization.heads import plot_head_roles, plot_label_pe_scatter

    model = models[name]
    split = build_dataset(model.data_config).splits["val_unseen"]
    deltas = cls_label_pe_deltas(model.vision, split)  # App. I's form: the whole CLS query
    roles = classify_head_roles(deltas)
    ep_rel = classify_head_roles(label_pe_deltas(model.vision, split))["relational"].tolist()  # the paper's EP only
    bias = cls_object_bias(model.vision, split)
    rel = roles["relational"].tolist()
    gap = (bias["left"][0] - bias["right"][0]).abs().tolist()

    def match(shares: list[float], tol: float, nontrivial: bool = True) -> bool:
        close = all(abs(r - g) <= tol for r, g in zip(shares, gap, strict=True))
        return close and (max(shares) >= 0.5 or not nontrivial)  # not true merely because every share is ~0

    c1 = "some head is relational on >= 50% of unseen-pair images (whole CLS query: App. I's Δlabel and Δp.e.)"
    c2 = (
        "the relational share (whole CLS query) matches |P(left) - P(right)| per head (within 0.15), and some head's "
        "share is >= 0.5 (not ~0 everywhere)"
    )
    e1 = "[EP only, the paper's coordinates] some head is relational on >= 50% of unseen-pair images"
    e2 = "[EP only, the paper's coordinates] the relational share matches |P(left) - P(right)| per head (within 0.15)"
    checks = [
        (c1, max(rel) >= 0.5),
        (c2, match(rel, 0.15)),
        (e1, max(ep_rel) >= 0.5),
        (e2, match(ep_rel, 0.15, False)),
        (RELATIONAL_TEXT, at_least(max(rel), RELATIONAL_RESTATED)),
    ]
    sensitivity = {
        c2: [(t, match(rel, t)) for t in (0.05, 0.1, 0.15, 0.2, 0.3)],
        RELATIONAL_TEXT: [(t, at_least(max(rel), t)) for t in RELATIONAL_STEPS],
    }
    summary = (
        "relational share (whole CLS query) / |P(left)-P(right)| per head: "
        + ", ".join(f"h{h} {r:.2f}/{g:.2f}" for h, (r, g) in enumerate(zip(rel, gap, strict=True)))
        + "; EP-only relational share (secondary): "
        + ", ".join(f"h{h} {r:.2f}" for h, r in enumerate(ep_rel))
    )
    figs = {"scatter": plot_label_pe_scatter(deltas), "roles": plot_head_roles(roles)}
    numbers = {"relational": rel, "lr_gap": gap, "relational_ep_only": ep_rel, "sensitivity": sensitivity}
    notes = (
        "With the whole CLS query, Δlabel + Δp.e. is the head's CLS logit difference, so an image is relational when "
        "App. I's consistency condition (Eq. 13) holds in the head's direction: the per-head match then fails only "
        "where a head prefers a side consistently against its majority direction or attends most to a background "
        "pixel."
    )
    constructed = (
        "true by construction in the form computed (verdicts v3, docs/fidelity.md): with the whole CLS query, "
        "Δlabel + Δp.e. is the head's CLS logit difference, so the relational share counts the images on which the "
        "head prefers one side in both orders, which |P(left) - P(right)| counts on the same images (the two differ "
        "by <= 0.10 in every reading from epoch 500 on)"
    )
    secondary = {c1: RESTATED_5D, c2: constructed, e1: COORDINATE, e2: COORDINATE}
    return Outcome(
        numbers,
        summary + ".",
        checks,
        figs,
        notes,
        values={c1: (max(rel), ">")},
        secondary=secondary,
        sensitivity=sensitivity,
        check_ids={RELATIONAL_TEXT: RELATIONAL_ID},
    )


# the figures of this module, each with its claim, thresholds (in its function) and zoo models
SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "fig4c",
        "CLS -> object attention bias per head (Fig. 4c)",
        "On unseen-pair images, head 2 has the strongest bias to the right object; the other three heads are "
        "left-biased (the paper states no share).",
        (FLAGSHIP,),
        fig4c_outcome,
        data="val_unseen (unseen-pair validation images)",
        replicate=True,
    ),
    FigureSpec(
        "fig4b",
        "Attention of the CLS token on an unseen pair with swapped positions (Fig. 4b)",
        "In both images of the pair (17, 19), the CLS token attends to the objects, and head 2 attends to the "
        "right object whichever label it is (relational, not label-specific).",
        (FLAGSHIP,),
        fig4b_outcome,
        data="the two Fig. 4b images (17, 19 and 19, 17)",
        replicate=True,
    ),
    FigureSpec(
        "fig13",
        "Weight-bias decomposition: share of each term in the CLS-row std (Fig. 12, 13, App. D)",
        "XW_QKX^T dominates: 76 %, 77 %, 91 % and 76 % of the across-key std of the CLS row in heads 0-3.",
        (FLAGSHIP,),
        fig13_outcome,
        data="val_unseen pairs (shares, histograms); the Fig. 4b image C . . 17 . . 19 . . . . (term maps)",
        replicate=True,
    ),
    FigureSpec(
        "fig14",
        "Token-position decomposition: the EP horizontal gradient, label-specific EE (Fig. 5a, 5b, 14)",
        "EW_QKP^T shows a clear monotonic gradient along the image on the CLS row in all four heads, in the "
        "direction of each head's left/right bias.",
        (FLAGSHIP,),
        fig14_outcome,
        data="the Fig. 4b image C . . 17 . . 19 . . . .",
        replicate=True,
    ),
    FigureSpec(
        "fig5e",
        "Term ablations: unseen-pair accuracy and label-set recognition (Fig. 5e, 16, 17)",
        "Ablating EP drops unseen-pair accuracy to ~0.5 while label-set recognition stays high (Fig. 5e, 16); "
        "ablating all positional terms of attention and value also gives ~0.5 with label-set kept (Fig. 17).",
        (FLAGSHIP,),
        fig5e_outcome,
        data="val_seen and val_unseen",
        replicate=True,
    ),
    FigureSpec(
        "fig15",
        "A non-generalizing model has no left/right head bias (Fig. 15, App. F)",
        "With Ntot = 10, n2 = 5 the model does not generalize to unseen pairs and no head shows the "
        "left/right bias or the EP gradient.",
        (NONGEN,),
        _fig15,
        data="val_unseen (unseen-pair validation images)",
    ),
    FigureSpec(
        "fig5d",
        "Relational vs label-specific heads: delta-label vs delta-p.e. (Fig. 5c, d)",
        "A head is relational when |delta-label| < |delta-p.e.|; the relational share of each head is about its "
        "|P(left) - P(right)| of Fig. 4c, so the left/right bias comes from the EP gradient.",
        (FLAGSHIP,),
        fig5d_outcome,
        data="val_unseen (unseen-pair validation images)",
        replicate=True,
    ),
)
