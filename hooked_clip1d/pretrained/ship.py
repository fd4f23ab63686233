"""Shipping to the zoo: a finished training run becomes a pretrained model (``export_run``: weights-only file and
manifest) and its snapshots a training trajectory (``ship_trajectory``). The reading side (``load_model``,
``list_checkpoints``, ...) is the package's ``__init__``; everything written goes through atomic writes.

Example:
    >>> from pathlib import Path
    >>> home = str(Path.home())
    >>> portable_command(f"hooked-clip1d train --out {home}/runs/x")
    'hooked-clip1d train --out ~/runs/x'
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hooked_clip1d.files import atomic_write_text, json_text  # torch-free, as this module
from hooked_clip1d.pretrained import (
    manifest,
    read_history,
    sha256_file,
    trajectory_manifest,
    zoo,  # its WEIGHTS_DIR / TRAJECTORIES_DIR read at call time (tests move them)
)
from hooked_clip1d.pretrained.precision import PRECISION_METHOD, STORE_DTYPES, dtype_summary
from hooked_clip1d.pretrained.ship_measure import (
    check_run_snapshots,
    emergence_record,
    exported_final,
    finished_run_snapshots,
    snapshot_accuracies,
    stored_epochs,
    stored_precisions,
)
from hooked_clip1d.pretrained.trajectories import (
    MANIFEST_FORMAT,
    PART_BYTES,
    SUFFIX,
    split_checkpoints,
    trajectory_tensors,
    write_compressed,
)
from hooked_clip1d.settings.checks import check_int_list

# All shipped trajectories together: the package's size on disk and in a clone (a GPU window sends the slim tree,
# without them, since 2026-11-30, so the window's room no longer sets it; 25 MB until 2026-12-01, when the last
# three mechanism models' trajectories were to ship beside the 23 MB then used; 30 MB until 2026-12-01, session 41:
# the full model at protocol is to ship one stored checkpoint, ~2.9 MB in float16 and xz, and its other snapshots'
# accuracies, beside the 27.2 MB then used, every other trajectory at its test's minimum of checkpoints).
TRAJECTORY_BUDGET_MB = 33.0


def export_run(
    run_dir: str | Path,
    name: str,
    description: str,
    dest: str | Path | None = None,
    weights_dtype: str = "float32",
    compress: bool = True,
) -> Path:
    """Ship a training run (``train`` output) as pretrained model ``name``: weights-only file plus manifest.

    The manifest's accuracies are measured here, on the exported weights: with ``weights_dtype="float16"`` (half
    the file, for the larger models) on the rounded ones. A run that has not finished is shipped from its latest
    ``checkpoint.safetensors``; the manifest then records the epochs actually trained. ``dest`` defaults to the
    package's ``WEIGHTS_DIR``. With ``compress`` (the default) the weights are then stored xz-compressed
    (``compress_weights``); returns the weights file written.
    """
    from hooked_clip1d.training.rundir import RunLock, is_run_dir

    run_dir, dest = Path(run_dir), Path(dest) if dest is not None else zoo.WEIGHTS_DIR
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise ValueError(f"model name {name!r} must be a plain identifier (letters, digits, '_', '-', '.')")
    if not (run_dir / "config.json").exists():
        raise FileNotFoundError(f"{run_dir / 'config.json'} is missing: is {run_dir} a training run directory?")
    if not is_run_dir(run_dir):
        raise ValueError(f"{str(run_dir / 'config.json')!r} is not a hooked_clip1d run config (foreign folder?)")
    check_destination(dest, "export")  # before the evaluation, not after it
    with RunLock(run_dir, "run directory"):  # a run still training there is refused, not exported half-way
        target = _export_locked(run_dir, name, description, dest, weights_dtype)
    return compress_weights(name, dest) if compress else target


def compress_weights(name: str, dest: str | Path | None = None) -> Path:
    """Store zoo model ``name``'s weights xz-compressed: ``<name>.safetensors`` becomes ``<name>.safetensors.xz``
    (``xz -d`` gives it back bit for bit, checked before the plain file is removed). The manifest's ``sha256`` and
    ``bytes`` stay those of the safetensors bytes (what every trajectory and record cites); ``packed`` records the
    compressed file's. ``dest`` defaults to ``WEIGHTS_DIR``. Returns the compressed file.

    Example:
        >>> import shutil, tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for ext in ("json", "safetensors.xz"):
        ...     _ = shutil.copy(zoo.WEIGHTS_DIR / f"simplified-ntot20-n2-10.{ext}", d)
        >>> compress_weights("simplified-ntot20-n2-10", d)
        Traceback (most recent call last):
        ValueError: 'simplified-ntot20-n2-10' has no plain weights file to compress in ... (already compressed?)
    """
    import hashlib

    from hooked_clip1d.model.checkpoint import CheckpointError
    from hooked_clip1d.pretrained.trajectories import unpack_xz

    dest = Path(dest) if dest is not None else zoo.WEIGHTS_DIR
    plain, packed, man_path = dest / f"{name}.safetensors", dest / f"{name}.safetensors.xz", dest / f"{name}.json"
    if not plain.is_file():
        raise ValueError(f"{name!r} has no plain weights file to compress in {str(dest)!r} (already compressed?)")
    man = json.loads(man_path.read_text())
    raw = plain.read_bytes()
    if hashlib.sha256(raw).hexdigest() != man.get("sha256"):
        raise CheckpointError(f"{plain.name}: its sha256 does not match the manifest; not compressed")
    write_compressed(packed, raw)  # atomic
    if unpack_xz(packed, "weights file") != raw:
        packed.unlink()
        raise CheckpointError(f"{packed.name} did not unpack to {plain.name}'s bytes; removed, nothing changed")
    man["packed"] = {"format": "xz", "sha256": sha256_file(packed), "bytes": packed.stat().st_size}
    atomic_write_text(man_path, json_text(man))
    plain.unlink()  # a crash before this leaves both files: load_model then names them (keep one)
    return packed


def check_destination(dest: str | os.PathLike, what: str) -> Path:
    """Refuse, before any work, a destination folder that is a file (or lies under one) or cannot be written into
    (``PermissionError``, ``NotADirectoryError``, each naming the folder); creates nothing. Returns ``dest``.

    Example:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "a-file"
        >>> _ = f.write_text("")
        >>> try:
        ...     check_destination(f / "trajectories", "ship_trajectory")
        ... except NotADirectoryError as e:
        ...     print(str(e).split(": ", 1)[1].replace(str(f), "F"))
        cannot write into 'F/trajectories': 'F' is a file, not a folder
    """
    dest = Path(dest)
    probe = dest
    while not probe.exists() and probe.parent != probe:  # the nearest folder that exists: where writing starts
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(f"{what}: cannot write into {str(dest)!r}: {str(probe)!r} is a file, not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".write-check.", dir=probe)
    except OSError as e:
        raise PermissionError(
            f"{what}: cannot write into {str(dest)!r}: {str(probe)!r} is not writable ({e.strerror or e})"
        ) from None
    os.close(fd)
    os.unlink(tmp)
    return dest


def portable_command(cmd: str) -> str:
    """A recorded command line without this machine's paths: the checkout's root dropped, the home folder as ``~``
    (manifests ship with the package and must not name one machine's folders).

    Example:
        >>> home = str(Path.home())
        >>> portable_command(f"hooked-clip1d train --out {home}/runs/x")
        'hooked-clip1d train --out ~/runs/x'
    """
    root = str(Path(__file__).resolve().parents[2]) + "/"
    return cmd.replace(root, "").replace(str(Path.home()), "~")


def _export_locked(run_dir: Path, name: str, description: str, dest: Path, weights_dtype: str) -> Path:
    import torch

    from hooked_clip1d.data.dataset import build_dataset
    from hooked_clip1d.evaluation import evaluate
    from hooked_clip1d.model.checkpoint import load_model_file, read_tensors, save_model

    config = json.loads((run_dir / "config.json").read_text())
    final = run_dir / "model.safetensors"
    src = final if final.exists() else run_dir / "checkpoint.safetensors"
    if weights_dtype not in ("float32", "float16"):
        raise ValueError(f"weights_dtype must be 'float32' or 'float16', got {weights_dtype!r}")
    store = getattr(torch, weights_dtype)
    model = load_model_file(src)
    with torch.no_grad():
        for p in model.state_dict().values():
            if p.is_floating_point():
                p.copy_(p.to(store))  # evaluate what the file will hold
    if final.exists():
        summary = json.loads((run_dir / "summary.json").read_text())
        epochs, steps, seconds = summary["epochs"], summary["steps"], summary["train_seconds"]
    else:
        st = read_tensors(src)[1]["train_state"]
        epochs, steps, seconds = st["epoch"], st["step"], round(st["elapsed_s"], 1)
    metrics = evaluate(model, build_dataset(model.data_config))
    history = read_history(run_dir / "metrics.jsonl", max_epoch=epochs)
    target = dest / f"{name}.safetensors"
    save_model(model, target, extra={"train_config": config["train_config"]}, dtype=store)
    (dest / f"{name}.safetensors.xz").unlink(missing_ok=True)  # a re-export replaces the model in either form
    man = {
        "name": name,
        "description": description,
        "model_config": config["model_config"],
        "data_config": config["data_config"],
        "train_config": config["train_config"],
        "command": portable_command(config["provenance"]["command"]),
        "seed": config["train_config"]["seed"],
        "epochs": epochs,
        "epochs_planned": config["train_config"]["epochs"],
        "steps": steps,
        "train_seconds": seconds,
        "metrics": metrics,
        "provenance": {**config["provenance"], "command": portable_command(config["provenance"]["command"])},
        "history": history,
        "weights_dtype": weights_dtype,
        "sha256": sha256_file(target),
        "bytes": target.stat().st_size,
    }
    atomic_write_text(dest / f"{name}.json", json_text(man))
    return target


def ship_trajectory(
    run_dir: str | os.PathLike,
    name: str,
    epochs: Sequence[int] | None = None,
    dtypes: Sequence[str] = STORE_DTYPES,
    dest: str | os.PathLike | None = None,
    budget_mb: int | float = TRAJECTORY_BUDGET_MB,
    tolerance_images: int = 0,
    metrics_epochs: Sequence[int] | str = (),
) -> Path:
    """Ship a finished training run's snapshots as the training trajectory of zoo model ``name``; returns the path of
    the trajectory's ``.safetensors`` (its manifest ``.json`` beside it, in ``dest``, default ``TRAJECTORIES_DIR``).

    The zoo's ``name`` must have been exported from this run (``hooked-clip1d export RUN --name NAME ...``): its
    weights must equal the run's ``model.safetensors`` at the zoo file's precision, bit for bit; the last checkpoint
    is that shipped file. ``epochs`` defaults to ``trajectory_schedule(last epoch)`` among the run's snapshots.
    Each stored checkpoint takes the first of ``dtypes`` at which its accuracies on every split equal its float32 ones
    (``precision.measure_precision``; recorded in the manifest); ``tolerance_images`` > 0 accepts a precision whose
    accuracies differ by at most that many images in any split (recorded too; rounding flips near-ties, e.g. in a
    left/right-symmetric plateau, where float32 on another machine may flip them as well). The emergence rows are
    measured on the stored weights and recorded, with the largest change of any of their numbers from the float32
    weights. A trajectory that would bring all shipped trajectories (in ``dest``) past ``budget_mb`` MB is refused,
    naming the sizes. ``metrics_epochs`` (``"all"``: every other snapshot) are snapshots whose weights are not stored:
    their float32 accuracies are measured and recorded (``precision.snapshot_metrics``, with each file's sha256),
    for a figure that reads accuracies at epochs the budget cannot store (Fig. 11a, the full model's phases).
    Everything is measured before anything is written; each file is written atomically.

    Example (the command line: ``hooked-clip1d ship-trajectory RUN_DIR --name NAME``):
        >>> ship_trajectory("runs/flagship", "simplified-ntot20-n2-10")  # doctest: +SKIP
    """
    import torch

    from hooked_clip1d.analysis.mechanism.report import unseen_probe
    from hooked_clip1d.data.dataset import build_dataset
    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.training.rundir import RunLock

    run_dir = Path(run_dir)
    dest = Path(dest) if dest is not None else Path(zoo.TRAJECTORIES_DIR)
    zman = manifest(name)  # KeyError listing the zoo for a model not exported yet
    if [d for d in dtypes if d not in STORE_DTYPES] or not dtypes:
        raise ValueError(f"dtypes must be a non-empty list of {list(STORE_DTYPES)}, got {list(dtypes)}")
    snaps = finished_run_snapshots(run_dir)
    check_destination(dest, "ship-trajectory")  # before the measuring (minutes), not after it
    with RunLock(run_dir, "run directory"), torch.random.fork_rng(devices=[]):
        config = json.loads((run_dir / "config.json").read_text())
        check_run_snapshots(snaps, config)
        last, shipped, final = exported_final(run_dir, name, zman, config)
        stored = stored_epochs(epochs, last, snaps)
        ds = unseen_probe(build_dataset(final.data_config))
        models, kept_dtypes, kept, record = stored_precisions(snaps, stored, final, ds, dtypes, tolerance_images)
        scheduled = config["train_config"].get("snapshot_epochs") or ()
        measured = snapshot_accuracies(snaps, metrics_epochs, [*stored, last], final, ds, scheduled)
        emerg = emergence_record(
            kept, models, kept_dtypes, (last, shipped), TrainConfig.from_dict(config["train_config"]), ds
        )

        tensors, meta, man = _TrajectoryMeasured(
            name=name,
            config=config,
            zoo_manifest=zman,
            run_dir=run_dir,
            snaps=snaps,
            stored=stored,
            last=last,
            kept=kept,
            kept_dtypes=kept_dtypes,
            dtypes=tuple(dtypes),
            tolerance_images=tolerance_images,
            precision_record=record,
            emergence=emerg,
            n_captions=len(ds.captions),
            snapshot_metrics=measured,
        ).files()
        target, text = _write_parts(dest, name, tensors, meta, man, budget_mb)
        atomic_write_text(dest / f"{name}.json", text)
    return target


@dataclass(frozen=True)
class _TrajectoryMeasured:
    """What ``ship_trajectory`` read and measured (everything before anything is written): the zoo model ``name``
    and its manifest, the run (config, snapshots, the stored epochs and the last), the kept checkpoints with their
    chosen dtypes, the precision record over the candidate ``dtypes``, the emergence record and the caption count."""

    name: str
    config: dict[str, Any]
    zoo_manifest: dict[str, Any]
    run_dir: Path
    snaps: dict[int, Path]
    stored: list[int]
    last: int
    kept: dict[int, Any]
    kept_dtypes: dict[int, str]
    dtypes: tuple[str, ...]
    tolerance_images: int
    precision_record: Any
    emergence: dict[str, Any]
    n_captions: int
    snapshot_metrics: dict[str, Any]

    def files(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """``ship_trajectory``'s tensors, file metadata and manifest, from what it measured."""
        tensors, digests = trajectory_tensors(self.kept, self.kept_dtypes)
        digests[str(self.last)] = self.zoo_manifest["sha256"]  # the last checkpoint: the shipped weights file
        epochs_all = [*self.stored, self.last]
        dtype_map = {str(e): self.kept_dtypes[e] for e in self.stored}
        trajectory = {"name": self.name, "epochs": epochs_all, "final_epoch": self.last, "dtypes": dtype_map}
        meta = {
            **{k: self.config[k] for k in ("model_config", "data_config", "train_config")},
            "trajectory": trajectory,
        }
        precision = dict(
            method=PRECISION_METHOD,
            candidates=list(self.dtypes),
            tolerance_images=self.tolerance_images,
            checkpoints=self.precision_record,
        )
        source = dict(
            run=portable_command(str(self.run_dir.resolve())),
            command=portable_command(self.config["provenance"]["command"]),
            snapshots=list(self.snaps),
        )
        man = {
            "format": MANIFEST_FORMAT,
            "name": self.name,
            "epochs": epochs_all,
            "final_epoch": self.last,
            "final": f"weights/{self.name}.safetensors (the shipped model, sha256 {self.zoo_manifest['sha256']})",
            "dtype": dtype_summary(self.kept_dtypes),
            "dtypes": dtype_map,
            "checkpoint_sha256": digests,
            "chance": round(1.0 / self.n_captions, 6),
            "precision": precision,
            "emergence": self.emergence,
            "source": source,
        }
        if self.snapshot_metrics:
            man["snapshot_metrics"] = self.snapshot_metrics
        return tensors, meta, man


def _write_parts(
    dest: Path, name: str, tensors: dict[str, Any], meta: dict[str, Any], man: dict[str, Any], budget_mb: int | float
) -> tuple[Path, str]:
    """Write the trajectory's files of at most ``PART_BYTES`` of tensors each, xz-compressed (the first is
    ``dest/name.safetensors.xz``), to pending names, complete the manifest ``man`` with their names, digests and
    sizes, refuse past ``budget_mb`` (naming the sizes), then put them in place (removing this name's older files);
    returns (the first file, the manifest's text). Nothing half-written is left."""
    from hooked_clip1d.model.checkpoint import save_tensors

    target = dest / f"{name}{SUFFIX}"
    groups = split_checkpoints(tensors, PART_BYTES)  # files of at most PART_BYTES: the first is `target`
    finals = [target, *(dest / f"{name}.part{i}{SUFFIX}" for i in range(1, len(groups)))]
    pendings = [f.with_name(f".{f.name}.pending") for f in finals]  # replaced after the budget check
    raw = dest / f".{name}.raw.pending.safetensors"
    try:
        for pend, group in zip(pendings, groups, strict=True):
            save_tensors(raw, group, meta)
            write_compressed(pend, raw.read_bytes())
        files = {
            "file": target.name,
            "sha256": sha256_file(pendings[0]),
            "bytes": sum(p.stat().st_size for p in pendings),  # every part
            "parts": [
                {"file": f.name, "sha256": sha256_file(p), "bytes": p.stat().st_size}
                for f, p in zip(finals[1:], pendings[1:], strict=True)
            ],  # the checkpoints past the first file's PART_BYTES
        }
        at = list(man).index("dtypes") + 1  # the files' entries follow "dtypes", as the manifest format lists them
        man = dict([*list(man.items())[:at], *files.items(), *list(man.items())[at:]])
        text = json_text(man)
        size = man["bytes"] + len(text.encode())
        present = [p for p in dest.glob("*") if p.is_file() and not p.name.startswith(".") and not _owned(p, name)]
        others = sum(p.stat().st_size for p in present)
        if others + size > budget_mb * 1e6:
            raise ValueError(
                f"shipping {name!r} ({size / 1e6:.1f} MB, {man['dtype']}) would bring the trajectories in "
                f"{str(dest)!r} to {(others + size) / 1e6:.1f} MB, past the budget of {budget_mb} MB (the others: "
                f"{others / 1e6:.1f} MB): ship fewer checkpoints (--epochs) or raise the budget (--budget-mb)"
            )
        for old in dest.glob(f"{name}.*safetensors*"):  # a re-ship may have fewer parts, or the older format
            if _owned(old, name) and old not in finals:
                old.unlink()
        for pend, final in zip(pendings, finals, strict=True):
            os.replace(pend, final)
    finally:
        for pend in [*pendings, raw]:
            if pend.exists():
                pend.unlink()
    return target, text


def _owned(path: Path, name: str) -> bool:
    """Whether ``path`` is one of zoo model ``name``'s trajectory files (its manifest, first file or parts, in
    either format)."""
    own = {f"{name}.json", f"{name}.safetensors", f"{name}{SUFFIX}"}
    return path.name in own or re.fullmatch(re.escape(name) + r"\.part\d+\.safetensors(\.xz)?", path.name) is not None


def repack_trajectory(
    name: str,
    epochs: Sequence[int] | None = None,
    dest: str | os.PathLike | None = None,
    budget_mb: int | float = TRAJECTORY_BUDGET_MB,
) -> Path:
    """Rewrite the shipped trajectory of zoo model ``name`` in today's file format (xz-compressed parts), keeping
    the checkpoints at ``epochs`` (default: all of them; the last, the shipped model, always): no training run
    needed. Each kept checkpoint is stored bit for bit in its stored dtype (its content sha256 checked against the
    manifest), the precision record keeps its rows, the emergence rows keep theirs (each measured on that
    checkpoint's stored weights at shipping) and their windows are recomputed over the kept rows
    (``check_windows``); ``source.repacked`` records the date and the epochs dropped. Returns the first file's path.
    For making room (the working tree travels to a GPU window within 64 MiB) without retraining.

    Example (the command line: ``hooked-clip1d repack-trajectory NAME --epochs 0,100,...``):
        >>> repack_trajectory("simplified-ntot20-n2-10-standard-loss", [0, 200, 1500])  # doctest: +SKIP
    """
    import datetime

    import torch

    from hooked_clip1d.analysis.mechanism.dynamics import check_windows
    from hooked_clip1d.pretrained.trajectories import read_trajectory, stored_checkpoint

    src = Path(zoo.TRAJECTORIES_DIR)
    dest = check_destination(dest if dest is not None else src, "repack-trajectory")
    man = trajectory_manifest(name)  # KeyError / NoTrajectoryError naming what is there
    final, have = int(man["final_epoch"]), [int(e) for e in man["epochs"]]
    keep = have if epochs is None else sorted({*check_int_list(epochs, "repack_trajectory: epochs"), final})
    unknown = [e for e in keep if e not in have]
    if unknown:
        raise ValueError(f"{name!r}'s trajectory has no checkpoint at epochs {unknown}; its epochs: {have}")
    stored = [e for e in keep if e != final]
    if not stored:
        raise ValueError(f"a trajectory needs a checkpoint before the last epoch {final}; kept: {keep}")
    with torch.random.fork_rng(devices=[]):
        tensors_all, meta = read_trajectory(src, man)
        models = {
            e: stored_checkpoint(tensors_all, meta, e, man["checkpoint_sha256"][str(e)], f"trajectory {name!r}")
            for e in stored
        }
    kept_dtypes = {e: man["dtypes"][str(e)] for e in stored}
    tensors, digests = trajectory_tensors(models, kept_dtypes)
    moved = [e for e in stored if digests[str(e)] != man["checkpoint_sha256"][str(e)]]
    if moved:  # upcast and stored again in its dtype, a checkpoint must be the same bytes
        raise ValueError(f"{name!r}: the checkpoints at epochs {moved} would not be stored bit for bit")
    digests[str(final)] = man["checkpoint_sha256"][str(final)]
    earlier = man["source"].get("repacked", {}).get("dropped", [])  # a second repack keeps the first's record
    dropped = sorted({*earlier, *(e for e in have if e not in keep)})
    emergence = man["emergence"]
    if "rows" in emergence:
        rows = [r for r in emergence["rows"] if int(r["epoch"]) in keep]
        flipped = [c for c in emergence.get("checks_changed_by_rounding", []) if int(c[0]) in keep]
        emergence = {**emergence, "rows": rows, "windows": check_windows(rows), "checks_changed_by_rounding": flipped}
    dtype_map = {str(e): kept_dtypes[e] for e in stored}
    trajectory = {"name": name, "epochs": keep, "final_epoch": final, "dtypes": dtype_map}
    meta = {**{k: v for k, v in meta.items() if k != "format"}, "trajectory": trajectory}
    files = ("file", "sha256", "bytes", "parts")
    new = {k: v for k, v in man.items() if k not in files}
    new.update(
        epochs=keep,
        dtype=dtype_summary(kept_dtypes),
        dtypes=dtype_map,
        checkpoint_sha256={str(e): digests[str(e)] for e in keep},
        precision={**man["precision"], "checkpoints": {e: man["precision"]["checkpoints"][e] for e in dtype_map}},
        emergence=emergence,
        source={
            **man["source"],
            "repacked": {
                "date": datetime.date.today().isoformat(),
                "dropped": dropped,
                "why": "room in the working tree (it travels to a GPU window within 64 MiB); the kept checkpoints "
                "are the shipped bytes, their rows the shipped rows",
            },
        },
    )
    target, text = _write_parts(dest, name, tensors, meta, new, budget_mb)
    atomic_write_text(dest / f"{name}.json", text)
    return target
