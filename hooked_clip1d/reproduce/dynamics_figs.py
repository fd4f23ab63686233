"""The paper's generalization dynamics (App. C, Fig. 11): the three phases, single-object positional, seen-pair and
unseen-pair generalization, reached in that order.

- ``fig11`` (Fig. 11c, d): the flagship (simplified model), read on its metrics history merged with its shipped
  trajectory's checkpoints (``readings.fine_history``).
- ``fig11a`` (Fig. 11a, b): the same checks, unchanged, on the full model (docs/fidelity.md, pre-registered
  2026-12-01 with an amendment), also reading the snapshot accuracies its trajectory records; ``not run`` while the
  shipped full model is a partial run or has no such trajectory.

``open_questions`` reruns ``fig11_outcome`` on other models (it takes the model name).

Example:
    >>> from hooked_clip1d import load_model
    >>> out = fig11_outcome({FLAGSHIP: load_model(FLAGSHIP)})
    >>> [done for _, done in out.checks][:3]  # the three accuracies are reached
    [True, True, True]
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from hooked_clip1d.analysis.mechanism.dynamics import FIG11_LEVELS
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.reproduce.core import FLAGSHIP, FULL, FigureSpec, Outcome, register
from hooked_clip1d.reproduce.readings import fine_history, first_epoch, measured_epochs, run_epochs


def fig11_outcome(models: dict[str, CLIP1D], name: str = FLAGSHIP) -> Outcome:
    model = models[name]
    h = model.manifest["history"]
    fine, added = fine_history(model, name)
    epochs = h["epoch"]

    def firsts(unseen_level: float = FIG11_LEVELS["unseen"]) -> tuple[int | None, int | None, int | None]:
        levels = (("single", FIG11_LEVELS["single"]), ("seen", FIG11_LEVELS["seen"]), ("unseen", unseen_level))
        return tuple(first_epoch(fine, k, t) for k, t in levels)  # type: ignore[return-value]

    def in_order(t: tuple[int | None, ...]) -> bool:
        return all(x is not None for x in t) and t[0] < t[1] < t[2]  # type: ignore[operator]  # a tie is no order

    t_single, t_seen, t_unseen = firsts()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for key, label in (("single", "single-object"), ("seen", "seen-pair"), ("unseen", "unseen-pair")):
        line = axes[0].plot(fine["epoch"], fine[key], label=label)[0]
        if added:
            axes[0].plot(
                added, [fine[key][fine["epoch"].index(e)] for e in added], ls="", marker=".", color=line.get_color()
            )
    axes[0].plot(epochs, h["unseen_label_set"], ls=":", label="unseen label-set")
    axes[0].set(xlabel="epoch", ylabel="accuracy", title=f"{name}: generalization dynamics", ylim=(0, 1.05))
    if added and min(added) < (epochs[0] if epochs else 1):
        axes[0].set_xscale("symlog", linthresh=10)
        axes[0].set_xlim(left=0)
    axes[0].legend(fontsize=8)
    axes[1].plot(epochs, h["loss"])
    axes[1].set(xlabel="epoch", ylabel="training loss", yscale="log", title="training loss")
    fig.tight_layout()
    order = "they are reached in the paper's order, strictly (single before seen before unseen; ties fail)"
    checks = [
        ("single-object positional accuracy reaches 0.95", t_single is not None),
        ("seen-pair accuracy reaches 0.95", t_seen is not None),
        ("unseen-pair accuracy reaches 0.8", t_unseen is not None),
        (order, in_order((t_single, t_seen, t_unseen))),
    ]

    def after(t: int | None) -> str:  # the evaluation before the first one reaching a threshold
        before = [e for e in fine["epoch"] if t is not None and e < t]
        return f" (previous evaluation: epoch {before[-1]})" if before else ""

    measured = measured_epochs(model, name, added)  # recorded accuracies alone, no weights shipped
    stored = [e for e in added if e not in measured]
    summary = (
        f"single-object >= 0.95 at epoch {t_single}{after(t_single)}, seen-pair >= 0.95 at epoch {t_seen}"
        f"{after(t_seen)}, unseen-pair >= 0.8 at epoch {t_unseen}{after(t_unseen)}; final unseen-pair accuracy "
        f"{h['unseen'][-1]:.2f} (max {max(h['unseen']):.2f}). Read on {len(fine['epoch'])} evaluations: the metrics "
        f"history (every {epochs[1] - epochs[0] if len(epochs) > 1 else '-'} epochs)"
        + (f" and the shipped trajectory's checkpoints at epochs {stored}" if stored else "")
        + (f" and its recorded snapshot accuracies at epochs {measured}" if measured else "")
    )
    sensitivity = {order: [(t, in_order(firsts(t))) for t in (0.6, 0.7, 0.8, 0.9)]}  # the unseen-pair threshold
    numbers = {
        "epoch_single_095": t_single,
        "epoch_seen_095": t_seen,
        "epoch_unseen_08": t_unseen,
        "history": h,
        "fine_history": fine,
        "trajectory_epochs_added": added,
        "sensitivity": sensitivity,
    }
    values = {
        checks[0][0]: (max(v for v in fine["single"] if v is not None), ">"),
        checks[1][0]: (max(v for v in fine["seen"] if v is not None), ">"),
        checks[2][0]: (max(v for v in fine["unseen"] if v is not None), ">"),
    }
    notes = (
        "The trajectory's checkpoints are read as shipped (their stored weights); where the history has an "
        "evaluation at the same epoch, the history's value is used."
        if added
        else ""
    )
    if measured:
        notes += (
            f" The accuracies at epochs {measured} were measured at shipping on the run's float32 snapshots, whose "
            "weights are not shipped (the trajectory's snapshot_metrics, each with its file's sha256)."
        )
    return Outcome(numbers, summary + ".", checks, {"fig11": fig}, notes, values=values, sensitivity=sensitivity)


def fig11a_outcome(models: dict[str, CLIP1D], name: str = FULL) -> Outcome:
    """Fig. 11a, b: ``fig11``'s checks, unchanged, on the full model (4 pre-LN blocks with MLPs; docs/fidelity.md,
    stated 2026-12-01 before the full model at protocol finished). ``not run`` while the shipped model stopped
    before the epochs it planned: the paper's panels span the whole training, and a run cut short is not it."""
    from hooked_clip1d.pretrained import list_trajectories, trajectory_manifest
    from hooked_clip1d.pretrained.precision import snapshot_metrics

    out = fig11_outcome(models, name)
    man = models[name].manifest
    done, planned = run_epochs(man, name)  # no epochs in the manifest: an error (an untrained draw: 0 of 0, judged)
    shipped = man.get("name") == name  # the zoo's own model, not a substitute
    if done < planned:
        which = f"the shipped full model ({name})" if shipped else f"its model ({man.get('name')})"
        out.not_run = (
            f"{which} is a partial run, {done:,} of its {planned:,} epochs; the full model at protocol trains in the "
            "sweep full-protocol.toml (tools/cpu/long_runs.sh, or a GPU window)"
        )
    elif shipped and name not in list_trajectories():
        out.not_run = f"the shipped full model ({name}) has no trajectory: the order of its phases needs one"
    elif shipped and not snapshot_metrics(trajectory_manifest(name)):  # the amendment of 2026-12-01
        out.not_run = (
            "the shipped full model's trajectory records no accuracies of the snapshots it does not store "
            "(ship-trajectory --metrics-epochs all, as pre-registered): its phases before epoch 100 cannot be read"
        )
    return out


# the figures of this module, each with its claim, thresholds (in its function) and zoo models
SPECS: tuple[FigureSpec, ...] = register(
    FigureSpec(
        "fig11",
        "Generalization dynamics of the simplified model (Fig. 11c, d)",
        "Single-object positional, seen-pair and unseen-pair generalization are reached consecutively (three phases).",
        (FLAGSHIP,),
        fig11_outcome,
        data="the training run's metrics (every 100 epochs) and its shipped trajectory's checkpoints",
        replicate=True,
    ),
    FigureSpec(
        "fig11a",
        "Generalization dynamics of the full model (Fig. 11a, b)",
        "With the full model too, single-object positional, seen-pair and unseen-pair generalization are reached "
        "consecutively (three phases).",
        (FULL,),
        fig11a_outcome,
        data="the training run's metrics (every 100 epochs), its shipped trajectory's checkpoints and the snapshot "
        "accuracies the trajectory records",
    ),
)
