"""x18-dissolution (reproduce/dissolution_study.py): the per-run readings behind its checks."""

from __future__ import annotations

from conftest import tiny_config

from hooked_clip1d import CLIP1D, DataConfig
from hooked_clip1d.model.checkpoint import load_model_file, save_model
from hooked_clip1d.reproduce.dissolution_study import _trajectory_split

D6 = DataConfig(n_labels=6, n_heldout=2, n2=2)


def test_trajectory_split_reads_snapshot_files_that_carry_no_manifest(tmp_path):
    """x18 read the best arm's run from its snapshot files and stopped: a snapshot has no manifest, and the data
    order's seed was read from one. The seed is now the caller's (the run's config.json)."""
    m = CLIP1D(tiny_config(n_labels=6), seed=0).eval()
    save_model(m, tmp_path / "epoch_0.safetensors", data_config=D6)
    snap = load_model_file(tmp_path / "epoch_0.safetensors")
    assert not hasattr(snap, "manifest")
    rows = _trajectory_split([(0, snap)], "distinct", seed=3)
    assert len(rows) == 1 and rows[0]["epoch"] == 0
    assert abs(rows[0]["loss_unique"] + rows[0]["loss_shared"] - rows[0]["loss"]) < 1e-5
    # the run's seed decides the data order, hence which items share their caption in a batch
    other = _trajectory_split([(0, snap)], "distinct", seed=4)
    assert rows[0]["loss"] != other[0]["loss"] or rows[0]["shared_items"] != other[0]["shared_items"]
