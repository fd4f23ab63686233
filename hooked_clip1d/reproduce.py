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
from matplotlib.figure import Figure

from hooked_clip1d.checkpoint import atomic_write, atomic_write_text
from hooked_clip1d.clip import CLIP1D
from hooked_clip1d.data import build_dataset
from hooked_clip1d.evaluation import evaluate
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


ABLATIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "EP": ("EP",),
    "PE": ("PE",),
    "PP": ("PP",),
    "BP": ("BP",),
    "VP": ("VP",),
    "all positional (EP+PE+PP+BP+VP)": ("EP", "PE", "PP", "BP", "VP"),
}


def _fig5e(models: dict[str, CLIP1D]) -> Outcome:
    from hooked_clip1d.analysis.terms import ablate_terms
    from hooked_clip1d.visualization.plots import plot_ablation_accuracy

    model = models[FLAGSHIP]
    ds = build_dataset(model.data_config)
    res = {
        k: evaluate(model, ds, vision_hooks=ablate_terms(model.vision, terms) if terms else ())
        for k, terms in ABLATIONS.items()
    }
    u = {k: (v["val_unseen"]["acc"], v["val_unseen"]["label_set"]) for k, v in res.items()}
    fig = plot_ablation_accuracy(res, split="val_unseen")
    fig.set_size_inches(8, 3.6)
    fig.tight_layout()
    ep_acc, ep_ls = u["EP"]
    all_acc, all_ls = u["all positional (EP+PE+PP+BP+VP)"]
    others = [u[k][0] for k in ("PE", "PP", "BP")]
    checks = [
        ("ablating EP brings unseen-pair accuracy near 0.5 (0.3-0.7)", 0.3 <= ep_acc <= 0.7),
        ("label-set recognition survives the EP ablation (>= 0.8)", ep_ls >= 0.8),
        ("EP is the single score term whose ablation hurts most", ep_acc <= min(others)),
        ("ablating all positional terms (attention and value) gives ~0.5 (0.3-0.7)", 0.3 <= all_acc <= 0.7),
        ("label-set recognition survives ablating all positional terms (>= 0.8)", all_ls >= 0.8),
    ]
    summary = "unseen-pair accuracy / label-set: " + "; ".join(f"{k} {a:.2f}/{ls:.2f}" for k, (a, ls) in u.items())
    numbers = {k: {"unseen_acc": a, "unseen_label_set": ls, "all_splits": res[k]} for k, (a, ls) in u.items()}
    return Outcome(numbers, summary + ".", checks, {"ablation": fig})


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
