"""What ``ship.ship_trajectory`` reads and measures before it writes anything: the finished run's snapshots, the
check that the zoo model was exported from that run, the epochs it stores, each stored checkpoint's precision, the
accuracies of the snapshots it records without storing them, and the emergence rows on the stored weights. Nothing
here writes a file.

Example:
    >>> from pathlib import Path
    >>> stored_epochs([0, 100], 10000, {0: Path("s0"), 100: Path("s100"), 10000: Path("s10000")})
    [0, 100]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hooked_clip1d.pretrained import load_model
from hooked_clip1d.pretrained.checkpoints import check_snapshot
from hooked_clip1d.pretrained.precision import measure_precision
from hooked_clip1d.pretrained.trajectories import (
    file_sha256,
    numeric_diff,
    run_snapshots,
    trajectory_schedule,
)
from hooked_clip1d.settings.checks import check_int_list


def finished_run_snapshots(run_dir: Path) -> dict[int, Path]:
    """The snapshots of a finished run directory (epoch -> file), or a FileNotFoundError naming what is missing.

    Example:
        >>> import tempfile
        >>> finished_run_snapshots(Path(tempfile.mkdtemp()))  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        FileNotFoundError: ... is not a hooked_clip1d training run directory (no run config.json)
    """
    from hooked_clip1d.training.rundir import is_run_dir

    if not (run_dir / "config.json").exists() or not is_run_dir(run_dir):
        raise FileNotFoundError(f"{str(run_dir)!r} is not a hooked_clip1d training run directory (no run config.json)")
    if not (run_dir / "model.safetensors").exists():
        raise FileNotFoundError(
            f"{str(run_dir / 'model.safetensors')!r} is missing: the run has not finished (ship a finished run)"
        )
    snaps = run_snapshots(run_dir)
    if not snaps:
        raise FileNotFoundError(
            f"{str(run_dir)!r} has no snapshots/: train with TrainConfig.snapshot_epochs (settings.dense_schedule)"
        )
    return snaps


def check_run_snapshots(snaps: dict[int, Path], config: dict[str, Any]) -> None:
    """Each snapshot's own metadata against its name and the run's ``config``: another epoch's file, or another
    run's, would be shipped or recorded under this label (``checkpoints.check_snapshot``: a ``CheckpointError``).

    Example (a run's ``snapshots/`` and its ``config.json``):
        >>> check_run_snapshots(run_snapshots(run), json.loads((run / "config.json").read_text()))  # doctest: +SKIP
    """
    for epoch, path in snaps.items():
        check_snapshot(path, epoch, config)


def exported_final(run_dir: Path, name: str, zman: dict[str, Any], config: dict[str, Any]) -> tuple[int, Any, Any]:
    """(last epoch, the zoo's model ``name``, the run's final model), after checking that the zoo's ``name`` was
    exported from this run: its weights equal the run's ``model.safetensors`` at the zoo file's precision.

    Example:
        >>> last, shipped, final = exported_final(run, "vision2-ntot25-n2-15", manifest(name), config)  # doctest: +SKIP
    """
    import torch

    from hooked_clip1d.model.checkpoint import load_model_file

    last = int(json.loads((run_dir / "summary.json").read_text())["epochs"])
    export_hint = f"export this run first (hooked-clip1d export {run_dir} --name {name} --description ...)"
    if int(zman["epochs"]) != last:
        raise ValueError(f"the zoo's {name!r} has {zman['epochs']} epochs, the run {last}: {export_hint}")
    shipped = load_model(name)  # sha256-checked
    final = load_model_file(run_dir / "model.safetensors")
    zdtype = getattr(torch, zman.get("weights_dtype", "float32"))
    sz, sf = shipped.state_dict(), final.state_dict()
    same = sz.keys() == sf.keys() and all(torch.equal(sz[k], sf[k].to(zdtype).float()) for k in sz)
    if not same or zman["model_config"] != config["model_config"] or zman["data_config"] != config["data_config"]:
        raise ValueError(
            f"the zoo's {name!r} was not exported from {str(run_dir)!r} (its weights or configs differ from the "
            f"run's model.safetensors): {export_hint}, then ship its trajectory"
        )
    return last, shipped, final


def stored_epochs(epochs: Sequence[int] | None, last: int, snaps: dict[int, Path]) -> list[int]:
    """The epochs whose snapshots the trajectory stores (all but the last, which is the zoo's file): ``epochs``, or
    ``trajectory_schedule(last)`` among the snapshots.

    Example:
        >>> stored_epochs(None, 10, {0: Path("a"), 5: Path("b"), 7: Path("c"), 10: Path("d")})
        [0, 5]
    """
    if epochs is None:
        chosen = [e for e in trajectory_schedule(last) if e in snaps]
    else:
        chosen = check_int_list(epochs, "epochs (the snapshots to ship)")
        late = [e for e in chosen if e > last]
        if late:
            raise ValueError(f"epochs {late} are past the run's last epoch {last}")
        missing = [e for e in chosen if e not in snaps and e != last]
        if missing:
            raise ValueError(f"the run has no snapshot at epochs {missing}; its snapshots: {list(snaps)}")
    stored = [e for e in chosen if e != last]
    if not stored:
        raise ValueError(f"a trajectory needs a checkpoint before the last epoch {last}; snapshots: {list(snaps)}")
    return stored


def run_snapshot(path: Path, final: Any) -> Any:
    """A run's snapshot loaded (float32), refused if its model config is not the run's final model's.

    Example:
        >>> model = run_snapshot(run / "snapshots" / "epoch_00100.safetensors", final)  # doctest: +SKIP
    """
    from hooked_clip1d.model.checkpoint import load_model_file

    model = load_model_file(path)
    if model.cfg.to_dict() != final.cfg.to_dict():
        raise ValueError(f"snapshot {path} has another model config than the run's model.safetensors")
    return model


def snapshot_accuracies(
    snaps: dict[int, Path],
    epochs: Sequence[int] | str,
    shipped: list[int],
    final: Any,
    ds: Any,
    scheduled: Sequence[int] = (),
) -> dict[str, Any]:
    """``ship_trajectory``'s ``metrics_epochs``: each snapshot's float32 accuracies on every split of ``ds`` and its
    file's sha256 (``{}`` for none); ``"all"``: every snapshot whose weights the trajectory does not store, refused
    when a snapshot the run ``scheduled`` (its ``snapshot_epochs``, up to its last epoch) is missing (a figure would
    read a gap as an epoch never measured; give the epochs as a list to ship without it).

    Example (none asked: nothing measured):
        >>> snapshot_accuracies({0: Path("a"), 10: Path("b")}, [], [0, 10], final=None, ds=None)
        {}
    """
    from hooked_clip1d.evaluation import evaluate

    if isinstance(epochs, str):
        if epochs != "all":
            raise ValueError(f"metrics_epochs must be a list of epochs or 'all', got {epochs!r}")
        missing = [e for e in scheduled if e <= max(shipped) and e not in snaps]
        if missing:
            raise ValueError(
                f"metrics_epochs 'all': the run scheduled snapshots at epochs {missing} that are missing from its "
                "snapshots/; give the epochs to measure as a list to ship without them"
            )
        chosen = [e for e in snaps if e not in shipped]
    else:
        chosen = check_int_list(epochs, "metrics_epochs (snapshots measured, not stored)") if len(epochs) else []
        bad = [e for e in chosen if e not in snaps or e in shipped]
        if bad:
            raise ValueError(f"metrics_epochs {bad}: not a snapshot of the run, or stored as a checkpoint {shipped}")
    if not chosen:
        return {}
    metrics, digests = {}, {}
    for e in sorted(chosen):
        model = run_snapshot(snaps[e], final)
        metrics[str(e)] = evaluate(model.eval(), ds, splits=list(ds.splits))
        digests[str(e)] = file_sha256(snaps[e])
    why = "float32 accuracies measured at shipping on run snapshots whose weights are not stored"
    return {"note": why, "epochs": sorted(chosen), "metrics": metrics, "snapshot_sha256": digests}


def stored_precisions(
    snaps: dict[int, Path], stored: list[int], final: Any, ds: Any, dtypes: Sequence[str], tolerance: int
) -> tuple[dict[int, Any], dict[int, str], dict[int, Any], dict[str, Any]]:
    """The snapshots at ``stored`` epochs loaded (float32; each must have the final model's config) and each one's
    precision by ``measure_precision``: (models, kept dtypes, kept weights, the precision record); a ValueError names
    the checkpoints no precision of ``dtypes`` keeps.

    Example:
        >>> _, dtypes, kept, record = stored_precisions(snaps, [0, 500], final, ds, ["float16"], 2)  # doctest: +SKIP
    """

    models = {e: run_snapshot(snaps[e], final) for e in stored}
    kept_dtypes, kept, record = measure_precision(models, ds, dtypes, tolerance=tolerance)
    refused = [e for e in stored if e not in kept_dtypes]
    if refused:
        raise ValueError(
            f"no precision of {list(dtypes)} keeps the accuracies of the checkpoints at epochs {refused}: "
            "add float32 to dtypes"
        )
    return models, kept_dtypes, kept, record


def emergence_record(
    kept: dict[int, Any],
    models: dict[int, Any],
    kept_dtypes: dict[int, str],
    final: tuple[int, Any],
    train_cfg: Any,
    ds: Any,
) -> dict[str, Any]:
    """The emergence rows on the stored weights ``kept`` (and the shipped ``final`` (epoch, model)), with the largest
    change of any of their numbers from the float32 weights ``models`` and the checks the rounding flipped.

    Example (``{"not_run": why}`` for a tower the mechanism report cannot read):
        >>> emergence_record(kept, models, kept_dtypes, (10000, shipped), train_cfg, ds)["windows"]  # doctest: +SKIP
    """
    from hooked_clip1d.analysis.mechanism.dynamics import emergence

    try:
        em = emergence([*kept.items(), final], train_cfg, dataset=ds)
        moved, flipped = 0.0, []
        if any(d != "float32" for d in kept_dtypes.values()):
            em32 = emergence([*models.items(), final], train_cfg, dataset=ds)
            moved = max(numeric_diff(a, b) for a, b in zip(em32.rows, em.rows, strict=True))
            flipped = [
                [a["epoch"], c]
                for a, b in zip(em32.rows, em.rows, strict=True)
                for c in a["checks"]
                if a["checks"][c] != b["checks"].get(c)
            ]
        return {**em.to_json(), "max_change_from_float32": round(moved, 6), "checks_changed_by_rounding": flipped}
    except ValueError as err:  # not the paper's simplified vision tower: no mechanism report
        return {"not_run": str(err)}
