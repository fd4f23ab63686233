"""benchmarks/gpu_queue.sh on the CPU: a sweep that does not finish in one lent session comes back in parts.

Two "sessions" (fresh $STATE each, as a GPU machine is after it goes back): the first stops after 7 steps, when one
of the two runs has finished; it brings back that run and the resumable state of the other (its group's weights,
AdamW moments, data order and dropout stream). Unpacked here and carried (`gpu_queue.sh carry`), the finished run
is not retrained by the second session, and the other resumes at step 7: both end bit for bit where one
uninterrupted sweep ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from hooked_clip1d.model.checkpoint import read_tensors
from hooked_clip1d.sweeps.runner import load_spec, results_table, run_sweep
from hooked_clip1d.sweeps.transfer import unpack_runs

ROOT = Path(__file__).resolve().parent.parent
SPEC = """name = "t"
[model]
preset = "simplified"
d_model = 16
d_head = 4
n_heads = 2
[data]
n_heldout = 2
n2 = 2
[train]
epochs = 2
batch_size = 16
[grid]
n_labels = [5, 7]
"""


def queue(tmp: Path, *args: str, rc: int = 0, **env: str) -> str:
    full = {**os.environ, "QUEUE": "t", "SPEC_DIR": str(tmp / "specs"), "CARRY": str(tmp / "carry"),
            "DEVICE": "cpu", "FLAGS": "", "WHEELS": str(tmp / "no-wheels"), **env}  # fmt: skip
    r = subprocess.run(["bash", "benchmarks/gpu_queue.sh", *args], cwd=ROOT, env=full, capture_output=True, text=True)
    assert r.returncode == rc, r.stdout + r.stderr
    return r.stdout + r.stderr


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/")[0] for m in tar.getmembers()}


@pytest.mark.slow
def test_a_sweep_finished_over_two_sessions_retrains_nothing_and_resumes_bit_for_bit(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "t.toml").write_text(SPEC)
    home = tmp_path / "home"
    # session 1: 7 steps; n_labels 5 has 3 steps an epoch (finishes at 6), n_labels 7 has 5 (needs 10)
    out = queue(tmp_path, "120", STATE=str(tmp_path / "s1"), OUT=str(tmp_path / "o1"), FLAGS="--max-steps 7")
    assert "1 of 2 runs finished (1 of them trained on this machine)" in out
    assert "packed 1 new runs, 0 sent before, resumable state: g000" in out and "at step 7" in out
    assert not (tmp_path / "s1" / "done-t").exists()
    assert sorted(p.name for p in (tmp_path / "o1" / "t").iterdir()) == ["runs-000.tar", "state-000.tar"]
    assert members(tmp_path / "o1" / "t" / "runs-000.tar") == {"n_labels-5"}
    out = queue(tmp_path, "unpack", str(tmp_path / "o1"), HOOKED_CLIP1D_SWEEPS=str(home))
    assert "t: 1 runs and the resumable state" in out
    (tmp_path / "other").mkdir()  # a spec that would not train them as they were: refused here, not on the GPU
    (tmp_path / "other" / "t.toml").write_text(SPEC.replace("[train]", "[train]\nlr = 0.001"))
    out = queue(tmp_path, "carry", rc=3, HOOKED_CLIP1D_SWEEPS=str(home), SPEC_DIR=str(tmp_path / "other"))
    assert "train_config.lr: trained with 0.0001, the spec asks 0.001" in out
    out = queue(tmp_path, "carry", HOOKED_CLIP1D_SWEEPS=str(home), CARRY_MIB="0.001")  # no room for the state
    assert "1 finished runs" in out and "WARNING: the state of" in out
    assert not (tmp_path / "carry" / "t" / "groups").exists()
    out = queue(tmp_path, "carry", HOOKED_CLIP1D_SWEEPS=str(home))
    assert "1 finished runs" in out and "resumable state: g000" in out
    assert sorted(p.name for p in (tmp_path / "carry" / "t").iterdir()) == ["groups", "plan.json", "runs", "spec.toml"]
    assert [p.name for p in (tmp_path / "carry").rglob("*.safetensors")] == ["group_checkpoint.safetensors"]
    # session 2, a fresh machine: the carried run is not retrained, the other resumes at step 7 and finishes
    out = queue(tmp_path, "120", STATE=str(tmp_path / "s2"), OUT=str(tmp_path / "o2"))
    assert "1 runs finished in earlier sessions (carried), not retrained; 1 groups resume" in out
    assert "WARNING" not in out
    assert "2 of 2 runs finished (1 of them trained on this machine)" in out
    assert (tmp_path / "s2" / "done-t").exists()
    assert sorted(p.name for p in (tmp_path / "o2" / "t").iterdir()) == ["runs-000.tar"]
    assert members(tmp_path / "o2" / "t" / "runs-000.tar") == {"n_labels-7"}
    unpack_runs(sorted((tmp_path / "o2" / "t").glob("*.tar")), home / "t")
    rows = results_table(load_spec(tmp_path / "specs" / "t.toml"), home / "t")
    assert [(r["run"], r["steps"]) for r in rows] == [("n_labels-5", 6), ("n_labels-7", 10)]
    # what two sessions trained is what one uninterrupted session trains, bit for bit (fp32 weights on the machine)
    whole = tmp_path / "whole"
    run_sweep(tmp_path / "specs" / "t.toml", whole, progress=False)
    for run, machine in (("n_labels-5", "s1"), ("n_labels-7", "s2")):
        a = read_tensors(whole / "runs" / run / "model.safetensors")[0]
        b = read_tensors(tmp_path / machine / "sweeps" / "t" / "runs" / run / "model.safetensors")[0]
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), run
        lines = [
            [{k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in (d / "metrics.jsonl").open()]
            for d in (whole / "runs" / run, tmp_path / machine / "sweeps" / "t" / "runs" / run)
        ]
        assert lines[0] == lines[1], run


def _gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_check_picks_the_fastest_fp32_queue_mode_that_passed():
    gc = _gpu_check()
    checks = [
        {"mode": "graph-step", "ok": False},  # failed its check: never picked, however fast
        {"mode": "compile+cudagraphs/flat", "ok": True},
        {"mode": "flat", "ok": True},
        {"mode": "graph-step+tf32", "ok": True},  # reduced precision: reported, not picked
    ]
    rows = [{"mode": m, "K": k, "ms_per_step": ms} for m, ms in
            (("graph-step", 0.5), ("compile+cudagraphs/flat", 2.0), ("flat", 3.0), ("graph-step+tf32", 0.3))
            for k in (1, 5, 12)]  # fmt: skip
    flags, hours = gc.pick(checks, rows)
    assert flags == "--compile --cudagraphs" and hours == pytest.approx(2.0 * (880_000 + 440_000 + 1_170_000) / 3.6e6)
    assert gc.pick(checks, [r for r in rows if r["K"] != 12 or r["mode"] == "flat"])[0] == "--no-compile"
    assert gc.pick([], rows) == (None, None)  # nothing checked: gpu_queue.sh falls back to its own rule
    assert set(gc.QUEUE_FLAGS) <= set(gc.MODES) and all(gc._precision(m) == "fp32" for m in gc.QUEUE_FLAGS)


@pytest.mark.slow
def test_the_gpu_check_runs_on_a_cpu(tmp_path):
    """The script's CPU-side paths (the checks against the CPU, the flat mode against eager, the timing table, the
    pick) run before any device time is spent on them."""
    r = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--quick", "--threads", "1",
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert all(c["ok"] for c in record["checks"]), record["checks"]
    assert {c.get("mode") for c in record["checks"]} >= {"flat"}
    assert [(row["mode"], row["K"]) for row in record["timing"]] == [("eager", 1), ("eager", 2)]
