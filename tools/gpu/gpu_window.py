"""One lent-GPU window of the queue in one command: carried state in, a short check, training, what finished out.

A lent GPU gives 15 minutes of device time per window (start-up and idle included), at most 10 minutes a command,
and its machine starts bare; 64 MiB travel each way (in: the working tree, the wheels and the carried state; back:
at most 8 files of 16 MiB from ``$OUT``). So a window is one command, ``bash tools/gpu/gpu_queue.sh window 540``
(docs/cli.md, "On a GPU", has the exact calls), which installs the carried wheels and runs ``window`` here:

1. **carry in** (``carry_in``): ``.gpu-carry/<sweep>/`` (finished runs' configs, metrics and summaries, the sweep's
   ``plan.json``, the compressed resumable state of its groups in flight, ``state/state-NNN.tar``) into the
   machine's sweeps home, so finished runs are not retrained and carried groups resume bit for bit;
2. **the check** (<= 60 s; each mode in its own process, so a broken capture cannot spoil the next): fp32 eager on
   the device against the CPU (one step of K = 2 simplified and full models: loss within 1e-5, gradients within
   1e-4 of their largest entry; required, else nothing trains), then the step mode the queue will train with
   against fp32 eager on the device (full model, K = 2, dropout 0; ``gpu_check.TOLS["fp32"]``: the summed loss of 5
   steps within 1e-5 relative, the 5th step's gradients within 1e-4 and every weight after 200 steps within 1e-3
   of their largest entry), and its step time at K = 2 and 12. A mode that fails, crashes or runs past its time
   hands over to the next of ``MODES``: the whole step as one CUDA graph, inductor with CUDA graphs, eager;
3. **training** (one process, until ``reserve`` = 60 s before the command's limit): the queue's groups in order,
   each only if it finishes before then or if its resumable state at that time fits what can travel back in next
   window (``decide``); a sweep first started here gets a plan sized for that (``plan_for_windows``). A crash
   hands over to the next mode (checked first) and training goes on;
4. **packing** (``pack``): per sweep into ``$OUT/<sweep>/`` the runs finished since the machine's last call
   (configs, metrics, float16 weights), the state of the groups in flight (within the carry room), then runs sent
   before while room is left; ``$OUT/window.json`` says what was checked, timed, trained and packed. Checked
   against the device tool's limits (``out_problems``) before the command ends.

Here, afterwards: ``unpack`` puts what came back into the sweeps home; ``carry`` makes ``.gpu-carry/`` for the
next window (the state of the groups in flight, compressed, within what travels beside the tree and the wheels,
and ``room.json``: how much state the next window may leave in flight).

The limit is what travels in: 64 MiB less the working tree and the wheels (2.9 MiB). The whole tree was 42 MiB on
2026-11-30, mostly the pretrained zoo and its trajectories, which no window reads: ``carry`` (gpu_queue.sh) first
slims it (``tools/gpu/slim_tree.py``, 6.7 MiB sent), leaving ~53 MiB, the packed state of three full models with
independent blocks (~16 MiB each) or six with tied blocks (~8 MiB each); tests/test_gpu_queue.py holds the slim tree
to leave room for one. So runs longer than a window travel a few at a time, and a group is only
as large as finishes inside a window or travels (``plan_for_windows``).

    python tools/gpu/gpu_window.py window --out OUT ...   # on the GPU (through gpu_queue.sh)
    python tools/gpu/gpu_window.py unpack FILES_AT ...    # here, oldest call first
    python tools/gpu/gpu_window.py carry                  # here, before every window
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is tools/gpu/gpu_window.py)
MIB = 2**20
CALL_MIB = 64  # what travels with a call, each way (the device tool)
OUT_FILES, OUT_FILE_MIB = 8, 16  # what comes back from $OUT: at most 8 files of 16 MiB, 64 MiB together
OUT_MARGIN_MIB = 2  # kept free of $OUT's 64 MiB
FILE_MIB = 15  # archives at most this, under 16 MiB with their headers
IN_MARGIN_MIB = 1  # kept free of what travels in
# docs/cli.md, "On a GPU" (issue 51's order): the full model at protocol with its trajectory (Fig. 11a reads it), Fig.
# 10's weight decays, the other full-model variants, Fig. 3; identical runs are trained once (adopt_identical)
QUEUE = ("full-protocol", "fig10", "full-variants", "fig3")
#: step modes in fallback order (gpu_check.MODES names) and the sweep settings each trains with
MODES = ("graph-step+compile", "graph-step+streams", "graph-step", "compile+cudagraphs/flat", "flat")
SWEEP_KW: dict[str, dict[str, bool]] = {
    # issue 51 item 4: inductor's fused kernels inside the whole-step graph (never measured yet: its check decides)
    "graph-step+compile": {"graph_step": True, "compile": True},
    "graph-step+streams": {"graph_step": True, "streams": True},  # the fastest fp32 step measured (H200: 1.24-1.46x)
    "graph-step": {"graph_step": True},
    "compile+cudagraphs/flat": {"compile": True, "cudagraphs": True},
    "flat": {"compile": False},
}
CHECK_SECONDS = {
    "graph-step+compile": 150,  # a compile of ~1 min, cached for training (TORCHINDUCTOR_CACHE_DIR)
    "graph-step+streams": 60,
    "graph-step": 60,
    "compile+cudagraphs/flat": 150,
    "flat": 60,
}
# the fastest fp32 step measured on a GPU kind (ms at K = 1 and 12; benchmarks/records): a mode more than
# MAX_SLOWDOWN times slower there is refused (an eager fallback ~10x slower would spend windows for little)
BEST_STEP_MS = {"NVIDIA H200": {1: 1.892, 12: 4.26}}
MAX_SLOWDOWN = 2.0  # a compiled mode compiles ~1 min
PACKED = 0.87  # packed / raw size of a group checkpoint (fig10's at 37,912 steps: 0.83; benchmarks/README.md)
SAFETY = 1.1  # time predictions: a step this much slower than timed
GROUP_OVERHEAD_S = 10.0  # a group's start: data, models, warm-up and capture (or compile, cached by the check)
LIMIT_S, RESERVE_S, STARTUP_S = 540, 60, 60  # a window's command, the packing reserve, install + check
DEFAULT_ROOM_MIB = 24.0  # state room when no room.json came along (~26 MiB on 2026-11-27)
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def log(msg: str) -> None:
    print(msg, flush=True)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


# ---- the device tool's limits ------------------------------------------------------------------------------------
def out_problems(
    out: str | os.PathLike, files: int = OUT_FILES, file_mib: float = OUT_FILE_MIB, total_mib: float = CALL_MIB
) -> list[str]:
    """What in ``out`` would not come back through the device tool: more than ``files`` files, a file over
    ``file_mib`` MiB, more than ``total_mib`` MiB together, anything more than 2 folders down, a name with other
    characters than letters, digits, '.', '_' and '-', a link. Empty when everything comes back.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "fig3").mkdir()
        >>> _ = (d / "fig3" / "runs-000.tar").write_bytes(b"x")
        >>> out_problems(d)
        []
        >>> _ = (d / "a b.json").write_text("{}")
        >>> out_problems(d)
        ["'a b.json': a name with characters other than letters, digits, '.', '_' and '-'"]
    """
    out = Path(out)
    problems, n, size = [], 0, 0
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if any(not _NAME.match(part) for part in rel.parts):
            problems.append(f"{str(rel)!r}: a name with characters other than letters, digits, '.', '_' and '-'")
        if p.is_symlink():
            problems.append(f"{str(rel)!r}: a link")
        elif p.is_file():
            n += 1
            size += p.stat().st_size
            if len(rel.parts) > 3:
                problems.append(f"{str(rel)!r}: more than 2 folders down")
            if p.stat().st_size > file_mib * MIB:
                problems.append(f"{str(rel)!r}: {p.stat().st_size / MIB:.1f} MiB, over {file_mib:g} MiB")
    if n > files:
        problems.append(f"{n} files, over {files}")
    if size > total_mib * MIB:
        problems.append(f"{size / MIB:.1f} MiB together, over {total_mib:g} MiB")
    return problems


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree that travels with a call: tracked and untracked-not-ignored files (git)."""
    r = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    )
    return sum((root / f).stat().st_size for f in r.stdout.decode().split("\0") if f and (root / f).is_file())


def _slim_tree() -> Any:
    """tools/gpu/slim_tree.py (beside this file; not a package): what a slim tree sets aside."""
    import importlib.util

    if "slim_tree" not in sys.modules:
        spec = importlib.util.spec_from_file_location("slim_tree", Path(__file__).with_name("slim_tree.py"))
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["slim_tree"] = mod
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return sys.modules["slim_tree"]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


# ---- timing model, plan and the rule -----------------------------------------------------------------------------
def step_model(step_s: dict[int, float]) -> Callable[[int], float]:
    """Seconds per group step as a function of the group size K, from the check's timings (``{K: seconds}``):
    linear through two timed sizes (not below 0.8 of the smallest), or from one, growing 2.5 % per member (the
    first H100 run: a compiled or eager step of the full model cost about the same from K = 1 to 12).

    Example:
        >>> f = step_model({2: 0.003, 12: 0.005})
        >>> round(f(7) * 1e3, 3), round(f(1) * 1e3, 3)
        (4.0, 2.8)
        >>> round(step_model({2: 0.004})(12) * 1e3, 3)
        5.0
    """
    if not step_s:
        raise ValueError("step_model needs at least one timed group size")
    pts = sorted((int(k), float(v)) for k, v in step_s.items())
    (k0, t0), (k1, t1) = pts[0], pts[-1]
    if k1 == k0:
        return lambda k: t0 * (1 + 0.025 * (k - k0))
    slope = (t1 - t0) / (k1 - k0)
    return lambda k: max(0.8 * t0, t0 + slope * (k - k0))


def decide(
    remaining: Sequence[int],
    member_mib: float,
    step_s: Callable[[int], float],
    seconds_left: float,
    room_left_mib: float,
) -> str | None:
    """Whether a group may train now, with ``seconds_left`` before training must stop: ``"finish"`` if its members'
    ``remaining`` steps all fit, ``"carry"`` if the members still training then (at the slower estimate, so the most
    of them) have packed state (``member_mib`` each) within ``room_left_mib``, else None (it would train for
    nothing: its state could not travel).

    Example:
        >>> f = lambda k: 0.001
        >>> decide([100_000], 16.0, f, 400, 26.0), decide([900_000], 16.0, f, 400, 26.0)
        ('finish', 'carry')
        >>> decide([900_000, 900_000], 16.0, f, 400, 26.0) is None  # two full models' state does not travel
        True
        >>> decide([900_000, 100_000], 16.0, f, 400, 26.0)  # the short one finishes first
        'carry'
    """
    if not remaining:
        return None
    per = step_s(len(remaining)) * SAFETY
    usable = seconds_left - GROUP_OVERHEAD_S
    if usable <= 0:
        return None
    if max(remaining) * per <= usable:
        return "finish"
    done = usable / per
    return "carry" if sum(1 for r in remaining if r > done) * member_mib <= room_left_mib else None


def plan_for_windows(
    runs: Sequence[tuple[str, str, int, float]],
    step_s: Callable[[int], float],
    window_s: float,
    room_mib: float,
    max_group_size: int,
) -> list[list[str]]:
    """Groups for a sweep trained in windows (``runs``: name, group key, steps, packed state MiB of a member; spec
    order): per key, the runs too long to finish inside one window of ``window_s`` training seconds go in groups
    of as many as their state fits ``room_mib`` (so a group can travel between windows), longest first; the
    shorter runs join the first such group while they still finish inside its first window (they end before it
    has to travel), the rest form groups of their own, as large as still finish inside a window. Each group has
    at most ``max_group_size`` runs. Where a group finishes in a window anyway, this is ``plan_groups``' plan.

    Example:
        >>> runs = [(f"r{s}", "k", s, 16.0) for s in (30_000, 1_170_000, 650_000, 110_000)]
        >>> plan_for_windows(runs, lambda k: 0.001, 420, 26.0, 12)  # one full model travels at a time
        [['r1170000', 'r110000', 'r30000'], ['r650000']]
        >>> plan_for_windows(runs, lambda k: 0.0002, 420, 26.0, 12)  # everything finishes inside a window
        [['r1170000', 'r650000', 'r110000', 'r30000']]
    """

    def fits(steps: int, k: int) -> bool:
        return steps * step_s(k) * SAFETY + GROUP_OVERHEAD_S <= window_s

    plan: list[list[str]] = []
    for key in dict.fromkeys(r[1] for r in runs):
        rs = sorted((r for r in runs if r[1] == key), key=lambda r: -r[2])  # stable: spec order within ties
        mib = max(r[3] for r in rs)
        cap = max(1, min(max_group_size, int(room_mib // mib) if mib > 0 else max_group_size))
        long = [r for r in rs if not fits(r[2], 1)]
        short = [r for r in rs if fits(r[2], 1)]
        groups = [long[i : i + cap] for i in range(0, len(long), cap)]
        if groups:  # the longest short one joining must still finish at the size the group then has
            first = len(groups[0])
            while (
                short
                and len(groups[0]) < max_group_size
                and fits((groups[0][first:] or short)[0][2], len(groups[0]) + 1)
            ):
                groups[0].append(short.pop(0))
        while short:
            g = [short.pop(0)]
            while short and len(g) < max_group_size and fits(g[0][2], len(g) + 1):
                g.append(short.pop(0))
            groups.append(g)
        plan += [[r[0] for r in g] for g in groups]
    return plan


def simulate(
    queue: Sequence[tuple[str, Sequence[tuple[str, str, int, float]]]],
    step_s: Callable[[int], float],
    window_s: float,
    room_mib: float,
    max_group_size: Sequence[int] | int = 12,
    max_windows: int = 1000,
) -> list[dict[str, Any]]:
    """Windows of the queue (``queue``: per sweep its name and ``plan_for_windows`` rows) under this module's plan
    and rule, if a group step took exactly ``step_s(K)`` (the rule plans with ``SAFETY`` on top) and every window
    trained ``window_s`` seconds: one row per window with what trained (sweep, group, K at its start, steps,
    verdict) and the sweeps done by its end; a last row with ``stuck`` if something could never train. What
    ``estimate`` prints: an estimate, not a measurement.

    Example:
        >>> rows = [(f"r{i}", "k", 440_000, 16.0) for i in range(4)]
        >>> len(simulate([("s", rows)], lambda k: 0.0008, 420, 26.0, 4))  # one group of 4 finishes in a window
        1
        >>> len(simulate([("s", rows)], lambda k: 0.0011, 420, 26.0, 4))  # one travels at a time: 4 x 484 s
        5
    """
    sizes = [max_group_size] * len(queue) if isinstance(max_group_size, int) else list(max_group_size)
    groups: list[dict[str, Any]] = []
    for (sweep, rows), cap in zip(queue, sizes, strict=True):
        by = {r[0]: r for r in rows}
        for i, g in enumerate(plan_for_windows(rows, step_s, window_s, room_mib, cap)):
            groups.append(
                {
                    "sweep": sweep,
                    "group": f"g{i:03d}",
                    "steps": [by[n][2] for n in g],
                    "at": 0,
                    "mib": max(by[n][3] for n in g),
                    "flight": False,
                }
            )

    def left(g: dict[str, Any]) -> list[int]:
        return [s - g["at"] for s in g["steps"] if s > g["at"]]

    out: list[dict[str, Any]] = []
    while any(left(g) for g in groups) and len(out) < max_windows:
        t, tried, trained = 0.0, set(), []
        while True:
            pick = None
            for i, g in enumerate(groups):
                if not left(g) or i in tried:
                    continue
                room_left = room_mib - sum(
                    len(left(h)) * h["mib"] for j, h in enumerate(groups) if h["flight"] and j != i
                )
                verdict = decide(left(g), g["mib"], step_s, window_s - t, room_left)
                if verdict:
                    pick = (i, g, verdict)
                    break
            if pick is None:
                break
            i, g, verdict = pick
            t += GROUP_OVERHEAD_S
            at0, k0 = g["at"], len(left(g))
            for end in sorted(set(g["steps"])):  # stretches at the group's size then: members leave as they finish
                if end <= g["at"]:
                    continue
                k = sum(1 for s in g["steps"] if s > g["at"])
                n = min(end - g["at"], int((window_s - t) / step_s(k)))
                g["at"], t = g["at"] + n, t + n * step_s(k)
                if g["at"] < end:
                    break
            trained.append(
                {"sweep": g["sweep"], "group": g["group"], "K": k0, "steps": g["at"] - at0, "verdict": verdict}
            )
            g["flight"] = bool(left(g))
            if g["flight"]:
                tried.add(i)
        if not trained:
            break
        if sum(len(left(g)) * g["mib"] for g in groups if g["flight"]) > room_mib:  # more than travels: restarts
            for g in groups:
                if g["flight"]:
                    g["steps"], g["at"], g["flight"] = [s for s in g["steps"] if s > g["at"]], 0, False
        done = sorted({g["sweep"] for g in groups} - {g["sweep"] for g in groups if left(g)})
        out.append({"trained": trained, "done": done, "stuck": False})
    if any(left(g) for g in groups):
        out.append({"trained": [], "done": [], "stuck": True})
    return out


# ---- a sweep on this machine -------------------------------------------------------------------------------------
_MEMBER_MIB: dict[str, float] = {}


def member_mib(model_cfg: Any) -> float:
    """Packed resumable state of one member (fp32 weights and both AdamW moments, ``PACKED`` of 12 bytes a
    parameter), MiB.

    Example:
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> round(member_mib(CLIPConfig.from_preset("full", n_labels=20)), 1)
        16.0
    """
    import torch

    from hooked_clip1d.model.clip import CLIP1D

    key = json.dumps(model_cfg.to_dict(), sort_keys=True, default=str)
    if key not in _MEMBER_MIB:
        with torch.random.fork_rng(devices=[]):  # building a model draws from the global RNG: the caller's is kept
            n = sum(p.numel() for p in CLIP1D(model_cfg).parameters())
        _MEMBER_MIB[key] = 12 * n * PACKED / MIB
    return _MEMBER_MIB[key]


class Sweep:
    """One sweep of the queue on this machine: its spec, folder, runs' planned steps and groups' state."""

    def __init__(self, spec_path: Path, home: Path):
        from hooked_clip1d.sweeps.runner import load_spec, planned_steps

        self.path = Path(spec_path)
        self.spec = load_spec(self.path)
        self.name = self.spec.name
        self.out = Path(home) / self.name
        self.runs = {r.name: r for r in self.spec.runs}
        self.steps = {r.name: planned_steps(r) for r in self.spec.runs}

    def finished(self, run: str) -> bool:
        return (self.out / "runs" / run / "summary.json").exists()

    def done(self) -> bool:
        return all(self.finished(r) for r in self.runs)

    def ensure_plan(self, step_s: Callable[[int], float], window_s: float, room_mib: float) -> bool:
        """Write ``plan.json`` (and ``spec.toml``) for the runs not finished, sized for windows, unless a plan is
        there (carried: kept, so carried groups resume). True if a plan was written."""
        from hooked_clip1d.training.members import group_key

        if (self.out / "plan.json").exists():
            return False
        todo = [r for r in self.spec.runs if not self.finished(r.name)]
        rows = [
            (r.name, group_key(r.model_cfg, r.data_cfg, r.train_cfg), self.steps[r.name], member_mib(r.model_cfg))
            for r in todo
        ]
        groups = plan_for_windows(rows, step_s, window_s, room_mib, self.spec.run["max_group_size"])
        plan = [[f"g{i:03d}-{hashlib.sha256(json.dumps(g).encode()).hexdigest()[:8]}", g] for i, g in enumerate(groups)]
        self.out.mkdir(parents=True, exist_ok=True)
        if not (self.out / "spec.toml").exists():
            (self.out / "spec.toml").write_bytes(self.path.read_bytes())
        _write_json(self.out / "plan.json", plan)
        return True

    def groups(self) -> list[dict[str, Any]]:
        """Per group of ``plan.json``, in order: ``name``, ``runs``, ``active`` (not finished), ``step`` (its
        checkpoint's, else 0), ``remaining`` (steps of each active run), ``in_flight`` (resumable state here),
        ``member_mib``."""
        from hooked_clip1d.training.group_io import GROUP_CHECKPOINT, read_group_state

        path = self.out / "plan.json"
        rows = []
        for gname, names in json.loads(path.read_text()) if path.exists() else []:
            names = [n for n in names if n in self.runs]
            left = [n for n in names if not self.finished(n)]
            gs = read_group_state(self.out / "groups" / gname / GROUP_CHECKPOINT)
            active, step = left, 0
            if gs is not None and gs.get("active"):
                active = [gs["names"][i] for i in gs["active"] if gs["names"][i] in left]
                step = gs["step"]
            mib = max((member_mib(self.runs[n].model_cfg) for n in names), default=0.0)
            rows.append(
                {
                    "name": gname,
                    "runs": names,
                    "active": active,
                    "step": step,
                    "member_mib": mib,
                    "remaining": [max(0, self.steps[n] - step) for n in active],
                    "in_flight": gs is not None and bool(active),
                }
            )
        return rows


def load_queue(queue: Sequence[str], spec_dir: Path, home: Path) -> list[Sweep]:
    return [Sweep(Path(spec_dir) / f"{q}.toml", home) for q in queue]


def _identity(run: Any) -> str:
    """What a run computes: its model and data configs and the training fields that change results (execution
    settings such as eval_every or snapshot_epochs left out)."""
    from hooked_clip1d.training.run_config import comparable_train_config

    parts = [run.model_cfg.to_dict(), run.data_cfg.to_dict(), comparable_train_config(run.train_cfg.to_dict())]
    return json.dumps(parts, sort_keys=True, default=str)


def adopt_identical(sweeps: Sequence[Sweep]) -> list[str]:
    """Train identical runs once (issue 51): a run of the queue that computes what a finished run of any sweep of
    the queue computed (``_identity``) is copied from it (its snapshots left out) instead of trained again, e.g. the
    full model at protocol, Fig. 10's w = 0.2 and Fig. 3's (20, 10) cell. Returns a line per run adopted.

    Example:
        >>> adopt_identical([])
        []
    """
    done: dict[str, Path] = {}
    for sw in sweeps:
        for name, run in sw.runs.items():
            if sw.finished(name):
                done.setdefault(_identity(run), sw.out / "runs" / name)
    lines = []
    for sw in sweeps:
        for name, run in sw.runs.items():
            src = done.get(_identity(run))
            if sw.finished(name) or src is None:
                continue
            dest = sw.out / "runs" / name
            tmp = dest.with_name(f".{name}.adopting")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("snapshots", "*.lock", ".*.tmp"))
            shutil.rmtree(dest, ignore_errors=True)  # a partial run of its own: the finished one replaces it
            os.replace(tmp, dest)
            lines.append(
                f"== {sw.name}: run {name} is {src.parent.parent.name}/{src.name} (identical): copied, "
                "not trained again"
            )
    return lines


def adopt_here(queue: Sequence[str], spec_dir: Path, home: Path) -> list[str]:
    """``adopt`` (tools/cpu/long_runs.sh's ``adopt=`` item): ``adopt_identical`` on these sweeps under ``home``, and
    a sweep folder the copy made gets its spec.toml (a sweep refuses a folder without one), as the window's plan
    does. Returns a line per run adopted and per spec.toml written.

    Example:
        >>> adopt_here([], Path("."), Path("/nonexistent"))
        []
    """
    sweeps = load_queue(queue, spec_dir, home)
    lines = adopt_identical(sweeps)
    for sw in sweeps:
        if sw.out.is_dir() and not (sw.out / "spec.toml").exists():
            (sw.out / "spec.toml").write_bytes(sw.path.read_bytes())
            lines.append(f"== {sw.name}: spec.toml written into {sw.out}")
    return lines


# ---- training (the `train` process) ------------------------------------------------------------------------------
def train_queue(
    sweeps: Sequence[Sweep],
    device: str,
    mode: str,
    until: float,
    step_s: dict[int, float],
    room_mib: float,
    window_s: float,
    max_steps: int | None = None,
) -> list[dict[str, Any]]:
    """Train the queue's groups until ``until`` (a ``time.time()``): repeatedly the first group, in queue and plan
    order, that ``decide`` lets train (the room left is ``room_mib`` less the state of the other groups in
    flight); a group stopped before its end is not taken up again in this call. A sweep without a plan gets one
    (``plan_for_windows``). After each group the timing model is rescaled by the rate it trained at. Returns one
    row per group trained (steps, seconds, why it was chosen, whether it finished)."""
    from hooked_clip1d.sweeps.runner import run_sweep

    model, scale = step_model(step_s), 1.0
    rows: list[dict[str, Any]] = []
    tried: set[tuple[str, str]] = set()
    blocked_said: set[tuple[str, str]] = set()
    while True:
        left = until - time.time()
        if left <= GROUP_OVERHEAD_S:
            break
        for line in adopt_identical(sweeps):
            log(line)
        f = lambda k, s=scale: model(k) * s  # noqa: E731
        for sw in sweeps:
            if not sw.done() and sw.ensure_plan(f, window_s, room_mib):
                log(
                    f"== {sw.name}: planned {sw.out / 'plan.json'} (groups: "
                    f"{[len(g['runs']) for g in sw.groups()]}; {window_s:.0f} s windows, {room_mib:.1f} MiB room)"
                )
        status = {sw.name: sw.groups() for sw in sweeps}
        flight = {
            (s, g["name"]): len(g["active"]) * g["member_mib"] for s, gs in status.items() for g in gs if g["in_flight"]
        }
        pick = None
        for sw in sweeps:
            for g in status[sw.name]:
                key = (sw.name, g["name"])
                if not g["active"] or key in tried:
                    continue
                room_left = room_mib - sum(v for k, v in flight.items() if k != key)
                verdict = decide(g["remaining"], g["member_mib"], f, left, room_left)
                if verdict:
                    pick = (sw, g, verdict)
                    break
                if key not in blocked_said:
                    blocked_said.add(key)
                    log(
                        f"== {sw.name} {g['name']}: not started ({len(g['active'])} runs, {max(g['remaining'])} "
                        f"steps left: neither finishes in {left:.0f} s nor travels in {room_left:.1f} MiB)"
                    )
            if pick:
                break
        if pick is None:
            break
        sw, g, verdict = pick
        k = len(g["active"])
        log(
            f"== {sw.name} {g['name']}: {k} runs from step {g['step']:,} ({verdict}; ~{f(k) * 1e3:.2f} ms a step, "
            f"{left:.0f} s left)"
        )
        t0 = time.time()
        run_sweep(
            sw.path,
            sw.out,
            device=device,
            progress=False,
            max_seconds=max(1.0, until - time.time()),
            max_steps=max_steps,
            groups=[g["name"]],
            **SWEEP_KW[mode],
        )
        sec = time.time() - t0
        after = next(x for x in sw.groups() if x["name"] == g["name"])
        fin = not after["active"]
        steps = (max(g["remaining"]) if fin else max(0, after["step"] - g["step"])) if g["remaining"] else 0
        if steps >= 500 and sec > GROUP_OVERHEAD_S:  # the rate this group trained at, its start left out
            scale = max(0.5, min(3.0, (sec - GROUP_OVERHEAD_S / 2) / steps / model(k)))
        rows.append(
            {
                "sweep": sw.name,
                "group": g["name"],
                "runs": k,
                "verdict": verdict,
                "from_step": g["step"],
                "steps": steps,
                "seconds": round(sec, 1),
                "finished": fin,
                "ms_per_step": round(1e3 * sec / steps, 3) if steps else None,
            }
        )
        log(f"== {sw.name} {g['name']}: {steps:,} steps in {sec:.0f} s" + (", finished" if fin else ", stopped"))
        if not fin:
            tried.add((sw.name, g["name"]))
    return rows


# ---- the check (the `check` process) -----------------------------------------------------------------------------
def _gpu_check() -> Any:
    """benchmarks/gpu_check.py as a module (its checks and tolerances), loaded once by path."""
    if "gpu_check" not in sys.modules:
        import importlib.util

        spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpu_check"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["gpu_check"]


def check_one(
    mode: str,
    device: str,
    steps: int = 200,
    preset: str = "full",
    required: bool = False,
    ks: Sequence[int] = (2, 12),
    timing_s: float = 0.5,
) -> dict[str, Any]:
    """Check one step ``mode`` (module docstring, step 2) and time it at group sizes ``ks``; with ``required``,
    fp32 eager on ``device`` against the CPU first. Returns ``ok``, ``checks`` (rows with value and tolerance),
    ``step_s`` ({K: seconds}), ``error`` (a crash: the check failed) and ``required_failed``."""
    import torch

    gc = _gpu_check()

    rec: dict[str, Any] = {"mode": mode, "ok": False, "checks": [], "step_s": {}, "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        rec["gpu"] = torch.cuda.get_device_name(0)
    t0 = time.time()
    try:
        if required and device != "cpu":  # the CPU against itself proves nothing
            rows = gc.check_step(device)
            rec["checks"] += [{**r, "required": True} for r in rows]
            if not all(r["ok"] for r in rows):
                rec["required_failed"] = True
                return rec
        base = gc.five_then(device, "eager", steps, preset)
        got = gc.five_then(device, mode, steps, preset)
        rec["checks"] += gc.mode_rows(mode, got, base, steps)  # gpu_check's one comparison (b_K by its size)
        rec["ok"] = all(c["ok"] for c in rec["checks"])
        if rec["ok"]:
            for k in ks if "compile" not in mode else ks[:1]:  # a new size recompiles (~1 min): timed at K = 2
                bt = got["traj"] if k == 2 else gc._mode_group(device, mode, k, 10, preset=preset)[0]
                gc._advance(bt, 10)
                n, dt = 20, 0.0
                while dt < timing_s and n <= 4000:
                    n *= 2
                    dt = gc._advance(bt, n)
                rec["step_s"][k] = dt / n
            slow = too_slow(rec.get("gpu"), rec["step_s"])
            if slow:
                rec["ok"], rec["error"] = False, slow
    except Exception as e:  # noqa: BLE001 - a mode that crashes is a failed check; the next mode is tried
        rec["ok"] = False
        rec["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    rec["seconds"] = round(time.time() - t0, 1)
    return rec


def too_slow(gpu: str | None, step_s: dict[int, float]) -> str | None:
    """Why a mode is refused for speed on ``gpu`` (its timed ``step_s``, seconds by K): slower than ``MAX_SLOWDOWN``
    times the fastest step measured on that GPU kind (``BEST_STEP_MS``, compared at K = 12, or K = 2 against K = 1's);
    None where it is not, or where nothing was measured on that kind.

    Example:
        >>> too_slow("NVIDIA H200", {2: 0.004, 12: 0.005}) is None
        True
        >>> too_slow("NVIDIA H200", {2: 0.03, 12: 0.036})
        'too slow: 36.0 ms a step at K = 12, over 2x the fastest measured on this GPU (4.26 ms)'
        >>> too_slow("NVIDIA H100", {12: 1.0}) is None  # nothing measured there
        True
    """
    best = BEST_STEP_MS.get(gpu or "")
    if not best or not step_s:
        return None
    k, ref = (12, best[12]) if 12 in step_s else (min(step_s), best[1])
    ms = step_s[k] * 1e3
    if ms > MAX_SLOWDOWN * ref:
        fastest = f"the fastest measured on this GPU ({ref} ms)"
        return f"too slow: {ms:.1f} ms a step at K = {k}, over {MAX_SLOWDOWN:g}x {fastest}"
    return None


def _check_lines(rec: dict[str, Any]) -> list[str]:
    lines = []
    for c in rec["checks"]:
        tol = "-" if c.get("tol") is None else f"{c['tol']:.0e}"
        lines.append(f"  {c['check']:<76} {c['value']:>10.3g} {tol:>7}  {'yes' if c['ok'] else 'NO'}")
    if rec.get("error"):
        lines.append(f"  {rec['mode']}: {rec['error']}")
    for k, s in sorted(rec["step_s"].items(), key=lambda x: int(x[0])):
        lines.append(f"  {rec['mode']}: {float(s) * 1e3:.3f} ms a group step at K = {k}")
    return lines


# ---- carrying state between windows (here) and into a window (there) ---------------------------------------------
def carry_out(sweeps: Sequence[Sweep], dest: Path, travel_bytes: int) -> dict[str, Any]:
    """Make ``dest`` (``.gpu-carry``) from this machine's sweeps: per sweep its spec (``spec.toml``, byte for
    byte), ``plan.json`` and finished runs' configs, metrics and summaries (``carry_sweep``: each checked against
    the spec), then the packed state of its groups in flight (``state/state-NNN.tar``) while it fits what may
    travel beside ``travel_bytes`` (the working tree and the wheels): 64 MiB less them, less 1 MiB. ``room.json``
    says how much state the next window may leave in flight. Returns what it carried and what it left."""
    from hooked_clip1d.sweeps.transfer import carry_sweep, pack_state, unfinished_groups

    room = CALL_MIB - travel_bytes / MIB - IN_MARGIN_MIB
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    got: dict[str, Any] = {"sweeps": {}, "left": {}}
    for sw in sweeps:
        if not sw.out.is_dir():
            continue
        d = tmp / sw.name
        rows = carry_sweep(sw.spec, sw.out, d, state=False)
        if rows["runs"] or (sw.out / "plan.json").exists():
            d.mkdir(parents=True, exist_ok=True)
            (d / "spec.toml").write_bytes(sw.path.read_bytes())
            if (sw.out / "plan.json").exists():
                shutil.copyfile(sw.out / "plan.json", d / "plan.json")
        got["sweeps"][sw.name] = {"runs": rows["runs"], "state": []}
    state_room = room - _size(tmp) / MIB
    used = 0.0
    for sw in sweeps:
        groups = unfinished_groups(sw.out) if sw.out.is_dir() else []
        if not groups:
            continue
        archives = pack_state(sw.out, tmp / sw.name / "state", max_mib=FILE_MIB, budget_mib=max(0.0, state_room - used))
        if archives:
            import tarfile

            with tarfile.open(archives[0]) as tar:
                f = tar.extractfile("STATE.json")
                packed = json.loads(f.read())["groups"] if f else []
            got["sweeps"][sw.name]["state"] = [
                {"name": g["name"], "step": g["step"], "runs": g["active"]} for g in packed
            ]
            used += sum(a.stat().st_size for a in archives) / MIB
        packed_names = {g["name"] for g in got["sweeps"][sw.name]["state"]}
        left = [g["name"] for g in groups if g["name"] not in packed_names]
        if left:
            got["left"][sw.name] = left
    caches = Path(sweeps[0].out).parent / CACHE_DIR if sweeps else None
    got["caches"], cache_mib = [], 0.0
    for c in sorted(caches.iterdir()) if caches is not None and caches.is_dir() else []:
        size = _size(c) / MIB
        if c.is_dir() and size <= state_room - used - cache_mib - 1.0:  # compile caches: in the room the state left
            shutil.copytree(c, tmp / CACHE_DIR / c.name)
            cache_mib += size
            got["caches"].append(c.name)
    # the next window's state room: a little less (new runs' files come along), less the caches that travel too
    got["room_mib"] = round(state_room - cache_mib - 0.5, 2)
    got["state_mib"] = round(used, 2)
    got["travel_mib"] = round((travel_bytes + _size(tmp)) / MIB + 0.0, 2)
    room_json = {k: got[k] for k in ("room_mib", "state_mib", "travel_mib")}
    _write_json(tmp / "room.json", {**room_json, "made": time.strftime("%Y-%m-%d %H:%M")})
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return got


def carry_in(sweeps: Sequence[Sweep], carry: Path) -> list[str]:
    """Put ``carry`` (``carry_out``'s folder) into the sweeps home: per sweep not yet on this machine whose carried
    ``spec.toml`` is byte for byte its spec, the finished runs' files and ``plan.json``, then its state archives
    (``unpack_runs`` checks them). Returns a line per sweep."""
    from hooked_clip1d.sweeps.transfer import unpack_runs

    lines = []
    for sw in sweeps:
        src = Path(carry) / sw.name
        if not (src / "spec.toml").exists():
            continue
        if sw.out.exists():
            lines.append(f"== {sw.name}: already on this machine (an earlier call); {src} not used")
            continue
        if (src / "spec.toml").read_bytes() != sw.path.read_bytes():
            lines.append(f"== {sw.name}: WARNING: {src} not used: its spec.toml differs from {sw.path} (carry again)")
            continue
        shutil.copytree(src, sw.out, ignore=shutil.ignore_patterns("state"))
        tars = sorted((src / "state").glob("*.tar")) if (src / "state").is_dir() else []
        if tars:
            unpack_runs(tars, sw.out)
        n = sum(1 for r in sw.runs if sw.finished(r))
        state = [f"{g['name']} at step {g['step']:,} ({len(g['active'])} runs)" for g in sw.groups() if g["in_flight"]]
        lines.append(
            f"== {sw.name}: {n} of {len(sw.runs)} runs finished earlier (not retrained)"
            + (f"; resumes {', '.join(state)}" if state else "")
        )
    return lines


def unpack(files_at: Sequence[Path], home: Path) -> list[str]:
    """Put what calls brought back (their ``files_at`` folders, oldest first) into the sweeps home: each
    ``<sweep>/`` folder's archives (finished runs and resumable state) into ``home/<sweep>``, a compile cache
    (``inductor-<kind>.tar``) into ``home/inductor/<kind>``."""
    from hooked_clip1d.sweeps.transfer import unpack_runs

    lines = []
    for fa in files_at:
        fa = Path(fa)
        if not fa.is_dir():
            raise FileNotFoundError(f"{str(fa)!r} is not a folder (a call's files_at)")
        for t in sorted(fa.glob(f"{CACHE_DIR}-*.tar")):  # inductor's compile cache of a GPU kind (pack_cache)
            lines.append(unpack_cache(t, Path(home)))
        for d in sorted(p for p in fa.iterdir() if p.is_dir() and any(p.glob("*.tar"))):
            names = unpack_runs(sorted(d.glob("*.tar")), Path(home) / d.name)
            state = " and the resumable state" if any(d.glob("state-*.tar")) else ""
            lines.append(f"== {d.name}: {len(names)} runs{state} from {fa} -> {Path(home) / d.name}")
    return lines


# ---- packing (there) ---------------------------------------------------------------------------------------------
def pack(
    sweeps: Sequence[Sweep],
    out: Path,
    state_dir: Path,
    room_mib: float,
    files: int = OUT_FILES - 1,
    total_mib: float = CALL_MIB - OUT_MARGIN_MIB,
) -> list[dict[str, Any]]:
    """Pack each sweep's news into ``out/<sweep>/`` (``transfer.pack_for_transfer``: runs finished since the last
    call, the state of its groups in flight, runs sent before), within ``files`` archives and ``total_mib``
    together (one file of the device tool's 8 is left for window.json) and the state within ``room_mib`` (what can
    travel in next window). Remembers what was sent in ``state_dir``."""
    from hooked_clip1d.sweeps.transfer import pack_for_transfer

    rows = []
    state_left = room_mib
    for sw in sweeps:
        if not sw.out.is_dir():
            continue
        sent_file = state_dir / f"sent-{sw.name}"
        sent = sent_file.read_text().split() if sent_file.exists() else []
        r = pack_for_transfer(
            sw.out,
            out / sw.name,
            sent=sent,
            max_files=files,
            max_mib=FILE_MIB,
            max_total_mib=max(0.0, total_mib),
            state_mib=max(0.0, state_left),
        )
        sent_file.write_text("".join(f"{n}\n" for n in sent + r["runs"]))
        size = sum(a.stat().st_size for a in r["archives"]) / MIB
        state = sum(a.stat().st_size for a in r["archives"] if a.name.startswith("state-")) / MIB
        files -= len(r["archives"])
        total_mib -= size
        state_left -= state
        rows.append(
            {
                "sweep": sw.name,
                "runs": r["runs"],
                "resent": r["resent"],
                "left": r["left"],
                "state": [{"name": g["name"], "step": g["step"], "runs": g["active"]} for g in r["state"]],
                "state_left": r["state_left"],
                "mib": round(size, 2),
            }
        )
    return rows


# ---- inductor's compile cache, per GPU kind (issue 51 item 4) ---------------------------------------------------
CACHE_DIR = "inductor"  # under the window's state (there), the carry folder and the sweeps home (here)


def cache_slug(device_name: str) -> str:
    """A folder name for a device kind (``_device_name``'s text): inductor's kernels are compiled for one GPU kind.

    Example:
        >>> cache_slug("cuda:NVIDIA H200")
        'cuda_NVIDIA_H200'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", device_name)


def pack_cache(cache: Path, out: Path, slug: str, files_left: int, mib_left: float) -> Path | None:
    """Tar ``cache`` (this machine's compile cache for one GPU kind) as ``out/inductor-<slug>.tar`` when a file of
    ``files_left`` and ``mib_left`` MiB (and ``FILE_MIB``) hold it; else nothing (the next bare machine compiles
    again, ~1 min of its check)."""
    import tarfile

    if not cache.is_dir() or files_left < 1 or not any(cache.rglob("*")):
        return None
    target = out / f"{CACHE_DIR}-{slug}.tar"
    with tarfile.open(target, "w") as tar:
        tar.add(cache, arcname=slug)
    if target.stat().st_size > min(mib_left, FILE_MIB) * MIB:
        target.unlink()
        return None
    return target


def unpack_cache(tar_path: Path, home: Path) -> str:
    """Extract a ``pack_cache`` archive into ``home/inductor/<slug>`` (replacing an older one); tar's ``data`` filter
    refuses absolute paths, links out of the folder and device files."""
    import tarfile

    dest = home / CACHE_DIR
    dest.mkdir(parents=True, exist_ok=True)
    slug = tar_path.stem.removeprefix(f"{CACHE_DIR}-")
    shutil.rmtree(dest / slug, ignore_errors=True)
    with tarfile.open(tar_path) as tar:
        if any(m.name.split("/")[0] != slug for m in tar.getmembers()):
            raise ValueError(f"{str(tar_path)!r} holds files outside {slug}/: not a compile cache of this tool")
        tar.extractall(dest, filter="data")
    return f"== compile cache {slug}: {str(tar_path)!r} -> {dest / slug}"


# ---- the window (parent process: never touches the device) -------------------------------------------------------
def _sub(args: list[str], timeout: float) -> int:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    try:
        return subprocess.run(cmd, timeout=max(1.0, timeout)).returncode
    except subprocess.TimeoutExpired:
        log(f"== {args[0]} ran past {timeout:.0f} s and was stopped")
        return 124


def choose_mode(
    modes: Sequence[str], run_check: Callable[[str, bool], dict[str, Any]], failed: Sequence[str] = ()
) -> tuple[str | None, list[dict[str, Any]]]:
    """The first of ``modes`` (not in ``failed``) whose check passes, and every check record; ``run_check(mode,
    required)`` runs one (``required``: with the eager-against-CPU check, for the first mode tried). None when a
    required check failed or no mode passed.

    Example:
        >>> choose_mode(["a", "b"], lambda m, req: {"mode": m, "ok": m == "b"})[0]
        'b'
        >>> choose_mode(["a", "b"], lambda m, req: {"mode": m, "ok": True, "required_failed": req})[0] is None
        True
    """
    recs = []
    first = True
    for mode in modes:
        if mode in failed:
            continue
        rec = run_check(mode, first)
        first = False
        recs.append(rec)
        if rec.get("required_failed"):
            return None, recs
        if rec.get("ok"):
            return mode, recs
    return None, recs


def _device_name(device: str) -> str:
    """What a check is valid for: the device kind and, on CUDA, the GPU's name (a check on one says nothing of
    another)."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return f"cuda:{torch.cuda.get_device_name(0)}"
    return device


def window(a: argparse.Namespace) -> int:
    started = a.started or time.time()
    until = started + a.limit - a.reserve
    out, state = Path(a.out), Path(a.state)
    out.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    if a.again and not (state / "check.json").exists():  # call 1's machine went back: nothing here to go on with
        log("== window ... again: a fresh machine (call 1's went back), so nothing to go on with; give it back")
        return 6
    home = state / "sweeps"  # this machine's sweeps (the train process reads them through the variable)
    os.environ["HOOKED_CLIP1D_SWEEPS"] = str(home)
    rec: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "limit": a.limit,
        "reserve": a.reserve,
        "device": a.device,
        "queue": a.queue,
        "checks": [],
        "trained": [],
    }
    try:
        sweeps = load_queue(a.queue.split(), Path(a.spec_dir), home)
    except ImportError as e:  # a module the carried wheels do not hold: name it (add it to gpu_wheels.sh)
        log(f"== cannot import the package: {e} (add the module to tools/gpu/gpu_wheels.sh; carry .whl)")
        return 3
    room_file = Path(a.carry) / "room.json"
    room = json.loads(room_file.read_text())["room_mib"] if room_file.exists() else DEFAULT_ROOM_MIB
    if a.room is not None:
        room = a.room
    rec["room_mib"] = room
    log(
        f"== window: limit {a.limit} s, training until {until - started:.0f} s after the start, state room "
        f"{room:.1f} MiB" + ("" if room_file.exists() else f" (no {room_file}: default)")
    )
    for line in carry_in(sweeps, Path(a.carry)):
        log(line)
    # the check: once per machine (a second call reuses it)
    check_file = state / "check.json"
    here = _device_name(a.device)
    # inductor's compile cache for this GPU kind: carried in from an earlier window, read by the check and training
    # processes (a bare machine would compile again, ~1 min), packed out again at the end
    cache = state / CACHE_DIR / cache_slug(here)
    carried_cache = Path(a.carry) / CACHE_DIR / cache_slug(here)
    if carried_cache.is_dir() and not cache.exists():
        shutil.copytree(carried_cache, cache)
        log(f"== compile cache for {here} carried in ({_size(cache) / MIB:.1f} MiB)")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    checked = json.loads(check_file.read_text()) if check_file.exists() else {}
    if checked.get("device") != here:  # another device's check (a CPU dry run, another GPU) says nothing of this one
        if checked:
            log(f"== the check file there is {checked.get('device')!r}'s, not {here!r}'s: checked again")
        checked = {"mode": None, "failed": [], "recs": [], "device": here}
    mode, step_s = checked["mode"], {int(k): v for k, v in checked.get("step_s", {}).items()}
    if a.step_ms is not None:
        step_s = {2: a.step_ms / 1e3}
    modes = a.modes.split(",")

    def run_check(m: str, required: bool) -> dict[str, Any]:
        js = state / f"check-{m.replace('+', '_').replace('/', '_')}.json"
        js.unlink(missing_ok=True)
        args = [
            "check",
            "--mode",
            m,
            "--device",
            a.device,
            "--steps",
            str(a.check_steps),
            "--preset",
            a.check_preset,
            "--timing-s",
            str(a.check_timing_s),
            "--json",
            str(js),
        ]
        args += ["--required"] if required else []
        rc = _sub(args, CHECK_SECONDS.get(m, 60) * a.check_scale)
        r = json.loads(js.read_text()) if js.exists() else {"mode": m, "ok": False, "checks": [], "step_s": {}}
        if rc != 0 and not r.get("required_failed"):
            r["ok"], r["error"] = False, r.get("error") or f"the check process exited {rc}"
        for line in _check_lines(r):
            log(line)
        return r

    def check(failed: list[str]) -> str | None:
        nonlocal step_s
        t0 = time.time()
        m, recs = choose_mode(modes, run_check, failed)
        rec["checks"] += recs
        failed += [r["mode"] for r in recs if not r.get("ok")]
        if m is not None and a.step_ms is None:
            step_s = {int(k): v for k, v in recs[-1]["step_s"].items()}
        checked.update(mode=m, failed=failed, step_s=step_s, recs=checked["recs"] + recs)
        _write_json(check_file, checked)
        log(f"== check: {m or 'no mode passed'} ({time.time() - t0:.0f} s)")
        return m

    if mode is None:
        if any(r.get("required_failed") for r in checked["recs"]):
            log("== the required check failed on this machine earlier: nothing trains")
        else:
            mode = check(checked["failed"])
    else:
        log(f"== check: {mode} (passed in an earlier call on this machine)")
    rec["mode"] = mode
    rec["step_ms"] = {k: round(v * 1e3, 4) for k, v in sorted(step_s.items())}  # `estimate --step-ms A,B`
    rc = 0
    calls = 0
    while mode is not None and until - time.time() > GROUP_OVERHEAD_S + 5:
        calls += 1
        js = state / f"train-{int(started)}-{calls}.json"
        args = [
            "train",
            "--mode",
            mode,
            "--until",
            str(until),
            "--device",
            a.device,
            "--queue",
            a.queue,
            "--spec-dir",
            a.spec_dir,
            "--room",
            str(max(0.0, room)),  # no room left: nothing may stay in flight (a negative room means the same)
            "--window-s",
            str(a.window_s),
            "--step-json",
            json.dumps(step_s),
            "--json",
            str(js),
        ]
        args += ["--max-steps", str(a.max_steps)] if a.max_steps else []
        code = _sub(args, until - time.time() + 60)
        got = json.loads(js.read_text()) if js.exists() else {}
        rec["trained"] += got.get("rows", [])
        if code == 0:
            break
        rec.setdefault("crashes", []).append({"mode": mode, "exit": code, "error": got.get("error")})
        if until - time.time() < 90:  # no time for another check and training: pack what there is
            log(f"== training with {mode} stopped: exit {code} {got.get('error', '')}; no time left to try another")
            checked["failed"] = checked["failed"] + [mode]
            _write_json(check_file, {**checked, "mode": None})
            mode, rc = None, 4
            break
        log(f"== training with {mode} stopped: exit {code} {got.get('error', '')}; the next mode is checked")
        mode = check(checked["failed"] + [mode])
        rc = 4 if mode is None else 0
    if mode is None and not rec["trained"]:
        rc = rc or 1
    # pack what finished and the state of what did not, whatever happened above
    rows = pack(sweeps, out, state, room)
    rec["packed"] = rows
    n_files = sum(1 for p in out.rglob("*") if p.is_file())
    packed_cache = pack_cache(
        cache, out, cache_slug(here), OUT_FILES - 1 - n_files, CALL_MIB - OUT_MARGIN_MIB - _size(out) / MIB
    )
    rec["compile_cache"] = packed_cache.name if packed_cache is not None else None
    for r in rows:
        log(
            f"== {r['sweep']}: packed {len(r['runs'])} new runs, {len(r['resent'])} sent before, state of "
            f"{[g['name'] + ' at ' + str(g['step']) for g in r['state']] or 'none'} ({r['mib']:.1f} MiB)"
        )
        if r["left"]:
            log(f"== {r['sweep']}: WARNING: runs {r['left']} did not fit; a second call brings them")
        if r["state_left"]:
            log(f"== {r['sweep']}: WARNING: the state of {r['state_left']} did not fit; they restart next window")
    rec["sweeps"] = {
        sw.name: {"finished": sum(1 for r in sw.runs if sw.finished(r)), "runs": len(sw.runs), "done": sw.done()}
        for sw in sweeps
    }
    rec["seconds"] = round(time.time() - started, 1)
    _write_json(out / "window.json", rec)
    problems = out_problems(out)
    for p in problems:
        log(f"== WARNING: $OUT: {p}")
    log("== trained:")
    for t in rec["trained"]:
        log(
            f"  {t['sweep']:<14} {t['group']:<14} K={t['runs']:<3} {t['verdict']:<6} {t['steps']:>9,} steps "
            f"{t['seconds']:>6.0f} s  {t['ms_per_step'] or 0:7.3f} ms/step  {'finished' if t['finished'] else ''}"
        )
    for name, s in rec["sweeps"].items():
        log(f"  {name:<14} {s['finished']} of {s['runs']} runs finished" + (" (done)" if s["done"] else ""))
    log(
        f"== window: {rec['seconds']:.0f} s, mode {mode}, $OUT {_size(out) / MIB:.1f} MiB in "
        f"{sum(1 for p in out.rglob('*') if p.is_file())} files"
    )
    return rc or (5 if problems else 0)


def train_main(a: argparse.Namespace) -> int:
    home = Path(os.environ.get("HOOKED_CLIP1D_SWEEPS", "."))
    rows: list[dict[str, Any]] = []
    rec: dict[str, Any] = {"mode": a.mode, "rows": rows}
    try:
        sweeps = load_queue(a.queue.split(), Path(a.spec_dir), home)
        step_s = {int(k): v for k, v in json.loads(a.step_json).items()}
        rows += train_queue(sweeps, a.device, a.mode, a.until, step_s, a.room, a.window_s, a.max_steps)
    except Exception as e:  # noqa: BLE001 - the parent falls back to the next mode
        import traceback

        traceback.print_exc()
        rec["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        _write_json(Path(a.json), rec)
        return 4
    _write_json(Path(a.json), rec)
    return 0


def estimate(a: argparse.Namespace) -> int:
    """Print ``simulate``'s windows for each assumed step time (an estimate, not a measurement)."""
    from hooked_clip1d.training.members import group_key

    sweeps = load_queue(a.queue.split(), Path(a.spec_dir), Path("/nonexistent"))
    queue = [
        (
            sw.name,
            [
                (r.name, group_key(r.model_cfg, r.data_cfg, r.train_cfg), sw.steps[r.name], member_mib(r.model_cfg))
                for r in sw.spec.runs
            ],
        )
        for sw in sweeps
    ]
    wheels = sum(p.stat().st_size for p in Path(a.wheels).glob("*.whl")) if Path(a.wheels).is_dir() else int(2.9 * MIB)
    sent = tree_bytes() - _slim_tree().aside_bytes()  # `gpu_queue.sh carry` slims the tree before a window
    room = a.room if a.room is not None else CALL_MIB - (sent + wheels) / MIB - IN_MARGIN_MIB - 0.5
    log(
        f"room for state in flight: {room:.1f} MiB; {a.window_s:.0f} s of training a window; model-steps: "
        + ", ".join(f"{n} {sum(r[2] for r in rows) / 1e6:.2f} M" for n, rows in queue)
    )
    for spec in a.step_ms:
        pts = [float(x) / 1e3 for x in spec.split(",")]
        f = step_model({2: pts[0]} if len(pts) == 1 else {2: pts[0], 12: pts[1]})
        wins = simulate(queue, f, a.window_s, room, [sw.spec.run["max_group_size"] for sw in sweeps])
        when = {n: next((i + 1 for i, w in enumerate(wins) if n in w["done"]), None) for n, _ in queue}
        stuck = bool(wins) and wins[-1]["stuck"]
        log(
            f"step {spec} ms: "
            + ", ".join(f"{n} done in window {w}" if w else f"{n} never" for n, w in when.items())
            + f"; {len(wins) - stuck} windows"
            + (" (then stuck)" if stuck else "")
        )
        if a.verbose:
            for i, w in enumerate(wins):
                log(
                    f"  window {i + 1}: "
                    + "; ".join(
                        f"{t['sweep']} {t['group']} K={t['K']} {t['steps']:,} ({t['verdict']})" for t in w["trained"]
                    )
                )
    return 0


def _positive(text: str) -> float:
    """argparse type: a finite number > 0 (a limit, a time, a size)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return v


def _count(text: str) -> int:
    """argparse type: a whole number > 0 (steps)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number > 0")
    return v


def _non_negative(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return v


def _step_ms(text: str) -> str:
    """argparse type of ``estimate --step-ms``: 'A' or 'A,B', each a finite number of ms > 0."""
    parts = text.split(",")
    if len(parts) not in (1, 2):
        raise argparse.ArgumentTypeError(f"{text!r}: give 'A' (ms at K = 2) or 'A,B' (at K = 2 and 12)")
    for x in parts:
        _positive(x)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("window", help="on the GPU: one window (gpu_queue.sh window)")
    w.add_argument("--out", required=True, help="the folder whose files come back ($OUT)")
    w.add_argument(
        "--state",
        default=os.path.join(tempfile.gettempdir(), "hc1d-gpu"),
        help="this machine's working folder (kept between calls; default: in its temp dir)",
    )
    w.add_argument("--carry", default=".gpu-carry", help="the carried folder (carry)")
    w.add_argument("--limit", type=_positive, default=LIMIT_S, help="seconds this command may take")
    w.add_argument("--reserve", type=_non_negative, default=RESERVE_S, help="seconds before the limit training stops")
    w.add_argument("--started", type=float, default=None, help="time.time() the command started (gpu_queue.sh)")
    w.add_argument(
        "--window-s",
        type=_positive,
        default=LIMIT_S - RESERVE_S - STARTUP_S,
        help="training seconds of a window, for the plan",
    )
    w.add_argument("--room", type=_non_negative, default=None, help="MiB of state that may stay in flight (room.json)")
    w.add_argument("--step-ms", type=_positive, default=None, help="assume this step time (tests)")
    w.add_argument("--max-steps", type=_count, default=None, help="stop each group after this many steps (tests)")
    w.add_argument("--check-scale", type=_positive, default=1.0, help="scale the checks' time limits")
    w.add_argument("--again", action="store_true", help="a second call: only on the machine of the first")
    w.add_argument("--device", default="cuda")
    w.add_argument("--queue", default=" ".join(QUEUE), help="sweep spec names, in order")
    w.add_argument("--spec-dir", default=str(ROOT / "hooked_clip1d" / "sweeps"))
    w.add_argument("--modes", default=",".join(MODES), help="step modes in fallback order")
    w.add_argument("--check-steps", type=_count, default=200, help="steps of the check's trajectory")
    w.add_argument("--check-preset", default="full", help="the checked model (full: the queue's)")
    w.add_argument("--check-timing-s", type=_positive, default=0.5, help="seconds timing each group size")
    c = sub.add_parser("check", help="(the window's) check one mode, in its own process")
    c.add_argument("--mode", required=True, choices=MODES)
    c.add_argument("--device", default="cuda")
    c.add_argument("--steps", type=_count, default=200)
    c.add_argument("--preset", default="full")
    c.add_argument("--required", action="store_true")
    c.add_argument("--timing-s", type=_positive, default=0.5)
    c.add_argument("--json", required=True)
    t = sub.add_parser("train", help="(the window's) train the queue, in its own process")
    t.add_argument("--mode", required=True, choices=MODES)
    t.add_argument("--until", type=float, required=True)
    t.add_argument("--device", default="cuda")
    t.add_argument("--queue", default=" ".join(QUEUE))
    t.add_argument("--spec-dir", default=str(ROOT / "hooked_clip1d" / "sweeps"))
    t.add_argument("--room", type=_non_negative, default=DEFAULT_ROOM_MIB)
    t.add_argument("--window-s", type=_positive, default=LIMIT_S - RESERVE_S - STARTUP_S)
    t.add_argument("--step-json", required=True)
    t.add_argument("--max-steps", type=_count, default=None)
    t.add_argument("--json", required=True)
    k = sub.add_parser("carry", help="here: .gpu-carry for the next window")
    k.add_argument("--dest", default=str(ROOT / ".gpu-carry"))
    k.add_argument("--wheels", default=str(ROOT / ".whl"))
    k.add_argument("--queue", default=" ".join(QUEUE))
    k.add_argument("--spec-dir", default=str(ROOT / "hooked_clip1d" / "sweeps"))
    k.add_argument(
        "--travel-mib", type=_non_negative, default=None, help="MiB travelling beside the carry (default: tree, wheels)"
    )
    e = sub.add_parser("estimate", help="here: windows the queue takes at assumed step times (simulate)")
    e.add_argument(
        "--step-ms",
        action="append",
        required=True,
        type=_step_ms,
        help="ms a group step at K = 2 (or 'A,B': at K = 2 and 12); one scenario each",
    )
    e.add_argument("--room", type=_non_negative, default=None, help="MiB of state that travels (default: the tree's)")
    e.add_argument("--window-s", type=_positive, default=LIMIT_S - RESERVE_S - STARTUP_S)
    e.add_argument("--queue", default=" ".join(QUEUE))
    e.add_argument("--spec-dir", default=str(ROOT / "hooked_clip1d" / "sweeps"))
    e.add_argument("--wheels", default=str(ROOT / ".whl"))
    e.add_argument("-v", "--verbose", action="store_true", help="every window's groups")
    u = sub.add_parser("unpack", help="here: what calls brought back, oldest first")
    u.add_argument("files_at", nargs="+")
    d = sub.add_parser("adopt", help="here: copy finished runs into the identical runs of other sweeps (long_runs.sh)")
    d.add_argument("queue", nargs="+", help="sweep spec names")
    d.add_argument("--spec-dir", default=str(ROOT / "hooked_clip1d" / "sweeps"))
    d.add_argument("--home", default=None, help="the sweeps home (default: sweeps_home())")
    a = ap.parse_args(argv)
    if a.cmd == "window" and a.reserve >= a.limit:
        ap.error(f"window: --reserve {a.reserve:g} must be less than --limit {a.limit:g} (no time would train)")
    if a.cmd == "window":
        return window(a)
    if a.cmd == "check":
        r = check_one(a.mode, a.device, a.steps, a.preset, a.required, timing_s=a.timing_s)
        _write_json(Path(a.json), r)
        return 0 if r["ok"] else (1 if r.get("required_failed") else 2)
    if a.cmd == "train":
        return train_main(a)
    from hooked_clip1d.sweeps.runner import sweeps_home

    if a.cmd == "unpack":
        for line in unpack([Path(p) for p in a.files_at], sweeps_home()):
            log(line)
        return 0
    if a.cmd == "estimate":
        return estimate(a)
    if a.cmd == "adopt":
        for line in adopt_here(a.queue, Path(a.spec_dir), Path(a.home) if a.home else sweeps_home()):
            print(line)
        return 0
    sweeps = load_queue(a.queue.split(), Path(a.spec_dir), sweeps_home())
    wheels = sum(p.stat().st_size for p in Path(a.wheels).glob("*.whl")) if Path(a.wheels).is_dir() else 0
    travel = int(a.travel_mib * MIB) if a.travel_mib is not None else tree_bytes() + wheels
    try:
        got = carry_out(sweeps, Path(a.dest), travel)
    except ValueError as e:  # a finished run not trained as its spec asks: refused here, before any device time
        log(f"== carry refused: {e}")
        return 3
    for name, s in got["sweeps"].items():
        state = "; ".join(f"{g['name']} at step {g['step']:,} ({len(g['runs'])} runs)" for g in s["state"])
        log(f"== {name}: {len(s['runs'])} finished runs" + (f"; resumable state: {state}" if state else ""))
    for name, left in got["left"].items():
        log(f"== {name}: WARNING: the state of {left} left out (over the room); those groups restart")
    log(
        f"== -> {a.dest}: {got['state_mib']:.1f} MiB of state; {got['travel_mib']:.1f} MiB travel with a call "
        f"(of {CALL_MIB}); the next window may leave {got['room_mib']:.1f} MiB of state in flight"
    )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
