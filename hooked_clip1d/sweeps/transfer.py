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
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from hooked_clip1d.model.checkpoint import read_tensors, save_tensors

RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "model.safetensors")
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
) -> list[Path]:
    """Pack the finished runs under ``src`` into ``dest/<prefix>-NNN.tar`` archives of at most ``max_mib`` MiB each
    (module docstring); returns the archives written. A run too large for one archive is an error naming it."""
    if weights_dtype not in _DTYPES:
        raise ValueError(f"weights_dtype must be one of {sorted(_DTYPES)}, got {weights_dtype!r}")
    if not max_mib > 0:
        raise ValueError(f"max_mib must be > 0, got {max_mib}")
    runs = finished_runs(src)
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


def unpack_runs(archives: Sequence[str | os.PathLike], dest: str | os.PathLike) -> list[str]:
    """Put the runs of ``archives`` (from ``pack_runs``) into ``dest/runs/<run>/``; return the run names.

    Only the run files are accepted (no links, no other paths); a run already there with different contents is an
    error naming it (identical ones are skipped), and each run appears whole or not at all.
    """
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
        if final.exists():
            same = all((final / f).exists() and (final / f).read_bytes() == b for f, b in files.items())
            if same:
                continue
            raise FileExistsError(f"run {name} is already in {str(root)!r} with other contents; unpack elsewhere")
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
        try:
            for f, b in files.items():
                (tmp / f).write_bytes(b)
            read_tensors(tmp / "model.safetensors")  # a readable checkpoint before it becomes a run
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return sorted(runs)
