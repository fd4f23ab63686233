"""The body of ``hooked-clip1d analyze dynamics`` (declared in ``cli.families``, as every family): a shipped
model's training dynamics along its trajectory. Where the trajectory holds the mechanism rows measured at shipping
(the paper's simplified vision tower), the emergence table, its figures and the attention page; where it does not (a
RoPE, two-layer or full-model tower), the accuracies the zoo records along the training (``trajectory_accuracies``:
the history, the stored checkpoints and the snapshots recorded without weights), their figure and when each of Fig.
11's levels is first reached.
"""

from __future__ import annotations

from typing import Any

from hooked_clip1d.cli.family_api import Report, flag_option
from hooked_clip1d.model.clip import CLIP1D


def dynamics_report(model: CLIP1D, opts: dict[str, Any]) -> Report:
    """``analyze dynamics``'s report on ``model`` (a shipped model with a trajectory) with the family's options.

    Example (what ``hooked-clip1d analyze dynamics --model rope-ntot20-n2-15`` runs):
        >>> from hooked_clip1d import load_model
        >>> report = dynamics_report(load_model("rope-ntot20-n2-15"), {})
        >>> report.data["first_reached"]["seen"], report.data["rows"][0]["source"]
        (100, 'checkpoint')
    """
    from hooked_clip1d.pretrained import list_trajectories, load_trajectory, trajectory_emergence, trajectory_manifest
    from hooked_clip1d.visualization.dynamics import (
        plot_checkpoints,
        plot_emergence,
        show_attention_over_checkpoints,
    )

    man = getattr(model, "manifest", None)
    name = man.get("name") if isinstance(man, dict) else None
    if name is None:
        have = ", ".join(list_trajectories()) or "none yet"
        raise ValueError(
            "analyze dynamics needs a shipped model with a training trajectory (--model NAME); models with one: "
            f"{have} (for a run directory's snapshots: hooked_clip1d.analysis.mechanism.dynamics.run_emergence)"
        )

    def epoch_list(key: str) -> list[int] | None:
        v = opts.get(key)
        if v is None:
            return None
        vs = v if isinstance(v, list) else [v]
        if not all(isinstance(e, int) and not isinstance(e, bool) for e in vs):
            raise ValueError(f"option {key} must be an epoch or a list of epochs, e.g. [0,100,10000]; got {v!r}")
        return vs

    not_run = trajectory_manifest(name).get("emergence", {}).get("not_run")
    if not_run is not None:  # no mechanism rows: the accuracies along the training
        return _accuracy_report(name, not_run, opts, epoch_list("epochs"))
    em = trajectory_emergence(name, epochs=epoch_list("epochs"), recompute=flag_option(opts, "recompute", False))
    epochs = [r["epoch"] for r in em.rows]
    show = epoch_list("show")
    if show is None:
        gen = em.windows.get("generalizes", {}).get("first")
        show = sorted({epochs[0], *([gen] if gen is not None else [epochs[len(epochs) // 2]]), epochs[-1]})
    ckpts = load_trajectory(name, epochs)
    by_epoch = dict(ckpts)
    missing = [e for e in show if e not in by_epoch]
    if missing:
        raise ValueError(f"option show: no checkpoint at epochs {missing}; the checkpoints: {epochs}")
    image = opts.get("image")
    figs = {
        "emergence": plot_emergence(em, title=f"{name}: emergence of the mechanism over training"),
        "checkpoints": plot_checkpoints([(e, by_epoch[e]) for e in show], image=image),
    }
    heading = f"{name}: vision attention at each checkpoint of its trajectory (panels: epoch, head)"
    pages = {"attention_steps": (show_attention_over_checkpoints(ckpts, image=image), heading)}

    lines = _emergence_lines(name, epochs, em)
    return Report("\n".join(lines), {"name": name, **em.to_json(), "show": show}, figs, pages)


def _accuracy_report(name: str, not_run: str, opts: dict[str, Any], epochs: list[int] | None) -> Report:
    """``analyze dynamics`` for a trajectory without mechanism rows: the accuracies the zoo records along the
    training (``trajectory_accuracies``), when each of Fig. 11's levels is first reached, and their figure. The
    options that need the rows or the weights (``recompute``, ``show``, ``image``) are refused by name."""
    from hooked_clip1d.pretrained import trajectory_accuracies
    from hooked_clip1d.reproduce.readings import first_epoch
    from hooked_clip1d.visualization.dynamics import ACCURACY_LEVELS, plot_accuracy_dynamics

    given = [k for k in ("recompute", "show", "image") if k in opts]
    if given:
        raise ValueError(
            f"option(s) {given} need the mechanism rows, which {name!r}'s trajectory has none of: {not_run}"
        )
    rows = trajectory_accuracies(name)
    if epochs is not None:
        have = [r["epoch"] for r in rows]
        missing = [e for e in epochs if e not in have]
        if missing:
            raise ValueError(f"option epochs: no recorded accuracies at epochs {missing}; the epochs: {have}")
        rows = [r for r in rows if r["epoch"] in epochs]
    if not rows:
        raise ValueError("option epochs: no epochs given")
    late = rows[-20:]  # the end of training: does the last number stand for it?
    spread = {
        k: {"min": min(r[k] for r in late), "max": max(r[k] for r in late), "mean": sum(r[k] for r in late) / len(late)}
        for k in ACCURACY_LEVELS
    }
    history = {"epoch": [r["epoch"] for r in rows], **{k: [r[k] for r in rows] for k in ACCURACY_LEVELS}}
    first = {k: first_epoch(history, k, level) for k, level in ACCURACY_LEVELS.items()}  # fig11's own reading
    lines = [
        f"{name}: accuracies at {len(rows)} epochs, {rows[0]['epoch']}..{rows[-1]['epoch']} (the history, the stored "
        "checkpoints and the snapshots recorded without weights); no mechanism rows: " + not_run,
        f"{'epoch':>6} {'single':>6} {'seen':>5} {'unseen':>6}  source",
    ]
    lines += [f"{r['epoch']:>6} {r['single']:>6.2f} {r['seen']:>5.2f} {r['unseen']:>6.2f}  {r['source']}" for r in rows]
    lines.append("")
    lines.append(
        "first reached (Fig. 11's levels): "
        + ", ".join(f"{k} >= {level} at epoch {first[k]}" for k, level in ACCURACY_LEVELS.items())
    )
    lines.append(
        "(the history's numbers are the run's own evaluations, in float32; the stored checkpoints' and the shipped "
        "model's are measured on the stored weights)"
    )
    lines.append(
        f"over the last {len(late)} evaluations listed (epochs {late[0]['epoch']}..{late[-1]['epoch']}): "
        + ", ".join(f"{k} {v['min']:.2f}-{v['max']:.2f} (mean {v['mean']:.2f})" for k, v in spread.items())
    )
    data = {
        "name": name,
        "rows": rows,
        "first_reached": first,
        "levels": ACCURACY_LEVELS,
        "last_rows": {"epochs": [late[0]["epoch"], late[-1]["epoch"]], **spread},
        "mechanism": not_run,
    }
    figs = {"accuracies": plot_accuracy_dynamics(rows, title=f"{name}: generalization over training")}
    return Report("\n".join(lines), data, figs)


def _emergence_lines(name: str, epochs: list[int], em: Any) -> list[str]:
    """The emergence table's text: a row per checkpoint, then when each check first and last holds."""
    from hooked_clip1d.analysis.mechanism.dynamics import CHECK_TEXT

    def heads(v: list[float] | list[int] | None, fmt: str = "{:.2f}") -> str:
        return " ".join(fmt.format(x) for x in v) if v else "n/a"

    lines = [f"{name}: {len(epochs)} checkpoints, epochs {epochs[0]}..{epochs[-1]} (probe: every unseen pair)"]
    lines.append(
        f"{'epoch':>6} {'loss':>7} {'single':>6} {'seen':>5} {'unseen':>6} {'probe':>5}  "
        f"{'P(left) per head':<20} {'EP std per head':<24} {'Fig.13 share':<20} {'inv acc/ls':<10} {'rank':<8} exposure"
    )
    for r in em.rows:
        inv = r["invariant"]
        exp = r.get("exposure")
        lines.append(
            f"{r['epoch']:>6} {r['loss']:>7.4f} {r['single']:>6.2f} {r['seen']:>5.2f} {r['unseen']:>6.2f} "
            f"{r['probe']:>5.2f}  {heads(r['p_left']):<20} {heads(r['ep_std'], '{:.3g}'):<24} "
            f"{heads(r['xwx_share']):<20} {f'{inv[0]:.2f}/{inv[1]:.2f}':<10} {heads(r['qk_rank'], '{}'):<8} "
            f"{'n/a' if exp is None else f'{exp:.3g}'}"
        )
    lines.append("")
    lines.append("checks (docs/fidelity.md, the dynamics study): first / last epoch at which each holds")
    for check, w in em.windows.items():
        if w["first"] is None:
            state = "never holds"
        else:
            end = "holds at the end" if w["held_at_end"] else f"last holds at {w['last']}"
            state = f"from {w['first']}, {end} (at {w['fraction']:.0%} of the checkpoints since)"
        lines.append(f"  {check:<19} {state}  [{CHECK_TEXT.get(check, 'all five checks')}]")
    return lines
