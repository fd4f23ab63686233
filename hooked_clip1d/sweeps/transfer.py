"""Carry finished runs between machines in a few size-capped archives.

A GPU here is lent in commands of at most 10 minutes that bring back at most 8 files of 16 MiB. ``pack_runs`` puts
every finished run under a folder (a run directory, a sweep's ``runs/`` or a sweep folder) into ``runs-000.tar``,
``runs-001.tar``, ... each at most ``max_mib``: per run its ``config.json``, ``metrics.jsonl``, ``summary.json`` and
``model.safetensors`` (floating-point weights stored as ``weights_dtype``, float16 by default: loading casts them
back), not its optimizer checkpoint. ``unpack_runs`` puts them into another folder's ``runs/``, where ``results_table``,
``reproduce --no-sweeps`` and a resumed sweep (which never retrains a finished run) read them like runs trained there.

Example:
    >>> import tempfile, pathlib
    >>> from hooked_clip1d.sweeps.runner import run_sweep
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "s.toml").write_text('''
    ... name = "doc"
    ... [model]
    ... preset = "simplified"
    ... d_model = 16
    ... d_head = 4
    ... n_heads = 2
    ... [data]
    ... n_heldout = 2
    ... n2 = 2
    ... [train]
    ... epochs = 1
    ... batch_size = 16
    ... [grid]
    ... seed = [0, 1]
    ... ''')
    >>> _ = run_sweep(d / "s.toml", d / "gpu", progress=False)
    >>> [p.name for p in pack_runs(d / "gpu", d / "back")]
    ['runs-000.tar']
    >>> unpack_runs(sorted((d / "back").glob("*.tar")), d / "here")
    ['seed-0', 'seed-1']

Resumable state (a run that outlasts a session): ``pack_state`` puts the group checkpoints of a sweep's unfinished
groups (fp32 weights and AdamW moments of the members still training, 19.4 MB per full model; byte-shuffled and
zlib-compressed, split over archives) with the sweep's ``plan.json``, ``spec.toml`` and those members' ``config.json``
and ``metrics.jsonl`` into ``state-NNN.tar`` archives, when they fit a budget (the longest-trained groups first);
``unpack_runs`` recognises them and puts the state into the sweep folder, and ``carry_sweep`` copies what a fresh
machine needs to go on (finished runs without weights, and the state) into a folder that travels. The group then
resumes bit for bit where it stopped (``tests/test_transfer.py``: two sessions against one uninterrupted run).
``pack_for_transfer`` chooses what comes back from a call under the device tool's limits (8 files, 64 MiB).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hooked_clip1d.files import atomic_write
from hooked_clip1d.model.checkpoint import read_tensors, save_tensors
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT, read_group_state

RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "model.safetensors")
STATE_FORMAT = "hooked-clip1d-state/1"  # the STATE.json of a state archive
STATE_RUN_FILES = ("config.json", "metrics.jsonl")  # what an unfinished member brings along
_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def finished_runs(src: str | os.PathLike) -> list[Path]:
    """The finished run directories (``summary.json`` and ``model.safetensors`` present) at or under ``src``.

    ``src`` may be a run directory, a folder of runs (a sweep's ``runs/``) or a sweep folder (its ``runs/``).
    """
    src = Path(src)
    if not src.is_dir():
        raise FileNotFoundError(f"{str(src)!r} is not a directory")
    if (src / "summary.json").exists():
        candidates = [src]
    else:
        base = src / "runs" if (src / "runs").is_dir() else src
        candidates = sorted(p for p in base.iterdir() if p.is_dir())
    return [p for p in candidates if (p / "summary.json").exists() and (p / "model.safetensors").exists()]


def _weights_bytes(path: Path, dtype: torch.dtype) -> bytes:
    tensors, meta = read_tensors(path)
    meta = {k: v for k, v in meta.items() if k not in ("format", "digest")}
    for k, v in tensors.items():
        if v.is_floating_point() and v.dtype != dtype:
            cast = v.to(dtype)
            if not torch.isfinite(cast).all():
                raise ValueError(f"{path}: {k} does not fit in {dtype} (max |w| = {v.abs().max().item():.3g})")
            tensors[k] = cast
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.safetensors"
        save_tensors(out, tensors, meta)
        return out.read_bytes()


def _tar_bytes(members: int) -> int:
    """The size of a tar file whose members (headers and 512-byte data blocks) take ``members`` bytes: plus the
    1 KiB end marker, rounded up to tarfile's 10 KiB record (which alone can add up to 10 KiB)."""
    return -(-(members + 1024) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def pack_runs(
    src: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    max_mib: float | int = 16.0,
    weights_dtype: str = "float16",
    prefix: str = "runs",
    runs: Sequence[str] | None = None,
) -> list[Path]:
    """Pack the finished runs under ``src`` into ``dest/<prefix>-NNN.tar`` archives of at most ``max_mib`` MiB each
    (module docstring); returns the archives written. A run too large for one archive is an error naming it.
    ``runs``: only the finished runs of these names."""
    if weights_dtype not in _DTYPES:
        raise ValueError(f"weights_dtype must be one of {sorted(_DTYPES)}, got {weights_dtype!r}")
    if not max_mib > 0:
        raise ValueError(f"max_mib must be > 0, got {max_mib}")
    runs_found = finished_runs(src)
    runs = runs_found if runs is None else [r for r in runs_found if r.name in set(runs)]
    if not runs:
        raise ValueError(f"no finished run (summary.json and model.safetensors) at or under {str(src)!r}")
    limit = int(max_mib * 2**20)
    dest = Path(dest)
    if dest.is_dir() and any(dest.glob(f"{prefix}-*.tar")):  # an older pack's extra archives would be unpacked too
        raise FileExistsError(f"{str(dest)!r} already holds {prefix}-*.tar archives; pack into an empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    batches: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for run in runs:
        files = [(f"{run.name}/{f}", (run / f).read_bytes()) for f in RUN_FILES[:-1] if (run / f).exists()]
        weights = _weights_bytes(run / "model.safetensors", _DTYPES[weights_dtype])
        files.append((f"{run.name}/model.safetensors", weights))
        n = sum(1536 + -(-len(b) // 512) * 512 for _, b in files)  # tar: (pax) headers, 512-byte blocks
        if _tar_bytes(n) > limit:
            raise ValueError(f"run {run.name} needs {_tar_bytes(n) / 2**20:.1f} MiB, more than max_mib={max_mib}")
        if _tar_bytes(size + n) > limit:
            batches.append([])
            size = 0
        batches[-1].extend(files)
        size += n
    return _write_archives(batches, dest, prefix)


def unpack_runs(archives: Sequence[str | os.PathLike], dest: str | os.PathLike) -> list[str]:
    """Put the runs of ``archives`` (from ``pack_runs``) into ``dest/runs/<run>/``; return the run names.

    Only the run files are accepted (no links, no other paths); a finished run already there with different
    contents is an error naming it (identical ones are skipped; an unfinished one's files, from resumable state, are
    replaced), and each run appears whole or not at all. State archives among
    them (``pack_state``) go to ``unpack_state`` (the same ``dest``, a sweep folder).
    """
    archives = [Path(a) for a in archives]
    state = [a for a in archives if _is_state_archive(a)]
    if state:  # resumable state of unfinished groups (pack_state): into the same folder
        unpack_state(state, dest)
        archives = [a for a in archives if a not in state]
    runs: dict[str, dict[str, bytes]] = {}
    for archive in archives:
        with tarfile.open(archive, "r") as tar:
            for m in tar.getmembers():
                parts = m.name.split("/")
                if not m.isfile() or len(parts) != 2 or parts[1] not in RUN_FILES or parts[0] in ("", ".", ".."):
                    raise ValueError(f"{archive}: unexpected member {m.name!r}; not an archive of pack_runs")
                f = tar.extractfile(m)
                assert f is not None
                runs.setdefault(parts[0], {})[parts[1]] = f.read()
    for name, files in runs.items():
        missing = [f for f in ("config.json", "summary.json", "model.safetensors") if f not in files]
        if missing:
            raise ValueError(f"run {name}: the archives lack {missing}")
        json.loads(files["summary.json"])  # readable
    root = Path(dest) / "runs"
    root.mkdir(parents=True, exist_ok=True)
    for name, files in sorted(runs.items()):
        final = root / name
        stale = None
        if final.exists():
            same = all(_same_file(final / f, b) for f, b in files.items())
            if same:
                continue
            if (final / "summary.json").exists():
                raise FileExistsError(f"run {name} is already in {str(root)!r} with other contents; unpack elsewhere")
            stale = final  # an unfinished run's files (from resumable state): the finished run replaces them
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
        try:
            for f, b in files.items():
                (tmp / f).write_bytes(b)
            read_tensors(tmp / "model.safetensors")  # a readable checkpoint before it becomes a run
            if stale is not None:
                shutil.rmtree(stale)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return sorted(runs)


def _same_file(path: Path, b: bytes) -> bool:
    """Whether ``path`` holds ``b``: byte for byte, or, for weights, the same content digest (safetensors writes its
    metadata in hash-map order, so packing one run in two processes can order it differently)."""
    if not path.exists():
        return False
    a = path.read_bytes()
    if a == b:
        return True

    def digest(x: bytes) -> str | None:
        try:
            return json.loads(x[8 : 8 + int.from_bytes(x[:8], "little")])["__metadata__"]["digest"]
        except (ValueError, KeyError, TypeError):
            return None

    return path.name == "model.safetensors" and digest(a) is not None and digest(a) == digest(b)


# ---- resumable state of unfinished groups --------------------------------------------------------------------------
def _shuffle(b: bytes, width: int = 4) -> bytes:
    """Byte planes of ``width``-byte words (fp32: exponents together, mantissas together): zlib then finds the
    redundancy of floats (17 % smaller than plain zlib's ~5 % on a full model's checkpoint). A tail shorter than a
    word stays last."""
    n = len(b) // width * width
    return b"".join(b[i:n:width] for i in range(width)) + b[n:]


def _unshuffle(b: bytes, width: int = 4) -> bytes:
    n = len(b) // width * width
    k = n // width
    out = bytearray(len(b))
    for i in range(width):
        out[i:n:width] = b[i * k : (i + 1) * k]
    out[n:] = b[n:]
    return bytes(out)


def unfinished_groups(sweep_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The groups of a sweep folder whose group checkpoint has members still training (none of them finished since):
    per group its ``name``, ``step``, ``active`` (run names), ``bytes`` (the checkpoint's size), longest-trained
    first.

    Example:
        >>> unfinished_groups("/nonexistent")
        []
    """
    base = Path(sweep_dir) / "groups"
    out = []
    for g in sorted(base.iterdir()) if base.is_dir() else []:
        ckpt = g / GROUP_CHECKPOINT
        gs = read_group_state(ckpt)
        if gs is None or not gs.get("active"):
            continue
        names = gs["names"]
        active = [names[i] for i in gs["active"]]
        if any((Path(sweep_dir) / "runs" / r / "summary.json").exists() for r in active):
            continue  # a checkpoint older than its members' end (the group finished): nothing to resume
        out.append({"name": g.name, "step": gs["step"], "active": active, "bytes": ckpt.stat().st_size})
    return sorted(out, key=lambda g: (-g["step"], g["name"]))


def _items_size(items: Sequence[tuple[str, bytes]]) -> int:
    return sum(1536 + -(-len(b) // 512) * 512 for _, b in items)


def _write_archives(batches: list[list[tuple[str, bytes]]], dest: Path, prefix: str) -> list[Path]:
    written = []
    for i, batch in enumerate(batches):
        path = dest / f"{prefix}-{i:03d}.tar"
        tmp = path.with_suffix(".tar.tmp")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, b in batch:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(b), 0o644
                tar.addfile(info, io.BytesIO(b))
        os.replace(tmp, path)
        written.append(path)
    return written


def state_items(
    sweep_dir: str | os.PathLike, budget_mib: float | int = 40.0, groups: Sequence[str] | None = None
) -> tuple[list[tuple[str, bytes]], list[dict[str, Any]]]:
    """What ``pack_state`` packs: the files (name, bytes) of the unfinished groups that fit ``budget_mib``
    (compressed), longest-trained first, and those groups (``unfinished_groups`` rows, with ``packed_bytes``).
    ``groups``: only these (by name). Checkpoints are compressed whole; ``pack_state`` splits them."""
    src = Path(sweep_dir)
    chosen, items = [], []
    used = 0
    for g in unfinished_groups(src):
        if groups is not None and g["name"] not in groups:
            continue
        raw = (src / "groups" / g["name"] / GROUP_CHECKPOINT).read_bytes()
        packed = zlib.compress(_shuffle(raw), 6)
        runs = []
        for run in g["active"]:
            for f in STATE_RUN_FILES:
                path = src / "runs" / run / f
                if path.exists():
                    runs.append((f"runs/{run}/{f}", path.read_bytes()))
        size = len(packed) + _items_size(runs)
        if used + size > budget_mib * 2**20:
            continue
        used += size
        g = {**g, "packed_bytes": len(packed), "sha256": hashlib.sha256(raw).hexdigest()}
        chosen.append(g)
        items.append((f"groups/{g['name']}/{GROUP_CHECKPOINT}.z", packed))
        items.extend(runs)
    return items, chosen


def pack_state(
    sweep_dir: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    max_mib: float | int = 15.0,
    budget_mib: float | int = 40.0,
    max_files: int | None = None,
    groups: Sequence[str] | None = None,
    prefix: str = "state",
) -> list[Path]:
    """Pack the resumable state of the sweep's unfinished groups (module docstring) into ``dest/<prefix>-NNN.tar``
    of at most ``max_mib`` MiB each, groups longest-trained first while their compressed state fits ``budget_mib``
    (and ``max_files`` archives); returns the archives, none when no group has state or none fits.

    Example:
        >>> import tempfile
        >>> pack_state(tempfile.mkdtemp(), tempfile.mkdtemp())  # no groups: nothing to carry
        []
    """
    src, dest = Path(sweep_dir), Path(dest)
    limit = int(max_mib * 2**20)
    chunk = limit - 64 * 1024  # a checkpoint piece, with room for the headers and tar's end record
    if chunk <= 0:
        raise ValueError(f"max_mib={max_mib} leaves no room for the state")
    room = budget_mib if max_files is None else min(budget_mib, max_files * chunk / 2**20)
    items, chosen = state_items(src, room, groups)
    if not chosen:
        return []
    if dest.is_dir() and any(dest.glob(f"{prefix}-*.tar")):
        raise FileExistsError(f"{str(dest)!r} already holds {prefix}-*.tar archives; pack into an empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    pieces: list[tuple[str, bytes]] = []
    for name, b in items:  # a compressed checkpoint in pieces that fit an archive each
        if name.endswith(".z") and len(b) > chunk:
            pieces.extend((f"{name}.{i:03d}", b[o : o + chunk]) for i, o in enumerate(range(0, len(b), chunk)))
        else:
            pieces.append((f"{name}.000" if name.endswith(".z") else name, b))
    meta = [(n, (src / n).read_bytes()) for n in ("spec.toml", "plan.json") if (src / n).exists()]
    batches: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for item in meta + pieces:
        n = _items_size([item])
        if size and _tar_bytes(size + n + 4096) > limit:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += n
    if max_files is not None and len(batches) > max_files:
        return []
    set_id = hashlib.sha256(b"".join(hashlib.sha256(b).digest() for _, b in meta + pieces)).hexdigest()[:16]
    pieces_of = {g["name"]: sum(1 for n, _ in pieces if n.startswith(f"groups/{g['name']}/")) for g in chosen}
    for i, batch in enumerate(batches):
        head = {
            "format": STATE_FORMAT,
            "set": set_id,
            "archive": i,
            "archives": len(batches),
            "sweep": src.name,
            "groups": [{**g, "pieces": pieces_of[g["name"]]} for g in chosen],
        }
        batch.insert(0, ("STATE.json", json.dumps(head, indent=1).encode()))
    return _write_archives(batches, dest, prefix)


def _is_state_archive(path: Path) -> bool:
    with tarfile.open(path, "r") as tar:
        first = tar.next()
        return first is not None and first.name == "STATE.json"


def unpack_state(archives: Sequence[str | os.PathLike], dest: str | os.PathLike) -> list[dict[str, Any]]:
    """Put the state archives of one ``pack_state`` call into the sweep folder ``dest``: its ``spec.toml`` and
    ``plan.json`` (refused if different ones are there), each group's checkpoint (refused if one of a later step is
    there) and its members' ``config.json`` and ``metrics.jsonl`` (refused if such a member has finished there).
    Returns the groups (name, step, active runs). Every archive of the set must be given; each checksum is checked
    before anything is written.

    Example:
        >>> unpack_state([], "/nonexistent")
        []
    """
    if not archives:
        return []
    files: dict[str, bytes] = {}
    heads = []
    for archive in archives:
        with tarfile.open(archive, "r") as tar:
            for m in tar.getmembers():
                parts = m.name.split("/")
                ok = (
                    m.isfile()
                    and ".." not in parts
                    and "" not in parts
                    and (
                        m.name in ("STATE.json", "spec.toml", "plan.json")
                        or (len(parts) == 3 and parts[0] == "groups" and parts[2].startswith(f"{GROUP_CHECKPOINT}.z."))
                        or (len(parts) == 3 and parts[0] == "runs" and parts[2] in STATE_RUN_FILES)
                    )
                )
                if not ok:
                    raise ValueError(f"{archive}: unexpected member {m.name!r}; not an archive of pack_state")
                f = tar.extractfile(m)
                assert f is not None
                if m.name == "STATE.json":
                    heads.append(json.loads(f.read()))
                else:
                    files[m.name] = f.read()
    if any(h.get("format") != STATE_FORMAT for h in heads) or len({h["set"] for h in heads}) != 1:
        raise ValueError("the state archives are not one pack_state set (mixed or foreign archives)")
    head = heads[0]
    if sorted(h["archive"] for h in heads) != list(range(head["archives"])):
        have = sorted(h["archive"] for h in heads)
        raise ValueError(f"state archives {have} of a set of {head['archives']}: give every one of them")
    dest = Path(dest)
    checkpoints = {}
    for g in head["groups"]:
        stem = f"groups/{g['name']}/{GROUP_CHECKPOINT}.z"
        names = [f"{stem}.{i:03d}" for i in range(g["pieces"])]
        if any(n not in files for n in names):
            raise ValueError(f"group {g['name']}: pieces of its checkpoint are missing from the archives")
        raw = _unshuffle(zlib.decompress(b"".join(files[n] for n in names)))
        if hashlib.sha256(raw).hexdigest() != g["sha256"]:
            raise ValueError(f"group {g['name']}: its checkpoint does not match its checksum (damaged archive)")
        checkpoints[g["name"]] = raw
    for n in ("spec.toml", "plan.json"):
        if n in files and (dest / n).exists() and (dest / n).read_bytes() != files[n]:
            raise FileExistsError(f"{str(dest / n)!r} differs from the state's; unpack into that sweep's own folder")
    for g in head["groups"]:
        here = read_group_state(dest / "groups" / g["name"] / GROUP_CHECKPOINT)
        if here is not None and here["step"] > g["step"]:
            raise FileExistsError(
                f"group {g['name']} in {str(dest)!r} is at step {here['step']}, later than this state's {g['step']}"
            )
        for run in g["active"]:
            if (dest / "runs" / run / "summary.json").exists():
                raise FileExistsError(
                    f"run {run} has finished in {str(dest)!r}; this state (still training it) is older"
                )
    for n, b in files.items():  # checked: write
        if not n.startswith("groups/"):
            atomic_write(dest / n, lambda tmp, b=b: Path(tmp).write_bytes(b))
    for name, raw in checkpoints.items():
        atomic_write(dest / "groups" / name / GROUP_CHECKPOINT, lambda tmp, raw=raw: Path(tmp).write_bytes(raw))
        read_tensors(dest / "groups" / name / GROUP_CHECKPOINT)  # readable, digest checked
    return [{"name": g["name"], "step": g["step"], "active": g["active"]} for g in head["groups"]]


def carry_sweep(spec: Any, src: str | os.PathLike, dest: str | os.PathLike, *, state: bool = True) -> dict[str, Any]:
    """Copy into ``dest`` (a folder that travels to a fresh machine; made new) what lets a sweep go on there
    without retraining: ``spec`` (a ``SweepSpec``)'s source as ``spec.toml``, every finished run's ``config.json``,
    ``summary.json`` and ``metrics.jsonl`` (no weights; each checked against the spec by ``results_table``) and,
    with ``state``, the unfinished groups' checkpoints with ``plan.json`` and their members' ``config.json`` and
    ``metrics.jsonl``. Returns what it copied: ``runs`` (finished), ``groups`` (with state), ``bytes``."""
    from hooked_clip1d.sweeps.runner import results_table

    src, dest = Path(src), Path(dest)
    rows = results_table(spec, src)
    groups = unfinished_groups(src) if state else []
    out: dict[str, Any] = {"runs": [r["run"] for r in rows], "groups": groups, "bytes": 0}
    if not rows and not groups:
        return out
    if dest.exists():
        raise FileExistsError(f"{str(dest)!r} exists; carry into a new folder")
    copies = [(Path(r["path"]) / f, dest / "runs" / r["run"] / f) for r in rows for f in RUN_FILES[:3]]
    if groups:
        copies.append((src / "plan.json", dest / "plan.json"))
    for g in groups:
        copies.append((src / "groups" / g["name"] / GROUP_CHECKPOINT, dest / "groups" / g["name"] / GROUP_CHECKPOINT))
        copies += [(src / "runs" / r / f, dest / "runs" / r / f) for r in g["active"] for f in STATE_RUN_FILES]
    for a, b in copies:
        if a.exists():
            b.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(a, b)
            out["bytes"] += b.stat().st_size
    (dest / "spec.toml").write_text(spec.source)
    return out


class _Room:
    """What one call can still bring back (``files`` archives, ``bytes``); ``keep`` moves the archives that fit, in
    order, into ``dest`` and counts them off."""

    def __init__(self, dest: Path, files: int, total_bytes: float | int) -> None:
        self.dest, self.files, self.bytes = dest, files, total_bytes

    def keep(self, archives: list[Path], prefix: str) -> list[Path]:
        """Move the archives that fit (in order) into ``dest`` as ``<prefix>-NNN.tar``; return those moved."""
        moved = []
        for i, a in enumerate(archives):
            size = a.stat().st_size
            if self.files < 1 or size > self.bytes:
                break
            self.dest.mkdir(parents=True, exist_ok=True)
            target = self.dest / f"{prefix}-{i:03d}.tar"
            if target.exists():
                raise FileExistsError(f"{str(target)!r} exists; pack into an empty folder")
            shutil.move(str(a), target)
            moved.append(target)
            self.files, self.bytes = self.files - 1, self.bytes - size
        return moved


def _archive_runs(archive: Path) -> set[str]:
    """The top-level folders (runs) of a tar archive."""
    with tarfile.open(archive) as tar:
        return {m.name.split("/")[0] for m in tar.getmembers()}


def pack_for_transfer(
    sweep_dir: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    sent: Sequence[str] = (),
    max_files: int = 8,
    max_total_mib: float | int = 62.0,
    max_mib: float | int = 15.0,
    state_mib: float | int = 40.0,
    weights_dtype: str = "float16",
) -> dict[str, Any]:
    """Choose and pack what one call brings back from a sweep folder, within ``max_files`` archives and
    ``max_total_mib`` together (the device tool: 8 files, 64 MiB): first the finished runs not yet ``sent`` (by an
    earlier call of the same machine), then the unfinished groups' resumable state (``pack_state``, at most
    ``state_mib``), then the runs sent before (again, while room is left: a call whose files were lost loses
    nothing). Returns ``runs`` (packed now for the first time), ``resent``, ``state`` (groups), ``archives``,
    ``left`` (finished runs that did not fit: the next call's) and ``state_left`` (the groups whose state did not).

    Example:
        >>> import tempfile
        >>> pack_for_transfer(tempfile.mkdtemp(), tempfile.mkdtemp())["archives"]
        []
    """
    src, dest = Path(sweep_dir), Path(dest)
    finished = [p.name for p in finished_runs(src)] if src.is_dir() else []
    new = [r for r in finished if r not in set(sent)]
    old = [r for r in finished if r in set(sent)]
    out: dict[str, Any] = {"runs": [], "resent": [], "state": [], "archives": [], "left": [], "state_left": []}
    room = _Room(dest, max_files, max_total_mib * 2**20)

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if new:
            moved = room.keep(
                pack_runs(src, tmp_path / "new", max_mib=max_mib, weights_dtype=weights_dtype, runs=new),
                "runs",
            )
            got = set().union(*(_archive_runs(a) for a in moved)) if moved else set()
            out["runs"] = [r for r in new if r in got]
            out["left"] = [r for r in new if r not in got]
            out["archives"] += moved
        groups = unfinished_groups(src) if src.is_dir() else []
        if groups and room.files > 0:
            state = pack_state(
                src,
                tmp_path / "state",
                max_mib=max_mib,
                max_files=room.files,
                budget_mib=min(state_mib, room.bytes / 2**20 * 0.98),
            )
            if state and sum(a.stat().st_size for a in state) <= room.bytes and len(state) <= room.files:  # all or none
                with tarfile.open(state[0]) as tar:
                    f = tar.extractfile("STATE.json")
                    assert f is not None
                    out["state"] = json.loads(f.read())["groups"]
                out["archives"] += room.keep(state, "state")
        packed = {g["name"] for g in out["state"]}
        out["state_left"] = [g["name"] for g in groups if g["name"] not in packed]
        if old and room.files > 0:
            moved = room.keep(
                pack_runs(src, tmp_path / "old", max_mib=max_mib, weights_dtype=weights_dtype, runs=old),
                "resent",
            )
            out["resent"] = sorted(set().union(*(_archive_runs(a) for a in moved))) if moved else []
            out["archives"] += moved
    return out
