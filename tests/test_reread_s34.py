"""Session 34's reread: one eval-mode check for evaluation and analysis, one label-list check, and the
reparametrisation's logit comparison on the shared eval-mode helper."""

from __future__ import annotations

import pytest
import torch

from hooked_clip1d import CLIP1D, CLIPConfig
from hooked_clip1d.analysis.interventions.knockout import knockout_sweep
from hooked_clip1d.analysis.mechanism.reparametrize import logit_change, scale_query_key
from hooked_clip1d.analysis.mechanism.spatial_ids import vision_spatial_ids
from hooked_clip1d.model.modes import check_eval
from hooked_clip1d.settings.checks import check_label_list


def _model(seed: int = 0, dropout: float = 0.5) -> CLIP1D:
    return CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8, dropout=dropout), seed=seed).eval()


def test_an_analysis_refuses_a_block_in_train_mode_inside_an_eval_model():
    """analysis.hooks.check_eval read the top module's flag only: a block left in train mode ran its dropout (and
    drew the global RNG) inside every intervention; evaluation's check read every submodule. One check now."""
    m = _model()
    images = m.vision.to_tokens(["C 1 . . . . . . . 2 ."])
    captions = m.text.to_tokens(["1 is on the left of 2"])
    m.vision.blocks[0].train()
    assert not m.training
    with pytest.raises(ValueError, match=r"knockout_sweep|needs the model in eval mode.*vision\.blocks\.0"):
        knockout_sweep(m, images, captions)
    with pytest.raises(ValueError, match="in training mode"):
        vision_spatial_ids(m.vision)
    m.eval()
    knockout_sweep(m, images, captions)  # and the same call in eval mode runs
    assert check_eval(m) is m


def test_check_label_list_refuses_what_the_two_copies_refused():
    assert check_label_list(torch.tensor([3, 1]), 5) == [3, 1]
    for bad, err, match in (
        ([2.7], TypeError, r"fit_labels must be ints, got \[2.7\]"),
        ([True, 2], TypeError, "must be ints"),
        ([1, 1, 2], ValueError, "repeated labels"),
        ([0, 2], ValueError, r"outside 1..5"),
        ([], ValueError, "need at least 1"),
        ("12", ValueError, "must be a list of labels"),
    ):
        with pytest.raises(err, match=match):
            check_label_list(bad, 5, "fit_labels")
    with pytest.raises(ValueError, match="need at least 2 distinct labels"):
        vision_spatial_ids(_model().vision, labels=[3], context="pair")
    assert vision_spatial_ids(_model().vision, labels=[3, 1]).object_labels == [1, 3]  # sorted, as before


def test_logit_change_gives_back_every_submodules_mode_and_builds_no_graph():
    m = _model()
    m.text.blocks[0].train()
    moved = scale_query_key(m)
    moved.train()
    before = [(n, x.training) for n, x in m.named_modules()] + [(n, x.training) for n, x in moved.named_modules()]
    assert logit_change(m, moved) < 1e-5
    after = [(n, x.training) for n, x in m.named_modules()] + [(n, x.training) for n, x in moved.named_modules()]
    assert before == after


def test_x7_names_the_all_decay_grid_and_keeps_its_check_ids():
    """x7's checks quoted "fig21's seed 0" (0.93, 0.96, 0.02): Fig. 21's record moved to the default recipe's grid
    (seed 0 there: 0.85 / 0.94 / 0.90), so the numbers are fig21-all-decay's; reworded, with the kept record's ids."""
    import json
    from pathlib import Path

    from hooked_clip1d.reproduce import open_questions as oq

    kept = json.loads((Path(__file__).resolve().parents[1] / "docs/records/x7-single-head-seeds.json").read_text())
    assert [c["id"] for c in kept["checks"]][:2] == [oq.X7_LOW_ID, oq.X7_DEFAULT_ID]
    assert "fig21-all-decay's seed 0" in oq.X7_LOW_TEXT and "fig21-all-decay's seed 0" in oq.X7_DEFAULT_TEXT


ONE_RUN_PLANS = ("fig10", "fig3")  # plan.json written as one-run groups (tools/cpu/long_runs.sh, 2026-12-01)
ADOPTED = {"fig10": {"weight_decay-0.2_seed-0"}, "fig3": {"n_labels-20_n2-10_seed-0"}}  # the full model at protocol


def test_the_long_runs_queue_names_groups_its_sweeps_plan():
    """tools/cpu/long_runs.sh names each lane's groups as the sweep's plan names them (an index and a hash of the
    runs' names): a spec changed under it (a recipe renamed, a grid cell added) would leave a lane asking for groups
    that no longer exist. The script parses with bash -n."""
    import re
    import subprocess
    from pathlib import Path

    from hooked_clip1d.sweeps.runner import _saved_plan, group_name
    from hooked_clip1d.sweeps.spec import load_spec

    root = Path(__file__).resolve().parents[1]
    script = root / "tools/cpu/long_runs.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    lanes = re.findall(r'^  "(lane\d+)\|([\w :+=,.-]+)"$', text, flags=re.M)
    assert len(lanes) == len(re.findall(r'^  "lane', text, flags=re.M))  # no lane line the pattern misses
    assert lanes  # at least one lane (lane 1 is free since App. L shipped, 2026-12-01)
    items = [item.split("+")[0] for _, line in lanes for item in line.split()]  # +compile, +threadsN: execution
    adopts = [i for i in items if i.startswith("adopt=")]  # adopt=SPEC,SPEC: copies identical finished runs
    for item in adopts:
        for name in item.removeprefix("adopt=").split(","):
            assert load_spec(root / "hooked_clip1d/sweeps" / f"{name}.toml").name == name, item
    items = [i for i in items if i not in adopts]
    assert set(items) - {i for i in items if ":" in i} <= {"fig22-control"}  # the one item that is not a group
    for item in (i for i in items if ":" in i):
        spec_name, group = item.split(":")
        spec = load_spec(root / "hooked_clip1d/sweeps" / f"{spec_name}.toml")
        planned = {name for name, _ in _saved_plan(Path("/nonexistent"), list(spec.runs), spec.run["max_group_size"])}
        # or, for the sweeps whose plan.json was written as one-run groups on this CPU (session 45: any partition of
        # the same runs resumes), those groups
        if spec_name in ONE_RUN_PLANS:
            planned |= {group_name(i, [r]) for i, r in enumerate(spec.runs)}
        assert group in planned, (spec_name, group, planned)
    for spec_name in ONE_RUN_PLANS:  # each run in exactly one lane item, but the one adopted from the full model
        spec = load_spec(root / "hooked_clip1d/sweeps" / f"{spec_name}.toml")
        named = [i.split(":")[1] for i in items if i.startswith(f"{spec_name}:")]
        want = {group_name(i, [r]) for i, r in enumerate(spec.runs)} - {
            group_name(i, [r]) for i, r in enumerate(spec.runs) if r.name in ADOPTED[spec_name]
        }
        assert sorted(named) == sorted(want), spec_name


def test_a_lane_whose_worktree_lacks_a_spec_is_not_started(tmp_path):
    """2026-12-02: lane 3's worktree (8885c25) predated x21's spec, which the lane lists: it would have trained Fig.
    10's w = 0.05 run for ~10 h, then stopped at x21's item, and w = 0.5 behind it. `start` now refuses such a lane
    before anything runs, naming each missing spec once (those of adopt= items too) and the remedy; and while one
    lane is refused, no other lane starts."""
    import os
    import re
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "tools/cpu/long_runs.sh"
    venv = tmp_path / "venv"  # commands that do nothing: were the refusal to fail, no lane would train anything
    (venv / "bin").mkdir(parents=True)
    for exe in ("hooked-clip1d", "python"):
        (venv / "bin" / exe).symlink_to(shutil.which("true"))
    lanes = dict(re.findall(r'^  "(lane\d+)\|([\w :+=,.-]+)"$', script.read_text(), flags=re.M))
    specs = {
        name
        for item in lanes["lane3"].split()
        for name in (
            item.split("+")[0].removeprefix("adopt=").split(",")
            if item.startswith("adopt=")
            else [item.split("+")[0].split(":")[0]]
            if ":" in item
            else []
        )
    }
    assert {"rope-interaction", "fig10", "fig3", "full-protocol"} <= specs  # adopt=full-protocol,fig3 read too
    home = tmp_path / "home"
    for lane in lanes:  # every lane's worktree holds its specs but lane 3's, which lacks one
        wt = home / f"wt-{lane}"
        (wt / "hooked_clip1d/sweeps").mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(wt)], check=True)
        for spec in (root / "hooked_clip1d/sweeps").glob("*.toml"):
            if not (lane == "lane3" and spec.stem == "rope-interaction"):
                shutil.copy(spec, wt / "hooked_clip1d/sweeps" / spec.name)
    env = dict(os.environ, HOME=str(home), VENV=str(venv), SWEEPS=str(tmp_path / "sw"), LOGS=str(tmp_path / "logs"))
    got = subprocess.run(["bash", str(script), "start"], env=env, capture_output=True, text=True)
    assert got.returncode == 2, got.stderr
    refusals = [line for line in got.stderr.splitlines() if "not started" in line]
    assert len(refusals) == 1 and refusals[0].startswith("lane3: not started"), got.stderr
    assert "has no spec for: rope-interaction (" in refusals[0] and "checkout --detach" in refusals[0]
    assert "nothing started" in got.stderr and "started (" not in got.stdout
    assert not list((tmp_path / "logs").glob("*.sh*"))  # no lane script written or left half-written


def test_the_cpu_shipping_scripts_parse_and_name_shipped_models():
    """tools/cpu/ship_*.sh (one command per retraining that ships) parse with bash -n, and each zoo name they export
    over is a shipped model (a renamed model would leave a script exporting to a new name)."""
    import re
    import subprocess
    from pathlib import Path

    from hooked_clip1d.pretrained import list_pretrained

    root = Path(__file__).resolve().parents[1]
    scripts = sorted((root / "tools" / "cpu").glob("ship_*.sh"))
    assert scripts
    for script in scripts:
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script.name
        names = re.findall(r"export \"\$RUN\" --name (\S+)", script.read_text())
        assert names and set(names) <= set(list_pretrained()), (script.name, names)


def test_a_new_machine_gets_the_one_run_plans_the_lanes_name(tmp_path):
    """2026-12-02 (a new machine, every run lost): `long_runs.sh start` writes Fig. 10's and Fig. 3's plans as one-run
    groups into a new sweep folder (tools/cpu/one_run_plan.py) before any lane starts; without it the runner would
    plan them batched and every lane item would name a group that is not in the plan. The names are those the lanes
    list, a folder with a plan keeps it, and the script's ONE_RUN_PLANS are this test's."""
    import importlib.util
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "tools/cpu/long_runs.sh").read_text()
    assert re.search(r'^ONE_RUN_PLANS="([\w ]+)"', text, flags=re.M).group(1).split() == list(ONE_RUN_PLANS)
    spec_file = importlib.util.spec_from_file_location("one_run_plan", root / "tools/cpu/one_run_plan.py")
    tool = importlib.util.module_from_spec(spec_file)
    spec_file.loader.exec_module(tool)
    lanes = " ".join(re.findall(r'^  "lane\d+\|([^"]*)"$', text, flags=re.M))
    for name in ONE_RUN_PLANS:
        out = tmp_path / name
        written = tool.write_plan(root / "hooked_clip1d/sweeps" / f"{name}.toml", out)
        plan = json.loads((out / "plan.json").read_text())
        assert [len(runs) for _, runs in plan] == [1] * len(plan) and len(written) == len(plan)
        queued = set(re.findall(rf"\b{name}:(g\d{{3}}-[0-9a-f]{{8}})\b", lanes))
        adopted = {g for g, (run,) in plan if run in ADOPTED[name]}
        assert queued == {g for g, _ in plan} - adopted, name
        assert tool.write_plan(root / "hooked_clip1d/sweeps" / f"{name}.toml", out) == []  # kept as it was


def test_a_lanes_log_holds_no_results_table(tmp_path):
    """2026-12-02: a finished group's results table (the sweep's stdout) went to the lane's log, which a session reads
    for progress, and showed two of Fig. 4a's rows before its record may be read. Every sweep item of every lane
    script sends its stdout elsewhere; its errors (stderr) still reach the log."""
    import os
    import re
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "tools/cpu/long_runs.sh"
    venv = tmp_path / "venv"  # commands that do nothing: the lanes start, run nothing and end
    (venv / "bin").mkdir(parents=True)
    for exe in ("hooked-clip1d", "python"):
        (venv / "bin" / exe).symlink_to(shutil.which("true"))
    lanes = dict(re.findall(r'^  "(lane\d+)\|([\w :+=,.-]+)"$', script.read_text(), flags=re.M))
    home = tmp_path / "home"
    for lane in lanes:
        wt = home / f"wt-{lane}"
        (wt / "hooked_clip1d/sweeps").mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(wt)], check=True)
        for spec in (root / "hooked_clip1d/sweeps").glob("*.toml"):
            shutil.copy(spec, wt / "hooked_clip1d/sweeps" / spec.name)
    env = dict(os.environ, HOME=str(home), VENV=str(venv), SWEEPS=str(tmp_path / "sw"), LOGS=str(tmp_path / "logs"))
    got = subprocess.run(["bash", str(script), "start"], env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    for lane in lanes:
        groups = [line for line in (tmp_path / "logs" / f"{lane}.sh").read_text().splitlines() if "--groups" in line]
        assert groups and all(">/dev/null ||" in line for line in groups), (lane, groups)


def test_no_lane_compiles_a_captioning_sweep():
    """The batched engine refuses ``compile`` for captioners by name (untested on the captioning loss): an item of a
    captioning sweep (x22, 2026-12-02) with ``+compile`` would stop its lane when it is reached, hours in. None is
    queued so."""
    import re
    from pathlib import Path

    from hooked_clip1d.sweeps.spec import load_spec

    root = Path(__file__).resolve().parents[1]
    text = (root / "tools/cpu/long_runs.sh").read_text()
    items = [i for line in re.findall(r'^  "lane\d+\|([^"]*)"$', text, flags=re.M) for i in line.split()]
    seen = set()
    for item in (i for i in items if ":" in i and not i.startswith("adopt=")):
        spec_name = item.split("+")[0].split(":")[0]
        spec = load_spec(root / "hooked_clip1d/sweeps" / f"{spec_name}.toml")
        if any(r.model_cfg.objective == "captioning" for r in spec.runs):
            seen.add(spec_name)
            assert "+compile" not in item, item
    assert "captioning" in seen  # the test reads the queue it is about
