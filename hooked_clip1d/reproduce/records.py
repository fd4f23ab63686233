"""A figure's record as types (issue 52): ``Record`` and ``Check``, one writer, one loader with the converter.

``reproduce`` assembles a figure's reading (its checks, the null control, the seeds, the trained control) and
writes it once, through ``write_record``; the results page, ``compare`` and ``rejudge_record`` read records
through ``load_record``. A record carries ``schema`` (``SCHEMA_VERSION``); a record written before the schema
existed (version 2: no ``schema``, checks without ids) is converted on load, and a record of a newer schema is
refused. Both directions are strict: a field neither type knows, a check whose ``holds`` is not a bool, a NaN in a
check's stated value, or a counted check without its outcome is an error naming the record and the field, never
a record read another way.

Each check has a stable ``id``: the figure's own (``Outcome.check_ids``, kept when its sentence is reworded) or,
where the figure declares none, one derived from the sentence when it was first recorded (``check_id``);
``Record.check(id)`` finds a check by it. The sentence is what the page shows. ``rejudge_record`` matches a kept
record's checks to what the figure computes today by id (a reworded sentence with its id kept is the same check,
shown in today's words). Within one ``reproduce`` run the null control, the seeds and the trained control are runs
of the same code as the outcome they mark, so their checks are matched by the sentence that code wrote.

Example:
    >>> rec = Record.from_dict({"figure": "t", "title": "T", "paper": "p", "models": [], "command": "c",
    ...     "verdict": "partly", "summary": "s", "plots": [],
    ...     "checks": [{"check": "a holds", "holds": True}, {"check": "b holds", "holds": False}]})
    >>> [c.id for c in rec.checks], rec.schema, rec.judged()
    (['a-holds-5c12', 'b-holds-0311'], 3, 'partly')
    >>> Record.from_dict({**rec.to_dict(), "color": "red"})
    Traceback (most recent call last):
    ValueError: record 't': unknown field(s) ['color'] (schema 3 knows ...)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hooked_clip1d.files import atomic_write_text, json_text

SCHEMA_VERSION = 3  # 2: records before the types (no "schema", checks without ids); 3: typed, with check ids
# "inconclusive": no check counts (untrained models or a trained control pass them, or they are shown only), so none
# is evidence about training
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "not run")


def verdict_of(checks: list[tuple[str, bool]]) -> str:
    """``reproduced`` if every check holds, ``partly`` if some do, ``not reproduced`` if none does.

    Example:
        >>> verdict_of([("a", True), ("b", False)])
        'partly'
    """
    if not checks:
        raise ValueError("a figure needs at least one check to get a verdict")
    held = sum(bool(ok) for _, ok in checks)
    return "reproduced" if held == len(checks) else "partly" if held else "not reproduced"


def check_id(text: str) -> str:
    """A check's id derived from its sentence: its first words as a slug and 4 hex digits of the sentence's hash
    (two sentences sharing their first words get different ids).

    Example:
        >>> check_id("some head gives the subject (first object) >= 0.2 more mean EOT attention")
        'some-head-gives-the-subject-first-object-0-2-more-c87b'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    words = slug.split("-")[:10]
    return "-".join(words) + "-" + hashlib.sha1(text.encode()).hexdigest()[:4]


# a check row's fields and their JSON types (a string "no" for a bool counted as true; a NaN count printed "nan/10")
_CHECK_FIELD_TYPES: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("id", (str,), "a string"),
    ("counted", (bool,), "true / false"),
    ("counted_holds", (bool,), "true / false"),
    ("absence", (bool,), "true / false"),
    ("beyond_null", (bool,), "true / false"),
    ("not_auditable", (bool,), "true / false"),
    ("null_passes", (int,), "an integer count"),
    ("null_n", (int,), "an integer count"),
    ("fresh_holds", (int,), "an integer count"),
    ("null_incomplete", (str,), "a string"),
    ("secondary", (str,), "a string"),
    ("direction", (str,), "a string"),
    ("fresh_rule", (str,), "a string"),
    ("seeds", (dict,), "an object"),
    ("trained_control", (dict,), "an object"),
    ("fresh_runs", (dict,), "an object"),
    ("coordinate_dependent", (list,), "a list"),
    ("control_passes", (list,), "a list"),
)
FIGURE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a record's figure names its file: no path


@dataclass
class Check:
    """One check of a figure: the sentence, whether it holds, and what its controls say of it (every field but
    ``id``, ``text`` and ``holds`` is absent where that control did not run)."""

    id: str
    text: str
    holds: bool
    counted: bool | None = None  # None: no null control ran (a record without controls)
    counted_holds: bool | None = None  # the outcome that counts toward the verdict (None where not counted)
    null_passes: int | None = None  # untrained draws passing it, of null_n
    null_n: int | None = None
    null_incomplete: str | None = None  # why the null control did not run in full
    secondary: str | None = None  # why it is shown and not counted (an identity, a ceiling...)
    absence: bool | None = None  # an upper bound untrained models meet too
    value: float | None = None  # its stated value, the direction the paper claims, the untrained extreme
    direction: str | None = None
    null_extreme: float | None = None
    beyond_null: bool | None = None
    permutation_p: float | None = None  # a sweep figure's permutation null over the trained runs
    coordinate_dependent: list[str] | None = None  # the reparametrisations that moved it
    not_auditable: bool | None = None  # the audit cannot see it (the same on untrained weights: stored numbers...)
    seeds: dict[str, bool] | None = None  # its outcome at each replicate seed
    fresh_holds: int | None = None  # how many fresh seeds it holds at
    trained_control: dict[str, bool] | None = None  # its outcome on each trained-control run
    control_passes: list[str] | None = None  # the control runs that pass it (so it does not count)
    fresh_runs: dict[str, bool] | None = None  # a restated check's outcome on each deciding fresh run
    fresh_rule: str | None = None  # the pre-registered rule's verdict on those runs (or why it was not applied)

    @classmethod
    def from_row(cls, row: dict[str, Any], where: str) -> Check:
        """A check from its JSON row (``{"check": sentence, "holds": ..., ...}``; an ``id`` derived where absent)."""
        if not isinstance(row, dict) or not isinstance(row.get("check"), str):
            raise ValueError(f"{where}: a check row needs its sentence under 'check': {str(row)[:80]!r}")
        known = {f.name for f in dataclasses.fields(cls)} - {"text"}
        unknown = sorted(set(row) - known - {"check"})
        if unknown:
            raise ValueError(f"{where}: check {row['check'][:60]!r} has unknown field(s) {unknown}")
        if not isinstance(row.get("holds"), bool):
            raise ValueError(f"{where}: check {row['check'][:60]!r}: 'holds' is {row.get('holds')!r}, not a bool")
        for name in ("value", "null_extreme", "permutation_p"):
            v = row.get(name)
            if v is not None and not (isinstance(v, int | float) and math.isfinite(v)):
                raise ValueError(f"{where}: check {row['check'][:60]!r}: {name} is {v!r}, not a finite number")
        name = row["check"][:60]
        for key, kinds, what in _CHECK_FIELD_TYPES:
            v = row.get(key)
            if v is not None and (not isinstance(v, kinds) or (bool not in kinds and isinstance(v, bool))):
                raise ValueError(f"{where}: check {name!r}: {key} is {v!r}, not {what}")  # "no" read as true
        for key in ("null_passes", "null_n", "fresh_holds"):
            if row.get(key) is not None and row[key] < 0:
                raise ValueError(f"{where}: check {name!r}: {key} is {row[key]!r}, not a count")
        for key in ("seeds", "trained_control", "fresh_runs"):
            v = row.get(key)
            if v is not None and not all(isinstance(k, str) and isinstance(o, bool) for k, o in v.items()):
                raise ValueError(f"{where}: check {name!r}: {key} must map names to true / false, got {v!r}")
        for key in ("coordinate_dependent", "control_passes"):
            v = row.get(key)
            if v is not None and not all(isinstance(x, str) for x in v):
                raise ValueError(f"{where}: check {name!r}: {key} must be a list of names, got {v!r}")
        if row.get("null_extreme") is not None and row.get("value") is None:  # the page compares the two
            raise ValueError(f"{where}: check {name!r} has an untrained extreme but no value to compare it with")
        if row.get("counted") and not isinstance(row.get("counted_holds"), bool):
            raise ValueError(f"{where}: check {row['check'][:60]!r} counts but its counted outcome is missing")
        kw = {k: v for k, v in row.items() if k != "check"}
        kw.setdefault("id", check_id(row["check"]))
        return cls(text=row["check"], **kw)

    def to_row(self) -> dict[str, Any]:
        """The JSON row: ``id``, ``check`` (the sentence), ``holds`` and the controls' fields that are set."""
        row: dict[str, Any] = {"id": self.id, "check": self.text, "holds": self.holds}
        for f in dataclasses.fields(self):
            if f.name not in ("id", "text", "holds") and getattr(self, f.name) is not None:
                row[f.name] = getattr(self, f.name)
        return row


# a record's fields beside the checks that readers use by name; everything a figure measures is under "numbers"
_DETAILS = (
    "notes",
    "table",
    "sensitivity",
    "model_epochs",
    "model_epochs_planned",
    "invariance_audit",
    "null_control",
    "replicates",
    "trained_control",
    "fresh_runs",
    "sweep_clock",
    "interim",
    "rejudged",
    "relabelled",
    "substituted",
)


@dataclass
class Record:
    """A figure's record: what the paper says, what we measured, the checks and the verdict (module docstring)."""

    figure: str
    title: str
    paper: str
    models: list[str]
    command: str
    verdict: str
    summary: str
    checks: list[Check]
    plots: list[str]
    beyond_paper: bool = False
    recorded: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # the _DETAILS fields that are set
    schema: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str | None = None) -> Record:
        """The record of JSON object ``d``; a version-2 record (no ``schema``) is converted (check ids derived)."""
        where = where or (f"record {d.get('figure', '?')!r}" if isinstance(d, dict) else "record")
        if not isinstance(d, dict):
            raise ValueError(f"{where}: not a JSON object")
        schema = d.get("schema", 2)
        if schema not in (2, SCHEMA_VERSION):
            raise ValueError(f"{where}: schema {schema!r}; this package reads 2 and {SCHEMA_VERSION}")
        top = {f.name for f in dataclasses.fields(cls)} - {"details"}
        unknown = sorted(set(d) - top - set(_DETAILS) - {"_dir"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown} (schema {SCHEMA_VERSION} knows {sorted(top)})")
        missing = [k for k in ("figure", "title", "paper", "command", "verdict", "summary") if k not in d]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        if d["verdict"] not in VERDICTS:
            raise ValueError(f"{where}: verdict {d['verdict']!r} is not one of {VERDICTS}")
        for key in ("figure", "title", "paper", "command", "summary"):
            if not isinstance(d[key], str):
                raise ValueError(f"{where}: {key} is {d[key]!r}, not a string")
        if not FIGURE_NAME.fullmatch(d["figure"]):  # "../../x" was written outside the records folder
            raise ValueError(f"{where}: figure {d['figure']!r} is not a figure name (letters, digits, _ . -)")
        for key in ("models", "plots"):  # a string was read letter by letter (plots: files deleted and copied)
            v = d.get(key) or []
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ValueError(f"{where}: {key} is {v!r}, not a list of names")
        if not isinstance(d.get("beyond_paper", False), bool):  # "false" was true: the figure left the table
            raise ValueError(f"{where}: beyond_paper is {d['beyond_paper']!r}, not true / false")
        if d.get("recorded") is not None and not isinstance(d["recorded"], str):
            raise ValueError(f"{where}: recorded is {d['recorded']!r}, not a date string")
        if not isinstance(d.get("numbers") or {}, dict):
            raise ValueError(f"{where}: numbers is not an object")
        checks = [Check.from_row(c, where) for c in d.get("checks") or []]
        ids = [c.id for c in checks]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{where}: two checks share an id: {sorted({i for i in ids if ids.count(i) > 1})}")
        return cls(
            figure=d["figure"],
            title=d["title"],
            paper=d["paper"],
            models=list(d.get("models") or []),
            command=d["command"],
            verdict=d["verdict"],
            summary=d["summary"],
            checks=checks,
            plots=list(d.get("plots") or []),
            beyond_paper=bool(d.get("beyond_paper", False)),
            recorded=d.get("recorded"),
            numbers=d.get("numbers") or {},
            details={k: d[k] for k in _DETAILS if k in d},
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``write_record`` writes (the field order of the records before the types)."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "beyond_paper": self.beyond_paper,
            "figure": self.figure,
            "title": self.title,
            "paper": self.paper,
            "models": self.models,
            "command": self.command,
            **({"recorded": self.recorded} if self.recorded is not None else {}),
            "verdict": self.verdict,
            "summary": self.summary,
        }
        out.update({k: self.details[k] for k in _DETAILS if k in self.details})
        out["checks"] = [c.to_row() for c in self.checks]
        out["numbers"] = self.numbers
        out["plots"] = self.plots
        return out

    def check(self, id_: str) -> Check:
        """The check with id ``id_`` (KeyError naming the ids it has)."""
        for c in self.checks:
            if c.id == id_:
                return c
        raise KeyError(f"{self.figure}: no check {id_!r}; its checks: {[c.id for c in self.checks]}")

    def judged(self) -> str:
        """The verdict its checks give: on the counted ones where controls ran (``inconclusive`` if none counts),
        else on every check; ``not run`` stays. An early reading (``interim``, or a sweep's zoo cells alone) is
        capped at ``partly``."""
        if self.verdict == "not run":  # decided outside the checks (a model or sweep missing, a step skipped)
            return "not run"
        controlled = any(c.counted is not None for c in self.checks)
        outcomes = [c.counted_holds for c in self.checks if c.counted] if controlled else [c.holds for c in self.checks]
        if not outcomes:
            return "inconclusive" if controlled else "not run"
        verdict = verdict_of([("", bool(o)) for o in outcomes])
        early = "interim" in self.details or "Verdict from these cells alone" in self.summary
        return "partly" if early and verdict == "reproduced" else verdict


def write_record(record: Record | dict[str, Any], path: str | Path) -> Record:
    """Write ``record`` (a ``Record``, or the dict ``reproduce`` assembled) to ``path`` as JSON, atomically; the one
    writer of records. Refuses a record whose stated verdict is not the one its checks give (``Record.judged``).

    Example:
        >>> import tempfile
        >>> d = {"figure": "t", "title": "T", "paper": "p", "models": [], "command": "c", "verdict": "reproduced",
        ...      "summary": "s", "plots": [], "checks": [{"check": "a", "holds": False}]}
        >>> write_record(d, tempfile.mkdtemp() + "/t.json")
        Traceback (most recent call last):
        ValueError: record 't': its verdict 'reproduced' is not what its checks give ('not reproduced')
    """
    rec = record if isinstance(record, Record) else Record.from_dict(record)
    if rec.judged() != rec.verdict:
        raise ValueError(
            f"record {rec.figure!r}: its verdict {rec.verdict!r} is not what its checks give ({rec.judged()!r})"
        )
    atomic_write_text(Path(path), json_text(rec.to_dict(), default=float))
    return rec


def load_record(path: str | Path) -> Record:
    """The record in ``path`` (a version-2 record converted: ``Record.from_dict``); a file that is not one is an
    error naming it."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"record {path} is not valid JSON ({e})") from e
    return checked_verdict(Record.from_dict(d, where=f"record {path}"), f"record {path}")


def checked_verdict(rec: Record, where: str) -> Record:
    """``rec`` if its stated verdict is the one its checks give, else a ``ValueError`` (a hand-edited verdict was
    shown and counted on the results page)."""
    if rec.judged() != rec.verdict:
        raise ValueError(f"{where}: its verdict {rec.verdict!r} is not what its checks give ({rec.judged()!r})")
    return rec


def is_record(d: Any) -> bool:
    """Whether JSON value ``d`` is a figure record (an object with ``figure`` and ``verdict``), to be read with
    ``Record.from_dict``; readers of a folder skip other JSON files."""
    return isinstance(d, dict) and "figure" in d and "verdict" in d


__all__ = [
    "SCHEMA_VERSION",
    "VERDICTS",
    "Check",
    "Record",
    "check_id",
    "checked_verdict",
    "load_record",
    "verdict_of",
    "write_record",
]


GUARD_NOTE = "[Guarded on "  # how guard_record's sentence in a record's notes begins


def guarded_notes(notes: str, on: str, status: str) -> str:
    """A record's ``notes`` with guard_record's sentence (guarded on date ``on`` by a trained control, ``status``)
    after them, in place of an earlier guard's; no leading space where the notes were empty.

    Example:
        >>> guarded_notes("", "2026-11-30", "1 run")[:40], guarded_notes("", "2026-11-30", "1 run")[-9:]
        ('[Guarded on 2026-11-30 by its trained co', 'l entry.]')
        >>> again = guarded_notes(guarded_notes("As made.", "2026-11-29", "1 run"), "2026-11-30", "3 runs")
        >>> again.startswith("As made. [Guarded on 2026-11-30"), again.count(GUARD_NOTE)
        (True, 1)
    """
    kept = notes.split(GUARD_NOTE)[0].rstrip()
    said = f"{GUARD_NOTE}{on} by its trained control ({status}): see the record's trained-control entry" + (
        "; the notes above are as recorded before it.]" if kept else ".]"
    )
    return f"{kept} {said}" if kept else said
