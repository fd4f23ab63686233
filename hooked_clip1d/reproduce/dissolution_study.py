"""Why the paper's mechanism dissolves (issue 48's x18; beyond the paper; pre-registered in docs/fidelity.md).

``x18-dissolution``: every standard-loss run ends on one loss floor, set by captions shared by two items of a batch.
At every checkpoint of the standard-loss flagship's trajectory (``core.STANDARD_LOSS``, the flagship until
2026-11-28; and of the false-negatives study's best arm, seed 0,
``best_arm_run``) ``analysis.mechanism.dissolution.caption_split`` measures those items' share of the loss and of the
gradient; ``dissolution_checks`` reads the pre-registered hypotheses (1)-(3) from it and the run's emergence rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from hooked_clip1d.reproduce.core import STANDARD_LOSS, FigureSpec, Outcome, register, sweeps_root
from hooked_clip1d.reproduce.negatives_study import ARMS, COUNTED, TIE_ORDER, m2_lifetime, negatives_decision
from hooked_clip1d.reproduce.temperature_study import STUDY_SEEDS
from hooked_clip1d.settings import RECIPES

LATE = 3000  # x18's "late in training": every snapshot from this epoch on (pre-registered)


def best_arm_run(sweeps_root: str | Path) -> tuple[str, Path] | None:
    """The study's best-scoring arm (``negatives_decision``'s scores; ties: the longest mean M2 lifetime at the study
    seeds, then ``TIE_ORDER``) and its seed-0 run under ``sweeps_root/negatives`` (the sweep's finished runs,
    ``sweeps.runner.results_table``); None while the study's runs are not all there."""
    import hooked_clip1d.reproduce.core as core
    from hooked_clip1d.analysis.mechanism.dynamics import run_emergence
    from hooked_clip1d.sweeps.runner import load_spec, results_table

    rows = results_table(load_spec(core.SWEEPS_DIR / "negatives.toml"), Path(sweeps_root) / "negatives")
    runs = {(r["recipe"], int(r["seed"])): Path(r["path"]) for r in rows if r["recipe"] in ARMS}
    if any((a, s) not in runs for a in ARMS for s in STUDY_SEEDS):
        return None
    em = {k: run_emergence(p) for k, p in runs.items() if k[1] in STUDY_SEEDS}
    finals = {k: e.rows[-1]["checks"] for k, e in em.items()}
    life = {k: m2_lifetime(e.rows) for k, e in em.items()}
    scores = negatives_decision(finals, life, COUNTED)["scores"]
    best = max(ARMS, key=lambda a: (scores[a], np.mean([life[(a, s)] for s in STUDY_SEEDS]), -TIE_ORDER.index(a)))
    return best, runs[(best, 0)]


def _trajectory_split(checkpoints: Sequence[tuple[int, Any]], negatives: str, seed: int) -> list[dict[str, Any]]:
    """``caption_split`` at every checkpoint ``(epoch, model)`` of one run, in its data order (training ``seed``;
    a snapshot file carries no manifest, so the caller names it)."""
    from hooked_clip1d.analysis.mechanism.dissolution import caption_split
    from hooked_clip1d.data.dataset import EpochPermutations, build_dataset

    out, orders, ds = [], None, None
    for epoch, model in checkpoints:
        if ds is None:
            ds = build_dataset(model.data_config)
            orders = EpochPermutations(len(ds.training_pairs()[0]), ds.config.batch_size, seed)
        out.append(caption_split(model, ds, 0, epoch, negatives=negatives, orders=orders))
    return out


def dissolution_checks(split: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pre-registered hypotheses (1)-(3) of x18 on one run: its ``caption_split`` rows and emergence rows (the
    same epochs). A hypothesis read "at every snapshot from epoch 3,000" fails where there is none.

    Example:
        >>> sp = [{"epoch": e, "loss": 1.0, "loss_shared": 0.9, "share": {"W_pos": {"shared": 0.8},
        ...        "W_K.0": {"shared": 0.7}, "W_K.1": {"shared": 0.1}}} for e in (1000, 3000)]
        >>> rows = [{"epoch": 1000, "checks": {"fig4c_split": True}, "kp_std": [0.5, 0.05]},
        ...         {"epoch": 3000, "checks": {"fig4c_split": False}, "kp_std": [2.0, 0.04]}]
        >>> c = dissolution_checks(sp, rows); c["dominant"], c["h1"], c["h2"], c["h3"]
        (0, True, True, True)
        >>> dissolution_checks(sp[:1], rows[:1])["h1"]  # no snapshot from epoch 3,000: not shown
        False
    """
    late = [r for r in split if r["epoch"] >= LATE]
    dominant = int(np.argmax(rows[-1]["kp_std"])) if rows and rows[-1].get("kp_std") else None
    h1 = bool(late) and all(r["loss_shared"] > 0.5 * r["loss"] for r in late)
    h2 = (
        bool(late)
        and dominant is not None
        and all(
            (r["share"]["W_pos"]["shared"] or 0) > 0.5 and (r["share"][f"W_K.{dominant}"]["shared"] or 0) > 0.5
            for r in late
        )
    )
    m2_end = m2_lifetime(rows) if rows else 0
    after = [r for r in rows if m2_end and r["epoch"] >= m2_end]
    h3 = (
        bool(after)
        and dominant is not None
        and after[-1]["kp_std"][dominant] > after[0]["kp_std"][dominant]
        and all(v < 0.1 for r in after for h, v in enumerate(r["kp_std"]) if h != dominant)
    )
    return {
        "dominant": dominant,
        "m2_end": m2_end,
        "h1": h1,
        "h2": h2,
        "h3": h3,
        "dominant_kp_std_end": rows[-1]["kp_std"][dominant] if dominant is not None else None,
    }


def _arm_reading(arm: str, run: Path) -> dict[str, Any]:
    """The best arm's run read at each of its snapshots (``caption_split`` under its own loss, emergence rows) and
    ``dissolution_checks`` on them; measured once a process per run and snapshot set (the null control and the
    invariance audit rerun the figure on other flagship weights: the arm's reading does not change), copies out."""
    from hooked_clip1d.analysis.mechanism.dynamics import run_emergence
    from hooked_clip1d.files import measure_once
    from hooked_clip1d.model.checkpoint import load_model_file

    snaps = sorted(run.glob("snapshots/epoch_*.safetensors"))

    def measure() -> dict[str, Any]:
        arm_ckpts = [(int(p.stem.split("_")[1]), load_model_file(p).eval()) for p in snaps]
        seed = int(json.loads((run / "config.json").read_text())["train_config"]["seed"])
        arm_split = _trajectory_split(arm_ckpts, RECIPES[arm].negatives, seed)
        arm_rows = run_emergence(run).rows
        return {
            "split": arm_split,
            "kp_std": [[r["epoch"], r["kp_std"]] for r in arm_rows],
            **dissolution_checks(arm_split, arm_rows),
        }

    key = ("x18 arm reading", arm, str(run.resolve()), tuple((p.name, p.stat().st_mtime_ns) for p in snaps))
    return measure_once(key, measure)


def _x_dissolution(models: dict[str, Any]) -> Outcome:
    from hooked_clip1d.analysis.mechanism.dynamics import emergence
    from hooked_clip1d.pretrained import list_trajectories, load_trajectory, trajectory_emergence

    name, model = next(iter(models.items()))
    shipped = model.manifest.get("name") == name and name in list_trajectories()
    ckpts = load_trajectory(name) if shipped else [(int(model.manifest.get("epochs") or 0), model)]
    rows = trajectory_emergence(name, recompute=True).rows if shipped else emergence(ckpts).rows
    split = _trajectory_split(
        ckpts, "all", int((getattr(model, "manifest", None) or {}).get("train_config", {}).get("seed", 0))
    )
    std = dissolution_checks(split, rows)
    numbers: dict[str, Any] = {
        "standard": {"run": name, "split": split, "kp_std": [[r["epoch"], r["kp_std"]] for r in rows], **std}
    }
    found = best_arm_run(sweeps_root())
    arm_c: dict[str, Any] = {"h1": False, "h2": False, "h3": False, "dominant_kp_std_end": None}
    if found is not None:
        arm, run = found
        arm_c = _arm_reading(arm, run)
        numbers["arm"] = {"recipe": arm, "run": run.name, **arm_c}
    end_std, end_arm = std["dominant_kp_std_end"], arm_c["dominant_kp_std_end"]
    checks = [
        (
            "(1) standard loss: the items that share their caption carry more than half of the loss at every snapshot "
            f"from epoch {LATE:,}",
            std["h1"],
        ),
        (
            "(2) standard loss: they carry more than half of the gradient (<g_shared, g> / <g, g>) on W_pos and on the "
            f"dominant head's W_K at every snapshot from epoch {LATE:,}",
            std["h2"],
        ),
        (
            "(3) standard loss: the dominant head's key-position row std grows from M2's end to the last snapshot "
            "while every other head's stays below 0.1",
            std["h3"],
        ),
        (
            "(4) the study's best arm: its dominant head's key-position row std at the last snapshot is smaller than "
            "the standard loss run's",
            end_std is not None and end_arm is not None and end_arm < end_std,
        ),
    ]
    late = [r for r in split if r["epoch"] >= LATE]
    loss_share = [r["loss_shared"] / r["loss"] for r in late]
    pos_share = [r["share"]["W_pos"]["shared"] for r in late]
    summary = (
        f"standard loss ({name}, {len(split)} checkpoints): from epoch {LATE:,} the shared items carry "
        + (
            f"{min(loss_share):.3f}-{max(loss_share):.3f} of the loss ({np.mean([r['shared_items'] for r in late]):.2f}"
            f" of the items), {min(pos_share):.2f}-{max(pos_share):.2f} of the W_pos gradient"
            if late
            else "nothing (no checkpoint that late)"
        )
        + f"; dominant head {std['dominant']}, key-position std {end_std}; M2 ends at epoch {std['m2_end']}"
        + (
            f"; best arm {ARMS[numbers['arm']['recipe']]} (seed 0): dominant head {arm_c['dominant']} at std {end_arm}"
            if found is not None
            else "; the study's arms are not all on this machine: (4) not read"
        )
    )
    notes = (
        "Hypotheses (1)-(4) pre-registered in docs/fidelity.md (x18) before any was computed; descriptive: they "
        "decide nothing about the default. The loss and gradients over one training epoch in each run's own data "
        "order, eval mode (no dropout)."
    )
    return Outcome(numbers, summary + ".", checks, {"split": _plot_split(numbers)}, notes)


def _plot_split(numbers: Mapping[str, Any]) -> plt.Figure:
    """The shared items' share of the loss and of the W_pos gradient, and each head's key-position std, over
    training: the standard-loss run (solid) and the best arm (dashed)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, style in (("standard", "-"), ("arm", "--")):
        if key not in numbers:
            continue
        sp = numbers[key]["split"]
        ep = [max(r["epoch"], 1) for r in sp]
        axes[0].plot(
            ep,
            [r["loss_shared"] / r["loss"] if r["loss"] else np.nan for r in sp],
            style,
            color="C0",
            label=f"{key}: loss share",
        )
        axes[0].plot(
            ep, [r["share"]["W_pos"]["shared"] for r in sp], style, color="C1", label=f"{key}: W_pos gradient share"
        )
        for h in range(len(numbers[key]["kp_std"][-1][1] or [])):
            pts = [(max(e, 1), v[h]) for e, v in numbers[key]["kp_std"] if v]
            axes[1].plot(*zip(*pts, strict=True), style, color=f"C{h}", lw=1, label=f"{key}: head {h}")
    axes[0].set(xscale="log", xlabel="epoch", ylabel="shared items' share", title="where the signal comes from")
    axes[1].set(xscale="log", yscale="symlog", xlabel="epoch", ylabel="key-position row std", title="per head")
    axes[0].legend(fontsize=6)
    axes[1].legend(fontsize=5, ncol=2)
    fig.tight_layout()
    return fig


SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "x18-dissolution",
        "Why the paper's mechanism dissolves: the loss and gradient of the items whose caption is shared in a batch "
        "(beyond the paper)",
        "Question: every standard-loss run ends on one loss floor, set by captions shared by two items of a batch. "
        "Does the late gradient come from those items, and does it feed the one positional head that remains "
        "(hypotheses pre-registered in docs/fidelity.md)?",
        (STANDARD_LOSS,),
        _x_dissolution,
        beyond_paper=True,
        data="one training epoch in each run's own data order per checkpoint; the standard-loss flagship's shipped "
        "trajectory and the study's best arm (seed 0, the flagship since 2026-11-28)",
    ),
)
