"""``reproduce(figure)``: run one figure's experiment and write its record; ``FIGURES``, every figure by key.

``FIGURES`` (``core``) holds every figure a module of this package declares with ``core.register``; importing this
module imports every figure module of the package (all but ``NOT_FIGURE_MODULES``), so a new figure module needs
no other entry (the CLI and the results page sort the keys themselves). ``reproduce`` loads the zoo models a
figure needs, or trains / reads its sweep (reading the spec under ``core.SWEEPS_DIR``), and handles unfinished
sweeps: an interim reading once every run has an evaluation, else the zoo's cells of the grid
(``sweep_figs.grid_cell``), else "not run".
"""

from __future__ import annotations

import datetime
import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hooked_clip1d.reproduce.core as core
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.pretrained import list_pretrained, load_model, manifest
from hooked_clip1d.reproduce.cell_controls import cell_reading
from hooked_clip1d.reproduce.controls import audit_invariance, counted_checks, null_control, run_closed, substitutes
from hooked_clip1d.reproduce.core import FIGURES, FigureSpec, Outcome, outcome_record, reading_sweeps_from, verdict_of
from hooked_clip1d.reproduce.records import Record, guarded_notes, load_record, write_record
from hooked_clip1d.reproduce.replicates import (
    FRESH_JUDGED,
    OWN_CONTROLS,
    STUDY_SEEDS,
    TRAINED_CONTROLS,
    apply_fresh_runs,
    apply_trained_control,
    mark_seeds,
    own_control_entry,
    replicate_runs,
    trained_control_runs,
    withhold_fresh_judged,
)
from hooked_clip1d.reproduce.sweep_figs import grid_cell


def _portable(obj: Any, base: Path) -> Any:
    """``obj`` (a record's JSON value) with every path under ``base`` (the sweep's folder) made relative to it: a
    record is committed, and a machine's paths do not belong in it."""
    if isinstance(obj, dict):
        return {k: _portable(v, base) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_portable(v, base) for v in obj]
    if isinstance(obj, str) and obj.startswith(str(base) + "/"):
        return obj[len(str(base)) + 1 :]
    return obj


# the package's modules that declare no figure (the machinery around them); every other module is a figure module
NOT_FIGURE_MODULES = ("__main__", "compare", "controls", "core", "records", "replicates", "results_page", "runner")


def _declare_figures() -> None:
    """Import every figure module of this package (all but ``NOT_FIGURE_MODULES``), so each one's ``register(...)``
    declares its figures: a new figure module needs no other entry."""
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name not in NOT_FIGURE_MODULES:
            importlib.import_module(f"{__package__}.{info.name}")


_declare_figures()


def _zoo_cells(cells: dict[str, dict[str, Any]]) -> str:
    """What the zoo models in ``cells`` (name -> its grid parameters in an unfinished sweep) measure, for a summary."""
    parts = []
    for name, params in cells.items():
        m = manifest(name)
        acc = {k: m["metrics"][k]["acc"] for k in ("val_single", "val_seen", "val_unseen")}
        epochs = f"{m['epochs']}" + (
            f" of {planned}" if (planned := m.get("epochs_planned", m["epochs"])) != m["epochs"] else ""
        )
        where = ", ".join(f"{k}={v}" for k, v in params.items())
        parts.append(
            f"the zoo's `{name}` (the cell {where}; {epochs} epochs) has single-object "
            f"{acc['val_single']:.2f}, seen-pair {acc['val_seen']:.2f}, unseen-pair {acc['val_unseen']:.2f}"
        )
    return f". Meanwhile {'; '.join(parts)}" if parts else ""


def _finished(rows: list[dict[str, Any]]) -> str:
    """What the finished runs of an unfinished sweep (``results_table`` rows) measure, for a summary."""
    parts = [
        f"`{r['run']}` ({r['epochs']} epochs) unseen-pair {r['val_unseen.acc']:.2f}"
        for r in rows
        if r.get("val_unseen.acc") is not None
    ]
    return f". Finished: {'; '.join(parts)}" if parts else ""


def reproduce(
    figure: str,
    out_dir: str | Path = "results",
    train_sweeps: bool = True,
    compile_sweeps: bool | None = None,
    sweep_device: str = "cpu",
    sweep_workers: int = 1,
    sweeps_dir: str | Path | None = None,
    sweep_max_seconds: float | int | None = None,
    models: Mapping[str, str | CLIP1D] | str | CLIP1D | None = None,
    controls: bool = True,
) -> dict[str, Any]:
    """Run one figure's experiment; write ``<out_dir>/<figure>/<figure>.json`` and PNGs; return the record.

    ``models`` substitutes the figure's zoo models (``controls.substitutes``: a run folder, a model file, another
    zoo name or ``untrained:SEED[:INIT_STD]``, by zoo name or alone for a one-model figure): the paper's checks on
    your own model. ``controls`` (default on) adds the null control (the checks on untrained models; a check counts
    toward the verdict only if every untrained model fails it, ``controls.counted_checks``) and, for figures with
    ``FigureSpec.replicate``, the checks at every seed of the shipped model's recipe found in the replicate sweeps
    under ``sweeps_dir`` (a verdict then needs >= 2 of 3 fresh seeds).

    A figure built on a sweep (``FigureSpec.sweep``) trains or resumes it under ``<sweeps_dir>/<name>``
    (default ``sweep.sweeps_home()``, outside the work tree) on
    ``sweep_device``, ``sweep_workers`` groups at once (``compile_sweeps`` overrides the spec's ``run.compile``; all
    three are execution settings, so a sweep started on a CPU resumes on a GPU in the same folder); with
    ``train_sweeps=False`` it only reads the sweep's finished runs; ``sweep_max_seconds`` stops the sweep's training
    after that long (checkpointed, as ``sweep.run_sweep``'s ``max_seconds``). While the sweep is unfinished, the
    figure gets an interim reading or is judged on its zoo cells (module docstring).
    """
    if figure not in FIGURES:
        raise ValueError(f"unknown figure {figure!r}; known: {sorted(FIGURES)}")
    spec = FIGURES[figure]
    if models is not None and spec.sweep is not None:
        raise ValueError(f"{figure} reads its sweep's runs, not zoo models: --model does not apply")
    # a bad substitute (``untrained:BAD``, a missing folder) is refused before anything is written
    given = substitutes(spec, models) if models is not None else None
    out = Path(out_dir) / figure
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "beyond_paper": spec.beyond_paper,
        "figure": spec.key,
        "title": spec.title,
        "paper": spec.paper,
        "models": list(spec.models),
        "command": spec.command,
        "recorded": datetime.date.today().isoformat(),
    }
    missing = [m for m in spec.models if m not in list_pretrained()]
    with reading_sweeps_from(sweeps_dir):  # a figure that reads runs beside its models (x18) reads them here
        if spec.sweep is not None:
            from hooked_clip1d.sweeps.runner import sweeps_home

            sweep_out = Path(sweeps_dir if sweeps_dir is not None else sweeps_home()) / spec.sweep
            train = (
                {
                    "device": sweep_device,
                    "compile": compile_sweeps,
                    "workers": sweep_workers,
                    "max_seconds": sweep_max_seconds,
                }
                if train_sweeps
                else None
            )
            _sweep_record(record, spec, out, sweep_out, train, controls, sweeps_dir)
            record = _portable(record, sweep_out)  # the runs' paths, relative to the sweep's folder
        elif missing:
            record.update(
                verdict="not run", summary=f"needs zoo model(s) {missing}, not shipped yet", checks=[], plots=[]
            )
        else:
            _model_record(record, spec, out, given, controls, replicates=models is None, sweeps_dir=sweeps_dir)
    return write_record(record, out / f"{figure}.json").to_dict()


def _sweep_record(
    record: dict[str, Any],
    spec: FigureSpec,
    out: Path,
    sweep_out: Path,
    train: dict[str, Any] | None,
    controls: bool,
    sweeps_dir: str | Path | None,
) -> None:
    """Fill ``record`` with a sweep figure's reading: trains or resumes the sweep in ``sweep_out`` first when
    ``train`` (``run_sweep``'s execution settings) is given; a finished sweep is judged (with its controls and each
    group's training clock), an unfinished one gets ``_unfinished_sweep_record``'s interim reading."""
    from hooked_clip1d.settings.progress import bar_disabled
    from hooked_clip1d.sweeps.runner import load_spec, results_table, run_sweep, sweeps_home
    from hooked_clip1d.sweeps.status import sweep_status

    sweep_spec = core.SWEEPS_DIR / f"{spec.sweep}.toml"
    if train is not None:  # progress as a value: a sweep's worker processes do not see the caller's no_bars()
        rows = run_sweep(sweep_spec, sweep_out, progress=not bar_disabled(True), **train)
    else:
        rows = results_table(load_spec(sweep_spec), sweep_out)
    n_runs = len(load_spec(sweep_spec).runs)
    if len(rows) < n_runs:
        _unfinished_sweep_record(record, spec, out, sweep_out, rows, n_runs, controls)
        return
    if spec.extra_sweeps:  # finished: add the other sweeps' finished runs
        rows = [{**r, "sweep": spec.sweep} for r in rows]
        for extra in spec.extra_sweeps:
            home = Path(sweeps_dir if sweeps_dir is not None else sweeps_home()) / extra
            rows += [{**r, "sweep": extra} for r in results_table(load_spec(core.SWEEPS_DIR / f"{extra}.toml"), home)]
    outcome = spec.run(rows).validate()  # type: ignore[arg-type]
    record.update(outcome_record(outcome, out, spec, f"sweep {spec.sweep}"))
    if controls and not outcome.not_run:
        _add_controls(record, spec, outcome, sweeps_dir, replicates=True)
    # each group's own clock (carried across resumes), as `sweep --status` reads it
    groups = {g["group"]: g["elapsed_s"] for g in sweep_status(sweep_spec, sweep_out)["groups"]}
    clock = {"groups": groups, "longest_group_s": max(groups.values()), "sum_s": sum(groups.values())}
    record["sweep_clock"] = clock
    record["notes"] = (record["notes"] + " " if record["notes"] else "") + (
        "Training clock (each group's own, summed over the sessions that resumed it): longest group "
        f"{clock['longest_group_s'] / 3600:.2f} h, all {len(groups)} groups {clock['sum_s'] / 3600:.2f} h; "
        "groups trained side by side (`--workers`) take the longest group's."
    )


def _unfinished_sweep_record(  # noqa: PLR0913 - the record, what the sweep is, and whether controls run
    record: dict[str, Any], spec: FigureSpec, out: Path, sweep_out: Path, rows: list, n_runs: int, controls: bool = True
) -> None:
    """Fill ``record`` for a sweep with ``len(rows)`` of ``n_runs`` runs finished: an INTERIM reading on every run's
    latest evaluation once each run has one (at most *partly*), else *not run*, judged on its zoo cells where the
    figure has ``cell_checks`` (at most *partly*: a few cells do not measure the sweep's trend), with the cells'
    untrained draws as their null control (``cell_controls``; none with ``controls=False``)."""
    from hooked_clip1d.sweeps.runner import load_spec, progress_table

    sweep_spec = core.SWEEPS_DIR / f"{spec.sweep}.toml"
    interim = progress_table(load_spec(sweep_spec), sweep_out)
    if len(interim) == n_runs:
        record.update(outcome_record(spec.run(interim).validate(), out, spec, f"sweep {spec.sweep} (interim)"))  # type: ignore[arg-type]
        reached = sorted({r["epochs"] for r in interim if not r["finished"]})
        planned = sorted({r["epochs_planned"] for r in interim})
        at = f"{reached[0]}" if len(reached) == 1 else f"{reached[0]}-{reached[-1]}"
        record.update(
            verdict="partly" if record["verdict"] == "reproduced" else record["verdict"],
            summary=(
                f"INTERIM: its sweep ({n_runs} models) has {len(rows)} finished runs; judged on every run's "
                f"latest evaluation (unfinished runs at epoch {at} of {'/'.join(map(str, planned))}; "
                f"`{spec.command}` resumes it): " + record["summary"]
            ),
            interim={"finished": len(rows), "runs": n_runs, "epochs_reached": reached},
            models=[],  # read from the sweep's runs, not from zoo cells
        )
        return
    summary = (
        f"its sweep ({n_runs} models, spec hooked_clip1d/sweeps/{spec.sweep}.toml) has {len(rows)} finished "
        f"runs; `{spec.command}` trains or resumes it"
    )
    in_zoo = [m for m in spec.models if m in list_pretrained()]
    cells = {m: params for m in in_zoo if (params := grid_cell(m, sweep_spec)) is not None}
    summary += _finished(rows) + _zoo_cells(cells)  # e.g. the runs a lent GPU's session finished
    numbers: dict[str, Any] = {"finished_runs": rows} if rows else {}
    record.update(verdict="not run", summary=summary, checks=[], plots=[], numbers=numbers)
    if spec.cell_checks is not None and list(cells) == list(spec.models):
        record.update(cell_reading(spec, {m: manifest(m) for m in cells}, controls))
        record.update(
            summary=summary + ". Verdict from these cells alone: the sweep's trend is untested",
            numbers={**numbers, "cells": cells},
        )


def _model_record(
    record: dict[str, Any],
    spec: FigureSpec,
    out: Path,
    given: dict[str, CLIP1D] | None,
    controls: bool,
    replicates: bool,
    sweeps_dir: str | Path | None,
) -> None:
    """Fill ``record`` with a figure's reading on its zoo models (or the ``given`` substitutes), with its invariance
    audit and controls (seed replicates only for the zoo's own models: ``replicates``)."""
    if given is not None:
        loaded = given
        record["substituted"] = {
            m: loaded[m].manifest["name"] for m in spec.models if loaded[m].manifest.get("name") != m
        }
        source = ", ".join(loaded[m].manifest.get("name", m) for m in spec.models)
    else:
        loaded = {m: load_model(m) for m in spec.models}
        source = ", ".join(spec.models)
    outcome = spec.run(loaded).validate()
    record.update(outcome_record(outcome, out, spec, source))
    record["model_epochs"] = {m: loaded[m].manifest.get("epochs") for m in spec.models}
    record["model_epochs_planned"] = {
        m: loaded[m].manifest.get("epochs_planned", loaded[m].manifest.get("epochs")) for m in spec.models
    }
    if controls and not outcome.not_run:
        audit = audit_invariance(spec, loaded, outcome)
        record["invariance_audit"] = audit
        _add_controls(record, spec, outcome, sweeps_dir, replicates=replicates, audit=audit)


def _add_controls(
    record: dict[str, Any],
    spec: FigureSpec,
    outcome: Outcome,
    sweeps_dir: str | Path | None,
    replicates: bool,
    null: dict[str, Any] | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Put the null control (``null``, else computed here; and, with ``replicates``, the seeds, the trained control
    and the fresh runs: not for a substituted model or a re-judged record) into ``record`` and judge the verdict on
    the checks that count: ``controls.counted_checks``; a check of a replicated figure holds only if it also holds at
    >= 2 of 3 fresh seeds (when the replicate sweeps hold >= 3 of them); a check a trained-control run passes does
    not count (``replicates.apply_trained_control``); a restated check (``replicates.FRESH_JUDGED``) is judged on its
    six fresh runs alone, whatever the seeds and the control made of it (``replicates.apply_fresh_runs``), and does
    not count without them."""
    from hooked_clip1d.sweeps.runner import sweeps_home

    null = null if null is not None else null_control(spec)
    rows = counted_checks(outcome, null, audit)
    record["null_control"] = {
        "models": [v["model"] for v in null["variants"]],
        "errors": {v["model"]: v["error"] for v in [*null["variants"], *null.get("failed", [])] if "error" in v},
        "complete": bool(null.get("complete", True)) and not any("error" in v for v in null["variants"]),
    }
    if spec.replicate and replicates:
        sweeps_root = Path(sweeps_dir) if sweeps_dir is not None else sweeps_home()
        runs = replicate_runs(spec.models[0], sweeps_root)
        seeds: dict[str, dict[str, bool]] = {}
        for seed, run in runs.items():
            res = run_closed(spec.run, substitutes(spec, {spec.models[0]: str(run)}))
            seeds[str(seed)] = dict(res.checks)
        fresh = [s for s in seeds if int(s) not in STUDY_SEEDS]
        mark_seeds(rows, seeds, fresh, spec.key)
        record["replicates"] = {
            "study_seeds": sorted(int(s) for s in seeds if int(s) in STUDY_SEEDS),
            "fresh_seeds": sorted(int(s) for s in fresh),
            # <sweep>/runs/<run> under the sweeps folder: a record names no machine's folders
            "runs": {s: runs[int(s)].relative_to(sweeps_root).as_posix() for s in seeds},
        }
        if len(fresh) < 3:
            record["replicates"]["note"] = f"only {len(fresh)} fresh seeds found: judged on the shipped model alone"
    # the trained controls the figure computes itself (Fig. 7, 22); one declared, not trained or not readable: said
    own = OWN_CONTROLS.get(spec.key)
    if outcome.own_controls or (own is not None and own.reader is not None and replicates):
        status = None if outcome.own_controls else "not trained (or not readable) yet"
        record["trained_control"] = own_control_entry(spec.key, rows, outcome.own_controls, status)
    elif own is not None and not own.trained and replicates:  # no control exists: why, per check
        record["trained_control"] = own_control_entry(spec.key, rows, {}, own.what)
    if replicates:  # verdicts v3: the trained control (not for a substituted model or a re-judged record)
        sweeps_root = Path(sweeps_dir) if sweeps_dir is not None else sweeps_home()
        runs, status = trained_control_runs(spec, sweeps_root)
        if spec.key in TRAINED_CONTROLS:
            record["trained_control"] = apply_trained_control(rows, spec, runs, status)
        if spec.key in FRESH_JUDGED:  # restated checks judged on fresh runs alone (docs/fidelity.md, 2026-11-29)
            record["fresh_runs"] = apply_fresh_runs(rows, spec, null, sweeps_root)
    elif spec.key in FRESH_JUDGED:  # a substituted model: its restated checks have no fresh runs to judge them
        withhold_fresh_judged(rows, spec, "a substituted model (the rule judges the flagship's six fresh runs)")
    record["checks"] = [r.to_row() for r in rows]
    counted = [(r.text, r.counted_holds) for r in rows if r.counted]
    if record.get("verdict") == "not run":
        return
    record["verdict"] = verdict_of(counted) if counted else "inconclusive"


def _rejudge_rows(spec: FigureSpec, record: dict[str, Any], rows: list[dict[str, Any]], out_dir: Path) -> dict:
    """``rejudge_record`` for a record that keeps every run's final metrics (``numbers.rows``): the figure's current
    code run on those rows (checks, numbers and PNGs anew; runs whose weights are needed and gone are skipped by
    the figure), then the controls as for a fresh record."""
    outcome = spec.run(rows).validate()  # type: ignore[arg-type]
    out = out_dir / spec.key
    out.mkdir(parents=True, exist_ok=True)
    keep = ("beyond_paper", "figure", "title", "paper", "command", "recorded", "sweep_clock")
    new = {k: record[k] for k in keep if k in record}
    new["models"] = list(spec.models)  # the figure's zoo cells today (an old record may name another model)
    new.update(outcome_record(outcome, out, spec, f"sweep {spec.sweep} (the runs' rows kept in its record)"))
    new["rejudged"] = {
        "on": datetime.date.today().isoformat(),
        "from": f"the per-run rows of the record of {record.get('recorded', 'an unknown date')}, by the figure's "
        "current code (the runs' weights are not on this machine)",
    }
    if not outcome.not_run:
        _add_controls(new, spec, outcome, None, replicates=False)
    return write_record(new, out / f"{spec.key}.json").to_dict()


def rejudge_record(figure: str, records_dir: str | Path = "docs/records", out_dir: str | Path = "results") -> dict:
    """Judge a sweep figure's kept record again under the null control, without its sweep's runs; write
    ``<out_dir>/<figure>/<figure>.json`` (its PNGs stay the page's, ``results-page`` keeps them) and return it.

    For records made before the null controls existed, on sweeps that are not on this machine (docs/fidelity.md,
    second 2026-11-26 amendment). A record that keeps every run's final metrics (``numbers.rows``) is judged anew by
    the figure's current code on those rows (issue 42's restated checks). Otherwise the trained side is the
    record's own checks, as recorded (every check text must be
    one the figure's code computes today, or it stops); the null control is computed fresh on the figure's sweep
    untrained (``controls.null_control``); the verdict follows ``controls.counted_checks``. A check that thresholds a
    number the record does not state cannot be restated beyond the null, so where an untrained model passes it, it
    does not count.

    Example:
        >>> import tempfile
        >>> rejudge_record("fig4c", out_dir=tempfile.mkdtemp())  # a zoo figure: rerun it instead
        Traceback (most recent call last):
        ValueError: fig4c reads zoo models, not a sweep: rerun it (`hooked-clip1d reproduce fig4c`)
        >>> rec = rejudge_record("fig21b", out_dir=tempfile.mkdtemp())  # doctest: +SKIP
        >>> [(c["null_passes"], c["absence"], c["counted"]) for c in rec["checks"]], rec["verdict"]  # doctest: +SKIP
        ([(10, True, False)], 'inconclusive')
    """
    if figure not in FIGURES:
        raise ValueError(f"unknown figure {figure!r}; known: {sorted(FIGURES)}")
    spec = FIGURES[figure]
    if spec.sweep is None:
        raise ValueError(f"{figure} reads zoo models, not a sweep: rerun it (`{spec.command}`)")
    path = Path(records_dir) / f"{figure}.json"
    if not path.is_file():
        raise ValueError(f"no record of {figure} in {records_dir} (looked for {path})")
    record = load_record(path).to_dict()  # refused by name if it is not a record (converted if it is an old one)
    if record.get("figure") != figure:
        raise ValueError(f"record {path} is the record of {record['figure']!r}, not of {figure!r}")
    if not record.get("checks"):
        raise ValueError(f"record {path} is not a judged record of {figure} (no checks to judge)")
    if "interim" in record or "Verdict from these cells alone" in record.get("summary", ""):
        raise ValueError(f"record {path} is an early reading of an unfinished sweep: rerun it (`{spec.command}`)")
    rows = (record.get("numbers") or {}).get("rows")
    if rows:  # every run's final metrics are in the record: the figure's current code judges them
        return _rejudge_rows(spec, record, rows, Path(out_dir))
    null = null_control(spec)
    # the record's checks are matched to what the figure's code computes today by their stable id (a reworded
    # sentence keeps its id), and carry today's sentence
    today = [{v["ids"][c]: c for c in v["checks"]} for v in null["variants"]]
    unknown = [c["check"] for c in record["checks"] if not today or any(c["id"] not in t for t in today)]
    if unknown:
        raise ValueError(
            f"record {path} has checks {figure}'s code no longer computes: {unknown}; rerun it (`{spec.command}`)"
        )
    sentence = {c["id"]: today[0][c["id"]] for c in record["checks"]}
    recorded = [(sentence[c["id"]], bool(c["holds"])) for c in record["checks"]]
    values = {sentence[c["id"]]: (c["value"], c["direction"]) for c in record["checks"] if "value" in c}  # stated
    outcome = Outcome(
        {},
        "",
        recorded,
        {},
        values=values,
        absence=tuple(null["absence"]),
        secondary=dict(null["secondary"]),
        check_ids={s: i for i, s in sentence.items()},
    )
    record = {k: v for k, v in record.items() if k not in ("null_control", "_dir")}
    record["models"] = list(spec.models)  # the figure's zoo cells today (an old record may name another model)
    record["rejudged"] = {
        "on": datetime.date.today().isoformat(),
        "from": f"the record of {record.get('recorded', 'an unknown date')}: its checks as recorded",
    }
    _add_controls(record, spec, outcome, None, replicates=False, null=null)
    out = Path(out_dir) / figure
    out.mkdir(parents=True, exist_ok=True)
    return write_record(record, out / f"{figure}.json").to_dict()


def guard_record(
    figure: str,
    records_dir: str | Path = "docs/records",
    out_dir: str | Path = "results",
    sweeps_dir: str | Path | None = None,
) -> dict:
    """Judge a figure's kept record again under a trained control pre-registered after the record was made
    (``TRAINED_CONTROLS``; or, for a figure whose own code computes its control, ``OWN_CONTROLS``, that control
    applied per check: ``apply_own_controls``), keeping everything else it holds as recorded: its checks, null
    control, invariance audit and seed replicates. Writes ``<out_dir>/<figure>/<figure>.json`` (its PNGs stay the
    page's) and returns it.

    For a record whose seed replicates are not on this machine: a rerun would judge the shipped model alone and
    drop them. The control's runs are computed now (``trained_control_runs``, under ``sweeps_dir`` for its other
    seeds), each check a control run passes stops counting (``apply_trained_control``: a check the control's run
    does not report is an error), and the verdict follows (``Record.judged``). A record guarded this way before is
    judged again from its state before that guarding (kept in ``rejudged.before_control``), e.g. when more of the
    control's seeds are on the machine. Refused: a figure without a pre-registered control, one whose restated
    checks are judged on fresh runs (a rerun applies both rules in order), a record that carries a control from its
    own run or has no null control, a record made on substituted models or on models whose epochs differ from the
    zoo's today, and a control not in the zoo. (A zoo name switched to new weights of the same epochs is not
    visible in a record: guard a record only while its models are the ones it read.)

    Example:
        >>> import tempfile
        >>> guard_record("fig13", out_dir=tempfile.mkdtemp())
        Traceback (most recent call last):
        ValueError: fig13 has no pre-registered trained control (replicates.TRAINED_CONTROLS, OWN_CONTROLS)
    """
    from hooked_clip1d.sweeps.runner import sweeps_home

    if figure not in FIGURES:
        raise ValueError(f"unknown figure {figure!r}; known: {sorted(FIGURES)}")
    spec = FIGURES[figure]
    own = OWN_CONTROLS.get(figure)
    if figure not in TRAINED_CONTROLS and (own is None or not own.trained):
        raise ValueError(f"{figure} has no pre-registered trained control (replicates.TRAINED_CONTROLS, OWN_CONTROLS)")
    if figure in FRESH_JUDGED:
        raise ValueError(f"{figure}'s restated checks are judged on fresh runs after its control: rerun it")
    path = Path(records_dir) / f"{figure}.json"
    if not path.is_file():
        raise ValueError(f"no record of {figure} in {records_dir} (looked for {path})")
    record = load_record(path)
    if record.figure != figure:
        raise ValueError(f"record {path} is the record of {record.figure!r}, not of {figure!r}")
    earlier = _as_before_control(record, spec, path)
    _check_guardable(record, spec, path)
    root = Path(sweeps_dir) if sweeps_dir is not None else sweeps_home()
    before = {c.id: [c.counted, c.counted_holds] for c in record.checks}
    record.details["trained_control"] = _guard_control(record, spec, root)
    status = record.details["trained_control"]["status"]
    record.verdict = record.judged()
    # the notes are as recorded, written before the control: say so where they may still call it absent
    today = datetime.date.today().isoformat()
    record.details["notes"] = guarded_notes(str(record.details.get("notes") or ""), today, status)
    record.details["rejudged"] = {
        "on": today,
        "under": "trained control",
        "from": f"the record of {record.recorded or 'an unknown date'}: its checks, null control, audit and seeds as "
        + (
            f"recorded; its own trained control ({status}) applied per check, computed on this date by the current code"
            if figure in OWN_CONTROLS
            else f"recorded; the trained control pre-registered after it ({status}) computed on this date by the "
            "current code"
        ),
        # each check's (counted, counted_holds) before the control, so that a later guarding (more control runs)
        # starts from the record as it was, not from this one
        "before_control": before,
        **({"earlier": earlier} if earlier else {}),
    }
    out = Path(out_dir) / figure
    out.mkdir(parents=True, exist_ok=True)
    return write_record(record, out / f"{figure}.json").to_dict()


def _as_before_control(record: Record, spec: FigureSpec, path: Path) -> dict[str, Any] | None:
    """``record`` before any trained control, in place (returns its ``rejudged``): one not trained when it was made
    (Fig. 23's) applied nothing and is dropped, an earlier guard's is undone, its own run's is refused."""
    earlier = record.details.get("rejudged")
    made = record.details.get("trained_control")
    if made is not None and not made.get("runs") and not any(c.trained_control for c in record.checks):
        del record.details["trained_control"]
    if "trained_control" in record.details:
        if not (earlier and earlier.get("under") == "trained control" and "before_control" in earlier):
            raise ValueError(f"record {path} already carries a trained control: rerun {spec.key} (`{spec.command}`)")
        _unguard(record, earlier)  # guarded before by guard_record: judged again from what it was before that
        earlier = record.details.get("rejudged")
    return earlier


def _guard_control(record: Record, spec: FigureSpec, root: Path) -> dict[str, Any]:
    """``guard_record``'s control applied to the kept record's checks: the figure's own (``OWN_CONTROLS``, run on
    the zoo's models) or the registered one's runs (under ``root`` for its other seeds). Matched by sentence: a
    guarded check the record lacks, or one the control's run does not report (reworded since, or gone), is an
    error, never a pass. Returns the record's ``trained_control`` entry."""
    if spec.key in OWN_CONTROLS:  # the figure's own code computes its control: read it, or run the figure
        reader = OWN_CONTROLS[spec.key].reader
        with reading_sweeps_from(root):  # the control's runs are under --sweeps-dir, as a registered control's
            table = reader() if reader else run_closed(spec.run, {m: load_model(m) for m in spec.models}).own_controls
        gone = [c for c in table if c not in {r.text for r in record.checks}]
        if gone or not table:
            raise ValueError(f"{spec.key}: the record has no check {gone} that its own control guards: rerun it")
        status = f"{OWN_CONTROLS[spec.key]} ({len(table)} check{'s' if len(table) != 1 else ''} guarded)"
        return own_control_entry(spec.key, record.checks, table, status)
    with reading_sweeps_from(root):
        runs, status = trained_control_runs(spec, root)
        if not runs:
            raise ValueError(f"{spec.key}: no trained-control run to judge it under ({status})")
        return apply_trained_control(record.checks, spec, runs, status)


def _check_guardable(record: Record, spec: FigureSpec, path: Path) -> None:
    """Refuse (naming what) a kept record that ``guard_record`` cannot judge again as recorded: no null control, made
    on substituted or other models, or on zoo models whose epochs have moved since."""
    if not record.checks or any(c.counted is None for c in record.checks) or "null_control" not in record.details:
        raise ValueError(f"record {path} has no null control to keep: rerun {spec.key} (`{spec.command}`)")
    if "substituted" in record.details or record.models != list(spec.models):
        raise ValueError(
            f"record {path} was not made on the figure's zoo models {list(spec.models)} (models {record.models}"
            + (", substituted" if "substituted" in record.details else "")
            + f"): rerun {spec.key} (`{spec.command}`)"
        )
    moved = {
        name: (epochs, manifest(name).get("epochs"))
        for name, epochs in (record.details.get("model_epochs") or {}).items()
        if name in list_pretrained() and manifest(name).get("epochs") != epochs
    }
    if moved:
        raise ValueError(f"record {path}: the zoo's models moved since (epochs recorded, today): {moved}: rerun it")


def _unguard(record: Record, guarded: dict[str, Any]) -> None:
    """Undo ``guard_record`` on ``record`` (in place): each check's counted outcome as it was before the control, the
    control's marks removed, the re-judging before it put back."""
    before = guarded["before_control"]
    missing = [c.id for c in record.checks if c.id not in before]
    if missing:
        raise ValueError(f"{record.figure}: the guarded record lacks the state before its control for {missing}")
    for c in record.checks:
        c.counted, c.counted_holds = before[c.id]
        c.trained_control, c.control_passes = None, None
    del record.details["trained_control"]
    if "earlier" in guarded:
        record.details["rejudged"] = guarded["earlier"]
    else:
        del record.details["rejudged"]
    record.verdict = record.judged()
