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

The modules: ``zoo`` (the shipped files: names, manifests, weights; its ``WEIGHTS_DIR`` / ``TRAJECTORIES_DIR`` are
the folders read), ``checkpoints`` (trajectories and a run's snapshots, read), ``trajectories`` (their file format),
``ship`` (the writing side: releases exported and measured; ``ship_measure``: what it reads and measures before
writing), ``circuit_files`` (the ground-truth circuits). This
module re-exports the reading side and adds the two entry points that dispatch between them, ``load_model`` and
``resolve_model``.

Example:
    >>> from hooked_clip1d import list_pretrained, load_model
    >>> "simplified-ntot20-n2-10" in list_pretrained()
    True
    >>> model = load_model("simplified-ntot20-n2-10")
    >>> model.data_config.n_labels, model.training
    (20, False)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hooked_clip1d._version import DEFAULT_MODEL as DEFAULT_MODEL
from hooked_clip1d.files import UnknownNameError  # defined torch-free, for the CLI's parser
from hooked_clip1d.pretrained.checkpoints import (  # the trajectories and run snapshots, as TransformerLens loads them
    get_checkpoint_labels,
    list_checkpoints,
    list_trajectories,
    load_checkpoint,
    load_trajectory,
    trajectory_accuracies,
    trajectory_emergence,
    trajectory_manifest,
    trajectory_table,
    update_zoo_tables,
)
from hooked_clip1d.pretrained.trajectories import (  # the trajectories' file format (torch-free at import)
    NoTrajectoryError,
    StaleTrajectoryError,
    checkpoint_epoch,
    trajectory_schedule,
    unpack_xz,
)
from hooked_clip1d.pretrained.zoo import (  # the shipped files: names, manifests, weights
    HISTORY_KEYS,
    TRAJECTORIES_DIR,
    WEIGHTS_DIR,
    WEIGHTS_SUFFIXES,
    list_pretrained,
    load_shipped,
    manifest,
    model_name,
    names_a_path,
    read_history,
    registry_table,
    sha256_file,
    weights_file,
)

if TYPE_CHECKING:  # torch is imported where weights are read: listing the zoo and its manifests needs none
    from hooked_clip1d.model.clip import CLIP1D


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
    if checkpoint_index is not None or checkpoint_value is not None:
        return load_checkpoint(name, checkpoint_index, checkpoint_value, device=device)
    if names_a_path(name) and Path(name).exists():
        return resolve_model(name).to(device)  # a run directory or a model file, as with a checkpoint above
    return load_shipped(str(name), device)


__all__ = [
    "DEFAULT_MODEL",
    "HISTORY_KEYS",
    "UnknownNameError",
    "load_shipped",
    "names_a_path",
    "NoTrajectoryError",
    "StaleTrajectoryError",
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
    "trajectory_accuracies",
    "trajectory_emergence",
    "trajectory_manifest",
    "trajectory_schedule",
    "trajectory_table",
    "update_zoo_tables",
]
