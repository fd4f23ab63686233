"""Compare two sets of figure records number by number: the check that a refactoring changed no result.

``compare_records(old_dir, new_dir)`` reads every ``<figure>.json`` of ``old_dir`` (e.g. the committed
``docs/records``) and the record of the same figure in ``new_dir`` (as ``reproduce`` writes it, in
``<new_dir>/<figure>/<figure>.json``, or flat) and lists every difference: numbers beyond ``rel_tol`` / ``abs_tol``,
other values that differ, keys or list entries present on one side only. The date, command and plot names are not
compared.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> old, new = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    >>> _ = (old / "fig1.json").write_text(json.dumps({"verdict": "partly", "numbers": {"acc": 0.5}}))
    >>> _ = (new / "fig1.json").write_text(json.dumps({"verdict": "partly", "numbers": {"acc": 0.75}}))
    >>> compare_records(old, new)
    {'fig1': ['numbers.acc: 0.5 vs 0.75']}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

IGNORED = frozenset({"recorded", "command", "plots"})


def _read(path: Path) -> Any:
    """A record through ``records.load_record`` (so a record older than the types compares with a new one: both
    carry the schema and check ids); a JSON file that is no figure record, as it is."""
    from hooked_clip1d.reproduce.records import Record, is_record

    d = json.loads(path.read_text())
    return Record.from_dict(d, where=f"record {path}").to_dict() if is_record(d) else d


def _diff(a: Any, b: Any, path: str, out: list[str], rel_tol: float, abs_tol: float) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k in IGNORED:
                continue
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(f"{sub}: only in {'new' if k in b else 'old'}")
            else:
                _diff(a[k], b[k], sub, out, rel_tol, abs_tol)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} entries vs {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out, rel_tol, abs_tol)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
        if not both_nan and not math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol):
            out.append(f"{path}: {a} vs {b}")
    elif a != b:
        out.append(f"{path}: {str(a)[:80]!r} vs {str(b)[:80]!r}")


def compare_records(
    old_dir: str | Path, new_dir: str | Path, rel_tol: float = 1e-4, abs_tol: float = 1e-4
) -> dict[str, list[str] | None]:
    """Per figure of ``old_dir``: the list of differences to ``new_dir``'s record (empty: the same numbers), or
    None where ``new_dir`` has no record of that figure."""
    old_dir, new_dir = Path(old_dir), Path(new_dir)
    if not old_dir.is_dir():
        raise FileNotFoundError(f"no records folder {str(old_dir)!r}")
    out: dict[str, list[str] | None] = {}
    for f in sorted(old_dir.glob("*.json")):
        new = next((p for p in (new_dir / f.stem / f.name, new_dir / f.name) if p.exists()), None)
        if new is None:
            out[f.stem] = None
            continue
        diffs: list[str] = []
        _diff(_read(f), _read(new), "", diffs, rel_tol, abs_tol)
        out[f.stem] = diffs
    return out
