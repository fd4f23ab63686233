"""The zoo's training trajectories and a run's snapshots, loaded as TransformerLens loads checkpoints.

``list_checkpoints`` gives a trajectory's epochs (TransformerLens's checkpoint labels), ``load_checkpoint`` one of
them (``load_model(name, checkpoint_index=i)`` / ``checkpoint_value=epoch`` call it), ``load_trajectory`` all of
them and ``trajectory_emergence`` how the mechanism forms along them; each takes a shipped model's name or a training
run directory with ``snapshots/``. The file format is ``pretrained.trajectories``; the writing side
``pretrained.ship``. Everything here is re-exported by ``hooked_clip1d.pretrained``.

Example:
    >>> from hooked_clip1d.pretrained import list_checkpoints, load_checkpoint
    >>> labels = list_checkpoints("simplified-ntot20-n2-10")
    >>> load_checkpoint("simplified-ntot20-n2-10", checkpoint_index=0).manifest["checkpoint"]["epoch"] == labels[0]
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hooked_clip1d.pretrained.zoo as zoo  # its TRAJECTORIES_DIR read at call time (tests move it)
from hooked_clip1d.pretrained.precision import is_accuracy, snapshot_metrics, stored_metrics
from hooked_clip1d.pretrained.trajectories import (  # the trajectories' file format (torch-free at import)
    CheckpointLabels,
    NoTrajectoryError,
    StaleTrajectoryError,
    checkpoint_epoch,
    incomplete_trajectory,
    read_manifest,
    read_trajectory,
    run_snapshots,
    set_checkpoint_fields,
    stored_checkpoint,
    trajectory_file,
)
from hooked_clip1d.settings.checks import check_int_list

if TYPE_CHECKING:
    from hooked_clip1d.analysis.mechanism.dynamics import Emergence
    from hooked_clip1d.model.clip import CLIP1D


def list_trajectories() -> list[str]:
    """Names of the shipped models that ship a training trajectory (``hooked-clip1d list`` marks them).

    Example:
        >>> set(list_trajectories()) <= set(zoo.list_pretrained())
        True
    """
    d = Path(zoo.TRAJECTORIES_DIR)
    return sorted(p.stem for p in d.glob("*.json") if trajectory_file(d, p.stem).exists())


def trajectory_manifest(name: str) -> dict[str, Any]:
    """The trajectory manifest of shipped model ``name`` (``pretrained.trajectories`` describes it).

    Raises ``KeyError`` (listing the zoo) for an unknown name and ``NoTrajectoryError`` (listing the models with a
    trajectory) for a model that ships none; ``StaleTrajectoryError`` (a ``ValueError``) for a stale one, whose last
    checkpoint is not the shipped weights (the model was exported again and its trajectory not shipped again: every
    number it holds is another run's).
    """
    zman = zoo.manifest(name)  # an unknown name: KeyError listing the zoo
    known = list_trajectories()
    if name not in known:
        half = incomplete_trajectory(zoo.TRAJECTORIES_DIR, name)
        if half:  # a deleted file is not "ships no trajectory"
            raise FileNotFoundError(half)
        have = ", ".join(known) if known else "none yet"
        raise NoTrajectoryError(f"{name!r} ships no training trajectory; models with one: {have}")
    man = read_manifest(Path(zoo.TRAJECTORIES_DIR) / f"{name}.json")
    last = man.get("checkpoint_sha256", {}).get(str(man.get("final_epoch")))
    if last != zman.get("sha256") or int(man.get("final_epoch", -1)) != int(zman.get("epochs", -2)):
        raise StaleTrajectoryError(
            f"{name!r}'s trajectory is stale: its last checkpoint (epoch {man.get('final_epoch')}, sha256 {last}) is "
            f"not the shipped weights (epoch {zman.get('epochs')}, sha256 {zman.get('sha256')}); ship the trajectory "
            "of the run the weights were exported from again (hooked-clip1d ship-trajectory RUN --name NAME)"
        )
    return man


def _snapshot_dir(spec: str | os.PathLike) -> bool:
    return zoo.names_a_path(spec) and Path(spec).is_dir()


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
    base = dict(zoo.manifest(name))
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
            tensors, meta = read_trajectory(zoo.TRAJECTORIES_DIR, man)
            for e in stored:
                digest = man["checkpoint_sha256"].get(str(e))
                model = stored_checkpoint(tensors, meta, e, digest, f"trajectory {name!r}")
                out.append((e, _attach_checkpoint(model.to(device).eval(), name, man, e)))
        if final in epochs:
            out.append((final, _attach_checkpoint(zoo.load_shipped(name, device), name, man, final)))
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
        >>> from hooked_clip1d import CLIPConfig, DataConfig, RunConfig, TrainConfig, load_model, train
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
    train_cfg = TrainConfig.from_dict(zoo.manifest(name)["train_config"])
    return measure_once((*key, ROW_VERSION), lambda: emergence(load_trajectory(name, want), train_cfg))


ACCURACY_KEYS = {"single": "val_single", "seen": "val_seen", "unseen": "val_unseen"}


def trajectory_accuracies(name: str) -> list[dict[str, Any]]:
    """Every generalization accuracy the zoo records along shipped model ``name``'s training, one row an epoch:
    its metrics history (every ``eval_every`` epochs), its trajectory's stored checkpoints (measured on the stored
    weights at shipping) and the snapshots the trajectory records without their weights (``snapshot_metrics``: the
    full model's); where several give an epoch, the history's. Rows ``{"epoch", "single", "seen", "unseen",
    "source"}``, source ``"history"``, ``"checkpoint"`` or ``"snapshot"``. No weights are loaded: for a trajectory
    whose mechanism rows were not measured (``trajectory_emergence`` refuses it), this is its dynamics.

    Example:
        >>> rows = trajectory_accuracies("simplified-ntot20-n2-10")
        >>> rows[0]["epoch"], rows[0]["source"], rows[-1]["epoch"], rows[-1]["source"]
        (0, 'checkpoint', 10000, 'history')
    """
    man, zman = trajectory_manifest(name), zoo.manifest(name)
    h = zman["history"] or {}
    lengths = {k: len(h.get(k, [])) for k in ("epoch", *ACCURACY_KEYS)}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{name!r}: its metrics history's lists differ in length: {lengths}")
    rows: dict[int, dict[str, Any]] = {}
    for i, e in enumerate(h.get("epoch", [])):
        rows[int(e)] = {**{k: h[k][i] for k in ACCURACY_KEYS}, "source": "history"}

    def accuracies(met: Any, where: str) -> dict[str, Any]:
        lacking = [s for s in ACCURACY_KEYS.values() if not isinstance(met, dict) or s not in met]
        if lacking:
            raise ValueError(f"{name!r}: {where} records no {lacking} accuracy")
        return {k: met[s].get("acc") if isinstance(met[s], dict) else None for k, s in ACCURACY_KEYS.items()}

    final = int(man["final_epoch"])
    for e in [int(x) for x in man["epochs"]]:
        if e not in rows:
            if e == final:  # the shipped weights: the zoo's own accuracies
                rows[e] = {**accuracies(zman["metrics"], "the shipped model"), "source": "checkpoint"}
            elif str(e) not in man["precision"]["checkpoints"]:
                raise ValueError(f"{name!r}: the trajectory records no accuracies of its stored checkpoint at {e}")
            else:
                rows[e] = {**accuracies(stored_metrics(man, e), f"checkpoint {e}"), "source": "checkpoint"}
    for e, met in snapshot_metrics(man).items():
        if e not in rows:
            rows[e] = {**accuracies(met, f"snapshot epoch {e}"), "source": "snapshot"}
    bad = [(e, r["source"], k) for e, r in rows.items() for k in ACCURACY_KEYS if not is_accuracy(r[k])]
    if bad:  # a gap or a NaN read as a number would move every epoch read from these rows
        raise ValueError(f"{name!r}: recorded accuracies that are not numbers in [0, 1] (epoch, source, split): {bad}")
    return [{"epoch": e, **rows[e]} for e in sorted(rows)]


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
        last = zoo.manifest(name)["metrics"]["val_unseen"]["acc"]
        size = m["bytes"] + (Path(zoo.TRAJECTORIES_DIR) / f"{name}.json").stat().st_size
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


def _splice_table(lines: list[str], table: str, where: str) -> list[str]:
    """``lines`` with the markdown table whose header starts with ``table``'s first two column names replaced by
    ``table`` (a column added later still finds the old table)."""
    head = "|".join(table.splitlines()[0].split("|")[:3]) + "|"
    starts = [k for k, line in enumerate(lines) if line.startswith(head)]
    if len(starts) != 1:
        found = "no table" if not starts else f"{len(starts)} tables"
        raise ValueError(f"{where}: {found} starting with {head!r}; expected exactly one to update")
    i = j = starts[0]
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    return lines[:i] + table.splitlines() + lines[j:]


def update_zoo_tables(path: str | os.PathLike) -> bool:
    """Write the zoo's two tables (``zoo.registry_table`` and ``trajectory_table``, from the shipped manifests) into
    the markdown page at ``path`` (docs/zoo.md), in place of the tables whose headers start with the same two column
    names; the rest of the page is kept. Returns whether the page changed. A page without exactly one of each table
    is refused, unchanged. ``hooked-clip1d list --markdown --update docs/zoo.md`` calls it.

    Example:
        >>> import shutil, tempfile; from pathlib import Path
        >>> page = Path(tempfile.mkdtemp()) / "zoo.md"
        >>> _ = shutil.copy(Path(zoo.__file__).parents[2] / "docs" / "zoo.md", page)
        >>> update_zoo_tables(page)  # the shipped page is up to date
        False
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no zoo page at {str(path)!r} to update")
    try:
        with open(path, encoding="utf-8", newline="") as f:  # as written: a CRLF page stays CRLF
            old = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{str(path)!r} is not UTF-8 text ({e.reason} at byte {e.start}): not a zoo page") from None
    lines = old.splitlines()
    for table in (zoo.registry_table(), trajectory_table()):
        lines = _splice_table(lines, table, str(path))
    eol = "\r\n" if "\r\n" in old else "\n"
    new = eol.join(lines) + eol
    if new == old:
        return False
    from hooked_clip1d.files import atomic_write

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:  # the page's own line ends, untranslated
            f.write(new)

    atomic_write(path, write)
    return True


__all__ = [
    "check_snapshot",
    "get_checkpoint_labels",
    "list_checkpoints",
    "list_trajectories",
    "load_checkpoint",
    "load_trajectory",
    "trajectory_emergence",
    "trajectory_manifest",
    "trajectory_table",
    "update_zoo_tables",
]
