"""Typed records (issue 52): every committed record loads through the one converter and is judged as it says; the
one writer refuses a verdict its checks do not give; unknown fields, non-bool outcomes, NaN values and missing
counted outcomes are errors; check ids are stable and unique; the null control refuses a check that vanished."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hooked_clip1d.reproduce.controls import counted_checks
from hooked_clip1d.reproduce.core import Outcome
from hooked_clip1d.reproduce.records import SCHEMA_VERSION, Check, Record, check_id, load_record, write_record

RECORDS = Path(__file__).resolve().parents[1] / "docs" / "records"


def _minimal(**kw):
    checks = [{"check": "a", "holds": True}, {"check": "b", "holds": False}]
    d = {"figure": "t", "title": "T", "paper": "p", "models": [], "command": "c", "verdict": "partly"}
    return {**d, "summary": "s", "plots": [], "checks": checks, **kw}


@pytest.mark.parametrize("path", sorted(RECORDS.glob("*.json")), ids=lambda p: p.stem)
def test_every_committed_record_loads_and_is_judged_as_it_says(path):
    rec = load_record(path)
    assert rec.judged() == rec.verdict and rec.schema == SCHEMA_VERSION
    assert len({c.id for c in rec.checks}) == len(rec.checks)
    again = Record.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert again == rec  # the written form reads back to the same record


def test_the_writer_refuses_a_verdict_the_checks_do_not_give(tmp_path):
    with pytest.raises(ValueError, match="its verdict 'reproduced' is not what its checks give \\('partly'\\)"):
        write_record(_minimal(verdict="reproduced"), tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()  # nothing half-written
    rec = write_record(_minimal(), tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["schema"] == SCHEMA_VERSION
    assert load_record(tmp_path / "t.json") == rec


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "unknown field\\(s\\) \\['colour'\\]"),
        ({"verdict": "sort of"}, "verdict 'sort of' is not one of"),
        ({"schema": 4}, "schema 4; this package reads 2 and 3"),
        ({"checks": [{"check": "a", "holds": "yes"}]}, "'holds' is 'yes', not a bool"),
        ({"checks": [{"check": "a", "holds": True, "value": math.nan}]}, "value is nan, not a finite number"),
        ({"checks": [{"check": "a", "holds": True, "counted": True}]}, "counts but its counted outcome is missing"),
        ({"checks": [{"check": "a", "holds": True, "colour": 1}]}, "unknown field\\(s\\) \\['colour'\\]"),
        ({"checks": [{"check": "a", "holds": True}, {"check": "a", "holds": True}]}, "two checks share an id"),
    ],
)
def test_a_bad_record_is_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        Record.from_dict(_minimal(**change))


def test_check_ids_are_the_figures_own_or_derived_once():
    out = Outcome({}, "", [("a holds", True), ("b holds", True)], {}, check_ids={"a holds": "fig-a"})
    assert [out.id_of(c) for c, _ in out.checks] == ["fig-a", check_id("b holds")]
    null = {"variants": [{"model": "u", "checks": {"a holds": False, "b holds": False}, "values": {}}]}
    rows = counted_checks(out, null)
    assert [r.id for r in rows] == ["fig-a", check_id("b holds")]
    assert Check.from_row(rows[0].to_row(), "t").id == "fig-a"  # an id written is kept, not derived again
    assert check_id("a holds") != check_id("a holds too") and check_id("x") == check_id("x")


def test_the_null_control_refuses_a_check_that_vanished():
    """A check missing from an untrained draw's outcome is an error, not a fail that would let it count."""
    out = Outcome({}, "", [("a", True), ("b", True)], {})
    null = {"variants": [{"model": "untrained:0", "checks": {"a": False}, "values": {}}]}
    with pytest.raises(ValueError, match="draws \\['untrained:0'\\] do not report the check 'b'"):
        counted_checks(out, null)


def test_an_old_record_converts_and_compares_with_a_new_one(tmp_path):
    """A version-2 record (no schema, no ids) reads as version 3; compare_records sees no difference from the
    same record written by today's writer."""
    from hooked_clip1d.reproduce.compare import compare_records

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    (old / "t.json").write_text(json.dumps(_minimal()))
    write_record(_minimal(), new / "t.json")
    assert load_record(old / "t.json").checks[0].id == check_id("a")
    assert compare_records(old, new) == {"t": []}


def test_kept_json_files_are_in_the_compact_layout():
    """Records and the zoo's manifests are written by ``files.json_text`` (scalar-only rows on one line: a third
    smaller than ``indent=2``, and the working tree travels to a GPU window within 64 MiB); a file written another
    way (a hand edit, an old writer, a patch) is named."""
    import json
    from pathlib import Path

    from hooked_clip1d.files import json_text

    root = Path(__file__).resolve().parents[1]
    files = [*(root / "docs" / "records").glob("*.json"), *(root / "hooked_clip1d" / "pretrained").glob("*/*.json")]
    assert len(files) > 40
    other = [str(f.relative_to(root)) for f in files if f.read_text() != json_text(json.loads(f.read_text()))]
    assert not other, f"not in files.json_text's layout (rewrite them with it): {other}"
