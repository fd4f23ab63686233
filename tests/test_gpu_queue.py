"""benchmarks/gpu_queue.sh on the CPU: a sweep that does not finish in one lent session comes back in parts.

Two "sessions" (fresh $STATE each, as a GPU machine is after it goes back): the first stops after 7 steps, when one
of the two runs has finished; its archive holds that run alone. Unpacked here and carried (`gpu_queue.sh carry`),
it is not retrained by the second session, which trains the other run over two calls and brings back only it.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from hooked_clip1d.sweeps.runner import load_spec, results_table
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
def test_a_sweep_finished_over_two_sessions_retrains_nothing(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "t.toml").write_text(SPEC)
    home = tmp_path / "home"
    # session 1: 7 steps; n_labels 5 has 3 steps an epoch (finishes at 6), n_labels 7 has 5 (needs 10)
    out = queue(tmp_path, "120", STATE=str(tmp_path / "s1"), OUT=str(tmp_path / "o1"), FLAGS="--max-steps 7")
    assert "1 of 2 runs finished (1 of them trained on this machine)" in out
    assert not (tmp_path / "s1" / "done-t").exists()
    (a1,) = sorted((tmp_path / "o1" / "t").glob("*.tar"))
    assert members(a1) == {"n_labels-5"}
    unpack_runs([a1], home / "t")
    (tmp_path / "other").mkdir()  # a spec that would not train them as they were: refused here, not on the GPU
    (tmp_path / "other" / "t.toml").write_text(SPEC.replace("[train]", "[train]\nlr = 0.001"))
    out = queue(tmp_path, "carry", rc=3, HOOKED_CLIP1D_SWEEPS=str(home), SPEC_DIR=str(tmp_path / "other"))
    assert "train_config.lr: trained with 0.0001, the spec asks 0.001" in out
    out = queue(tmp_path, "carry", HOOKED_CLIP1D_SWEEPS=str(home))
    assert "1 finished runs" in out
    assert sorted(p.name for p in (tmp_path / "carry" / "t").iterdir()) == ["runs", "spec.toml"]
    assert not list((tmp_path / "carry").rglob("*.safetensors"))  # configs, metrics, summaries: no weights
    # session 2, a fresh machine, two calls: the carried run is not retrained, the other one is, from its first step
    out = queue(tmp_path, "120", STATE=str(tmp_path / "s2"), OUT=str(tmp_path / "o2"), FLAGS="--max-steps 3")
    assert "1 runs finished in earlier sessions (carried), not retrained" in out
    assert "1 of 2 runs finished (0 of them trained on this machine)" in out and not any((tmp_path / "o2").iterdir())
    out = queue(tmp_path, "120", STATE=str(tmp_path / "s2"), OUT=str(tmp_path / "o2"))  # resumes its checkpoint
    assert "WARNING" not in out
    assert "2 of 2 runs finished (1 of them trained on this machine)" in out
    assert (tmp_path / "s2" / "done-t").exists()
    (a2,) = sorted((tmp_path / "o2" / "t").glob("*.tar"))
    assert members(a2) == {"n_labels-7"}
    unpack_runs([a2], home / "t")
    rows = results_table(load_spec(tmp_path / "specs" / "t.toml"), home / "t")
    assert [(r["run"], r["steps"]) for r in rows] == [("n_labels-5", 6), ("n_labels-7", 10)]
