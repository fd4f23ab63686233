"""The command line's error contract: a user's mistake is one line and exit code 2; a bug of ours keeps its
traceback (it was once turned into a "usage error" too, which hid real bugs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hooked_clip1d.cli import commands
from hooked_clip1d.files import UnknownNameError


def test_unknown_model_is_a_usage_error(capsys):
    assert commands.main(["eval", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "'no-such-model' is neither a file nor a pretrained model" in err and "known models" in err
    assert commands.main(["list", "--checkpoints", "no-such-model"]) == 2  # an UnknownNameError (a KeyError)
    assert "unknown pretrained model 'no-such-model'" in capsys.readouterr().err


def test_a_bug_is_not_reported_as_a_usage_error(monkeypatch):
    def broken(a):
        raise TypeError("a bug: unsupported operand")

    monkeypatch.setattr(commands, "cmd_list", broken)
    with pytest.raises(TypeError, match="a bug"):
        commands.main(["list"])

    def broken_key(a):
        raise KeyError("missing")

    monkeypatch.setattr(commands, "cmd_list", broken_key)
    with pytest.raises(KeyError):
        commands.main(["list"])


def test_unknown_name_error_is_both_kinds():
    e = UnknownNameError("unknown model 'x'; known: ['a']")
    assert isinstance(e, KeyError) and isinstance(e, ValueError) and str(e) == "unknown model 'x'; known: ['a']"


def test_rejudge_record_all_on_a_folder_without_records_is_an_error(tmp_path, capsys):
    """`reproduce all --rejudge-record DIR` with DIR missing, a file, or holding no sweep figure's record exited 0
    saying "every sweep figure's record in DIR has a null control" (issue 45): nothing was judged, which is not
    "all judged". Now: exit 2 naming the folder, and nothing written."""
    out = tmp_path / "res"
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "zoo-only").mkdir()
    (tmp_path / "zoo-only" / "fig4c.json").write_text("{}")  # a zoo figure's record: nothing to re-judge there
    for folder, problem in (
        ("missing", "is not a folder"),
        ("a-file", "is not a folder"),
        ("empty", "holds no record of a sweep figure"),
        ("zoo-only", "holds no record of a sweep figure"),
    ):
        assert commands.main(["reproduce", "all", "--rejudge-record", str(tmp_path / folder), "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert f"--rejudge-record {str(tmp_path / folder)!r} {problem}" in captured.err, captured.err
        assert "nothing to re-judge" not in captured.out
    assert not out.exists()


def test_guard_record_takes_one_figure_and_names_what_it_refuses(tmp_path, capsys):
    """`reproduce FIG --guard-record DIR`: one figure's kept record under its later trained control; `all`, a
    substituted model, --no-controls or --rejudge-record beside it are refused (exit 2, one line); a figure without
    a pre-registered control is named."""
    out = tmp_path / "res"
    for extra in (["all"], ["fig11", "--no-controls"], ["fig11", "--model", "untrained:1"]):
        assert commands.main(["reproduce", *extra, "--guard-record", str(tmp_path), "--out", str(out)]) == 2
        assert "--guard-record judges one figure's kept record" in capsys.readouterr().err
    assert commands.main(["reproduce", "fig13", "--guard-record", str(tmp_path), "--out", str(out)]) == 2
    assert "fig13 has no pre-registered trained control" in capsys.readouterr().err
    assert not out.exists()


def test_rejudge_record_all_names_an_unreadable_record(tmp_path, capsys):
    from hooked_clip1d.reproduce import FIGURES

    sweep_figure = next(f for f, spec in sorted(FIGURES.items()) if spec.sweep is not None)
    (tmp_path / f"{sweep_figure}.json").write_text("{")
    assert commands.main(["reproduce", "all", "--rejudge-record", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert f"record {tmp_path / (sweep_figure + '.json')} is not valid JSON" in capsys.readouterr().err


def test_a_path_the_system_refuses_is_one_line_naming_it(tmp_path, capsys):
    """An output folder the system will not make (under /sys: refused even to root) printed a PermissionError
    traceback, and a file in the way a raw "[Errno 17] File exists" (issue 45): now one line naming the path, exit
    2."""
    (tmp_path / "a-file").write_text("x")
    for out in ("/sys/hooked-clip1d-test/out", str(tmp_path / "a-file")):
        assert commands.main(["analyze", "alignment", "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hooked-clip1d analyze: error: ") and err.count("\n") == 1, err
        assert "[Errno" not in err and ("/sys/hooked-clip1d-test" in err or str(tmp_path / "a-file") in err), err
    assert commands.user_error(PermissionError(13, "Permission denied", "/x")) == "/x: Permission denied"
    assert commands.user_error(OSError(30, "Read-only file system", "/ro/x")) == "/ro/x: Read-only file system"
    assert commands.user_error(OSError("no path: a bug of ours")) is None  # keeps its traceback
    assert commands.user_error(FileExistsError("'out' already holds runs")) == "'out' already holds runs"


def test_a_file_in_the_way_of_an_output_folder_is_named(tmp_path, capsys):
    """``--out`` naming a file said "afile: File exists" (demo, analyze) or "afile/fig6: Not a directory"
    (reproduce), after the command's work: now the file in the way is named, before any work."""
    f = tmp_path / "afile"
    f.write_text("x")
    spec = str(Path(__file__).parent.parent / "examples" / "sweeps" / "tiny.toml")
    for argv in (
        ["demo", "--out", str(f)],
        ["reproduce", "fig6", "--out", str(f)],
        ["analyze", "heads", "--out", str(f / "sub")],
        ["sweep", spec, "--out", str(f / "sub"), "--status"],
    ):
        assert commands.main(argv) == 2
        err = capsys.readouterr().err
        assert f"{str(f)!r} is a file, where a folder is needed" in err and "[Errno" not in err, err
    assert "(to hold" in commands.user_error(NotADirectoryError(20, "Not a directory", str(f / "fig6")))
    # a FileExistsError on a folder (not a file) keeps the system's words
    assert commands.user_error(FileExistsError(17, "File exists", str(tmp_path))) == f"{tmp_path}: File exists"
