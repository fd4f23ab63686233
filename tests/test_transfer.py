"""Finished runs carried between machines in size-capped archives (a GPU lent in short commands)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from hooked_clip1d.model.checkpoint import load_model_file, read_tensors
from hooked_clip1d.sweeps.runner import load_spec, results_table, run_sweep
from hooked_clip1d.sweeps.transfer import (
    RUN_FILES,
    _tar_bytes,
    carry_sweep,
    finished_runs,
    pack_for_transfer,
    pack_runs,
    pack_state,
    unfinished_groups,
    unpack_runs,
    unpack_state,
)
from hooked_clip1d.training.group_io import GROUP_CHECKPOINT, read_group_state

TINY = Path(__file__).resolve().parent.parent / "examples" / "sweeps" / "tiny.toml"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu") / "tiny"
    run_sweep(TINY, out, progress=False)
    return out


def test_packed_runs_read_back_as_the_runs_trained_there(trained, tmp_path):
    archives = pack_runs(trained, tmp_path / "back")
    assert [a.name for a in archives] == ["runs-000.tar"]
    names = unpack_runs(archives, tmp_path / "here")
    assert names == sorted(p.name for p in finished_runs(trained))
    spec = load_spec(TINY)
    strip = [{k: v for k, v in r.items() if k != "path"} for r in results_table(spec, trained)]
    assert [{k: v for k, v in r.items() if k != "path"} for r in results_table(spec, tmp_path / "here")] == strip
    for name in names:  # float16 weights: within float16 rounding of the trained ones
        a = load_model_file(trained / "runs" / name / "model.safetensors").state_dict()
        b = load_model_file(tmp_path / "here" / "runs" / name / "model.safetensors").state_dict()
        for k in a:
            assert torch.allclose(a[k], b[k], rtol=1e-3, atol=1e-4), (name, k)
        assert not (tmp_path / "here" / "runs" / name / "checkpoint.safetensors").exists()
    shutil.copy(trained / "spec.toml", tmp_path / "here" / "spec.toml")  # a resumed sweep retrains nothing
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "here" / "runs").rglob("*")}
    assert len(run_sweep(TINY, tmp_path / "here", progress=False)) == 4
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "here" / "runs").rglob("*")} == before
    assert unpack_runs(archives, tmp_path / "here") == names  # identical runs: nothing to do


def test_archives_stay_under_the_size_cap(trained, tmp_path):
    run = max(sum((r / f).stat().st_size for f in RUN_FILES) for r in finished_runs(trained))
    # room for one run, its tar headers (and block padding) and tar's 10 KiB record padding, not two runs. The
    # record padding was left out of pack_runs' estimate until a config field added a few bytes and an archive came
    # out over the cap
    one = _tar_bytes(run + len(RUN_FILES) * (1536 + 512))
    assert _tar_bytes(2 * run) > one
    cap = one / 2**20  # MiB
    archives = pack_runs(trained, tmp_path / "small", max_mib=cap, weights_dtype="float32")
    assert len(archives) == 4 and all(a.stat().st_size <= cap * 2**20 for a in archives)
    assert unpack_runs(archives, tmp_path / "x") == sorted(p.name for p in finished_runs(trained))
    with pytest.raises(ValueError, match="needs .* MiB"):
        pack_runs(trained, tmp_path / "tiny", max_mib=0.001)
    for bad in ({"weights_dtype": "int8"}, {"max_mib": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            pack_runs(trained, tmp_path / "bad", **bad)
    with pytest.raises(ValueError, match="no finished run"):
        pack_runs(tmp_path / "small", tmp_path / "y")  # archives, no runs
    with pytest.raises(FileExistsError, match="empty folder"):  # a second pack would mix with the first's archives
        pack_runs(trained, tmp_path / "small")


def test_unpack_refuses_foreign_members_and_conflicting_runs(trained, tmp_path):
    archive = pack_runs(trained, tmp_path / "back")[0]
    for name in ("../evil/config.json", "run/setup.py", "a/b/config.json"):
        bad = tmp_path / "bad.tar"
        with tarfile.open(bad, "w") as tar:
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
        with pytest.raises(ValueError, match="unexpected member"):
            unpack_runs([bad], tmp_path / "dest")
    link = tmp_path / "link.tar"
    with tarfile.open(link, "w") as tar:
        info = tarfile.TarInfo("run/config.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(ValueError, match="unexpected member"):
        unpack_runs([link], tmp_path / "dest")
    assert not (tmp_path / "dest" / "runs").exists() or not any((tmp_path / "dest" / "runs").iterdir())
    unpack_runs([archive], tmp_path / "dest")
    run = next((tmp_path / "dest" / "runs").iterdir())
    (run / "summary.json").write_text('{"edited": true}')
    with pytest.raises(FileExistsError, match=run.name):
        unpack_runs([archive], tmp_path / "dest")


def test_pack_and_unpack_commands(trained, tmp_path, capsys):
    from hooked_clip1d.cli.commands import main

    assert main(["pack", str(trained), str(tmp_path / "back"), "--max-mib", "16"]) == 0
    assert "runs-000.tar" in capsys.readouterr().out
    assert main(["unpack", str(tmp_path / "back" / "runs-000.tar"), "--into", str(tmp_path / "here")]) == 0
    assert "4 runs in" in capsys.readouterr().out
    assert main(["pack", str(tmp_path / "back"), str(tmp_path / "x")]) == 2  # no runs there: one-line error
    assert "no finished run" in capsys.readouterr().err


def test_a_group_with_runs_finished_elsewhere_resumes_over_several_calls(tmp_path):
    """Runs finished in an earlier session arrive without weights (gpu_queue.sh carry); the fresh group trains the
    others, and its checkpoint (which holds those alone) resumes in the next call: a bug once made it refuse."""
    from hooked_clip1d.sweeps.status import sweep_status

    spec = tmp_path / "s.toml"
    spec.write_text(TINY.read_text().replace("n_labels = [6, 7]", "n_labels = [5, 7]").replace("seed = [0, 1]", ""))
    first = tmp_path / "first"
    run_sweep(spec, first, progress=False, max_steps=10)  # n_labels 5 finishes at 9 steps, 7 needs 15
    done = finished_runs(first)
    assert [p.name for p in done] == ["n_labels-5"]
    here = tmp_path / "here"
    (here / "runs" / "n_labels-5").mkdir(parents=True)
    for f in ("config.json", "summary.json", "metrics.jsonl"):
        shutil.copy(done[0] / f, here / "runs" / "n_labels-5" / f)
    shutil.copy(spec, here / "spec.toml")
    assert run_sweep(spec, here, progress=False, max_steps=4) == results_table(load_spec(spec), here)
    group = sweep_status(spec, here)["groups"][0]
    assert (group["step"], group["active"]) == (4, 1)  # this group's own step, not the carried run's 9
    run_sweep(spec, here, progress=False, max_steps=4)  # resumed from the checkpoint of n_labels-7 alone
    rows = run_sweep(spec, here, progress=False)
    assert [(r["run"], r["steps"]) for r in rows] == [("n_labels-5", 9), ("n_labels-7", 15)]
    assert not (here / "runs" / "n_labels-5" / "model.safetensors").exists()  # never retrained


# ---- resumable state: a run that outlasts a session -------------------------------------------------------------
STATE_SPEC = """name = "carry"
[model]
preset = "full"
d_model = 16
d_head = 4
n_heads = 2
d_mlp = 32
n_layers = 2
[data]
n_heldout = 2
n2 = 2
[train]
epochs = 3
batch_size = 16
eval_every = 1
checkpoint_every = 2
[grid]
n_labels = [5, 7]
[run]
dropout_rng = "fast"
"""


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return read_tensors(path)[0]


def _lines(run: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in ln.items() if k != "elapsed_s"} for ln in lines]


def test_a_run_carried_over_two_sessions_ends_bit_for_bit_where_one_session_ends(tmp_path):
    """Session 1 trains 11 steps (n_labels 5 finishes at 9, n_labels 7 needs 15) and sends back the finished run
    and the unfinished group's state (weights, AdamW moments, data order, dropout stream); here they are unpacked
    and carried to a fresh folder (a new machine), where the group resumes: its run ends bit for bit where an
    uninterrupted sweep's ends (fp32 weights, every metrics line but the clock), and nothing is retrained."""
    spec = tmp_path / "carry.toml"
    spec.write_text(STATE_SPEC)
    whole = tmp_path / "whole"
    run_sweep(spec, whole, progress=False)
    gpu1 = tmp_path / "gpu1"
    run_sweep(spec, gpu1, progress=False, max_steps=11)
    (group,) = unfinished_groups(gpu1)
    assert (group["step"], group["active"]) == (11, ["n_labels-7"])
    back = pack_for_transfer(gpu1, tmp_path / "back")
    assert back["runs"] == ["n_labels-5"] and [g["name"] for g in back["state"]] == [group["name"]]
    assert [a.name for a in back["archives"]] == ["runs-000.tar", "state-000.tar"]
    home = tmp_path / "home"
    assert unpack_runs(back["archives"], home) == ["n_labels-5"]
    assert read_group_state(home / "groups" / group["name"] / GROUP_CHECKPOINT)["step"] == 11
    carried = carry_sweep(load_spec(spec), home, tmp_path / "carry")
    assert carried["runs"] == ["n_labels-5"] and [g["name"] for g in carried["groups"]] == [group["name"]]
    assert sorted(p.name for p in (tmp_path / "carry").rglob("*.safetensors")) == [GROUP_CHECKPOINT]
    gpu2 = tmp_path / "gpu2"
    shutil.copytree(tmp_path / "carry", gpu2)  # a fresh machine: what travelled, nothing else
    rows = run_sweep(spec, gpu2, progress=False)
    assert [(r["run"], r["steps"]) for r in rows] == [("n_labels-5", 9), ("n_labels-7", 15)]
    assert not (gpu2 / "runs" / "n_labels-5" / "model.safetensors").exists()  # not retrained
    for run, there in (("n_labels-7", gpu2), ("n_labels-5", gpu1)):
        a = _tensors(whole / "runs" / run / "model.safetensors")
        b = _tensors(there / "runs" / run / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), run
        assert _lines(there / "runs" / run) == _lines(whole / "runs" / run), run


def test_state_archives_are_checked_before_anything_is_written(tmp_path):
    spec = tmp_path / "carry.toml"
    spec.write_text(STATE_SPEC)
    gpu = tmp_path / "gpu"
    run_sweep(spec, gpu, progress=False, max_steps=4)
    (group,) = unfinished_groups(gpu)
    g = group["name"]
    # split over archives of at most 0.1 MiB: each is needed
    parts = pack_state(gpu, tmp_path / "small", max_mib=0.1)
    assert len(parts) >= 2 and all(p.stat().st_size <= 0.1 * 2**20 for p in parts)
    with pytest.raises(ValueError, match="give every one of them"):
        unpack_state(parts[1:], tmp_path / "x")
    assert not (tmp_path / "x").exists()
    (got,) = unpack_state(parts, tmp_path / "x")
    assert (got["name"], got["step"], sorted(got["active"])) == (g, 4, ["n_labels-5", "n_labels-7"])
    raw = (gpu / "groups" / g / GROUP_CHECKPOINT).read_bytes()
    assert (tmp_path / "x" / "groups" / g / GROUP_CHECKPOINT).read_bytes() == raw
    # a state older than the group already there is refused; so is one that still trains a run finished there
    run_sweep(spec, gpu, progress=False, max_steps=2)  # to step 6: both still training
    newer = pack_state(gpu, tmp_path / "newer")
    unpack_runs(newer, tmp_path / "x")
    with pytest.raises(FileExistsError, match="later than this state's 4"):
        unpack_runs(parts, tmp_path / "x")
    (tmp_path / "x" / "runs" / "n_labels-5" / "summary.json").write_text("{}")
    with pytest.raises(FileExistsError, match="has finished"):
        unpack_state(newer, tmp_path / "x")
    # a damaged archive (one byte of a checkpoint piece flipped) is caught by its checksum
    bad = tmp_path / "bad"
    bad.mkdir()
    with tarfile.open(newer[0]) as tar, tarfile.open(bad / "state-000.tar", "w", format=tarfile.PAX_FORMAT) as out:
        for m in tar.getmembers():
            b = tar.extractfile(m).read()
            if ".z." in m.name:
                b = b[:100] + bytes([b[100] ^ 1]) + b[101:]
            out.addfile(m, io.BytesIO(b))
    with pytest.raises(Exception, match="checksum|Error -3"):
        unpack_state([bad / "state-000.tar"], tmp_path / "y")


def test_transfer_choice_puts_new_runs_first_and_the_state_only_whole(tmp_path):
    spec = tmp_path / "carry.toml"
    spec.write_text(STATE_SPEC)
    gpu = tmp_path / "gpu"
    run_sweep(spec, gpu, progress=False, max_steps=11)
    one = pack_for_transfer(gpu, tmp_path / "one", max_files=1)  # the new run takes the only file
    assert one["runs"] == ["n_labels-5"] and one["state"] == [] and one["state_left"] == [one["state_left"][0]]
    again = pack_for_transfer(gpu, tmp_path / "again", sent=one["runs"])  # sent before: state first, then again
    assert again["runs"] == [] and len(again["state"]) == 1 and again["resent"] == ["n_labels-5"]
    assert [a.name for a in again["archives"]] == ["state-000.tar", "resent-000.tar"]
    tight = pack_for_transfer(gpu, tmp_path / "tight", sent=one["runs"], state_mib=0.01)  # no room for the state
    assert tight["state"] == [] and tight["state_left"] and tight["resent"] == ["n_labels-5"]
