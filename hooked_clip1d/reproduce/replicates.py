"""The seeds and trained controls of a figure: ``replicate_runs`` finds the runs of a zoo model's recipe at other
seeds (the study seeds that chose the recipe and the fresh ones that did not), and ``TRAINED_CONTROLS`` names the
model trained with the claimed property removed that guards each figure's counted checks (verdicts v3):
``trained_control_runs`` loads its runs, ``apply_trained_control`` marks each check with their outcomes. A check
restated after its controls were read (``FRESH_JUDGED``: Fig. 4c', 5d') is judged on fresh runs alone:
``fresh_runs`` finds them, ``apply_fresh_runs`` applies the pre-registered rule, whatever the seeds and the trained
control made of the check (both stay on it, reported), and ``withhold_fresh_judged`` leaves it uncounted where
there are no such runs to judge it.

Example:
    >>> replicate_runs("simplified-ntot20-n2-10", "/nonexistent")
    {}
    >>> TRAINED_CONTROLS["fig4c"]
    {'simplified-ntot20-n2-10': ('control-shuffled-distinct-ntot20-n2-10', False)}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hooked_clip1d.model.clip import CLIP1D, CLIPConfig
from hooked_clip1d.reproduce.controls import (
    judge_on_fresh_runs,
    run_closed,
    substitute,
    substitutes,
    with_manifest,
    with_metrics,
)
from hooked_clip1d.reproduce.core import FigureSpec, Outcome
from hooked_clip1d.reproduce.readings import DOMINANT_SPLIT_ID, RELATIONAL_ID
from hooked_clip1d.reproduce.records import Check

# verdicts v3 (docs/fidelity.md, pre-registered before any control was trained): the trained control guarding a
# figure's counted checks, per zoo model of the figure: (the control's zoo name, whether its architecture may differ
# from the figure's model: a control of the property, not a stand-in of the same shapes). A guarded check counts only
# if it fails on every run of its control on the machine (the shipped model, and its sweep's other seeds). A control
# shares the recipe of the model it guards (amendment of 2026-11-28): since the flagship switched to the masked loss,
# its control is SHUFFLED_DISTINCT, and the RoPE model's SHUFFLED_DISTINCT_ROPE since the RoPE model switched too
# (2026-11-29), and Fig. 8 by SHUFFLED_DISTINCT since its model did; SHUFFLED and SHUFFLED_ROPE guard no figure now
# (kept in the zoo beside the standard-loss models they were trained for)
CONTROLS_SWEEP = "controls"
SHUFFLED = "control-shuffled-ntot20-n2-10"
SHUFFLED_ROPE = "control-shuffled-rope-ntot20-n2-15"
SHUFFLED_DISTINCT = "control-shuffled-distinct-ntot20-n2-10"
SHUFFLED_DISTINCT_ROPE = "control-shuffled-distinct-rope-ntot20-n2-15"
# App. L's (amendment of 2026-11-29, session 28): seed 0 of its sweep, in the zoo since 2026-11-30 (session 37)
SHUFFLED_DISTINCT_VISION2 = "control-shuffled-distinct-vision2-ntot25-n2-15"
CONTROL_SWEEPS = {
    SHUFFLED: CONTROLS_SWEEP,
    SHUFFLED_ROPE: CONTROLS_SWEEP,
    SHUFFLED_DISTINCT: "controls-distinct",
    SHUFFLED_DISTINCT_ROPE: "controls-distinct-rope",
    SHUFFLED_DISTINCT_VISION2: "controls-distinct-vision2",
}
TRAINED_CONTROLS: dict[str, dict[str, tuple[str, bool]]] = {
    "fig4c": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},
    "fig5d": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},
    "fig5e": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},
    "fig6": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},
    "fig8": {"leftright-v1-t2-ntot20-n2-10": (SHUFFLED_DISTINCT, True)},  # its recipe since 2026-11-29
    "fig11": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},  # amendment of 2026-11-29, session 29
    # stated 2026-12-01 (session 41) before the full model at protocol finished: an order-blind model of the property
    # (the simplified one: no full-model control is trained, ~11 h of one core), which cannot reach its unseen pairs
    "fig11a": {"full-ntot20-n2-10": (SHUFFLED_DISTINCT, True)},
    "fig14": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},
    "fig18": {"rope-ntot20-n2-15": (SHUFFLED_DISTINCT_ROPE, False)},
    "fig19": {"rope-ntot20-n2-15": (SHUFFLED_DISTINCT_ROPE, False)},
    "fig20": {"leftright-v1-t1-ntot20-n2-10": ("leftright-v1-t2-ntot20-n2-10", True)},
    "fig23": {"vision2-ntot25-n2-15": (SHUFFLED_DISTINCT_VISION2, False)},  # App. L's model since 2026-11-29
    # x6's restated checks read the flagship alone (amendment of 2026-11-29, session 25)
    "x6-spatial-ids": {"simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False)},
    # x1's restated check (amendment of 2026-11-28, session 22): both models guarded, their controls substituted
    # together in each control run
    "x1-mirror-swap": {
        "simplified-ntot20-n2-10": (SHUFFLED_DISTINCT, False),
        "rope-ntot20-n2-15": (SHUFFLED_DISTINCT_ROPE, False),
    },
    # x20 (pre-registered 2026-12-01, session 44): App. L's model by its own control, the full model by the flagship's
    # (one layer: a control of the property, as Fig. 11a's), substituted together as x1's
    "x20-layers": {
        "full-ntot20-n2-10": (SHUFFLED_DISTINCT, True),
        "vision2-ntot25-n2-15": (SHUFFLED_DISTINCT_VISION2, False),
    },
}


def trained_control_runs(spec: FigureSpec, sweeps_root: Path | None) -> tuple[list[tuple[str, dict[str, CLIP1D]]], str]:
    """The trained-control runs of figure ``spec`` (``TRAINED_CONTROLS``): ``(label, the figure's models with the
    controls in place)`` for the shipped controls and each other seed of their configs in their sweeps under
    ``sweeps_root``, and a status line (what was found, or why nothing was). Empty where the figure has no control
    or one of its controls is not trained.

    A figure with several guarded models (x1) has them replaced together: run k puts each control's k-th run (the
    shipped seed first, then its sweep's other seeds in seed order) in its model's place; a control with fewer runs
    repeats its shipped seed (docs/fidelity.md, 2026-11-28 amendment).
    """
    from hooked_clip1d.pretrained import list_pretrained, load_model

    table = TRAINED_CONTROLS.get(spec.key)
    if not table:
        return [], "no trained control is declared for this figure"
    missing = [c for c, _ in table.values() if c not in list_pretrained()]
    if missing:
        sweeps = sorted({CONTROL_SWEEPS.get(c, CONTROLS_SWEEP) for c in missing})
        names = ", ".join(repr(c) for c in missing)
        return [], f"the trained control {names} is not in the zoo yet (sweep {', '.join(sweeps)}.toml trains it)"
    per_model = {zoo_name: _control_seeds(control, sweeps_root) for zoo_name, (control, _) in table.items()}
    others = {m: load_model(m) for m in spec.models if m not in table}
    runs = []
    for k in range(max(len(seeds) for seeds in per_model.values())):
        picked = {z: seeds[k] if k < len(seeds) else seeds[0] for z, seeds in per_model.items()}
        run_label = " + ".join(dict.fromkeys(label for label, _ in picked.values()))
        in_place = {z: _as_control(z, model, table[z][1], label) for z, (label, model) in picked.items()}
        runs.append((run_label, {**others, **in_place}))
    return runs, f"{len(runs)} run(s) of " + ", ".join(repr(c) for c, _ in table.values())


def _finished_runs(sweep_dir: Path) -> list[tuple[Path, int, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """The finished runs of sweep folder ``sweep_dir`` (summary and model written), in name order, each with what a
    reader matches it by: ``(run, seed, train config without the seed, data config, model config without the init
    seeds)``, the train config as ``comparable_train_config`` gives it."""
    from hooked_clip1d.training.run_config import comparable_train_config

    out = []
    for run in sorted((Path(sweep_dir) / "runs").glob("*")):
        if not (run / "summary.json").exists() or not (run / "model.safetensors").exists():
            continue
        saved = json.loads((run / "config.json").read_text())
        train = comparable_train_config(saved["train_config"])
        seed = train.pop("seed")
        model = _without_init_seed(CLIPConfig.from_dict(saved["model_config"]))
        out.append((run, seed, train, dict(saved["data_config"]), model))
    return out


def _control_seeds(control: str, sweeps_root: Path | None) -> list[tuple[str, CLIP1D]]:
    """Control ``control``'s runs: the shipped one (labelled by its zoo name), then each other seed of its config
    found in its sweep under ``sweeps_root`` (labelled ``sweep/runs/NAME``), in seed order."""
    from hooked_clip1d.model.checkpoint import load_model_file
    from hooked_clip1d.pretrained import load_model, manifest
    from hooked_clip1d.training.run_config import comparable_train_config

    found = [(control, load_model(control))]
    if sweeps_root is None:
        return found
    man = manifest(control)
    sweep = CONTROL_SWEEPS.get(control, CONTROLS_SWEEP)
    want = _without_init_seed(CLIPConfig.from_dict(man["model_config"]))
    want_t = comparable_train_config(man["train_config"])
    own_seed = want_t.pop("seed")
    seeded = []
    for run, seed, have_t, data, model in _finished_runs(Path(sweeps_root) / sweep):
        # the same recipe (another recipe's run in the sweep is not this control), config and data, another seed
        if seed != own_seed and have_t == want_t and data == man["data_config"] and model == want:
            # its manifest from its run folder (a figure may read the history), named by its label, not its file:
            # read on its history alone, as the shipped seed is (fidelity.md: a control's snapshots are not merged in)
            path, label = run / "model.safetensors", f"{sweep}/runs/{run.name}"
            seeded.append((seed, label, with_manifest(load_model_file(path), path, label)))
    return found + [(label, model) for _, label, model in sorted(seeded, key=lambda t: t[0])]


def _as_control(zoo_name: str, model: CLIP1D, free: bool, label: str | None = None) -> CLIP1D:
    """A control in a figure's place: through ``substitute`` (the same shapes and data, the caption order aside), or,
    for a control whose architecture differs by design (``free``), as it is, with its metrics measured."""
    if not free:
        return substitute(zoo_name, model)
    return with_metrics(with_manifest(model, None, label or "control"))


def mark_seeds(rows: list[Check], seeds: dict[str, dict[str, bool]], fresh: list[str], figure: str) -> None:
    """Mark each check with its outcome at each replicate seed (``seeds``: seed -> {check sentence: holds}); a
    counted check then counts as holding only if it also holds at >= 2/3 of the ``fresh`` seeds (where >= 3 are
    found). A seed whose run does not report a check is an error naming both (never a silent fail or pass).

    Example:
        >>> rows = [Check("a", "a", True, counted=True, counted_holds=True)]
        >>> mark_seeds(rows, {"6": {"a": True}, "7": {"a": False}, "8": {"a": True}}, ["6", "7", "8"], "t")
        >>> rows[0].seeds, rows[0].fresh_holds, rows[0].counted_holds
        ({'6': True, '7': False, '8': True}, 2, True)
        >>> mark_seeds(rows, {"6": {}}, ["6"], "t")
        Traceback (most recent call last):
        ValueError: t: the run at seed 6 does not report the check 'a' (a vanished check is an error)
    """
    for row in rows:
        for s, got in seeds.items():
            if row.text not in got:
                raise ValueError(
                    f"{figure}: the run at seed {s} does not report the check {row.text!r} "
                    "(a vanished check is an error)"
                )
        row.seeds = {s: bool(got[row.text]) for s, got in seeds.items()}
        if row.counted and len(fresh) >= 3:  # at >= 2 of 3 fresh seeds (>= 2/3 of them where more are found)
            row.fresh_holds = sum(row.seeds[s] for s in fresh)
            row.counted_holds = bool(row.counted_holds) and 3 * row.fresh_holds >= 2 * len(fresh)


def apply_trained_control(
    rows: list[Check], spec: FigureSpec, runs: list[tuple[str, dict[str, CLIP1D]]], status: str
) -> dict[str, Any]:
    """Run ``spec`` on each trained-control run and mark each check with the control's outcome
    (``trained_control``: label -> holds); a counted check that some control run passes is not counted
    (``control_passes``). A check the control's run does not report is an error. Returns the record's
    ``trained_control`` entry.

    Example:
        >>> rows = [Check("a", "a", True, counted=True, counted_holds=True),
        ...         Check("b", "b", True, counted=True, counted_holds=True)]
        >>> from hooked_clip1d.reproduce.core import Outcome
        >>> spec = FigureSpec("t", "t", "t", ("m",), lambda ms: Outcome({}, "", [("a", True), ("b", False)], {}))
        >>> from hooked_clip1d import CLIP1D, CLIPConfig
        >>> ctl = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5))
        >>> apply_trained_control(rows, spec, [("ctl", {"m": ctl})], "1 run")["passes"]
        {'a': ['ctl']}
        >>> [(r.text, r.counted) for r in rows]
        [('a', False), ('b', True)]
    """
    passes: dict[str, list[str]] = {}
    for label, models in runs:
        got = dict(run_closed(spec.run, models).checks)
        for row in rows:
            if row.text not in got:
                raise ValueError(f"{spec.key}: the trained control {label} does not report the check {row.text!r}")
            row.trained_control = {**(row.trained_control or {}), label: bool(got[row.text])}
            if got[row.text]:
                passes.setdefault(row.text, []).append(label)
    for row in rows:
        if row.counted and row.text in passes:  # a model that cannot know what the check claims passes it
            row.counted, row.counted_holds = False, None
            row.control_passes = passes[row.text]
    return {"status": status, "runs": [label for label, _ in runs], "passes": passes}


@dataclass(frozen=True)
class OwnControl:
    """A trained control that a figure's own code computes (``Outcome.own_controls``), as ``OWN_CONTROLS`` holds it.

    ``what`` says what the control is (the record's status line); ``reader``, where set, reads the control's table
    (check -> control label -> holds) without running the whole figure (Fig. 22: the flagship's 14 retrained runs
    need not be on the machine that guards a kept record); ``unguarded`` names the counted checks the control does not
    guard, with why (written into the record's trained-control entry, shown on the page); ``trained=False`` declares
    that no control exists (Fig. 4a's sweep trends): the entry only says why, and ``guard_record`` refuses it.

    Example:
        >>> OwnControl("four text towers trained apart").reader is None
        True
    """

    what: str
    reader: Callable[[], dict[str, dict[str, bool]]] | None = None
    unguarded: Mapping[str, str] = field(default_factory=dict)
    trained: bool = True

    def __str__(self) -> str:
        return self.what


# figures whose trained controls their own code computes, one registry (a figure's module registers its own entry:
# Fig. 7's in text_figs, pre-registered in docs/fidelity.md's amendment of 2026-11-26; Fig. 22's in pruned_heads,
# pre-registered in docs/fidelity.md 2026-11-30, guards R3 alone)
OWN_CONTROLS: dict[str, OwnControl] = {}


def own_control_entry(
    key: str, rows: list[Check], table: dict[str, dict[str, bool]], status: str | None = None
) -> dict[str, Any]:
    """The record's trained-control entry for figure ``key``'s own control: ``table`` applied to ``rows``
    (``apply_own_control_table``; an empty table, a control not trained or not readable, guards nothing), ``status``
    (None: how many runs the figure computed), and the checks it leaves unguarded with why (its ``OWN_CONTROLS``
    entry's ``unguarded``).

    Example:
        >>> own_control_entry("t", [], {}, "not trained yet")
        {'status': 'not trained yet', 'runs': [], 'passes': {}}
    """
    entry = apply_own_control_table(rows, table) or {"status": "", "runs": [], "passes": {}}
    entry = {"status": entry["status"] if status is None else status, "runs": entry["runs"], "passes": entry["passes"]}
    own = OWN_CONTROLS.get(key)
    if own is not None and own.unguarded:
        entry["unguarded"] = dict(own.unguarded)
    return entry


def apply_own_controls(rows: list[Check], outcome: Outcome) -> dict[str, Any] | None:
    """Mark each check with the trained controls its figure computed itself (``Outcome.own_controls``: label ->
    holds) and stop counting a counted check that one of them passes, as ``apply_trained_control`` does for the
    registered ones. Returns the record's ``trained_control`` entry, or None where the figure computes none.

    Example:
        >>> from hooked_clip1d.reproduce.core import Outcome
        >>> rows = [Check("a", "a", True, counted=True, counted_holds=True),
        ...         Check("b", "b", True, counted=True, counted_holds=True)]
        >>> out = Outcome({}, "", [("a", True), ("b", True)], {}, own_controls={"a": {"c1": False, "c2": True}})
        >>> apply_own_controls(rows, out)["passes"], [(r.text, r.counted) for r in rows]
        ({'a': ['c2']}, [('a', False), ('b', True)])
    """
    return apply_own_control_table(rows, outcome.own_controls)


def apply_own_control_table(rows: list[Check], table: dict[str, dict[str, bool]]) -> dict[str, Any] | None:
    """``apply_own_controls`` given the table itself (check -> control label -> holds), as a figure's
    ``OWN_CONTROLS`` entry's reader returns it."""
    if not table:
        return None
    labels = list(dict.fromkeys(k for d in table.values() for k in d))
    passes: dict[str, list[str]] = {}
    for row in rows:
        got = table.get(row.text)
        if got is None:
            continue
        row.trained_control = {**(row.trained_control or {}), **{k: bool(v) for k, v in got.items()}}
        passed = [k for k, v in got.items() if v]
        if passed:
            passes[row.text] = passed
            if row.counted:
                row.counted, row.counted_holds = False, None
                row.control_passes = passed
    return {"status": f"{len(labels)} run(s) the figure computes itself", "runs": labels, "passes": passes}


# checks judged on fresh runs alone (docs/fidelity.md, amendment of 2026-11-29, written before the runs were
# trained): figure -> the ids of its restated checks. The deciding runs are the figure's model's config and recipe at
# FRESH_SEEDS (trained by no earlier study), on ordered captions and on shuffled ones, in sweep FRESH_SWEEP; the
# shipped model, its controls and the other seeds are reported beside them and decide nothing
FRESH_SWEEP = "controls-fresh"
FRESH_SEEDS = (9, 10, 11)
FRESH_JUDGED: dict[str, tuple[str, ...]] = {"fig4c": (DOMINANT_SPLIT_ID,), "fig5d": (RELATIONAL_ID,)}


def fresh_runs(zoo_name: str, sweeps_root: str | Path | None) -> dict[str, Path]:
    """The finished runs of ``FRESH_SWEEP`` under ``sweeps_root`` trained as zoo model ``zoo_name`` was but for the
    seed (one of ``FRESH_SEEDS``) and the caption order: ``{"ordered:9": run, ..., "shuffled:11": run}``, in that
    order (a run not yet finished is absent).

    Example:
        >>> fresh_runs("simplified-ntot20-n2-10", "/nonexistent")
        {}
    """
    from hooked_clip1d.pretrained import manifest
    from hooked_clip1d.training.run_config import comparable_train_config

    if sweeps_root is None:
        return {}
    man = manifest(zoo_name)
    want_t = comparable_train_config(man["train_config"])
    want_t.pop("seed")
    want_m = _without_init_seed(CLIPConfig.from_dict(man["model_config"]))
    want_d = {k: v for k, v in man["data_config"].items() if k != "caption_order"}
    found: dict[str, Path] = {}
    for run, seed, have_t, data, model in _finished_runs(Path(sweeps_root) / FRESH_SWEEP):
        order = data.pop("caption_order", "ordered")
        if seed not in FRESH_SEEDS or have_t != want_t or data != want_d or model != want_m:
            continue
        label = f"{order}:{seed}"
        if label in found:  # two runs for one deciding slot: which one decides is not for this code to choose
            raise ValueError(f"{FRESH_SWEEP}: two finished runs are {label}: {found[label].name} and {run.name}")
        found[label] = run
    return {k: found[k] for k in (f"{o}:{s}" for o in ("ordered", "shuffled") for s in FRESH_SEEDS) if k in found}


def _fresh_judged(rows: list[Check], spec: FigureSpec) -> list[Check]:
    ids = FRESH_JUDGED[spec.key]
    judged = [r for r in rows if r.id in ids]
    if len(judged) != len(ids):
        raise ValueError(f"{spec.key}: the restated checks {list(ids)} are not all among its checks (vanished)")
    return judged


def withhold_fresh_judged(rows: list[Check], spec: FigureSpec, why: str) -> None:
    """Mark the restated checks of ``spec`` (``FRESH_JUDGED``) not counted, with ``why``: a reading that is not
    their six fresh runs (too few of them trained, or a substituted model) cannot judge them.

    Example:
        >>> from hooked_clip1d.reproduce.core import FIGURES
        >>> import hooked_clip1d.reproduce.mechanism_figs  # declares fig4c
        >>> rows = [Check("fig4c-dominant-split", "4c'", True, counted=True, counted_holds=True)]
        >>> withhold_fresh_judged(rows, FIGURES["fig4c"], "a substituted model")
        >>> rows[0].counted, rows[0].fresh_rule
        (False, 'not judged: a substituted model')
    """
    for row in _fresh_judged(rows, spec):
        row.fresh_rule = "not judged: " + why
        row.counted, row.counted_holds = False, None


def apply_fresh_runs(
    rows: list[Check], spec: FigureSpec, null: dict[str, Any], sweeps_root: str | Path | None
) -> dict[str, Any]:
    """Judge the restated checks of ``spec`` (``FRESH_JUDGED``) on the fresh runs alone by the pre-registered rule
    (``controls.judge_on_fresh_runs``: >= 2 of 3 ordered runs hold, every shuffled run and untrained draw fails).
    Each such row gets ``fresh_runs`` (run -> holds) and ``fresh_rule`` (the rule's verdict, or why it was not
    applied); ``counted`` / ``counted_holds`` follow the rule alone (reproduced: counts and holds; not reproduced:
    counts and fails; inconclusive: not counted), replacing what the seeds and the trained control made of it
    (both stay on the row, reported). Until the six runs are trained the checks do not count. A row not eligible
    for counting (shown only, coordinate-dependent, or with an incomplete null) stays uncounted. Returns the
    record's ``fresh_runs`` entry: the runs, each run's summary and each check's outcome at the reported
    thresholds.
    """
    judged = _fresh_judged(rows, spec)
    runs = fresh_runs(spec.models[0], sweeps_root)
    entry: dict[str, Any] = {"sweep": FRESH_SWEEP, "seeds": list(FRESH_SEEDS), "runs": {}, "summaries": {}}
    if len(runs) < 2 * len(FRESH_SEEDS):
        entry["status"] = (
            f"{len(runs)} of {2 * len(FRESH_SEEDS)} fresh runs finished in {FRESH_SWEEP}: the restated checks do "
            "not count until all six are trained"
        )
        withhold_fresh_judged(rows, spec, entry["status"])
        return entry
    entry["status"] = f"the six fresh runs of {FRESH_SWEEP} (seeds {', '.join(map(str, FRESH_SEEDS))})"
    sensitivity: dict[str, dict[str, list[tuple[float, bool]]]] = {}
    for label, run in runs.items():
        out = run_closed(spec.run, substitutes(spec, {spec.models[0]: str(run)}))
        got = dict(out.checks)
        entry["runs"][label] = f"{FRESH_SWEEP}/runs/{run.name}"
        entry["summaries"][label] = out.summary
        for row in judged:
            if row.text not in got:
                raise ValueError(f"{spec.key}: the fresh run {label} does not report the check {row.text!r}")
            row.fresh_runs = {**(row.fresh_runs or {}), label: bool(got[row.text])}
            sensitivity.setdefault(row.id, {})[label] = out.sensitivity.get(row.text, [])
    entry["sensitivity"] = sensitivity
    for row in judged:
        outcomes = row.fresh_runs or {}
        ordered = [outcomes[f"ordered:{s}"] for s in FRESH_SEEDS]
        shuffled = [outcomes[f"shuffled:{s}"] for s in FRESH_SEEDS]
        blocked = row.secondary or row.coordinate_dependent or row.null_incomplete
        if blocked:
            row.fresh_rule = "not applied: the check does not count (" + str(blocked) + ")"
            continue
        untrained = [bool(v["checks"][row.text]) for v in null["variants"]]
        verdict = judge_on_fresh_runs(ordered, shuffled, untrained)
        row.fresh_rule = verdict
        row.counted = verdict != "inconclusive"
        row.counted_holds = (verdict == "reproduced") if row.counted else None
    return entry


def _without_init_seed(cfg: CLIPConfig) -> dict[str, Any]:
    d = cfg.to_dict()
    for tower in ("vision", "text"):
        d[tower] = {k: v for k, v in d[tower].items() if k != "init_seed"}
    return d


# sweeps whose finished runs may be seeds of a zoo model's recipe (read from the sweeps folder), and the seeds that
# chose the default recipe (the recipe study's); every other seed is fresh (docs/fidelity.md)
# sweeps whose runs can replicate a zoo model (same configs, another seed); "temperature": its arm (a) is the
# default recipe at seeds 0-2 and 6-8 (6-8 fresh: used by no study to choose anything); "zoo-distinct": the zoo's
# mechanism models retrained under the default recipe, seeds 0-2 (seed 0 shipped)
REPLICATE_SWEEPS = (
    "study-seeds",
    "fresh-seeds",
    "dynamics",
    "trajectories",
    "temperature",
    "negatives",
    "zoo-distinct",
)
STUDY_SEEDS = (0, 1, 2)


def replicate_runs(zoo_name: str, sweeps_dir: str | Path) -> dict[int, Path]:
    """Finished runs under ``sweeps_dir`` (in ``REPLICATE_SWEEPS``) trained as zoo model ``zoo_name`` was, seed
    aside: the same model and data configs and the same training recipe. By training seed; the zoo model's own
    seed is left out (it is the shipped model).

    Example:
        >>> replicate_runs("simplified-ntot20-n2-10", "/nonexistent")
        {}
    """
    from hooked_clip1d.pretrained import manifest
    from hooked_clip1d.training.run_config import comparable_train_config

    man = manifest(zoo_name)
    want_t = comparable_train_config(man["train_config"])
    own_seed = want_t.pop("seed")
    want_m = CLIPConfig.from_dict(man["model_config"])
    found: dict[int, Path] = {}
    for sweep in REPLICATE_SWEEPS:
        for run, seed, have_t, data, model in _finished_runs(Path(sweeps_dir) / sweep):
            if have_t != want_t or seed == own_seed or seed in found:
                continue
            if data != man["data_config"] or model != _without_init_seed(want_m):
                continue
            found[int(seed)] = run
    return dict(sorted(found.items()))
