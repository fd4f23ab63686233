"""Session 35: the RoPE key analyses on the shared label-list check, and the moved ``head_subset_sweep``'s hint kept
through ``from hooked_clip1d.analysis import head_subset_sweep``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig
from hooked_clip1d.analysis.mechanism.rope import key_pca

SNIPPET = """
import hooked_clip1d.analysis as A
assert not hasattr(A, "head_subset_sweep")
try:
    getattr(A, "head_subset_sweep")
except AttributeError as e:
    assert "moved to hooked_clip1d.training.retrain" in str(e), e
def f():
    from hooked_clip1d.analysis import head_subset_sweep  # noqa: F401
try:
    f()
except ImportError as e:
    assert "from hooked_clip1d.training.retrain import head_subset_sweep" in str(e), e
else:
    raise AssertionError("imported")
try:
    from hooked_clip1d.analysis import no_such_thing  # noqa: F401
except ImportError as e:
    assert "cannot import name 'no_such_thing'" in str(e), e
print("ok")
"""


def test_the_moved_head_subset_sweep_names_its_new_home_on_from_import():
    """``from hooked_clip1d.analysis import head_subset_sweep`` gave Python's bare "cannot import name": the module's
    hint was an AttributeError, which ``from ... import`` replaces. It is an ImportError there now (carrying the
    hint), and an AttributeError for getattr / hasattr. In a plain interpreter and under the tests' type checkers."""
    exec(compile(SNIPPET, "<snippet>", "exec"), {})
    out = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_key_pca_refuses_bad_label_lists_by_the_shared_check():
    """``rope._labels`` had its own label checks (a "labels listed twice" message); it uses
    ``settings.checks.check_label_list`` now, a tensor of any shape flattened first, a split's labels range-checked."""
    m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5, positional="rope"), seed=0).eval()
    assert key_pca(m.vision, torch.tensor([[1, 2], [3, 4]]))["labels"].tolist() == [1, 2, 3, 4]
    for bad, err, msg in (
        ([1.0, 2.0], TypeError, "labels must be ints|parameter .labels."),
        (torch.tensor([True, False]), TypeError, "labels must be ints"),
        ([1], ValueError, "need at least 2 distinct labels"),
        ([0, 1], ValueError, r"labels \[0\] are outside 1..5"),
        ([1, 2, 6], ValueError, r"labels \[6\] are outside 1..5"),
        ("12", (ValueError, TypeError), "must be a list of labels|parameter .labels."),
        ([2, 2, 3], ValueError, r"repeated labels in \[2, 2, 3\]"),
    ):
        with pytest.raises(err, match=msg):
            key_pca(m.vision, bad)
