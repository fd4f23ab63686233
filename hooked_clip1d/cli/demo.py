"""The README's main job: the shipped model's accuracies, its per-head left/right bias and term ablations.

Example:
    >>> import tempfile
    >>> res = run_demo(out_dir=tempfile.mkdtemp())  # doctest: +SKIP
    >>> res["accuracy"]["val_unseen"]["acc"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from hooked_clip1d.analysis import ablate_terms, cls_object_bias
from hooked_clip1d.analysis.mechanism.report import ablate_cls_key_position
from hooked_clip1d.data.dataset import build_dataset
from hooked_clip1d.evaluation import evaluate, format_metrics
from hooked_clip1d.files import atomic_write, atomic_write_text
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.pretrained import DEFAULT_MODEL, load_model, model_name
from hooked_clip1d.visualization import plot_ablation_accuracy, plot_head_bias

ABLATIONS = ("EP", "PE", "PP", "BP", "VP")


def run_demo(name: str = DEFAULT_MODEL, out_dir: str | Path = "results/demo", model: CLIP1D | None = None) -> dict:
    """Evaluate ``name``; measure the Fig. 4c head bias and the Fig. 5e/16/17 term ablations; write PNG + JSON."""
    if model is None:
        model = load_model(name)
    else:  # a model passed in is named by its manifest (if any), not by the default name
        name = model_name(model)
    if model.data_config is None:
        raise ValueError("the model has no data_config attached; load it with load_model or load_model_file")
    ds = build_dataset(model.data_config)
    acc = evaluate(model, ds)
    bias = cls_object_bias(model.vision, ds.splits["val_unseen"])
    ablations: dict[str, Any] = {"none": acc}
    for term in ABLATIONS:
        try:
            ablations[term] = evaluate(model, ds, vision_hooks=ablate_terms(model.vision, [term]))
        except ValueError as e:  # e.g. LayerNorm / RoPE towers
            ablations[term] = {"error": str(e)}
    # the readings that do not depend on how the CLS query is split between W_E[CLS], W_pos[0] and b_Q (which term
    # carries the position does): every positional term at once (Fig. 17), and the CLS query's key-position part
    for key, make in (
        ("positional", lambda: ablate_terms(model.vision, list(ABLATIONS))),
        ("CLS-key-position", lambda: ablate_cls_key_position(model.vision)),
    ):
        try:
            ablations[key] = evaluate(model, ds, vision_hooks=make())
        except ValueError as e:
            ablations[key] = {"error": str(e)}
    result = {
        "model": name,
        "accuracy": acc,
        "head_bias_val_unseen": {k: v.tolist() for k, v in bias.items()},
        "ablation": ablations,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    try:
        plot_head_bias(bias, layer=0, ax=axes[0])
        short = {"positional": "all pos.", "CLS-key-position": "CLS q.pos"}  # tick labels that fit
        ok = {short.get(k, k): v for k, v in ablations.items() if "error" not in v}
        plot_ablation_accuracy(ok, split="val_unseen", ax=axes[1])
        fig.suptitle(f"{name}: Fig. 4c head bias and Fig. 5e/16/17 term ablations (unseen pairs)")
        fig.tight_layout()
        atomic_write(out / "demo.png", lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)
    atomic_write_text(out / "demo.json", json.dumps(result, indent=2))
    result["files"] = [str(out / "demo.png"), str(out / "demo.json")]
    return result


def format_demo(res: dict) -> str:
    """Human-readable summary of ``run_demo`` output."""
    lines = [f"model: {res['model']}", "", "retrieval accuracy (all train+val captions as candidates):"]
    lines.append(format_metrics(res["accuracy"]))
    lines += ["", "CLS -> object attention bias on unseen pairs (Fig. 4c), layer 0:"]
    b = res["head_bias_val_unseen"]
    lines.append(f"{'head':<8}{'left':>8}{'right':>8}{'other':>8}")
    for h in range(len(b["left"][0])):
        lines.append(f"{h:<8}{b['left'][0][h]:>8.2f}{b['right'][0][h]:>8.2f}{b['other'][0][h]:>8.2f}")
    lines += ["", "term ablation at inference, unseen pairs (Fig. 5e / 16 / 17):"]
    lines.append(f"{'ablated':<18}{'acc':>8}{'label-set':>11}")
    for k, v in res["ablation"].items():
        if "error" in v:
            lines.append(f"{k:<18}  n/a ({v['error']})")
        else:
            u = v["val_unseen"]
            lines.append(f"{k:<18}{u['acc']:>8.3f}{u['label_set']:>11.3f}")
    lines += ["", "wrote " + ", ".join(res.get("files", []))]
    return "\n".join(lines)
