"""Bad inputs of issue 45 get a clear error naming the problem and leave nothing behind."""

from __future__ import annotations

import pytest

from hooked_clip1d.reproduce.runner import reproduce
from hooked_clip1d.settings import TrainConfig
from hooked_clip1d.sweeps.spec import load_spec


def test_a_string_group_list_is_refused_not_split_into_letters():
    # (under the test suite's beartype instrumentation the annotation refuses it first: a TypeError naming it)
    with pytest.raises((ValueError, TypeError), match="no_decay") as err:
        TrainConfig.from_dict({"no_decay": "cls"})
    assert "'cls'" in str(err.value) and "'c', 'l'" not in str(err.value)  # not letter by letter (session 45)
    with pytest.raises((ValueError, TypeError), match="no_decay") as err:
        load_spec(text='[train]\nno_decay = "cls"\n[grid]\nseed = [0]').runs  # noqa: B018
    assert "'cls'" in str(err.value) and "'c', 'l'" not in str(err.value)
    assert TrainConfig.from_dict({"no_decay": ["cls"]}).no_decay == ("cls",)


@pytest.mark.parametrize("bad", ["untrained:BAD", "untrained:3:inf", "/no/such/run"])
def test_a_bad_substitute_leaves_no_results_folder(tmp_path, bad):
    with pytest.raises(ValueError, match="untrained:SEED|not a run folder"):
        reproduce("fig4c", out_dir=tmp_path, models=bad)
    assert not (tmp_path / "fig4c").exists()
