"""``hooked-clip1d reproduce <figure>``: rerun one of the paper's experiments on the shipped models.

Each figure is a ``FigureSpec``: the paper's claim (quoted numbers), the zoo models it needs, and a function that
measures ours, draws the PNG and states **checks** — named, computed criteria comparing ours with the paper. The
verdict follows from the checks alone: ``reproduced`` (all hold), ``partly`` (some hold) or ``not reproduced``
(none hold); a figure whose models are not in the zoo yet is ``not run`` and says which model is missing.
``reproduce`` writes ``<out>/<figure>/<figure>.json`` and its PNGs; ``hooked_clip1d.results_page`` turns the JSON
files into ``docs/results.md``.

Example:
    >>> import tempfile
    >>> rec = reproduce("fig11", out_dir=tempfile.mkdtemp())
    >>> rec["verdict"] in VERDICTS, rec["figure"]
    (True, 'fig11')
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from hooked_clip1d.checkpoint import atomic_write, atomic_write_text
from hooked_clip1d.clip import CLIP1D
from hooked_clip1d.data import build_dataset
from hooked_clip1d.pretrained import list_pretrained, load_model, manifest

VERDICTS = ("reproduced", "partly", "not reproduced", "not run")
FLAGSHIP = "simplified-ntot20-n2-10"


@dataclass
class Outcome:
    """What a figure function returns: numbers (JSON-able), a one-paragraph summary, checks and figures."""

    numbers: dict[str, Any]
    summary: str
    checks: list[tuple[str, bool]]
    figures: dict[str, Figure]
    notes: str = ""


@dataclass(frozen=True)
class FigureSpec:
    key: str  # "fig4c"
    title: str  # what the figure shows
    paper: str  # the paper's claim, with its numbers
    models: tuple[str, ...]  # zoo models needed
    run: Callable[[dict[str, CLIP1D]], Outcome]

    @property
    def command(self) -> str:
        return f"hooked-clip1d reproduce {self.key}"


def verdict_of(checks: list[tuple[str, bool]]) -> str:
    """``reproduced`` if every check holds, ``partly`` if some do, ``not reproduced`` if none does.

    Example:
        >>> verdict_of([("a", True), ("b", False)])
        'partly'
    """
    if not checks:
        raise ValueError("a figure needs at least one check to get a verdict")
    held = sum(bool(ok) for _, ok in checks)
    return "reproduced" if held == len(checks) else "partly" if held else "not reproduced"


# ---- figures -------------------------------------------------------------------------------------------------------
def _fig11(models: dict[str, CLIP1D]) -> Outcome:
    h = models[FLAGSHIP].manifest["history"]
    epochs = h["epoch"]

    def first(key: str, thr: float) -> int | None:
        return next((e for e, v in zip(epochs, h[key], strict=True) if v is not None and v >= thr), None)

    t_single, t_seen, t_unseen = first("single", 0.95), first("seen", 0.95), first("unseen", 0.8)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for key, label in (("single", "single-object"), ("seen", "seen-pair"), ("unseen", "unseen-pair")):
        axes[0].plot(epochs, h[key], label=label)
    axes[0].plot(epochs, h["unseen_label_set"], ls=":", label="unseen label-set")
    axes[0].set(xlabel="epoch", ylabel="accuracy", title=f"{FLAGSHIP}: generalization dynamics", ylim=(0, 1.05))
    axes[0].legend(fontsize=8)
    axes[1].plot(epochs, h["loss"])
    axes[1].set(xlabel="epoch", ylabel="training loss", yscale="log", title="training loss")
    fig.tight_layout()
    order = [t for t in (t_single, t_seen, t_unseen) if t is not None]
    checks = [
        ("single-object positional accuracy reaches 0.95", t_single is not None),
        ("seen-pair accuracy reaches 0.95", t_seen is not None),
        ("unseen-pair accuracy reaches 0.8", t_unseen is not None),
        ("they are reached in the paper's order (single, seen, unseen)", len(order) == 3 and order == sorted(order)),
    ]
    summary = (
        f"single-object >= 0.95 at epoch {t_single}, seen-pair >= 0.95 at epoch {t_seen}, unseen-pair >= 0.8 at "
        f"epoch {t_unseen}; final unseen-pair accuracy {h['unseen'][-1]:.2f} (max {max(h['unseen']):.2f})."
    )
    numbers = {"epoch_single_095": t_single, "epoch_seen_095": t_seen, "epoch_unseen_08": t_unseen, "history": h}
    return Outcome(numbers, summary, checks, {"fig11": fig})


def _head_bias_outcome(model: CLIP1D, name: str, expect_bias: bool) -> Outcome:
    from hooked_clip1d.analysis.heads import cls_object_bias
    from hooked_clip1d.visualization.plots import plot_head_bias

    ds = build_dataset(model.data_config)
    bias = cls_object_bias(model.vision, ds.splits["val_unseen"])
    left, right = bias["left"][0].tolist(), bias["right"][0].tolist()
    fig = plot_head_bias(bias, layer=0)
    fig.axes[0].set_title(f"{name}: CLS attends most to (unseen pairs)")
    fig.tight_layout()
    strong = [max(left_h, right_h) >= 0.6 for left_h, right_h in zip(left, right, strict=True)]
    heads = ", ".join(f"h{h} L{lv:.2f}/R{rv:.2f}" for h, (lv, rv) in enumerate(zip(left, right, strict=True)))
    if expect_bias:
        checks = [
            ("some head attends most to the right object on >= 60% of unseen-pair images", max(right) >= 0.6),
            ("some head attends most to the left object on >= 60% of unseen-pair images", max(left) >= 0.6),
        ]
    else:
        checks = [("no head is biased to one side on >= 60% of images (no gradient)", not any(strong))]
    return Outcome({"left": left, "right": right}, f"P(left)/P(right) per head: {heads}.", checks, {"bias": fig})


def _fig4c(models: dict[str, CLIP1D]) -> Outcome:
    return _head_bias_outcome(models[FLAGSHIP], FLAGSHIP, expect_bias=True)


def _fig15(models: dict[str, CLIP1D]) -> Outcome:
    name = "simplified-ntot10-n2-5"
    out = _head_bias_outcome(models[name], name, expect_bias=False)
    acc = models[name].manifest["metrics"]["val_unseen"]["acc"]
    out.checks.append(("the model does not generalize to unseen pairs (accuracy <= 0.6)", acc <= 0.6))
    out.numbers["unseen_acc"] = acc
    out.summary += f" Unseen-pair accuracy {acc:.2f}."
    return out


def _fig5e(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.ablation import evaluate_ablations
    from hooked_clip1d.visualization.decomposition import plot_ablations

    model = models[FLAGSHIP]
    res = evaluate_ablations(model, build_dataset(model.data_config))
    conds = res["conditions"]
    u = {k: (c["metrics"]["val_unseen"]["acc"], c["metrics"]["val_unseen"]["label_set"]) for k, c in conds.items()}
    fig = plot_ablations(res, splits=("val_seen", "val_unseen"))
    ep_acc, ep_ls = u["EP"]
    all_acc, all_ls = u["EP+PE+PP+BP+VP"]
    checks = [
        ("ablating EP brings unseen-pair accuracy near 0.5 (0.3-0.7)", 0.3 <= ep_acc <= 0.7),
        ("ablating EP lowers unseen-pair accuracy by at least 0.15", u["baseline"][0] - ep_acc >= 0.15),
        ("label-set recognition survives the EP ablation (>= 0.8)", ep_ls >= 0.8),
        ("EP is the single score term whose ablation hurts most", ep_acc <= min(u[k][0] for k in ("PE", "PP", "BP"))),
        ("ablating all positional terms (attention and value) gives ~0.5 (0.3-0.7)", 0.3 <= all_acc <= 0.7),
        ("label-set recognition survives ablating all positional terms (>= 0.8)", all_ls >= 0.8),
    ]
    summary = "unseen-pair accuracy / label-set: " + "; ".join(f"{k} {a:.2f}/{ls:.2f}" for k, (a, ls) in u.items())
    return Outcome(res, summary + ".", checks, {"ablation": fig})


# the two images of Fig. 4(b): the unseen pair (17, 19) with positions swapped
FIG4B_IMAGES = ("C . . 17 . . 19 . . . .", "C . . 19 . . 17 . . . .")


def _fig4b(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.visualization.attention import plot_attention

    model = models[FLAGSHIP]
    imgs = model.vision.to_tokens(list(FIG4B_IMAGES))
    _, cache = model.vision.run_with_cache(imgs, names_filter=lambda n: n.endswith("hook_pattern"))
    cls = cache["pattern", 0][:, :, 0, :]  # [2, head, key]
    pos = [(3, 6), (3, 6)]  # input positions of the left / right object (CLS is 0)
    right_wins = [[bool(cls[i, h, pos[i][1]] > cls[i, h, pos[i][0]]) for h in range(cls.shape[1])] for i in range(2)]
    relational = [h for h in range(cls.shape[1]) if right_wins[0][h] == right_wins[1][h]]
    on_objects = (cls[:, :, 3] + cls[:, :, 6]).min().item()
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
    return Outcome(numbers, summary, checks, figs)


def _flagship_decomposition(model: CLIP1D):
    from hooked_clip1d.analysis.decompose import decompose_attention_scores

    ds = build_dataset(model.data_config)
    split = ds.splits["val_unseen"]
    _, cache = model.vision.run_with_cache(split.images[split.is_pair])
    return decompose_attention_scores(model.vision, cache, layer=0)


PAPER_XWX_SHARE = (0.76, 0.77, 0.91, 0.76)  # App. D, Fig. 13: share of XW_QKX^T in the CLS-row std, heads 0-3


def _fig13(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.decompose import row_std_shares
    from hooked_clip1d.visualization.decomposition import plot_std_histograms, plot_std_shares, plot_term_maps

    model = models[FLAGSHIP]
    dec = _flagship_decomposition(model)
    wb = dec.weight_bias_terms()
    shares = row_std_shares(wb, query_pos=0)
    xwx = shares["share"][shares["terms"].index("XWX")].tolist()
    tokens = model.vision.token_strs(model.vision.to_tokens(FIG4B_IMAGES[0])[0])
    fig_img = model.vision.to_tokens(FIG4B_IMAGES[0])
    _, cache = model.vision.run_with_cache(fig_img)
    from hooked_clip1d.analysis.decompose import decompose_attention_scores

    maps = decompose_attention_scores(model.vision, cache, layer=0).weight_bias_terms()
    figs = {
        "shares": plot_std_shares(shares, reference={"XWX": list(PAPER_XWX_SHARE)}),
        "histograms": plot_std_histograms(shares),
        "fig12_terms": plot_term_maps(maps, tokens=tokens, title=f"{FLAGSHIP}: weight-bias terms (Fig. 12)"),
    }
    checks = [
        (
            "XW_QKX^T is the largest term in every head",
            all(x == max(col) for x, col in zip(xwx, shares["share"].T.tolist(), strict=True)),
        ),
        ("XW_QKX^T's share is >= 0.7 in every head (paper 0.76-0.91)", min(xwx) >= 0.7),
    ]
    summary = "XW_QKX^T share of the CLS-row std per head: " + ", ".join(
        f"h{h} {x:.2f} (paper {p:.2f})" for h, (x, p) in enumerate(zip(xwx, PAPER_XWX_SHARE, strict=True))
    )
    numbers = {"terms": shares["terms"], "share": shares["share"].tolist(), "std": shares["std"].tolist()}
    return Outcome(numbers, summary + ".", checks, figs)


def _spearman(y: torch.Tensor) -> torch.Tensor:
    """Rank correlation of each row of ``y`` [..., n] with 0..n-1."""
    n = y.shape[-1]
    ranks = y.argsort(-1).argsort(-1).to(torch.float64)
    x = torch.arange(n, dtype=torch.float64)
    rc, xc = ranks - ranks.mean(-1, keepdim=True), x - x.mean()
    return (rc * xc).sum(-1) / (rc.norm(dim=-1) * xc.norm())


def _fig14(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.decompose import decompose_attention_scores
    from hooked_clip1d.visualization.decomposition import plot_row_profiles, plot_term_maps

    model = models[FLAGSHIP]
    img = model.vision.to_tokens(FIG4B_IMAGES[0])
    _, cache = model.vision.run_with_cache(img)
    tp = decompose_attention_scores(model.vision, cache, layer=0).token_position_terms()
    tokens = model.vision.token_strs(img[0])
    # the EP gradient is a property of the weights: the CLS row of EP over the pixel keys (positions 1..d_image)
    ep_row = tp["EP"][0, :, 0, 1:]  # [head, pixel]
    rho = _spearman(ep_row)
    std_ep = ep_row.std(-1)
    std_ee = tp["EE"][0, :, 0, 1:].std(-1)
    figs = {
        "fig14_terms": plot_term_maps(tp, ["EE", "EP", "PE", "PP"], tokens=tokens, title=f"{FLAGSHIP}: Eq. 2 terms"),
        "fig5a_rows": plot_row_profiles(tp, ["EE", "EP", "PE", "PP", "BP"], row=0, tokens=tokens),
    }
    checks = [
        ("EP's CLS row is monotonic along the image in every head (|Spearman| >= 0.9)", bool((rho.abs() >= 0.9).all())),
        (
            "EP's CLS-row variation is comparable to EE's (std ratio >= 0.5 in some head)",
            bool((std_ep / std_ee >= 0.5).any()),
        ),
    ]
    summary = (
        "EP CLS-row rank correlation with position per head: "
        + ", ".join(f"h{h} {r:+.2f}" for h, r in enumerate(rho.tolist()))
        + "; std(EP)/std(EE) along the row: "
        + ", ".join(f"{r:.2f}" for r in (std_ep / std_ee).tolist())
    )
    numbers = {"spearman": rho.tolist(), "std_ep": std_ep.tolist(), "std_ee": std_ee.tolist()}
    return Outcome(numbers, summary + ".", checks, figs)


FIGURES: dict[str, FigureSpec] = {
    spec.key: spec
    for spec in (
        FigureSpec(
            "fig4c",
            "CLS -> object attention bias per head (Fig. 4c)",
            "On unseen-pair images, head 2 attends most to the right object (~67%); the other heads attend left.",
            (FLAGSHIP,),
            _fig4c,
        ),
        FigureSpec(
            "fig4b",
            "Attention of the CLS token on an unseen pair with swapped positions (Fig. 4b)",
            "In both images of the pair (17, 19), the CLS token attends to the objects, and head 2 attends to the "
            "right object whichever label it is (relational, not label-specific).",
            (FLAGSHIP,),
            _fig4b,
        ),
        FigureSpec(
            "fig13",
            "Weight-bias decomposition: share of each term in the CLS-row std (Fig. 12, 13, App. D)",
            "XW_QKX^T dominates: 76 %, 77 %, 91 % and 76 % of the across-key std of the CLS row in heads 0-3.",
            (FLAGSHIP,),
            _fig13,
        ),
        FigureSpec(
            "fig14",
            "Token-position decomposition: the EP horizontal gradient (Fig. 5a, 14)",
            "EW_QKP^T shows a clear monotonic gradient along the image on the CLS row in all four heads, in the "
            "direction of each head's left/right bias.",
            (FLAGSHIP,),
            _fig14,
        ),
        FigureSpec(
            "fig5e",
            "Term ablations: unseen-pair accuracy and label-set recognition (Fig. 5e, 16, 17)",
            "Ablating EP drops unseen-pair accuracy to ~0.5 while label-set recognition stays high (Fig. 5e, 16); "
            "ablating all positional terms of attention and value also gives ~0.5 with label-set kept (Fig. 17).",
            (FLAGSHIP,),
            _fig5e,
        ),
        FigureSpec(
            "fig11",
            "Generalization dynamics of the simplified model (Fig. 11c, d)",
            "Single-object positional, seen-pair and unseen-pair generalization are reached consecutively "
            "(three phases).",
            (FLAGSHIP,),
            _fig11,
        ),
        FigureSpec(
            "fig15",
            "A non-generalizing model has no left/right head bias (Fig. 15, App. F)",
            "With Ntot = 10, n2 = 5 the model does not generalize to unseen pairs and no head shows the "
            "left/right bias or the EP gradient.",
            ("simplified-ntot10-n2-5",),
            _fig15,
        ),
    )
}


def reproduce(figure: str, out_dir: str | Path = "results") -> dict[str, Any]:
    """Run one figure's experiment; write ``<out_dir>/<figure>/<figure>.json`` and PNGs; return the record."""
    if figure not in FIGURES:
        raise ValueError(f"unknown figure {figure!r}; known: {sorted(FIGURES)}")
    spec = FIGURES[figure]
    out = Path(out_dir) / figure
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "figure": spec.key,
        "title": spec.title,
        "paper": spec.paper,
        "models": list(spec.models),
        "command": spec.command,
    }
    missing = [m for m in spec.models if m not in list_pretrained()]
    if missing:
        record.update(verdict="not run", summary=f"needs zoo model(s) {missing}, not shipped yet", checks=[], plots=[])
    else:
        models = {m: load_model(m) for m in spec.models}
        res = spec.run(models)
        plots = []
        for name, fig in res.figures.items():
            path = out / f"{figure}_{name}.png"
            atomic_write(path, lambda tmp, fig=fig: fig.savefig(tmp, dpi=110, format="png"))
            plt.close(fig)
            plots.append(path.name)
        record.update(
            verdict=verdict_of(res.checks),
            summary=res.summary,
            notes=res.notes,
            checks=[{"check": c, "holds": bool(ok)} for c, ok in res.checks],
            numbers=res.numbers,
            plots=plots,
            model_epochs={m: manifest(m)["epochs"] for m in spec.models},
        )
    atomic_write_text(out / f"{figure}.json", json.dumps(record, indent=2, default=float) + "\n")
    return record
