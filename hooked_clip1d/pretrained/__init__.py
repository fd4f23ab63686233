"""Pretrained registry: models trained by this package, shipped as package data, loaded offline.

Each model is two files in ``hooked_clip1d/pretrained/weights/``: its weights, ``<name>.safetensors`` (weights +
configs, see ``hooked_clip1d.model.checkpoint``) or the same file xz-compressed, ``<name>.safetensors.xz`` (``xz -d``
gives the plain file; ~0.78 of its bytes for float32 weights), and ``<name>.json``, its manifest: description,
configs, the exact training command, seed, epochs, steps, training time, the accuracies measured on its dataset, the
sha256 and size of the safetensors bytes (``packed``: the compressed file's, where compressed) and provenance (git
commit, versions). ``load_model`` checks the sha256 before loading.

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

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hooked_clip1d._version import DEFAULT_MODEL as DEFAULT_MODEL
from hooked_clip1d.files import UnknownNameError  # defined torch-free, for the CLI's parser
from hooked_clip1d.pretrained.trajectories import (  # the trajectories' file format (torch-free at import)
    CheckpointLabels,
    NoTrajectoryError,
    checkpoint_epoch,
    file_sha256,
    incomplete_trajectory,
    read_manifest,
    read_trajectory,
    run_snapshots,
    set_checkpoint_fields,
    stored_checkpoint,
    stored_metrics,
    trajectory_file,
    trajectory_schedule,
    unpack_xz,
)
from hooked_clip1d.settings.checks import check_int_list

if TYPE_CHECKING:  # torch is imported where weights are read: listing the zoo and its manifests needs none
    from hooked_clip1d.analysis.mechanism.dynamics import Emergence
    from hooked_clip1d.model.clip import CLIP1D

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
TRAJECTORIES_DIR = Path(__file__).resolve().parent / "trajectories"  # shipped training trajectories


sha256_file = file_sha256  # one implementation (pretrained.trajectories); the registry's public name kept


WEIGHTS_SUFFIXES = (".safetensors", ".safetensors.xz")  # a zoo model's weights: plain or xz-compressed


def weights_file(name: str) -> Path | None:
    """The weights file of shipped model ``name`` in ``WEIGHTS_DIR`` (``<name>.safetensors`` or
    ``<name>.safetensors.xz``), or None if it has neither; both at once is an error naming them.

    Example:
        >>> weights_file("simplified-ntot20-n2-10").name
        'simplified-ntot20-n2-10.safetensors.xz'
    """
    found = [WEIGHTS_DIR / f"{name}{s}" for s in WEIGHTS_SUFFIXES if (WEIGHTS_DIR / f"{name}{s}").is_file()]
    if len(found) > 1:
        raise ValueError(f"pretrained {name!r} has two weights files, {found[0].name} and {found[1].name}: keep one")
    return found[0] if found else None


def _unpacked_weights(name: str, path: Path) -> bytes:
    """A compressed weights file's bytes, unpacked once per process while the file is unchanged (unpacking costs
    ~0.1 s for a simplified model, ~0.3 s for the full one; the tests load the zoo's models hundreds of times)."""
    st = path.stat()
    return _unpack_cached(str(path), st.st_mtime_ns, st.st_size, name)


@functools.lru_cache(maxsize=32)  # the zoo's 25 models: ~19 MB unpacked
def _unpack_cached(path: str, mtime_ns: int, size: int, name: str) -> bytes:
    return unpack_xz(path, f"pretrained {name!r}: weights file")


def list_pretrained() -> list[str]:
    """Names of the shipped models."""
    return sorted(p.stem for p in WEIGHTS_DIR.glob("*.json") if weights_file(p.stem) is not None)


def manifest(name: str) -> dict[str, Any]:
    """The manifest of a shipped model (see the module docstring)."""
    known = list_pretrained()
    if name not in known:
        hint = ""
        if Path(name).exists():  # a path, not a name
            hint = (
                f"; {name!r} is a path: load a model file or run directory with load_model({name!r}) or "
                f"`from hooked_clip1d import resolve_model; resolve_model({name!r})`"
            )
        elif str(name).endswith(".safetensors") or os.sep in str(name):
            hint = f"; {name!r} looks like a path, but no such file or directory exists"
        raise UnknownNameError(f"unknown pretrained model {name!r}{hint}; known models: {known}")
    path = WEIGHTS_DIR / f"{name}.json"
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not valid JSON (corrupt file?): {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"the manifest {str(path)!r} of {name!r} is not a JSON object")
    return d


def _planned_epochs(path: Path) -> int | None:
    """The planned epochs in a model or checkpoint file's metadata (its header only), or None."""
    if not path.exists():
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            return int(json.loads((f.metadata() or {})["train_config"])["epochs"])
    except Exception:  # noqa: BLE001 (a file without the field, or unreadable: the load below says what is wrong)
        return None


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

    if not names_a_path(spec):  # a shipped model's name (refused if a path here has it too)
        return load_model(spec, checkpoint_index=checkpoint_index, checkpoint_value=checkpoint_value)
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
        final, latest = p / "model.safetensors", p / "checkpoint.safetensors"
        planned = [_planned_epochs(f) for f in (final, latest)]
        if None not in planned and planned[0] != planned[1]:
            import warnings

            warnings.warn(  # a finished run being extended (--resume with more epochs): its model is the old end
                f"{str(spec)!r}: its model.safetensors ends a run of {planned[0]} epochs, its checkpoint.safetensors "
                f"belongs to a run of {planned[1]} (the run was resumed with more epochs): loading model.safetensors; "
                f"give {str(latest)!r} for the latest state",
                stacklevel=2,
            )
        p = final if final.exists() else latest
        if not p.exists():
            from hooked_clip1d.model.checkpoint import CheckpointError

            raise CheckpointError(
                f"{str(spec)!r} is a directory without model.safetensors or checkpoint.safetensors: not a training "
                "run directory (or its run has not saved a checkpoint yet)"
            )
    if p.name.endswith(".safetensors.xz") and p.is_file():  # what export_run writes (compress=True)
        from hooked_clip1d.model.checkpoint import build_model_from, read_tensors_bytes

        data = unpack_xz(p, "model file")
        return build_model_from(*read_tensors_bytes(data, str(p)), repr(str(p)))
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
    name: str | os.PathLike = DEFAULT_MODEL,
    device: str = "cpu",
    checkpoint_index: int | None = None,
    checkpoint_value: int | None = None,
) -> CLIP1D:
    """Load a shipped model in eval mode, offline, with ``.data_config`` and ``.manifest`` attached.

    ``checkpoint_index`` (a position in ``list_checkpoints(name)``, negative from the end) or ``checkpoint_value``
    (an epoch) loads a checkpoint of the model's training trajectory instead, as TransformerLens's
    ``from_pretrained`` does (``load_checkpoint``); the last is the shipped model itself. ``name`` may also be a
    training run directory or a ``.safetensors`` model file (``resolve_model``'s rules), with or without a checkpoint.

    Raises ``KeyError`` listing the known names for an unknown name, ``NoTrajectoryError`` (a ``ValueError``)
    listing what exists for a model without a trajectory or a checkpoint it does not have, and ``CheckpointError``
    if the weights do not match the manifest's sha256.
    """
    from hooked_clip1d.model.checkpoint import CheckpointError, build_model_from, load_model_file, read_tensors_bytes

    if checkpoint_index is not None or checkpoint_value is not None:
        return load_checkpoint(name, checkpoint_index, checkpoint_value, device=device)
    if names_a_path(name) and Path(name).exists():
        return resolve_model(name).to(device)  # a run directory or a model file, as with a checkpoint above
    name = str(name)
    man = manifest(name)
    path = weights_file(name)
    assert path is not None  # manifest() lists only names with weights
    data = _unpacked_weights(name, path) if path.suffix == ".xz" else None
    digest = sha256_file(path) if data is None else hashlib.sha256(data).hexdigest()  # of the safetensors bytes
    if digest != man.get("sha256"):
        raise CheckpointError(f"pretrained {name!r}: weights sha256 {digest} does not match the manifest")
    if data is None:
        model = load_model_file(path)
    else:
        model = build_model_from(*read_tensors_bytes(data, str(path)), repr(str(path)))
    model = model.to(device)
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
    return sorted(p.stem for p in d.glob("*.json") if trajectory_file(d, p.stem).exists())


def trajectory_manifest(name: str) -> dict[str, Any]:
    """The trajectory manifest of shipped model ``name`` (``pretrained.trajectories`` describes it).

    Raises ``KeyError`` (listing the zoo) for an unknown name and ``NoTrajectoryError`` (listing the models with a
    trajectory) for a model that ships none.
    """
    manifest(name)  # an unknown name: KeyError listing the zoo
    known = list_trajectories()
    if name not in known:
        half = incomplete_trajectory(TRAJECTORIES_DIR, name)
        if half:  # a deleted file is not "ships no trajectory"
            raise FileNotFoundError(half)
        have = ", ".join(known) if known else "none yet"
        raise NoTrajectoryError(f"{name!r} ships no training trajectory; models with one: {have}")
    return read_manifest(Path(TRAJECTORIES_DIR) / f"{name}.json")


def names_a_path(spec: str | os.PathLike) -> bool:
    """Whether ``spec`` names a file or folder rather than a shipped model: a ``Path`` always; a string unless it is a
    shipped model's name. A string that is both a shipped name and a path here is refused (``load_model`` read the
    zoo's model and ``resolve_model`` the folder, so one name loaded two models): give the folder as ``./NAME`` or a
    ``Path``.

    Example:
        >>> names_a_path("simplified-ntot20-n2-10"), names_a_path("runs/my-run")
        (False, True)
    """
    if not isinstance(spec, str):
        return True
    if spec in list_pretrained():
        if Path(spec).exists():
            raise ValueError(
                f"{spec!r} names both a shipped model and {'a folder' if Path(spec).is_dir() else 'a file'} here "
                f"({str(Path(spec).resolve())!r}): give the folder as './{spec}' (or a Path), or rename it, to say "
                "which"
            )
        return False
    return True


def _snapshot_dir(spec: str | os.PathLike) -> bool:
    return names_a_path(spec) and Path(spec).is_dir()


def list_checkpoints(name: str | os.PathLike) -> CheckpointLabels:
    """The epochs of a trajectory, in order: of shipped model ``name`` (TransformerLens's checkpoint labels; the last
    is the shipped model) or of a run directory's ``snapshots/``. ``load_model(name, checkpoint_index=i)`` loads
    ``list_checkpoints(name)[i]``, ``checkpoint_value=e`` the checkpoint at epoch ``e``. A list of ints that also
    carries ``.label_type`` (``"epoch"``); ``get_checkpoint_labels`` gives TransformerLens's ``(labels, type)``.

    Example:
        >>> list_checkpoints("simplified-ntot20-n2-10")[:3]  # doctest: +SKIP
        [0, 1, 5]
    """
    if _snapshot_dir(name):
        epochs = list(run_snapshots(name))
        if not epochs:
            raise NoTrajectoryError(
                f"{str(name)!r} is a folder without snapshots/: a run keeps a trajectory when trained with "
                "TrainConfig.snapshot_epochs (e.g. settings.dense_schedule(epochs))"
            )
        return CheckpointLabels(epochs)
    return CheckpointLabels(int(e) for e in trajectory_manifest(str(name))["epochs"])


def get_checkpoint_labels(name: str | os.PathLike) -> tuple[list[int], str]:
    """TransformerLens's ``get_checkpoint_labels``: ``(labels, label_type)`` of a trajectory, here its epochs and
    ``"epoch"`` (``list_checkpoints(name).with_type()``).

    Example:
        >>> labels, label_type = get_checkpoint_labels("simplified-ntot20-n2-10")
        >>> labels[:3], label_type
        ([0, 1, 5], 'epoch')
    """
    return list_checkpoints(name).with_type()


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
    set_checkpoint_fields(model, epochs, epoch)  # TransformerLens's names, on the config as its cfg carries them
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
            run_cfg = Path(name) / "config.json"
            saved = json.loads(run_cfg.read_text()) if run_cfg.is_file() else None
            for e in epochs:
                check_snapshot(snaps[e], e, saved)
                model = load_model_file(snaps[e]).to(device).eval()
                have = list(snaps)
                info = {"index": have.index(e), "epoch": e, "epochs": have, "final": e == have[-1]}
                model.manifest = {"name": str(name), "epochs": e, "checkpoint": info}
                set_checkpoint_fields(model, have, e)  # TransformerLens's names, on the config as its cfg has them
                out.append((e, model))
            return out
        name = str(name)
        man = trajectory_manifest(name)
        final = int(man["final_epoch"])
        stored = [e for e in epochs if e != final]
        if stored:
            tensors, meta = read_trajectory(TRAJECTORIES_DIR, man)
            for e in stored:
                digest = man["checkpoint_sha256"].get(str(e))
                model = stored_checkpoint(tensors, meta, e, digest, f"trajectory {name!r}")
                out.append((e, _attach_checkpoint(model.to(device).eval(), name, man, e)))
        if final in epochs:
            out.append((final, _attach_checkpoint(load_model(name, device=device), name, man, final)))
    return sorted(out, key=lambda c: c[0])


def check_snapshot(path: Path, epoch: int, run_config: dict[str, Any] | None) -> None:
    """Refuse a run's snapshot file whose own metadata disagrees with where it lies: another epoch's weights copied
    under this epoch's name, or a file from another run (its model or data config, init seeds included, differ from
    the run's ``config.json``). ``CheckpointError`` names the file and the disagreement."""
    from hooked_clip1d.model.checkpoint import CheckpointError, read_tensors

    meta = read_tensors(path)[1]
    own = meta.get("epoch")
    if own is not None and int(own) != int(epoch):
        raise CheckpointError(
            f"{str(path)!r} is labelled epoch {epoch} by its name but holds the weights of epoch {own}"
        )
    if run_config is not None:
        for key in ("model_config", "data_config"):
            if key in meta and key in run_config and meta[key] != run_config[key]:
                raise CheckpointError(
                    f"{str(path)!r} is not a snapshot of this run: its {key} differs from the run's config.json"
                )


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
    ``analysis.mechanism.dynamics.emergence`` and ``visualization.dynamics`` take.

    Example (a run directory trained with snapshots; a shipped name works the same):
        >>> import tempfile
        >>> from hooked_clip1d import CLIPConfig, DataConfig, RunConfig, TrainConfig, train
        >>> run = tempfile.mkdtemp()
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> tc = TrainConfig(epochs=3, batch_size=16, snapshot_epochs=(0, 1, 3))
        >>> _ = train(RunConfig(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), tc), run, progress=False)
        >>> list_checkpoints(run)
        [0, 1, 3]
        >>> [(epoch, model.training) for epoch, model in load_trajectory(run)]
        [(0, False), (1, False), (3, False)]
        >>> load_model(run, checkpoint_index=-1).cfg.n_labels  # load_model / resolve_model take a run too
        6
    """
    have = list_checkpoints(name)
    want = have if epochs is None else check_int_list(epochs, "load_trajectory: epochs")
    missing = [e for e in want if e not in have]
    if missing:
        raise NoTrajectoryError(f"no checkpoint at epochs {missing}; the trajectory has epochs {have}")
    return _load_checkpoints(name, want, device)


def trajectory_emergence(
    name: str | os.PathLike, epochs: Sequence[int] | None = None, recompute: bool = False
) -> Emergence:
    """``analysis.mechanism.dynamics.emergence`` of a trajectory: per checkpoint the loss, the three generalization
    accuracies,
    per-head P(left) / P(right), EP row std and rank correlation, the invariant ablation, the Fig. 13 share, W_QK rank
    and decay exposure, plus the first / last epoch at which each check holds (``windows``).

    For a shipped model the rows measured when it was shipped (on the stored weights) are returned, unless
    ``recompute`` (about 2 s a checkpoint for the simplified model); a run directory's rows come from
    ``analysis.mechanism.dynamics.run_emergence`` (cached in the run directory). ``epochs`` keeps only those
    checkpoints.
    """
    from hooked_clip1d.analysis.mechanism.dynamics import Emergence, check_windows, emergence, run_emergence

    if epochs is not None:
        epochs = check_int_list(epochs, "trajectory_emergence: epochs")
    if _snapshot_dir(name):
        list_checkpoints(name)  # a folder without snapshots: the error that says so
        return run_emergence(name, epochs=epochs)
    name = str(name)
    man = trajectory_manifest(name)
    have = [int(e) for e in man["epochs"]]
    want = have if epochs is None else epochs
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
    from hooked_clip1d.analysis.mechanism.dynamics import ROW_VERSION

    # the stored weights do not change: a process measures them once (the invariance audit reruns a figure that
    # reads the trajectory seven times), keyed by their digests and the rows' version
    from hooked_clip1d.files import measure_once
    from hooked_clip1d.settings import TrainConfig

    key = ("trajectory_emergence", name, tuple(want), json.dumps(man.get("checkpoint_sha256", {}), sort_keys=True))
    train_cfg = TrainConfig.from_dict(manifest(name)["train_config"])
    return measure_once((*key, ROW_VERSION), lambda: emergence(load_trajectory(name, want), train_cfg))


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


# the writing side (``export_run``, ``ship_trajectory``, ``portable_command``) is ``hooked_clip1d.pretrained.ship``:
# it reads this module, so this module does not re-export it (no circle; one import path per name)


__all__ = [
    "DEFAULT_MODEL",
    "NoTrajectoryError",
    "TRAJECTORIES_DIR",
    "WEIGHTS_DIR",
    "WEIGHTS_SUFFIXES",
    "weights_file",
    "checkpoint_epoch",
    "list_checkpoints",
    "list_pretrained",
    "list_trajectories",
    "get_checkpoint_labels",
    "load_checkpoint",
    "load_model",
    "load_trajectory",
    "manifest",
    "model_name",
    "read_history",
    "registry_table",
    "resolve_model",
    "sha256_file",
    "trajectory_emergence",
    "trajectory_manifest",
    "trajectory_schedule",
    "trajectory_table",
]
