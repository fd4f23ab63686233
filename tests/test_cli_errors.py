"""The command line's error contract: a user's mistake is one line and exit code 2; a bug of ours keeps its
traceback (it was once turned into a "usage error" too, which hid real bugs)."""

from __future__ import annotations

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
