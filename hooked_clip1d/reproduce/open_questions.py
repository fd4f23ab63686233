"""Experiments beyond the paper (the ``x*`` keys; their own section of the results page), except the recipe study.

Each asks a question the paper leaves open and states checks (written before or, where the notes say so, after a
first look at the numbers):

- ``x2-fig4a-small-init``: Fig. 4a's sweep with small embedding init (``sweep_figs.fig4a_outcome`` on another sweep).
- ``x3-small-init``: the paper's mechanism checks (Fig. 4b, 4c, 5d, 5e, 11, 13, 14) on the small-init model.
- ``x4-train-ablate-ep``: training with the EP term removed.
- ``x5-two-layer``: where the CLS-row gradient arises in the 2-layer vision encoder.
- ``x7-single-head-seeds``: fig21's single-head grid at more seeds.

The spatial-IDs paper's methods (``x1-mirror-swap``, ``x6-spatial-ids``) are in ``spatial_id_studies``, the recipe
study (``x8-recipe``) in ``recipe_study``.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.reproduce.core import (
    ABLATE_EP,
    SMALL_INIT,
    VISION2,
    FigureSpec,
    Outcome,
    register,
)
from hooked_clip1d.reproduce.dynamics_figs import fig11_outcome
from hooked_clip1d.reproduce.mechanism_figs import (
    fig4b_outcome,
    fig4c_outcome,
    fig5d_outcome,
    fig5e_outcome,
    fig13_outcome,
    fig14_outcome,
)
from hooked_clip1d.reproduce.readings import at_least, at_most, first_epoch
from hooked_clip1d.reproduce.replicates import FRESH_JUDGED
from hooked_clip1d.reproduce.sweep_figs import fig4a_outcome, head_readings, one_sided

FRESH_ONLY = (
    "restated to be judged on the flagship's six fresh runs alone (docs/fidelity.md, 2026-11-29): this model has "
    "none, so it is shown"
)


def _x_small_init(models: dict[str, CLIP1D]) -> Outcome:
    """The flagship's mechanism checks (Fig. 4b, 4c, 5d, 5e, 11, 13, 14) on the small-init model."""
    parts = {
        "fig11": fig11_outcome,
        "fig4c": fig4c_outcome,
        "fig4b": fig4b_outcome,
        "fig5d": fig5d_outcome,
        "fig5e": fig5e_outcome,
        "fig13": fig13_outcome,
        "fig14": fig14_outcome,
    }
    numbers, checks, figs, lines = {}, [], {}, []
    values, secondary, absence, sensitivity = {}, {}, [], {}
    for key, fn in parts.items():
        out = fn(models, SMALL_INIT)
        numbers[key] = out.numbers
        checks += [(f"[{key}] {c}", ok) for c, ok in out.checks]
        # each figure's marks carry over (docs/fidelity.md, "Verdicts v2"): what it does not count, x3 does not count
        values.update({f"[{key}] {c}": v for c, v in out.values.items()})
        secondary.update({f"[{key}] {c}": why for c, why in out.secondary.items()})
        # a check restated to be judged on the flagship's fresh runs alone (Fig. 4c', 5d') has none on this model
        secondary.update(
            {f"[{key}] {c}": FRESH_ONLY for c, _ in out.checks if out.id_of(c) in FRESH_JUDGED.get(key, ())}
        )
        absence += [f"[{key}] {c}" for c in out.absence]
        sensitivity.update({f"[{key}] {c}": v for c, v in out.sensitivity.items()})
        figs.update({f"{key}_{k}": f for k, f in out.figures.items()})
        held = sum(bool(ok) for _, ok in out.checks)
        lines.append(f"{key} ({held}/{len(out.checks)} checks): {out.summary}")
    m = models[SMALL_INIT].manifest["metrics"]["val_unseen"]
    summary = (
        f"unseen-pair accuracy {m['acc']:.2f} (the N(0, 1) flagship: 0.67). Per figure, with the paper's checks: "
        + " ".join(lines)
    )
    return Outcome(
        numbers,
        summary,
        checks,
        figs,
        values=values,
        secondary=secondary,
        absence=tuple(absence),
        sensitivity=sensitivity,
    )


def _x_train_ablate_ep(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations
    from hooked_clip1d.analysis.mechanism.heads import cls_object_bias
    from hooked_clip1d.visualization.decomposition import plot_ablations

    base, abl = models[SMALL_INIT], models[ABLATE_EP]
    hb, ha = base.manifest["history"], abl.manifest["history"]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for h, label in ((hb, "trained with EP (init 0.02)"), (ha, "trained with EP removed")):
        ax.plot(h["epoch"], h["unseen"], label=label)
    ax.set(
        xlabel="epoch",
        ylabel="unseen-pair accuracy",
        ylim=(0, 1.05),
        xlim=(0, max(ha["epoch"])),
        title="training-time EP ablation",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    ds = build_dataset(abl.data_config)
    conds = {
        "baseline": [],
        "PE": ["PE"],
        "PP": ["PP"],
        "BP": ["BP"],
        "PP+BP": ["PP", "BP"],
        "VP": ["VP"],
        "PP+BP+VP": ["PP", "BP", "VP"],
    }
    res = evaluate_ablations(abl, ds, conds)
    u = {k: c["metrics"]["val_unseen"]["acc"] for k, c in res["conditions"].items()}
    ls = {k: c["metrics"]["val_unseen"]["label_set"] for k, c in res["conditions"].items()}
    bias = cls_object_bias(abl.vision, ds.splits["val_unseen"])
    left, right = bias["left"][0].tolist(), bias["right"][0].tolist()
    acc_a = abl.manifest["metrics"]["val_unseen"]
    t_base, t_abl = first_epoch(hb, "unseen", 0.9), first_epoch(ha, "unseen", 0.9)
    checks = [
        ("without EP the model still generalizes (unseen-pair accuracy >= 0.9)", at_least(acc_a["acc"], 0.9)),
        ("some head is biased to one side on >= 90% of unseen-pair images", at_least(max(left + right), 0.9)),
        (
            "the other key-position terms take EP's role: ablating PP+BP gives ~0.5 (0.3-0.7, from a baseline above "
            "0.7) with label-set >= 0.8",
            0.3 <= u["PP+BP"] <= 0.7 and u["baseline"] > 0.7 and ls["PP+BP"] >= 0.8,
        ),
    ]
    summary = (
        f"trained {abl.manifest['epochs']} epochs with EP removed from every forward pass: unseen-pair accuracy "
        f"{acc_a['acc']:.2f} (label-set {acc_a['label_set']:.2f}); first epoch >= 0.9: {t_abl} (with EP: {t_base}). "
        "Heads P(left)/P(right): "
        + ", ".join(f"h{h} {lv:.2f}/{rv:.2f}" for h, (lv, rv) in enumerate(zip(left, right, strict=True)))
        + ". Ablating further terms at test time, unseen-pair accuracy / label-set: "
        + ", ".join(f"{k} {u[k]:.2f}/{ls[k]:.2f}" for k in u)
    )
    numbers = {
        "unseen_acc": u,
        "unseen_label_set": ls,
        "left": left,
        "right": right,
        "epochs_to_0.9": {"with_ep": t_base, "without": t_abl},
    }
    figs = {"curves": fig, "ablations": plot_ablations(res, splits=("val_seen", "val_unseen"))}
    notes = (
        "The checks state what we found (written after looking at the model), so they guard the finding rather than "
        f"test a prediction. The run is 3,000 epochs, not 10,000: {SMALL_INIT}'s recipe generalizes by epoch 300."
    )
    return Outcome(numbers, summary + ".", checks, figs, notes)


def _x_two_layer(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.interventions.ablation import evaluate_ablations
    from hooked_clip1d.analysis.interventions.decompose import decompose_attention_scores
    from hooked_clip1d.analysis.mechanism.report import gradient_sources
    from hooked_clip1d.visualization.decomposition import plot_row_profiles

    model = models[VISION2]
    ds = build_dataset(model.data_config)
    split = ds.splits["val_unseen"]
    images = split.images[split.is_pair]
    sources = {layer: gradient_sources(model, images, layer) for layer in range(model.vision.cfg.n_layers)}
    pos_terms = ["EP", "PE", "PP", "BP", "VP"]
    abl = {
        f"L{layer}": evaluate_ablations(
            model, ds, {"baseline": [], "EP": ["EP"], "all P": pos_terms}, layer=layer, splits=("val_unseen",)
        )
        for layer in sources
    }
    u = {f"{lk} {c}": v["metrics"]["val_unseen"]["acc"] for lk, r in abl.items() for c, v in r["conditions"].items()}
    base = model.manifest["metrics"]["val_unseen"]["acc"]
    img = model.vision.to_tokens("C . . 22 . . 24 . . . .")
    _, cache = model.vision.run_with_cache(img)
    figs = {
        f"layer{layer}_rows": plot_row_profiles(
            decompose_attention_scores(model.vision, cache, layer=layer).token_position_terms(),
            ["EE", "EP", "PE", "PP", "ER", "RE", "RP", "PR", "RR"] if layer else ["EE", "EP", "PE", "PP", "BP"],
            row=0,
            tokens=model.vision.token_strs(img[0]),
        )
        for layer in sources
    }
    lead = {layer: [s["terms"][0] for s in src] for layer, src in sources.items()}
    l0_ep = any(t["q"] == "embed" and t["k"] == "pos_embed" and abs(t["spearman"]) >= 0.9 for t in lead[0])
    l1_reads_heads = any(t["q"].startswith("L0") or t["k"].startswith("L0") for t in lead[1])
    checks = [
        ("layer 0: E x P (the EP term) is the leading monotonic CLS-row term in some head (|Spearman| >= 0.9)", l0_ep),
        ("layer 1: the leading monotonic term of some head involves a layer-0 head's output", l1_reads_heads),
        ("ablating layer-0 EP costs >= 0.3 unseen-pair accuracy", u["L0 baseline"] - u["L0 EP"] >= 0.3),
    ]

    def fmt(t: dict[str, Any]) -> str:
        return f"{t['q']} x {t['k']} ({t['spearman']:+.2f})"

    summary = (
        f"{VISION2} at {model.manifest['epochs']} epochs, unseen-pair accuracy {base:.2f}. Leading monotonic "
        "CLS-row term per head: "
        + "; ".join(
            f"layer {layer}: " + ", ".join(f"h{h} {fmt(t)}" for h, t in enumerate(lead[layer])) for layer in lead
        )
        + ". Unseen-pair accuracy under ablation: "
        + ", ".join(f"{k} {v:.2f}" for k, v in u.items())
    )
    return Outcome({"sources": sources, "ablations": u}, summary + ".", checks, figs)


# x7's checks name the all-decay grid's seed 0 (Fig. 21's record until 2026-11-30, now fig21-all-decay); reworded
# from "fig21's seed 0", their ids kept
X7_LOW_TEXT = (
    "weight decay 0 and 0.05: unseen-pair accuracy >= 0.8 at every seed (fig21-all-decay's seed 0: 0.93, 0.96)"
)
X7_DEFAULT_TEXT = (
    "weight decay 0.2 (the paper's default): unseen-pair accuracy <= 0.6 at every seed (fig21-all-decay's seed 0: 0.02)"
)
X7_LOW_ID = "weight-decay-0-and-0-05-unseen-pair-accuracy-0-a811"
X7_DEFAULT_ID = "weight-decay-0-2-the-paper-s-default-unseen-pair-211e"


def _x_single_head_seeds(rows: list[dict[str, Any]]) -> Outcome:
    """fig21-all-decay's grid at more seeds: is the single head's generalization at weight decay 0 / 0.05 robust?"""
    seeds = sorted({int(r["seed"]) for r in rows})
    wds = sorted({float(r["weight_decay"]) for r in rows})
    acc = {(int(r["seed"]), float(r["weight_decay"])): float(r["val_unseen.acc"]) for r in rows}
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    for s in seeds:
        ax.plot(range(len(wds)), [acc.get((s, w), float("nan")) for w in wds], marker="o", label=f"seed {s}")
    ax.axhline(0.6, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(wds)), [f"{w:g}" for w in wds])
    ax.set(xlabel="weight decay", ylabel="unseen-pair accuracy", ylim=(0, 1.05), title="single-head vision, per seed")
    ax.legend(fontsize=8)
    fig.tight_layout()
    rows, readings = head_readings(rows)
    mech = {(int(r["seed"]), m["weight_decay"]): m for r, m in zip(rows, readings, strict=True) if m is not None}
    low = [k for k in acc if k[1] in (0.0, 0.05)]
    default = [k for k in acc if k[1] == 0.2]
    good = [k for k, a in acc.items() if at_least(a, 0.8)]
    if missing := [k for k in good if k not in mech]:  # a missing input is an error, never a failed (or held) check
        raise ValueError(
            "x7's third check reads the single head of every run at >= 0.8, from its weights or its row's reading: "
            f"none for (seed, weight decay) {missing}; rerun where the sweep's runs are, or re-judge from a record "
            "whose rows carry them"
        )
    checks = [
        (
            X7_LOW_TEXT,
            bool(low) and all(at_least(acc[k], 0.8) for k in low),
        ),
        (
            X7_DEFAULT_TEXT,
            bool(default) and all(at_most(acc[k], 0.6) for k in default),
        ),
        (
            "where a run reaches >= 0.8, its head attends most to one side on >= 90 % of unseen pairs with a "
            "monotonic EP row (|Spearman| >= 0.9)",
            bool(good) and all(k in mech and one_sided(mech[k]) for k in good),
        ),
    ]
    summary = (
        "unseen-pair accuracy per weight decay ("
        + ", ".join(f"{w:g}" for w in wds)
        + "): "
        + "; ".join(
            f"seed {s}: " + " / ".join(f"{acc[(s, w)]:.2f}" if (s, w) in acc else "-" for w in wds) for s in seeds
        )
    )
    if mech:
        summary += ". The head on unseen pairs (CLS attends most to the left / right object; EP CLS-row Spearman): " + (
            "; ".join(
                f"seed {s}, wd {w:g}: {m['left']:.2f} / {m['right']:.2f}, {m['ep_spearman']:+.2f}"
                for (s, w), m in sorted(mech.items())
            )
        )
    above = sum(a > 0.6 for a in acc.values())
    epochs = sorted({r["epochs"] for r in rows})
    notes = (
        f"{len(rows)} runs ({len(seeds)} seeds), {epochs} epochs each; fig21-all-decay has seed 0 of the same grid. "
        "The checks "
        f"were written before these seeds were trained. {above} of {len(rows)} runs end above the paper's ~0.5 "
        "(> 0.6)."
    )
    label_set = {(int(r["seed"]), float(r["weight_decay"])): r.get("val_unseen.label_set") for r in rows}
    sided_low = [k for k, m in sorted(mech.items()) if acc[k] <= 0.6 and one_sided(m)]
    if sided_low:
        notes += (
            " A one-sided head with a monotonic EP row is not enough: it is there too in "
            + ", ".join(
                f"seed {s} wd {w:g} ({acc[(s, w)]:.2f}, label-set {label_set[(s, w)] or 0:.2f})" for s, w in sided_low
            )
            + ", which stay <= 0.6 on unseen pairs"
        )
        if all((label_set[k] or 0) <= 0.6 for k in sided_low):
            notes += (
                ": their unseen-pair label-set is about as low, so what fails there is naming the labels, not the side"
            )
        notes += "."
    numbers = {"weight_decay": wds, "seeds": seeds, "rows": rows, "mechanism": list(mech.values())}
    ids = {X7_LOW_TEXT: X7_LOW_ID, X7_DEFAULT_TEXT: X7_DEFAULT_ID}
    return Outcome(numbers, summary + ".", checks, {"seeds": fig}, notes, absence=(checks[1][0],), check_ids=ids)


# the experiments of this module (the results page's beyond-the-paper section)
SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x2-fig4a-small-init",
        "Label vs layout diversity with small embedding init (Fig. 4a's sweep, init_std 0.02, 300 epochs)",
        "Question: with init_std = 0.02 the Fig. 4 model generalizes in ~300 epochs instead of ~5,000; does the "
        "paper's finding (Ntot matters, n2 does not) hold on that faster route, over 36 models?",
        (),
        lambda rows: fig4a_outcome(rows, "Fig. 4a sweep, init_std 0.02"),  # type: ignore[arg-type,misc]
        beyond_paper=True,
        sweep="fig4a-init002",
        data="each run's last evaluation on its own validation splits",
    ),
    FigureSpec(
        "x3-small-init",
        "The paper's mechanism checks on the small-init model",
        "Question: the N(0, 1)-init flagship generalizes with a mechanism unlike the paper's (rank-1 keys, no EP "
        "gradient). Trained the same way from init_std = 0.02, does the model show the paper's mechanism "
        "(Fig. 4b, 4c, 5d, 5e, 11, 13, 14)?",
        (SMALL_INIT,),
        _x_small_init,
        beyond_paper=True,
        data="val_unseen (unseen-pair validation images)",
    ),
    FigureSpec(
        "x5-two-layer",
        "Where the gradient arises in the 2-layer vision encoder",
        "Question: in the 2-layer vision encoder of App. L, which (query component x key component) terms give "
        "the CLS row its monotonic left/right gradient at each layer, and which layer's EP matters?",
        (VISION2,),
        _x_two_layer,
        beyond_paper=True,
        data="val_unseen (unseen-pair validation images)",
    ),
    FigureSpec(
        "x4-train-ablate-ep",
        "Training-time EP ablation",
        "Question: if the EP term is removed from the vision scores during training (not only at test time), "
        "does the model still generalize to unseen pairs, and which term carries left/right instead?",
        (SMALL_INIT, ABLATE_EP),
        _x_train_ablate_ep,
        beyond_paper=True,
        data="val_seen and val_unseen",
    ),
    FigureSpec(
        "x7-single-head-seeds",
        "Single-head vision revisited: fig21-all-decay's grid at two more seeds",
        "Question: fig21-all-decay (Fig. 21's grid under the all-decay recipe, one seed) has a single-head vision "
        "encoder generalizing at weight decay 0 and 0.05, against the paper's App. K. Does that hold at seeds 1 and "
        "2, and with the same one-sided head?",
        (),
        _x_single_head_seeds,  # type: ignore[arg-type]
        beyond_paper=True,
        sweep="fig21-seeds",
        data="each run's last evaluation on its own validation splits",
    ),
)
