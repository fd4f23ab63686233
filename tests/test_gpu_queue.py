"""The GPU queue's windows on the CPU (tools/gpu/gpu_window.py through tools/gpu/gpu_queue.sh; issue 43).

A lent GPU is a 15-minute window whose machine starts bare, with 64 MiB travelling each way. Everything a window
does but the GPU's arithmetic is tested here, before any device time is spent on it: the check and its fallback,
the plan and the rule that only trains groups whose state can come back (or that finish), packing within the
device tool's limits, the carry, and (slow) two windows, the first of two calls, ending bit for bit where one
uninterrupted sweep ends.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from hooked_clip1d.model.checkpoint import read_tensors
from hooked_clip1d.sweeps.runner import run_sweep

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
[run]
dropout_rng = "fast"
"""


def _load(name: str):  # noqa: ANN202
    if name not in sys.modules:
        where = "tools/gpu" if name in ("gpu_window", "slim_tree") else "benchmarks"  # operations tooling / step table
        spec = importlib.util.spec_from_file_location(name, ROOT / where / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


gw = _load("gpu_window")


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "t.toml").write_text(SPEC)
    return tmp_path / "specs"


def _half_trained(specs: Path, home: Path) -> gw.Sweep:
    """Sweep t after 7 steps: n_labels-5 (3 steps an epoch) finished at 6, n_labels-7 (5) in flight at 7."""
    sw = gw.Sweep(specs / "t.toml", home)
    run_sweep(specs / "t.toml", sw.out, progress=False, max_steps=7)
    return sw


def test_the_window_scripts_examples_run():
    assert doctest.testmod(gw).failed == 0


def test_the_limits_are_the_device_tools():
    assert (gw.CALL_MIB, gw.OUT_FILES, gw.OUT_FILE_MIB) == (64, 8, 16)
    assert gw.FILE_MIB < gw.OUT_FILE_MIB  # an archive and its tar headers fit a file
    assert gw.LIMIT_S <= 540 and gw.LIMIT_S - gw.RESERVE_S - gw.STARTUP_S > 0  # <= 9 minutes, training in it
    assert gw.CHECK_SECONDS["graph-step"] <= 60  # the mode the queue expects to train with
    assert set(gw.MODES) == set(gw.SWEEP_KW) and set(gw.MODES) <= set(gw._gpu_check().MODES)
    # the queue script tries the window's own modes (a list of its own went stale: the two-stream and the compiled
    # whole-step modes were never tried by `gpu_queue.sh window`)
    script = (ROOT / "tools" / "gpu" / "gpu_queue.sh").read_text()
    assert '${MODES:+--modes "$MODES"}' in script and "MODES:-" not in script
    assert gw.MODES[0] == "graph-step+compile" and set(gw.CHECK_SECONDS) == set(gw.MODES)
    assert gw.QUEUE == ("full-protocol", "fig10", "full-variants", "fig3")


def test_out_problems_names_each_limit(tmp_path):
    out = tmp_path / "out"
    (out / "a" / "b" / "c").mkdir(parents=True)
    (out / "a" / "b" / "c" / "deep.tar").write_bytes(b"x")
    for i in range(8):
        (out / f"f{i}.tar").write_bytes(b"x")
    with open(out / "big.tar", "wb") as f:  # sparse: 17 MiB on paper
        f.truncate(17 * gw.MIB)
    (out / "ok name.json").write_text("{}")
    got = gw.out_problems(out)
    assert any("more than 2 folders down" in p for p in got)
    assert any("17.0 MiB, over 16 MiB" in p for p in got)
    assert any("11 files, over 8" in p for p in got)
    assert any("'ok name.json'" in p for p in got)
    assert gw.out_problems(out, files=20, file_mib=20, total_mib=64) != []  # the name and the depth remain
    assert any("MiB together, over 16 MiB" in p for p in gw.out_problems(out, files=20, file_mib=20, total_mib=16))


def test_the_plan_sends_long_runs_a_few_at_a_time_and_keeps_short_ones_together():
    def runs(steps, mib=16.0, key="k"):
        return [(f"r{i}", key, s, mib) for i, s in enumerate(steps)]

    fast, slow = (lambda k: 0.0002), (lambda k: 0.001)
    fig3 = [30_000, 50_000, 70_000, 110_000, 200_000, 290_000, 230_000, 440_000, 650_000, 410_000, 790_000, 1_170_000]
    # at 0.2 ms a step every run finishes inside a window: one group, longest first
    by_steps = [f"r{i}" for i in sorted(range(12), key=lambda i: -fig3[i])]
    assert gw.plan_for_windows(runs(fig3), fast, 420, 26.0, 12) == [by_steps]  # plan_groups' plan
    # at 1 ms: five runs outlast a window; one full model's state travels at a time
    plan = gw.plan_for_windows(runs(fig3), slow, 420, 26.0, 12)
    assert plan == [["r11", "r5", "r6", "r4", "r3", "r2", "r1", "r0"], ["r10"], ["r8"], ["r7"], ["r9"]]
    # three tied-block models (8 MiB) travel together; max_group_size caps every group
    assert [len(g) for g in gw.plan_for_windows(runs([900_000] * 4, mib=8.0), slow, 420, 26.0, 12)] == [3, 1]
    assert [len(g) for g in gw.plan_for_windows(runs([900_000] * 4, mib=8.0), slow, 420, 26.0, 2)] == [2, 2]
    # no room at all: groups of one, which the rule then never starts (they neither finish nor travel)
    assert gw.plan_for_windows(runs([900_000] * 2), slow, 420, 10.0, 12) == [["r0"], ["r1"]]
    assert gw.decide([900_000], 16.0, slow, 420, 10.0) is None
    # different shapes never share a group, and keep the spec's order of shapes
    mixed = runs([100_000], key="a") + [("s", "b", 100_000, 8.0)] + [("r9", "a", 50_000, 16.0)]
    assert gw.plan_for_windows(mixed, slow, 420, 26.0, 12) == [["r0", "r9"], ["s"]]


def test_the_queue_never_sticks_and_its_first_item_is_every_candidate_both_ways():
    """The real queue under the plan and the rule (``simulate``, no training): at any step time every run trains
    to its end (no group waits forever for room), and full-variants is the four candidate recipes x both block
    readings, the default first."""
    from hooked_clip1d.settings import DEFAULT_RECIPE, RECIPES
    from hooked_clip1d.training.members import group_key

    sweeps = gw.load_queue(gw.QUEUE, ROOT / "hooked_clip1d" / "sweeps", Path("/nonexistent"))
    by = {sw.name: sw for sw in sweeps}
    fv = by["full-variants"]
    assert [r.params["recipe"] for r in fv.spec.runs][::2] == [
        DEFAULT_RECIPE,
        "cls-exempt-init002",
        "cls-exempt-init002-temp100-distinct",
        "open-clip-init002",
    ]
    assert all(r.params["recipe"] in RECIPES for r in fv.spec.runs) and len(fv.spec.runs) == 8
    assert sorted(r.params["tied_repeats"] for r in fv.spec.runs) == [1] * 4 + [2] * 4
    assert set(fv.steps.values()) == {440_000} and sum(fv.steps.values()) + sum(by["fig10"].steps.values()) == 5_720_000
    protocol = by["full-protocol"].spec.runs
    assert len(protocol) == 1 and len(protocol[0].train_cfg.snapshot_epochs) == 43  # Fig. 11a's trajectory
    queue = [
        (
            sw.name,
            [
                (r.name, group_key(r.model_cfg, r.data_cfg, r.train_cfg), sw.steps[r.name], gw.member_mib(r.model_cfg))
                for r in sw.spec.runs
            ],
        )
        for sw in sweeps
    ]
    sizes = [sw.spec.run["max_group_size"] for sw in sweeps]
    for ms, most in ((0.5, 7), (1.0, 27), (3.5, 95)):
        wins = gw.simulate(queue, gw.step_model({2: ms / 1e3, 12: 1.4 * ms / 1e3}), 420, 25.8, sizes)
        assert not wins[-1]["stuck"] and wins[-1]["done"] == sorted(gw.QUEUE) and len(wins) <= most, (ms, len(wins))
    # at 0.5 ms the full model at protocol, the queue's first item, finishes inside the first window
    wins = gw.simulate(queue, gw.step_model({2: 5e-4, 12: 7e-4}), 420, 25.8, sizes)
    assert [(t["K"], t["verdict"]) for t in wins[0]["trained"] if t["sweep"] == "full-protocol"] == [(1, "finish")]


def test_a_second_call_on_a_fresh_machine_stops_at_once(tmp_path):
    """`window ... again` goes on only where call 1 ran: on a fresh machine it would retrain call 1's work."""
    assert gw.main(["window", "--out", str(tmp_path / "o"), "--state", str(tmp_path / "s"), "--again"]) == 6
    assert not any((tmp_path / "o").iterdir())


def test_the_rule_counts_the_state_of_other_groups_in_flight():
    f = lambda k: 0.001  # noqa: E731
    assert gw.decide([900_000], 16.0, f, 400, 26.0) == "carry"
    assert gw.decide([900_000], 16.0, f, 400, 26.0 - 16.0) is None  # another full model already travels
    assert gw.decide([100_000], 16.0, f, 400, 0.0) == "finish"  # finishing needs no room
    assert gw.decide([100_000], 16.0, f, 5, 26.0) is None  # no time to start a group


def test_the_check_falls_back_to_the_next_mode_on_a_cpu():
    """Real checks: the whole-step graph needs CUDA and fails its check here, eager on the flat layout passes."""

    def run(mode: str, required: bool) -> dict:
        return gw.check_one(mode, "cpu", steps=10, preset="simplified", required=required, ks=(2,), timing_s=0.01)

    mode, recs = gw.choose_mode(["graph-step", "flat"], run)
    assert mode == "flat" and [r["mode"] for r in recs] == ["graph-step", "flat"]
    assert "needs a CUDA device" in recs[0]["error"] and not recs[0]["ok"]
    assert len(recs[1]["checks"]) == 4 and all(c["ok"] and c["value"] <= c["tol"] for c in recs[1]["checks"])
    assert recs[1]["step_s"][2] > 0
    assert gw.choose_mode(["graph-step"], run)[0] is None  # nothing passed: the window trains nothing
    assert gw.choose_mode(["graph-step", "flat"], run, failed=["flat"])[0] is None  # a mode that crashed training


def test_run_sweep_trains_only_the_groups_named(tmp_path, specs):
    (specs / "t.toml").write_text(SPEC.replace('dropout_rng = "fast"', 'dropout_rng = "fast"\nmax_group_size = 1'))
    out = tmp_path / "out"
    run_sweep(specs / "t.toml", out, progress=False, max_steps=1)  # writes the plan: two groups of one
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan) == 2
    run_sweep(specs / "t.toml", out, progress=False, groups=[plan[1][0]])
    assert [(out / "runs" / g[1][0] / "summary.json").exists() for g in plan] == [False, True]
    with pytest.raises(ValueError, match="not in the sweep's plan"):
        run_sweep(specs / "t.toml", out, progress=False, groups=["g999"])


def test_calls_on_other_groups_of_one_sweep_train_side_by_side(tmp_path, specs, monkeypatch):
    """2026-12-01: a second lane on the same sweep was refused ("sweep directory ... is in use"), so one of two
    temperature groups trained in a side folder. A call with ``groups`` now claims its groups and holds the folder's
    lock only around its plan and results: while it trains, a call on another group runs (here from inside the
    first, at the moment it trains), a call on its group or on the whole sweep is refused before training (a
    reviewer's catch: the whole sweep would have retrained the group in flight), the status still reports the sweep
    as running, and both end finished."""
    import hooked_clip1d.sweeps.runner as sr
    from hooked_clip1d.sweeps.status import sweep_status
    from hooked_clip1d.training.rundir import RunDirBusy, RunLock

    (specs / "t.toml").write_text(SPEC.replace('dropout_rng = "fast"', 'dropout_rng = "fast"\nmax_group_size = 1'))
    out = tmp_path / "out"
    run_sweep(specs / "t.toml", out, progress=False, max_steps=1)
    plan = json.loads((out / "plan.json").read_text())
    real, seen = sr.run_groups, {}

    def first_lane(tasks, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        monkeypatch.setattr(sr, "run_groups", real)
        seen["folder_free"] = RunLock.holder(out) is None
        with RunLock(out / "groups" / plan[0][0], "batched group directory"):  # as its trainer holds it
            seen["status"] = sweep_status(specs / "t.toml", out)["running"] is not None
        for groups in ([plan[0][0]], None):  # the claimed group named again, or the whole sweep: refused, untouched
            with pytest.raises(RunDirBusy, match="being trained by a call that named them"):
                run_sweep(specs / "t.toml", out, progress=False, groups=groups)
        run_sweep(specs / "t.toml", out, progress=False, groups=[plan[1][0]])  # the second lane
        return real(tasks, *a, **k)

    monkeypatch.setattr(sr, "run_groups", first_lane)
    rows = run_sweep(specs / "t.toml", out, progress=False, groups=[plan[0][0]])
    assert seen == {"folder_free": True, "status": True} and len(rows) == 2
    assert all((out / "runs" / g[1][0] / "summary.json").exists() for g in plan)
    assert RunLock.holder(out) is None


def test_a_call_naming_groups_waits_for_another_lanes_planning(tmp_path, specs, monkeypatch):
    """2026-12-01: two lanes started together on one sweep; the second found the folder locked by the first's seconds
    of planning and claiming, and was refused (rc 2), losing its slot. A call naming groups now waits for the
    folder's lock (up to 120 s); a whole-sweep call is still refused at once."""
    import time
    import types

    import hooked_clip1d.sweeps.claims as claims
    from hooked_clip1d.training.rundir import RunDirBusy, RunLock

    (specs / "t.toml").write_text(SPEC.replace('dropout_rng = "fast"', 'dropout_rng = "fast"\nmax_group_size = 1'))
    out = tmp_path / "out"
    run_sweep(specs / "t.toml", out, progress=False, max_steps=1)
    plan = json.loads((out / "plan.json").read_text())
    other = RunLock(out, "sweep directory").acquire()  # another lane planning
    waits = []

    def sleep(s):  # noqa: ANN001, ANN202  (the other lane finishes its planning while this one waits)
        waits.append(s)
        other.release()

    monkeypatch.setattr(claims, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=sleep))  # claims' own
    with pytest.raises(RunDirBusy, match="in use by process"):
        run_sweep(specs / "t.toml", out, progress=False)
    assert waits == []  # the whole sweep: refused at once
    run_sweep(specs / "t.toml", out, progress=False, groups=[plan[1][0]])
    assert waits == [1.0]  # waited once, then took the lock and trained
    assert [(out / "runs" / g[1][0] / "summary.json").exists() for g in plan] == [False, True]
    assert RunLock.holder(out) is None


def test_the_sweep_command_trains_only_the_groups_named(tmp_path, specs):
    from hooked_clip1d.cli import main

    (specs / "t.toml").write_text(SPEC.replace('dropout_rng = "fast"', 'dropout_rng = "fast"\nmax_group_size = 1'))
    out = tmp_path / "out"
    run_sweep(specs / "t.toml", out, progress=False, max_steps=1)
    plan = json.loads((out / "plan.json").read_text())
    assert main(["sweep", str(specs / "t.toml"), "--out", str(out), "--no-progress", "--groups", plan[1][0]]) == 0
    assert [(out / "runs" / g[1][0] / "summary.json").exists() for g in plan] == [False, True]


def test_pack_brings_back_what_fits_the_limits(tmp_path, specs):
    sw = _half_trained(specs, tmp_path / "home")
    out = tmp_path / "out"
    rows = gw.pack([sw], out / "a", tmp_path, room_mib=20)
    assert rows[0]["runs"] == ["n_labels-5"] and [g["step"] for g in rows[0]["state"]] == [7]
    assert sorted(p.name for p in (out / "a" / "t").iterdir()) == ["runs-000.tar", "state-000.tar"]
    assert gw.out_problems(out / "a") == []
    # a second call of the same machine: the run was sent (resent while room is left); no room for state
    rows = gw.pack([sw], out / "b", tmp_path, room_mib=0)
    assert rows[0]["runs"] == [] and rows[0]["resent"] == ["n_labels-5"]
    assert rows[0]["state"] == [] and len(rows[0]["state_left"]) == 1
    # one file left: the new runs first, then the state (whole or not at all)
    (tmp_path / "sent-t").unlink()
    rows = gw.pack([sw], out / "c", tmp_path, room_mib=20, files=1)
    assert rows[0]["runs"] == ["n_labels-5"] and rows[0]["state"] == []
    assert [p.name for p in (out / "c" / "t").iterdir()] == ["runs-000.tar"]


def test_a_run_packed_again_unpacks_over_itself(tmp_path):
    """A bug the two-window test found: safetensors writes metadata in hash-map order, so a run packed again (a
    later call's resent-NNN.tar) had other bytes than its first packing, and unpacking both was refused as a
    conflict. Weights are now compared by their content digest; a real difference is still refused."""
    from hooked_clip1d.sweeps.spec import TINY_SPEC
    from hooked_clip1d.sweeps.transfer import pack_runs, unpack_runs

    run_sweep(TINY_SPEC, tmp_path / "sweep", progress=False)
    first = pack_runs(tmp_path / "sweep", tmp_path / "a", runs=["n_labels-5_seed-0"])
    for i in range(50):  # pack again until the bytes differ (they do ~9 times in 10)
        again = pack_runs(tmp_path / "sweep", tmp_path / f"b{i}", runs=["n_labels-5_seed-0"])
        if again[0].read_bytes() != first[0].read_bytes():
            break
    assert again[0].read_bytes() != first[0].read_bytes()
    assert unpack_runs(first, tmp_path / "home") == unpack_runs(again, tmp_path / "home") == ["n_labels-5_seed-0"]
    other = pack_runs(tmp_path / "sweep", tmp_path / "c", runs=["n_labels-5_seed-0"], weights_dtype="bfloat16")
    with pytest.raises(FileExistsError, match="with other contents"):
        unpack_runs(other, tmp_path / "home")


def test_carry_keeps_state_within_what_travels(tmp_path, specs):
    sw = _half_trained(specs, tmp_path / "home")
    dest = tmp_path / "carry"
    got = gw.carry_out([sw], dest, travel_bytes=30 * gw.MIB)
    assert got["sweeps"]["t"]["runs"] == ["n_labels-5"] and [g["step"] for g in got["sweeps"]["t"]["state"]] == [7]
    assert (dest / "t" / "spec.toml").read_bytes() == (specs / "t.toml").read_bytes()
    assert (dest / "t" / "plan.json").exists() and list((dest / "t" / "state").glob("state-*.tar"))
    assert not list(dest.rglob("*.safetensors"))  # finished runs travel without weights, state compressed
    room = json.loads((dest / "room.json").read_text())
    assert 32 < room["room_mib"] < gw.CALL_MIB - 30 - gw.IN_MARGIN_MIB and got["travel_mib"] <= gw.CALL_MIB
    # no room beside the tree and the wheels: the finished runs travel, the state does not (it restarts)
    got = gw.carry_out([sw], dest, travel_bytes=63 * gw.MIB)
    assert len(got["left"]["t"]) == 1 and not (dest / "t" / "state").exists()
    # into a fresh machine: the finished run is not retrained, the group resumes at step 7
    gw.carry_out([sw], dest, travel_bytes=30 * gw.MIB)
    there = gw.Sweep(specs / "t.toml", tmp_path / "there")
    lines = gw.carry_in([there], dest)
    assert "1 of 2 runs finished earlier (not retrained); resumes" in lines[0] and "at step 7" in lines[0]
    assert [(g["active"], g["step"], g["in_flight"]) for g in there.groups()] == [(["n_labels-7"], 7, True)]
    assert "already on this machine" in gw.carry_in([there], dest)[0]  # a second call leaves it as it is
    (specs / "t.toml").write_text(SPEC + "\n# changed\n")
    assert "spec.toml differs" in gw.carry_in([gw.Sweep(specs / "t.toml", tmp_path / "else")], dest)[0]


def _queue(tmp: Path, *args: str, rc: int = 0, **env: str) -> str:
    full = {
        **os.environ,
        "QUEUE": "t",
        "SPEC_DIR": str(tmp / "specs"),
        "CARRY": str(tmp / "carry"),
        "DEVICE": "cpu",
        "MODES": "flat",
        "CHECK_PRESET": "simplified",
        "CHECK_STEPS": "10",
        "WHEELS": str(tmp / "no-wheels"),
        "OMP_NUM_THREADS": "1",
        "TRAVEL_MIB": "30",
        "SLIM_TREE": "0",  # carry would slim the checkout the other tests read (tools/gpu/slim_tree.py: tested apart)
        **env,
    }
    r = subprocess.run(["bash", "tools/gpu/gpu_queue.sh", *args], cwd=ROOT, env=full, capture_output=True, text=True)
    assert r.returncode == rc, r.stdout[-4000:] + r.stderr[-4000:]
    return r.stdout + r.stderr


def _members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/")[0] for m in tar.getmembers()}


@pytest.mark.slow
def test_two_windows_end_bit_for_bit_where_one_uninterrupted_sweep_ends(tmp_path, specs):
    home, args = tmp_path / "home", "--check-scale 4 --check-timing-s 0.05"
    # window 1, call 1 (a short limit, and 7 steps a group): n_labels-5 finishes, n_labels-7 stops at step 7
    out = _queue(
        tmp_path,
        "window",
        "300",
        STATE=str(tmp_path / "s1"),
        OUT=str(tmp_path / "o1a"),
        WINDOW_ARGS=f"{args} --max-steps 7",
    )
    assert "== check: flat" in out and "t g000" in out and "7 steps in" in out
    assert sorted(p.name for p in (tmp_path / "o1a" / "t").iterdir()) == ["runs-000.tar", "state-000.tar"]
    assert _members(tmp_path / "o1a" / "t" / "runs-000.tar") == {"n_labels-5"}
    assert gw.out_problems(tmp_path / "o1a") == []
    record = json.loads((tmp_path / "o1a" / "window.json").read_text())
    assert record["mode"] == "flat" and [r["steps"] for r in record["trained"]] == [7]
    # window 1, call 2 on the same machine: the check is not repeated, the group goes on one step
    out = _queue(
        tmp_path,
        "window",
        "300",
        "again",
        STATE=str(tmp_path / "s1"),
        OUT=str(tmp_path / "o1b"),
        WINDOW_ARGS=f"{args} --max-steps 1",
    )
    assert "passed in an earlier call on this machine" in out and "1 runs from step 7" in out
    assert _members(tmp_path / "o1b" / "t" / "resent-000.tar") == {"n_labels-5"}
    # here: unpack both calls (oldest first), carry; window 2 on a fresh machine resumes at step 8 and finishes
    out = _queue(tmp_path, "unpack", str(tmp_path / "o1a"), str(tmp_path / "o1b"), HOOKED_CLIP1D_SWEEPS=str(home))
    out = _queue(tmp_path, "carry", HOOKED_CLIP1D_SWEEPS=str(home))
    assert "1 finished runs; resumable state: g000" in out and "at step 8" in out
    out = _queue(tmp_path, "window", "300", STATE=str(tmp_path / "s2"), OUT=str(tmp_path / "o2"), WINDOW_ARGS=args)
    assert "1 of 2 runs finished earlier (not retrained); resumes" in out and "1 runs from step 8" in out
    assert "2 of 2 runs finished (done)" in out
    assert sorted(p.name for p in (tmp_path / "o2" / "t").iterdir()) == ["runs-000.tar"]
    assert _members(tmp_path / "o2" / "t" / "runs-000.tar") == {"n_labels-7"}
    _queue(tmp_path, "unpack", str(tmp_path / "o2"), HOOKED_CLIP1D_SWEEPS=str(home))
    # one uninterrupted sweep: the same weights (fp32 on the machines, float16 here) and metrics, bit for bit
    whole = tmp_path / "whole"
    run_sweep(specs / "t.toml", whole, progress=False)
    for run, machine in (("n_labels-5", "s1"), ("n_labels-7", "s2")):
        for there in (tmp_path / machine / "sweeps" / "t" / "runs" / run, home / "t" / "runs" / run):
            a = read_tensors(whole / "runs" / run / "model.safetensors")[0]
            b = read_tensors(there / "model.safetensors")[0]
            dtype = b[next(iter(b))].dtype
            assert a.keys() == b.keys() and all(torch.equal(a[k].to(dtype), b[k]) for k in a), (run, there)
            lines = [
                [{k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in open(d / "metrics.jsonl")]
                for d in (whole / "runs" / run, there)
            ]
            assert lines[0] == lines[1], (run, there)


@pytest.mark.slow
def test_a_mode_that_crashes_in_training_hands_over_to_the_next(tmp_path, specs):
    """The machine's check passed the whole-step graph (as a first call would have written it), but training with
    it crashes (here: it needs CUDA): the window checks the next mode and trains the queue with it."""
    state = tmp_path / "s"
    state.mkdir()
    passed = {"mode": "graph-step", "failed": [], "recs": [], "step_s": {"2": 0.01}, "device": "cpu"}
    (state / "check.json").write_text(json.dumps(passed))
    out = _queue(
        tmp_path,
        "window",
        "300",
        STATE=str(state),
        OUT=str(tmp_path / "o"),
        MODES="graph-step,flat",
        WINDOW_ARGS="--check-scale 4 --check-timing-s 0.05",
    )
    assert "training with graph-step stopped: exit 4" in out and "needs a CUDA device" in out
    assert "== check: flat" in out and "2 of 2 runs finished (done)" in out
    record = json.loads((tmp_path / "o" / "window.json").read_text())
    assert [c["mode"] for c in record["crashes"]] == ["graph-step"] and record["trained"][-1]["finished"]
    assert json.loads((state / "check.json").read_text())["mode"] == "flat"


@pytest.mark.slow
def test_the_packed_state_of_a_full_model_is_what_the_plan_assumes(tmp_path):
    """A real full-model group checkpoint (2 members, 2 steps): packed, each member's state is within 10 % of
    ``member_mib`` (the plan's and the rule's estimate), so one such model travels in today's ~26 MiB room."""
    from hooked_clip1d.data.dataset import DataConfig
    from hooked_clip1d.model.clip import CLIPConfig
    from hooked_clip1d.sweeps.transfer import pack_state
    from hooked_clip1d.training.batched import BatchedTrainer, Member
    from hooked_clip1d.training.trainer import TrainConfig

    cfg = CLIPConfig.from_preset("full", n_labels=20)
    members = [
        Member(cfg, DataConfig(n_labels=20, n2=10), TrainConfig(seed=s, epochs=10), name=f"m{s}") for s in (0, 1)
    ]
    sweep = tmp_path / "sweep"
    bt = BatchedTrainer(members, sweep / "groups" / "g000", dropout_rng="fast")
    bt.run(progress=False, max_steps=2)
    archives = pack_state(sweep, tmp_path / "packed", budget_mib=60)
    per_member = sum(a.stat().st_size for a in archives) / 2 / gw.MIB
    assert abs(per_member / gw.member_mib(cfg) - 1) < 0.1, per_member
    assert gw.member_mib(cfg) < 26 < 2 * gw.member_mib(cfg)


def test_the_gradient_gate_reproduces_the_b_k_false_alarm_and_clears_it():
    """Issue 51's false alarm, on the CPU: two computations of the same step that differ only in rounding (the
    batched engine and the single-model CLIP1D, paper presets, dropout 0) agree on every gradient to ~1e-6, but b_K's
    (exactly zero in exact arithmetic) differ by more than its own size: the old comparison (every parameter as a
    relative error) fails, the one comparison (``grad_checks``: b_K by its magnitude) passes."""
    import torch

    from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset
    from hooked_clip1d.training.stacked import StackedCLIP

    gc = gw._gpu_check()
    images, captions = build_dataset(DataConfig()).training_pairs()
    idx = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:50]
    for preset in ("simplified", "full"):
        models = [CLIP1D(CLIPConfig.from_preset(preset, n_labels=20, dropout=0.0), seed=s).eval() for s in (0, 1)]
        st = StackedCLIP(models).eval()
        st.loss(torch.stack([images[idx]] * 2), torch.stack([captions[idx]] * 2), 3).sum().backward()
        for k, m in enumerate(models):
            m.loss(images[idx], captions[idx]).backward()
            names = [n for n, _ in m.named_parameters()]
            single = [p.grad for _, p in m.named_parameters()]
            stacked = [st.to_member(k, n, st.params[n].grad) for n in names]
            old = max(gc._rel(p, q) for p, q in zip(stacked, single, strict=True))
            assert old > gc.GRAD_TOL  # today's false alarm: b_K's noise as a relative error
            rows = gc.grad_checks(preset, names, stacked, single, gc.GRAD_TOL)
            assert all(r["ok"] for r in rows), rows
            assert rows[0]["value"] < 1e-5 and rows[1]["value"] < 1e-7


def test_the_gradient_gate_still_fails_on_a_real_difference():
    """The comparison is not blind: a b_K gradient that is not noise, a wrong weight gradient and a NaN each fail."""
    import torch

    gc = gw._gpu_check()
    names = ["W_Q", "blocks.0.attn.b_K"]
    ref = [torch.tensor([1.0, -2.0]), torch.tensor([1e-9])]
    assert not gc.grad_checks("x", names, [ref[0], torch.tensor([1e-3])], ref, 1e-4)[1]["ok"]
    assert not gc.grad_checks("x", names, [ref[0] * 1.01, ref[1]], ref, 1e-4)[0]["ok"]
    nan = [torch.tensor([float("nan"), -2.0]), ref[1]]
    assert not any(r["ok"] for r in gc.grad_checks("x", names, nan, ref, 1e-4))
    assert all(r["ok"] for r in gc.grad_checks("x", names, [ref[0], None], ref, 1e-4))  # b_K frozen: no gradient


@pytest.mark.slow
def test_a_check_made_on_another_device_is_not_reused(tmp_path, specs):
    """A check file left by a window on another device (a GPU, or the CPU dry run on a machine later lent a GPU)
    says nothing of this one: the window checks again instead of skipping its check."""
    state = tmp_path / "s"
    state.mkdir()
    other = {"mode": "flat", "failed": [], "recs": [], "step_s": {"2": 0.01}, "device": "cuda:NVIDIA H200"}
    (state / "check.json").write_text(json.dumps(other))
    out = _queue(
        tmp_path,
        "window",
        "300",
        STATE=str(state),
        OUT=str(tmp_path / "o"),
        MODES="flat",
        WINDOW_ARGS="--check-scale 4 --check-timing-s 0.05 --max-steps 2",
    )
    assert "is 'cuda:NVIDIA H200''s, not 'cpu''s: checked again" in out and "== check: flat (" in out
    assert json.loads((state / "check.json").read_text())["device"] == "cpu"


def test_the_window_refuses_bad_numbers_before_writing_anything(tmp_path, capsys):
    for argv in (
        ["window", "--out", str(tmp_path / "o"), "--state", str(tmp_path / "s"), "--limit", "-5"],
        ["window", "--out", str(tmp_path / "o"), "--state", str(tmp_path / "s"), "--limit", "30", "--reserve", "60"],
        ["estimate", "--step-ms", "abc"],
        ["estimate", "--step-ms", "1,2,3"],
        ["estimate", "--step-ms", "0"],
        ["window", "--out", str(tmp_path / "o"), "--state", str(tmp_path / "s"), "--check-scale", "nan"],
        ["window", "--out", str(tmp_path / "o"), "--state", str(tmp_path / "s"), "--check-timing-s", "-1"],
        ["window", "--out", str(tmp_path / "o"), "--state", str(tmp_path / "s"), "--max-steps", "0"],
        ["carry", "--dest", str(tmp_path / "o"), "--travel-mib", "abc"],  # session 45: the last untyped numbers
    ):
        with pytest.raises(SystemExit) as e:
            gw.main(argv)
        assert e.value.code == 2, argv
    err = capsys.readouterr().err
    assert "'-5' must be a finite number > 0" in err and "must be less than --limit" in err
    assert "'abc' is not a number" in err and "give 'A'" in err
    assert "'nan' must be a finite number > 0" in err and "'0' must be a whole number > 0" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "s").exists()


def test_identical_runs_of_the_queue_are_trained_once(tmp_path):
    """Issue 51: the full model at protocol, Fig. 10's w = 0.2, Fig. 3's (20, 10) cell and full-variants' first run
    compute the same: the shipped queue trains that run once; a finished run is copied into the others (its
    snapshots left out), a run that differs in what it computes is not."""
    sweeps = gw.load_queue(gw.QUEUE, ROOT / "hooked_clip1d" / "sweeps", tmp_path / "home")
    ids: dict[str, list[str]] = {}
    for sw in sweeps:
        for name, run in sw.runs.items():
            ids.setdefault(gw._identity(run), []).append(f"{sw.name}/{name}")
    shared = [v for v in ids.values() if len(v) > 1]
    assert len(shared) == 1 and shared[0][0] == "full-protocol/seed-0" and len(shared[0]) == 4
    src = sweeps[0].out / "runs" / "seed-0"
    (src / "snapshots").mkdir(parents=True)
    (src / "snapshots" / "epoch_00000.safetensors").write_bytes(b"x")
    for f in ("summary.json", "config.json", "metrics.jsonl", "model.safetensors"):
        (src / f).write_text("{}")
    lines = gw.adopt_identical(sweeps)
    assert len(lines) == 3 and all("copied, not trained again" in line for line in lines)
    for key in shared[0][1:]:
        sweep, name = key.split("/")
        dest = tmp_path / "home" / sweep / "runs" / name
        assert (dest / "summary.json").exists() and not (dest / "snapshots").exists()
    assert gw.adopt_identical(sweeps) == []  # nothing left to adopt
    fig10 = next(sw for sw in sweeps if sw.name == "fig10")
    assert sum(fig10.finished(n) for n in fig10.runs) == 1  # the other four weight decays still train


def test_the_adopt_subcommand_copies_identical_runs_and_writes_the_spec(tmp_path, capsys):
    """long_runs.sh's ``adopt=`` item was inline Python in a bash string (session 44); it is ``gpu_window.py adopt``
    now: the finished full model at protocol is copied into Fig. 10's w = 0.2 run, the folder the copy made gets
    fig10's spec.toml (a sweep refuses a folder without one), and a second call adopts nothing."""
    home = tmp_path / "home"
    src = home / "full-protocol" / "runs" / "seed-0"
    src.mkdir(parents=True)
    for f in ("summary.json", "config.json", "metrics.jsonl", "model.safetensors"):
        (src / f).write_text("{}")
    (home / "full-protocol" / "spec.toml").write_bytes((ROOT / "hooked_clip1d/sweeps/full-protocol.toml").read_bytes())
    argv = ["adopt", "full-protocol", "fig10", "--home", str(home), "--spec-dir", str(ROOT / "hooked_clip1d/sweeps")]
    assert gw.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "copied, not trained again" in out[0] and "spec.toml written" in out[1]
    assert (home / "fig10" / "runs" / "weight_decay-0.2_seed-0" / "summary.json").exists()
    assert (home / "fig10" / "spec.toml").read_bytes() == (ROOT / "hooked_clip1d/sweeps/fig10.toml").read_bytes()
    assert gw.main(argv) == 0 and capsys.readouterr().out == ""  # nothing left to adopt
    text = (ROOT / "tools/cpu/long_runs.sh").read_text()
    assert 'gpu_window.py\\" adopt' in text and "adopt_identical(q)" not in text  # the item calls the subcommand


def test_the_compile_cache_travels_per_gpu_kind(tmp_path, specs):
    """Issue 51 item 4: inductor's compile cache of one GPU kind comes back in $OUT, goes into the sweeps home here,
    travels in with the next window in the room the state leaves, and a foreign archive is refused."""
    slug = gw.cache_slug("cuda:NVIDIA H200")
    there = tmp_path / "there" / gw.CACHE_DIR / slug
    (there / "fxgraph").mkdir(parents=True)
    (there / "fxgraph" / "kernel.py").write_text("# compiled\n")
    out = tmp_path / "out"
    out.mkdir()
    assert gw.pack_cache(there, out, slug, files_left=0, mib_left=60) is None  # no file left for it
    tar = gw.pack_cache(there, out, slug, files_left=1, mib_left=60)
    assert tar is not None and tar.name == f"inductor-{slug}.tar"
    home = tmp_path / "home"
    lines = gw.unpack([out], home)
    assert any("compile cache" in line for line in lines)
    assert (home / gw.CACHE_DIR / slug / "fxgraph" / "kernel.py").read_text() == "# compiled\n"
    sw = _half_trained(specs, home)
    got = gw.carry_out([sw], tmp_path / "carry", travel_bytes=30 * gw.MIB)
    assert got["caches"] == [slug]
    assert (tmp_path / "carry" / gw.CACHE_DIR / slug / "fxgraph" / "kernel.py").exists()
    bad = tmp_path / "bad" / f"inductor-{slug}.tar"
    bad.parent.mkdir()
    with tarfile.open(bad, "w") as t:
        t.add(there / "fxgraph" / "kernel.py", arcname="elsewhere/kernel.py")
    with pytest.raises(ValueError, match="outside"):
        gw.unpack_cache(bad, home)


def test_the_working_tree_leaves_room_for_one_full_models_state():
    """What travels into a GPU window is the working tree, the wheels and the carried state, 64 MiB together: the
    tree (mostly the shipped zoo and its trajectories) must leave room for the packed state of one full model, or
    the full model at protocol (the queue's first item, longer than one window) can never resume in the next window.
    The trajectories grew the tree to 48 MiB on 2026-11-28 (room 12 MiB, a full model 16): this guards it. Since
    2026-11-30 a window's calls send the slim tree (``tools/gpu/slim_tree.py``: the zoo's weights and trajectories set
    aside, ~36 MiB), so the zoo may grow. The tests run in a git checkout (the tree is measured with ``git
    ls-files``, as a window measures it)."""
    from hooked_clip1d.model.clip import CLIPConfig

    slim_tree = _load("slim_tree")
    wheels_mib = 2.9  # the carried wheels (gpu_wheels.sh; measured 2026-11-26)
    sent = (gw.tree_bytes() - slim_tree.aside_bytes()) / gw.MIB  # `gpu_queue.sh carry` slims the tree first
    room = gw.CALL_MIB - sent - wheels_mib - gw.IN_MARGIN_MIB
    full = gw.member_mib(CLIPConfig.from_preset("full", n_labels=20))
    slack = 1.0  # the finished runs' configs, metrics and the window record travel beside the state
    assert room >= full + slack, (
        f"the slim working tree takes {sent:.1f} MiB: {room:.1f} MiB are left for state, one full model needs "
        f"{full:.1f} + {slack} (what grew besides the zoo's weights and trajectories?)"
    )


def _repo(tmp: Path) -> Path:
    """A small git repository shaped like ours: two zoo files slim sets aside, code it keeps."""
    import subprocess

    root = tmp / "repo"
    for rel, text in {
        "hooked_clip1d/pretrained/weights/a.safetensors.xz": "w" * 4000,
        "hooked_clip1d/pretrained/trajectories/a.safetensors.xz": "t" * 6000,
        "hooked_clip1d/pretrained/weights/a.json": "{}",
        "hooked_clip1d/code.py": "x = 1\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "zoo"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def test_a_slim_tree_sends_no_zoo_file_keeps_them_on_disk_refuses_commits_and_restores(tmp_path):
    """tools/gpu/slim_tree.py: ``slim`` takes the zoo's weights and trajectories out of what a call sends (the index
    and the untracked-not-ignored files, as ``gpu_window.tree_bytes`` measures it) without touching them on disk,
    refuses commits while slim, and ``restore`` gives back the tree git had (status clean, hook gone); both are
    idempotent."""
    import subprocess

    st = _load("slim_tree")
    root = _repo(tmp_path)
    whole = gw.tree_bytes(root)
    assert st.aside_files(root) == [
        "hooked_clip1d/pretrained/trajectories/a.safetensors.xz",
        "hooked_clip1d/pretrained/weights/a.safetensors.xz",
    ]
    assert st.slimmed(root) == [] and st.aside_bytes(root) == 10_000
    assert st.slim(root) == st.aside_files(root) == st.slimmed(root) and st.slim(root) == st.slimmed(root)
    assert (
        gw.tree_bytes(root) == whole - 10_000 and (root / "hooked_clip1d/pretrained/weights/a.safetensors.xz").exists()
    )
    (root / "hooked_clip1d/code.py").write_text("x = 2\n")
    r = subprocess.run(["git", "commit", "-qam", "x"], cwd=root, capture_output=True, text=True)
    assert r.returncode != 0 and "slim_tree.py restore" in r.stderr
    assert st.restore(root) == st.aside_files(root) and st.restore(root) == []
    assert gw.tree_bytes(root) == whole + 0 and st.slimmed(root) == []
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert status == " M hooked_clip1d/code.py\n"  # only the edit made while slim; the zoo is HEAD's again
    assert not (root / ".git/hooks/pre-commit").exists() and "slim_tree" not in (root / ".git/info/exclude").read_text()


def test_slim_refuses_uncommitted_zoo_changes_and_another_pre_commit_hook(tmp_path):
    st = _load("slim_tree")
    root = _repo(tmp_path)
    (root / "hooked_clip1d/pretrained/weights/a.safetensors.xz").write_text("changed")
    with pytest.raises(RuntimeError, match="uncommitted changes to files it would set aside"):
        st.slim(root)
    (root / "hooked_clip1d/pretrained/weights/a.safetensors.xz").write_text("w" * 4000)
    hook = root / ".git/hooks/pre-commit"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(RuntimeError, match="another pre-commit hook"):
        st.slim(root)
    assert st.slimmed(root) == [] and hook.read_text() == "#!/bin/sh\nexit 0\n"


def test_this_checkout_is_not_slim():
    """A checkout left slim after a GPU window (its zoo out of the index) would commit the zoo's deletion."""
    st = _load("slim_tree")
    assert not st.slimmed(ROOT), "this checkout is slim for a GPU window: python tools/gpu/slim_tree.py restore"


def test_a_lane_that_cannot_take_the_folder_back_warns_and_leaves_the_results_table(tmp_path):
    """sweeps.claims.train_beside: the folder's lock taken by another live process while it trained (here pid 1's
    lock file, written during the training) is waited for up to ``wait_s``, then a warning, no results table, and
    the claims are given up; an error while training propagates with the folder's lock released."""
    import socket
    import warnings

    from hooked_clip1d.sweeps.claims import CLAIMS, train_beside
    from hooked_clip1d.training.rundir import RunLock

    out = tmp_path / "sweep"
    lock = RunLock(out, "sweep directory").acquire()

    def someone_else_takes_it():  # noqa: ANN202
        (out / ".lock").write_text(json.dumps({"pid": 1, "host": socket.gethostname(), "since": 0}))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train_beside(lock, out, ["g0"], someone_else_takes_it, wait_s=0.0) is False
    assert "results table is left to a later call" in str(caught[-1].message) and not lock.held
    assert RunLock.holder(out / CLAIMS / "g0") is None
    (out / ".lock").unlink()
    lock.acquire()
    with pytest.raises(ZeroDivisionError):
        train_beside(lock, out, ["g0"], lambda: 1 / 0)
    assert not lock.held and RunLock.holder(out) is None and RunLock.holder(out / CLAIMS / "g0") is None
