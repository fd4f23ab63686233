"""Pretrained registry: models trained by this package, shipped as package data, loaded offline.

Each model is two files in ``hooked_clip1d/pretrained/weights/``: ``<name>.safetensors`` (weights + configs, see
``hooked_clip1d.model.checkpoint``) and ``<name>.json``, its manifest: description, configs, the exact training command,
seed, epochs, steps, training time, the accuracies measured on its dataset, the sha256 of the weights and
provenance (git commit, versions). ``load_model`` checks the sha256 before loading.

Some models also ship their training trajectory (``trajectories/``, see ``pretrained.trajectories``): checkpoints
dense early and sparse late, loaded as TransformerLens loads checkpoints, ``load_model(name, checkpoint_index=i)`` or
``load_model(name, checkpoint_value=epoch)``; ``list_checkpoints(name)`` gives the epochs, ``load_trajectory(name)``
all of them and ``trajectory_emergence(name)`` how the mechanism forms along them.

Example:
    >>> from hooked_clip1d import list_pretrained, load_model
    >>> "simplified-ntot20-n2-10" in list_pretrained()
    True
    >>> model = load_model("simplified-ntot20-n2-10")
    >>> model.data_config.n_labels, model.training
    (20, False)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d._version import DEFAULT_MODEL as DEFAULT_MODEL
from hooked_clip1d.files import UnknownNameError  # defined torch-free, for the CLI's parser
from hooked_clip1d.pretrained.trajectories import (  # the trajectories' file format (torch-free at import)
    MANIFEST_FORMAT,
    PRECISION_METHOD,
    STORE_DTYPES,
    NoTrajectoryError,
    checkpoint_epoch,
    dtype_summary,
    measure_precision,
    numeric_diff,
    read_manifest,
    read_trajectory_file,
    run_snapshots,
    stored_checkpoint,
    stored_metrics,
    trajectory_schedule,
    trajectory_tensors,
)

if TYPE_CHECKING:  # torch is imported where weights are read: listing the zoo and its manifests needs none
    from hooked_clip1d.analysis.dynamics import Emergence
    from hooked_clip1d.model.clip import CLIP1D

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
TRAJECTORIES_DIR = Path(__file__).resolve().parent / "trajectories"  # shipped training trajectories


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def list_pretrained() -> list[str]:
    """Names of the shipped models."""
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.json") if (WEIGHTS_DIR / f"{p.stem}.safetensors").exists())


def manifest(name: str) -> dict[str, Any]:
    """The manifest of a shipped model (see the module docstring)."""
    known = list_pretrained()
    if name not in known:
        hint = ""
        if Path(name).exists() or str(name).endswith(".safetensors"):  # a path, not a name
            hint = (
                f"; {name!r} is a path: load a model file or run directory with "
                f"`from hooked_clip1d import resolve_model; resolve_model({name!r})`"
            )
        raise UnknownNameError(f"unknown pretrained model {name!r}{hint}; known models: {known}")
    path = WEIGHTS_DIR / f"{name}.json"
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not valid JSON (corrupt file?): {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not a JSON object")
    return d


def resolve_model(
    spec: str | os.PathLike, checkpoint_index: int | None = None, checkpoint_value: int | None = None
) -> CLIP1D:
    """The model a command line names: a shipped model's name, a ``.safetensors`` model file, or a training run
    directory (its ``model.safetensors``, else its latest ``checkpoint.safetensors``). Every command uses this.

    ``checkpoint_index`` / ``checkpoint_value`` (an epoch) pick a checkpoint of a shipped model's trajectory or of a
    run directory's ``snapshots/`` (``list_checkpoints(spec)``); a model file has none.

    Example:
        >>> resolve_model("simplified-ntot20-n2-10").cfg.n_labels
        20
    """
    from hooked_clip1d.model.checkpoint import load_model_file

    if checkpoint_index is not None or checkpoint_value is not None:
        if Path(spec).is_file():
            raise ValueError(
                f"{str(spec)!r} is one model file, with no checkpoints: give a shipped model with a trajectory "
                f"({', '.join(list_trajectories()) or 'none yet'}) or a run directory with snapshots/"
            )
        if not Path(spec).is_dir() and str(spec) not in list_pretrained():
            known = list_pretrained()
            raise ValueError(f"{str(spec)!r} is neither a run directory nor a pretrained model; known: {known}")
        return load_checkpoint(spec, checkpoint_index, checkpoint_value)
    p = Path(spec)
    if p.is_dir():
        p = p / "model.safetensors" if (p / "model.safetensors").exists() else p / "checkpoint.safetensors"
    if p.suffix == ".safetensors" or p.exists():
        return load_model_file(p)
    if str(spec) in list_pretrained():
        return load_model(str(spec))
    raise ValueError(f"{str(spec)!r} is neither a file nor a pretrained model; known models: {list_pretrained()}")


def model_name(model: CLIP1D, default: str = "custom model") -> str:
    """The shipped name of a model loaded with ``load_model``, else ``default``; a checkpoint before the last of a
    trajectory is named with its epoch (``"NAME @ epoch 100"``).

    Example:
        >>> model_name(load_model("simplified-ntot20-n2-10"))
        'simplified-ntot20-n2-10'
    """
    man = getattr(model, "manifest", None)
    if not (isinstance(man, dict) and "name" in man):
        return default
    ck = man.get("checkpoint")
    return f"{man['name']} @ epoch {ck['epoch']}" if isinstance(ck, dict) and not ck.get("final") else man["name"]


def load_model(
    name: str = DEFAULT_MODEL,
    device: str = "cpu",
    checkpoint_index: int | None = None,
    checkpoint_value: int | None = None,
) -> CLIP1D:
    """Load a shipped model in eval mode, offline, with ``.data_config`` and ``.manifest`` attached.

    ``checkpoint_index`` (a position in ``list_checkpoints(name)``, negative from the end) or ``checkpoint_value``
    (an epoch) loads a checkpoint of the model's training trajectory instead, as TransformerLens's
    ``from_pretrained`` does (``load_checkpoint``); the last is the shipped model itself.

    Raises ``KeyError`` listing the known names for an unknown name, ``NoTrajectoryError`` (a ``ValueError``)
    listing what exists for a model without a trajectory or a checkpoint it does not have, and ``CheckpointError``
    if the weights do not match the manifest's sha256.
    """
    from hooked_clip1d.model.checkpoint import CheckpointError, load_model_file

    if checkpoint_index is not None or checkpoint_value is not None:
        return load_checkpoint(name, checkpoint_index, checkpoint_value, device=device)
    man = manifest(name)
    path = WEIGHTS_DIR / f"{name}.safetensors"
    digest = sha256_file(path)
    if digest != man.get("sha256"):
        raise CheckpointError(f"pretrained {name!r}: weights sha256 {digest} does not match the manifest")
    model = load_model_file(path).to(device)
    model.manifest = man
    return model


HISTORY_KEYS = ("epoch", "step", "loss", "single", "seen", "unseen", "unseen_label_set")


def read_history(metrics_path: str | Path, max_epoch: int | None = None) -> dict[str, list[int | float | None]]:
    """The training curve of a run's ``metrics.jsonl`` as columns ``HISTORY_KEYS`` (for Fig. 11-style plots).

    Lines past ``max_epoch`` (written before a resume rewound the run) are dropped; a later line for the same
    epoch replaces an earlier one.

    Example:
        >>> h = manifest("simplified-ntot20-n2-10")["history"]
        >>> h["epoch"][-1], len(h["epoch"]) == len(h["unseen"])
        (10000, True)
    """
    rows: dict[int, dict[str, float | None]] = {}
    path = Path(metrics_path)
    if not path.exists():
        return {k: [] for k in HISTORY_KEYS}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if max_epoch is not None and r["epoch"] > max_epoch:
            continue
        ev = r.get("eval", {})
        rows[r["epoch"]] = {
            "epoch": r["epoch"],
            "step": r["step"],
            "loss": r.get("loss"),
            "single": ev.get("val_single", {}).get("acc"),
            "seen": ev.get("val_seen", {}).get("acc"),
            "unseen": ev.get("val_unseen", {}).get("acc"),
            "unseen_label_set": ev.get("val_unseen", {}).get("label_set"),
        }
    ordered = [rows[e] for e in sorted(rows)]
    return {k: [r[k] for r in ordered] for k in HISTORY_KEYS}


def export_run(
    run_dir: str | Path,
    name: str,
    description: str,
    dest: str | Path | None = None,
    weights_dtype: str = "float32",
) -> Path:
    """Ship a training run (``train`` output) as pretrained model ``name``: weights-only file plus manifest.

    The manifest's accuracies are measured here, on the exported weights: with ``weights_dtype="float16"`` (half
    the file, for the larger models) on the rounded ones. A run that has not finished is shipped from its latest
    ``checkpoint.safetensors``; the manifest then records the epochs actually trained. ``dest`` defaults to the
    package's ``WEIGHTS_DIR``.
    """
    from hooked_clip1d.training.rundir import RunLock, is_run_dir

    run_dir, dest = Path(run_dir), Path(dest) if dest is not None else WEIGHTS_DIR
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise ValueError(f"model name {name!r} must be a plain identifier (letters, digits, '_', '-', '.')")
    if not (run_dir / "config.json").exists():
        raise FileNotFoundError(f"{run_dir / 'config.json'} is missing: is {run_dir} a training run directory?")
    if not is_run_dir(run_dir):
        raise ValueError(f"{str(run_dir / 'config.json')!r} is not a hooked_clip1d run config (foreign folder?)")
    with RunLock(run_dir, "run directory"):  # a run still training there is refused, not exported half-way
        return _export_locked(run_dir, name, description, dest, weights_dtype)


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
    from hooked_clip1d.files import atomic_write_text
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
    atomic_write_text(dest / f"{name}.json", json.dumps(man, indent=2) + "\n")
    return target


def registry_table() -> str:
    """Markdown table of the shipped models and their measured accuracies (the table of docs/zoo.md)."""
    rows = [
        "| name | description | epochs (planned) | train time "
        "| single-object | seen-pair | unseen-pair | unseen label-set |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in list_pretrained():
        m = manifest(name)
        acc = m["metrics"]
        rows.append(
            f"| `{name}` | {m['description']} | {m['epochs']} ({m['epochs_planned']}) | "
            f"{m['train_seconds'] / 60:.0f} min | {acc['val_single']['acc']:.3f} | {acc['val_seen']['acc']:.3f} | "
            f"{acc['val_unseen']['acc']:.3f} | {acc['val_unseen']['label_set']:.3f} |"
        )
    return "\n".join(rows)


# ---- training trajectories ------------------------------------------------------------------------------------------
def list_trajectories() -> list[str]:
    """Names of the shipped models that ship a training trajectory (``hooked-clip1d list`` marks them).

    Example:
        >>> set(list_trajectories()) <= set(list_pretrained())
        True
    """
    d = Path(TRAJECTORIES_DIR)
    return sorted(p.stem for p in d.glob("*.json") if (d / f"{p.stem}.safetensors").exists())


def trajectory_manifest(name: str) -> dict[str, Any]:
    """The trajectory manifest of shipped model ``name`` (``pretrained.trajectories`` describes it).

    Raises ``KeyError`` (listing the zoo) for an unknown name and ``NoTrajectoryError`` (listing the models with a
    trajectory) for a model that ships none.
    """
    manifest(name)  # an unknown name: KeyError listing the zoo
    known = list_trajectories()
    if name not in known:
        have = ", ".join(known) if known else "none yet"
        raise NoTrajectoryError(f"{name!r} ships no training trajectory; models with one: {have}")
    return read_manifest(Path(TRAJECTORIES_DIR) / f"{name}.json")


def _snapshot_dir(spec: str | os.PathLike) -> bool:
    return Path(spec).is_dir()


def list_checkpoints(name: str | os.PathLike) -> list[int]:
    """The epochs of a trajectory, in order: of shipped model ``name`` (TransformerLens's checkpoint labels; the last
    is the shipped model) or of a run directory's ``snapshots/``. ``load_model(name, checkpoint_index=i)`` loads
    ``list_checkpoints(name)[i]``, ``checkpoint_value=e`` the checkpoint at epoch ``e``.

    Example:
        >>> list_checkpoints("simplified-ntot20-n2-10")[:3]  # doctest: +SKIP
        [0, 1, 2]
    """
    if _snapshot_dir(name):
        epochs = list(run_snapshots(name))
        if not epochs:
            raise NoTrajectoryError(
                f"{str(name)!r} is a folder without snapshots/: a run keeps a trajectory when trained with "
                "TrainConfig.snapshot_epochs (e.g. settings.dense_schedule(epochs))"
            )
        return epochs
    return [int(e) for e in trajectory_manifest(str(name))["epochs"]]


def _attach_checkpoint(model: CLIP1D, name: str, man: dict[str, Any], epoch: int) -> CLIP1D:
    """Give a checkpoint the zoo manifest, with its own epoch, accuracies (measured on the stored weights) and
    history, and a ``checkpoint`` entry (index, epoch, epochs, final, dtype)."""
    base = dict(manifest(name))
    epochs = [int(e) for e in man["epochs"]]
    final = epoch == int(man["final_epoch"])
    info = {"index": epochs.index(epoch), "epoch": epoch, "epochs": epochs, "final": final}
    info["dtype"] = base.get("weights_dtype", "float32") if final else man["dtypes"][str(epoch)]
    if not final:
        measured = stored_metrics(man, epoch)
        base["metrics"] = {k: v for k, v in measured.items() if k in base["metrics"]}
        base["epochs"] = epoch
        hist = base.get("history") or {}
        if "epoch" in hist:
            keep = [i for i, e in enumerate(hist["epoch"]) if e <= epoch]
            base["history"] = {k: [v[i] for i in keep] for k, v in hist.items()}
    base["checkpoint"] = info
    model.manifest = base
    return model


def _load_checkpoints(name: str | os.PathLike, epochs: list[int], device: str) -> list[tuple[int, CLIP1D]]:
    """The checkpoints at ``epochs`` (all present) of a shipped trajectory or a run's snapshots; the trajectory file
    is read once; the caller's global RNG is left as it was."""
    import torch

    from hooked_clip1d.model.checkpoint import load_model_file

    out: list[tuple[int, CLIP1D]] = []
    with torch.random.fork_rng(devices=[]):
        if _snapshot_dir(name):
            snaps = run_snapshots(name)
            return [(e, load_model_file(snaps[e]).to(device).eval()) for e in epochs]
        name = str(name)
        man = trajectory_manifest(name)
        final = int(man["final_epoch"])
        stored = [e for e in epochs if e != final]
        if stored:
            tensors, meta = read_trajectory_file(Path(TRAJECTORIES_DIR) / man["file"], man.get("sha256"))
            for e in stored:
                digest = man["checkpoint_sha256"].get(str(e))
                model = stored_checkpoint(tensors, meta, e, digest, f"trajectory {name!r}")
                out.append((e, _attach_checkpoint(model.to(device).eval(), name, man, e)))
        if final in epochs:
            out.append((final, _attach_checkpoint(load_model(name, device=device), name, man, final)))
    return sorted(out, key=lambda c: c[0])


def load_checkpoint(
    name: str | os.PathLike,
    checkpoint_index: int | None = None,
    checkpoint_value: int | None = None,
    device: str = "cpu",
) -> CLIP1D:
    """One checkpoint of shipped model ``name`` (or of a run directory's ``snapshots/``), in eval mode with
    ``.data_config``: ``checkpoint_index`` is a position in ``list_checkpoints(name)`` (negative from the end),
    ``checkpoint_value`` an epoch. For a shipped model ``.manifest`` is the zoo manifest with this checkpoint's
    ``epochs``, ``metrics`` (measured on the stored weights) and history, plus ``checkpoint`` (index, epoch, dtype,
    final); the last checkpoint is the shipped model itself. ``load_model(name, checkpoint_index=...)`` calls this.
    """
    epoch = checkpoint_epoch(list_checkpoints(name), checkpoint_index, checkpoint_value)
    return _load_checkpoints(name, [epoch], device)[0][1]


def load_trajectory(
    name: str | os.PathLike, epochs: Sequence[int] | None = None, device: str = "cpu"
) -> list[tuple[int, CLIP1D]]:
    """Every checkpoint (or those at ``epochs``) of shipped model ``name`` or of a run directory's ``snapshots/``, as
    ``[(epoch, model), ...]`` in epoch order (models as ``load_checkpoint`` gives them; the file is read once): what
    ``analysis.dynamics.emergence`` and ``visualization.dynamics`` take.

    Example (a run directory trained with snapshots; a shipped name works the same):
        >>> import tempfile
        >>> from hooked_clip1d import CLIPConfig, DataConfig, TrainConfig, train
        >>> run = tempfile.mkdtemp()
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> tc = TrainConfig(epochs=3, batch_size=16, snapshot_epochs=(0, 1, 3))
        >>> _ = train(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), tc, run, progress=False)
        >>> list_checkpoints(run)
        [0, 1, 3]
        >>> [(epoch, model.training) for epoch, model in load_trajectory(run)]
        [(0, False), (1, False), (3, False)]
        >>> load_model(run, checkpoint_index=-1).cfg.n_labels  # load_model / resolve_model take a run too
        6
    """
    have = list_checkpoints(name)
    want = have if epochs is None else sorted({int(e) for e in epochs})
    missing = [e for e in want if e not in have]
    if missing:
        raise NoTrajectoryError(f"no checkpoint at epochs {missing}; the trajectory has epochs {have}")
    return _load_checkpoints(name, want, device)


def trajectory_emergence(
    name: str | os.PathLike, epochs: Sequence[int] | None = None, recompute: bool = False
) -> Emergence:
    """``analysis.dynamics.emergence`` of a trajectory: per checkpoint the loss, the three generalization accuracies,
    per-head P(left) / P(right), EP row std and rank correlation, the invariant ablation, the Fig. 13 share, W_QK rank
    and decay exposure, plus the first / last epoch at which each check holds (``windows``).

    For a shipped model the rows measured when it was shipped (on the stored weights) are returned, unless
    ``recompute`` (about 2 s a checkpoint for the simplified model); a run directory's rows come from
    ``analysis.dynamics.run_emergence`` (cached in the run directory). ``epochs`` keeps only those checkpoints.
    """
    from hooked_clip1d.analysis.dynamics import Emergence, check_windows, emergence, run_emergence

    if _snapshot_dir(name):
        list_checkpoints(name)  # a folder without snapshots: the error that says so
        return run_emergence(name, epochs=epochs)
    name = str(name)
    man = trajectory_manifest(name)
    have = [int(e) for e in man["epochs"]]
    want = have if epochs is None else sorted({int(e) for e in epochs})
    missing = [e for e in want if e not in have]
    if missing:
        raise NoTrajectoryError(f"no checkpoint at epochs {missing}; the trajectory has epochs {have}")
    stored = man.get("emergence", {})
    if not recompute and "rows" in stored:
        rows = [r for r in stored["rows"] if r["epoch"] in want]
        return Emergence(rows, check_windows(rows))
    if not recompute:
        why = stored.get("not_run", "no rows recorded")
        raise ValueError(f"{name!r}: the emergence analysis was not run when it was shipped: {why}")
    from hooked_clip1d.settings import TrainConfig

    train_cfg = TrainConfig.from_dict(manifest(name)["train_config"])
    return emergence(load_trajectory(name, want), train_cfg)


def ship_trajectory(
    run_dir: str | os.PathLike,
    name: str,
    epochs: Sequence[int] | None = None,
    dtypes: Sequence[str] = STORE_DTYPES,
    dest: str | os.PathLike | None = None,
    budget_mb: int | float = 25.0,
    tolerance_images: int = 0,
) -> Path:
    """Ship a finished training run's snapshots as the training trajectory of zoo model ``name``; returns the path of
    the trajectory's ``.safetensors`` (its manifest ``.json`` beside it, in ``dest``, default ``TRAJECTORIES_DIR``).

    The zoo's ``name`` must have been exported from this run (``hooked-clip1d export RUN --name NAME ...``): its
    weights must equal the run's ``model.safetensors`` at the zoo file's precision, bit for bit; the last checkpoint
    is that shipped file. ``epochs`` defaults to ``trajectory_schedule(last epoch)`` among the run's snapshots.
    Each stored checkpoint takes the first of ``dtypes`` at which its accuracies on every split equal its float32 ones
    (``trajectories.measure_precision``; recorded in the manifest); ``tolerance_images`` > 0 accepts a precision whose
    accuracies differ by at most that many images in any split (recorded too; rounding flips near-ties, e.g. in a
    left/right-symmetric plateau, where float32 on another machine may flip them as well). The emergence rows are
    measured on the stored weights and recorded, with the largest change of any of their numbers from the float32
    weights. A trajectory that would bring all shipped trajectories (in ``dest``) past ``budget_mb`` MB is refused,
    naming the sizes.
    Everything is measured before anything is written; each file is written atomically.

    Example (the command line: ``hooked-clip1d ship-trajectory RUN_DIR --name NAME``):
        >>> ship_trajectory("runs/flagship", "simplified-ntot20-n2-10")  # doctest: +SKIP
    """
    import torch

    from hooked_clip1d.analysis.dynamics import emergence
    from hooked_clip1d.analysis.mechanism import unseen_probe
    from hooked_clip1d.data.dataset import build_dataset
    from hooked_clip1d.files import atomic_write_text
    from hooked_clip1d.model.checkpoint import load_model_file, save_tensors
    from hooked_clip1d.settings import TrainConfig
    from hooked_clip1d.training.rundir import RunLock, is_run_dir

    run_dir = Path(run_dir)
    dest = Path(dest) if dest is not None else Path(TRAJECTORIES_DIR)
    zman = manifest(name)  # KeyError listing the zoo for a model not exported yet
    if [d for d in dtypes if d not in STORE_DTYPES] or not dtypes:
        raise ValueError(f"dtypes must be a non-empty list of {list(STORE_DTYPES)}, got {list(dtypes)}")
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
    with RunLock(run_dir, "run directory"), torch.random.fork_rng(devices=[]):
        config = json.loads((run_dir / "config.json").read_text())
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
        if epochs is None:
            chosen = [e for e in trajectory_schedule(last) if e in snaps]
        else:
            chosen = sorted({int(e) for e in epochs})
            late = [e for e in chosen if e > last]
            if late:
                raise ValueError(f"epochs {late} are past the run's last epoch {last}")
            missing = [e for e in chosen if e not in snaps and e != last]
            if missing:
                raise ValueError(f"the run has no snapshot at epochs {missing}; its snapshots: {list(snaps)}")
        stored = [e for e in chosen if e != last]
        if not stored:
            raise ValueError(f"a trajectory needs a checkpoint before the last epoch {last}; snapshots: {list(snaps)}")
        models = {e: load_model_file(snaps[e]) for e in stored}
        for e, m in models.items():
            if m.cfg.to_dict() != final.cfg.to_dict():
                raise ValueError(f"snapshot {snaps[e]} has another model config than the run's model.safetensors")

        ds = unseen_probe(build_dataset(final.data_config))
        kept_dtypes, kept, record = measure_precision(models, ds, dtypes, tolerance=tolerance_images)
        refused = [e for e in stored if e not in kept_dtypes]
        if refused:
            raise ValueError(
                f"no precision of {list(dtypes)} keeps the accuracies of the checkpoints at epochs {refused}: "
                "add float32 to dtypes"
            )

        # the emergence rows, on the stored weights and (to record what the rounding moved) on the float32 ones
        train_cfg = TrainConfig.from_dict(config["train_config"])
        emerg: dict[str, Any]
        try:
            em = emergence([*kept.items(), (last, shipped)], train_cfg, dataset=ds)
            moved, flipped = 0.0, []
            if any(d != "float32" for d in kept_dtypes.values()):
                em32 = emergence([*models.items(), (last, shipped)], train_cfg, dataset=ds)
                moved = max(numeric_diff(a, b) for a, b in zip(em32.rows, em.rows, strict=True))
                flipped = [
                    [a["epoch"], c] for a, b in zip(em32.rows, em.rows, strict=True) for c in a["checks"]
                    if a["checks"][c] != b["checks"].get(c)
                ]  # fmt: skip
            emerg = {**em.to_json(), "max_change_from_float32": round(moved, 6), "checks_changed_by_rounding": flipped}
        except ValueError as err:  # not the paper's simplified vision tower: no mechanism report
            emerg = {"not_run": str(err)}

        tensors, digests = trajectory_tensors(kept, kept_dtypes)
        digests[str(last)] = zman["sha256"]  # the last checkpoint: the shipped weights file
        epochs_all = [*stored, last]
        dtype_map = {str(e): kept_dtypes[e] for e in stored}
        meta = {
            "model_config": config["model_config"],
            "data_config": config["data_config"],
            "train_config": config["train_config"],
            "trajectory": {"name": name, "epochs": epochs_all, "final_epoch": last, "dtypes": dtype_map},
        }
        target = dest / f"{name}.safetensors"
        pending = dest / f".{name}.pending.safetensors"  # checked against the budget before it replaces anything
        save_tensors(pending, tensors, meta)
        try:
            man = {
                "format": MANIFEST_FORMAT,
                "name": name,
                "epochs": epochs_all,
                "final_epoch": last,
                "final": f"weights/{name}.safetensors (the shipped model, sha256 {zman['sha256']})",
                "dtype": dtype_summary(kept_dtypes),
                "dtypes": dtype_map,
                "file": target.name,
                "sha256": sha256_file(pending),
                "bytes": pending.stat().st_size,
                "checkpoint_sha256": digests,
                "chance": round(1.0 / len(ds.captions), 6),
                "precision": {
                    "method": PRECISION_METHOD,
                    "candidates": list(dtypes),
                    "tolerance_images": tolerance_images,
                    "checkpoints": record,
                },
                "emergence": emerg,
                "source": {
                    "run": portable_command(str(run_dir.resolve())),
                    "command": portable_command(config["provenance"]["command"]),
                    "snapshots": list(snaps),
                },
            }
            text = json.dumps(man, indent=2) + "\n"
            size = man["bytes"] + len(text.encode())
            present = [p for p in dest.glob("*") if p.is_file() and p.stem != name and not p.name.startswith(".")]
            others = sum(p.stat().st_size for p in present)
            if others + size > budget_mb * 1e6:
                raise ValueError(
                    f"shipping {name!r} ({size / 1e6:.1f} MB, {dtype_summary(kept_dtypes)}) would bring the "
                    f"trajectories in {str(dest)!r} to {(others + size) / 1e6:.1f} MB, past the budget of "
                    f"{budget_mb} MB (the others: {others / 1e6:.1f} MB): ship fewer checkpoints (--epochs) or "
                    "raise the budget (--budget-mb)"
                )
            os.replace(pending, target)
        finally:
            if pending.exists():
                pending.unlink()
        atomic_write_text(dest / f"{name}.json", text)
    return target


def trajectory_table() -> str:
    """Markdown table of the shipped trajectories and what each adds to the package (the second table of
    docs/zoo.md; ``hooked-clip1d list --markdown`` prints it).

    Example:
        >>> trajectory_table().splitlines()[0]
        '| model | checkpoints | epochs | stored as | added size | unseen-pair accuracy at epoch 0 -> last |'
    """
    rows = [
        "| model | checkpoints | epochs | stored as | added size | unseen-pair accuracy at epoch 0 -> last |",
        "|---|---|---|---|---|---|",
    ]
    total = 0
    for name in list_trajectories():
        m = trajectory_manifest(name)
        ep = m["epochs"]
        first = stored_metrics(m, ep[0])["val_unseen"]["acc"]
        last = manifest(name)["metrics"]["val_unseen"]["acc"]
        size = m["bytes"] + (Path(TRAJECTORIES_DIR) / f"{name}.json").stat().st_size
        total += size
        shown = ", ".join(map(str, ep)) if len(ep) <= 4 else f"{ep[0]}, {ep[1]}, {ep[2]}, ..., {ep[-1]}"
        rows.append(
            f"| `{name}` | {len(ep)} | {shown} | {m['dtype']}; the last: the shipped model | {size / 1e6:.1f} MB | "
            f"{first:.2f} -> {last:.2f} |"
        )
    if len(rows) == 2:
        rows.append("| (none shipped yet) | | | | 0 MB | |")
    else:
        rows.append(f"| all | | | | {total / 1e6:.1f} MB | |")
    return "\n".join(rows)


__all__ = [
    "DEFAULT_MODEL",
    "NoTrajectoryError",
    "TRAJECTORIES_DIR",
    "WEIGHTS_DIR",
    "checkpoint_epoch",
    "export_run",
    "list_checkpoints",
    "list_pretrained",
    "list_trajectories",
    "load_checkpoint",
    "load_model",
    "load_trajectory",
    "manifest",
    "model_name",
    "portable_command",
    "read_history",
    "registry_table",
    "resolve_model",
    "sha256_file",
    "ship_trajectory",
    "trajectory_emergence",
    "trajectory_manifest",
    "trajectory_schedule",
    "trajectory_table",
]
