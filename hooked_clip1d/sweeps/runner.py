"""Sweeps: a spec (``sweep_spec``) -> batched groups -> checkpoints and one results table.

``run_sweep`` packs runs with the same shapes (``batched.group_key``) into groups of at most ``max_group_size``
(``plan_groups``: similar lengths together, since a group runs as long as its longest member; with ``workers`` > 1,
groups of equal estimated cost, one or more per worker), trains each group with one progress bar, and writes::

    out_dir/spec.toml                 the spec as run
    out_dir/plan.json                 its groups (fixed at the first start, so a resumed sweep keeps them)
    out_dir/runs/<run>/               each run: config.json, metrics.jsonl, checkpoint.safetensors,
                                      model.safetensors (load with checkpoint.load_model_file), summary.json
    out_dir/groups/<group>/           each group's resumable state (group_checkpoint.safetensors)
    out_dir/results.json, results.csv one row per run: grid values, final metrics, steps, seconds, path

Run it again to resume: finished runs are read back, unfinished groups continue from their group checkpoint.
``workers=N`` trains up to N groups at once in local worker processes (each with ``run.threads`` torch threads, by
default an equal share of this machine's cores);
``runner="ray"`` submits the groups as Ray tasks (``pip install ray``; a running cluster is used, else a local one).
Either way each run's weights are those of a one-group-at-a-time sweep.

Example:
    >>> import tempfile, pathlib
    >>> from hooked_clip1d.sweeps.spec import TINY_SPEC  # 2 label counts x 2 seeds, 1 epoch
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> rows = run_sweep(TINY_SPEC, d / "out", progress=False)
    >>> [(r["run"], r["steps"]) for r in rows]
    [('n_labels-5_seed-0', 3), ('n_labels-5_seed-1', 3), ('n_labels-6_seed-0', 4), ('n_labels-6_seed-1', 4)]
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hooked_clip1d.data.dataset import SPLITS, DataConfig
from hooked_clip1d.files import atomic_write_text
from hooked_clip1d.model.clip import CLIPConfig
from hooked_clip1d.settings.checks import check_int, check_real
from hooked_clip1d.sweeps.claims import folder_lock, refuse_claimed, train_beside
from hooked_clip1d.sweeps.pool import GroupTask, run_groups
from hooked_clip1d.sweeps.spec import RunSpec, SweepSpec, load_spec
from hooked_clip1d.training.members import group_key
from hooked_clip1d.training.rundir import RunLock

__all__ = [
    "RunSpec",
    "SweepSpec",
    "load_spec",
    "plan_groups",
    "group_name",
    "planned_steps",
    "run_sweep",
    "results_table",
    "progress_table",
]


def _with_device(r: RunSpec, device: str) -> RunSpec:
    cfg = dataclasses.replace(
        r.model_cfg, vision=r.model_cfg.vision.replace(device=device), text=r.model_cfg.text.replace(device=device)
    )
    return dataclasses.replace(r, model_cfg=cfg, train_cfg=dataclasses.replace(r.train_cfg, device=device))


@functools.lru_cache(maxsize=256)
def _n_pairs(data_cfg: DataConfig) -> int:
    """Training pairs of a dataset (built once per distinct config: a grid repeats them over seeds)."""
    from hooked_clip1d.data.dataset import build_dataset

    return len(build_dataset(data_cfg).training_pairs()[0])


def planned_steps(r: RunSpec) -> int:
    """Training steps run ``r`` takes in all (epochs x steps per epoch).

    Example:
        >>> (run,) = load_spec(text="[train]\\nepochs = 3\\n[grid]\\nseed = [0]").runs
        >>> planned_steps(run)  # 2200 training pairs in batches of 50: 44 steps per epoch
        132
    """
    bs = r.train_cfg.batch_size or r.data_cfg.batch_size
    return r.train_cfg.epochs * -(-_n_pairs(r.data_cfg) // bs)


# What one group step costs beside its members' own work, in member-steps: a group of K simplified members takes
# about (GROUP_STEP_OVERHEAD + K) single-member step times. Fitted on Fig. 4a's protocol run (one thread per group;
# benchmarks/README.md, "Measured to the end"): K = 18 at 46 steps/s (21.7 ms a step, its first minutes) and K = 1
# at 323 steps/s (3.1 ms, its last member alone), i.e. b = 1.094 ms per member and a = 2.006 ms per step, a / b =
# 1.83; a x 1.17 M steps + b x 6.66 M model-steps predicts 9,633 s for each of its two groups, which took 9,606 and
# 9,517 s (one point of the model, both groups having the same longest run and total).
GROUP_STEP_OVERHEAD = 1.83


def group_cost(steps: Sequence[int]) -> float:
    """Estimated time of a batched group whose members train ``steps`` steps each, in single-member steps.

    A group runs as long as its longest member; each step costs the members still training plus a fixed overhead.

    Example:
        >>> group_cost([100, 100]) == 100 * GROUP_STEP_OVERHEAD + 200
        True
    """
    return GROUP_STEP_OVERHEAD * max(steps, default=0) + sum(steps)


def plan_groups(
    runs: Sequence[RunSpec], max_group_size: int = 32, workers: int = 1, pack_long: bool = False
) -> list[list[RunSpec]]:
    """Pack runs into batched groups of the same ``group_key`` and at most ``max_group_size`` members.

    With one worker, runs of similar length go together (a group runs as long as its longest member, so this
    spends the least time in all). With ``workers`` > 1 a shape's runs go to at least ``workers`` groups of about
    equal estimated cost (``group_cost``), so the workers stay busy until the end instead of one training a long
    group alone: the runs are spread, longest first, each to the group it leaves cheapest. With ``pack_long`` the
    plan is the cheaper, by ``group_cost``, of that and keeping long runs together under a cost cap
    (``_pack_under_cap``): not the default, since ``group_cost``'s a + bK misses what a big group pays beside a
    neighbour and on a compiled step (benchmarks/README.md, "Compiled"). Groups come longest first. Captioning
    models group with captioning models of the same vocabulary (``members.group_key``).

    Example:
        >>> spec = load_spec(text='[grid]\\nn_labels = [10, 20]\\nseed = [0, 1, 2]\\n[model]\\npreset = "simplified"')
        >>> [len(g) for g in plan_groups(spec.runs, max_group_size=4)]
        [4, 2]
        >>> [[r.params["n_labels"] for r in g] for g in plan_groups(spec.runs, max_group_size=4, workers=2)]
        [[20, 20], [20, 10, 10, 10]]
    """
    if max_group_size < 1:
        raise ValueError(f"max_group_size must be >= 1, got {max_group_size}")
    workers = check_int(workers, "workers")
    by_key: dict[str, list[RunSpec]] = {}
    groups: list[list[RunSpec]] = []
    for r in runs:
        by_key.setdefault(group_key(r.model_cfg, r.data_cfg, r.train_cfg), []).append(r)
    steps = {r.name: planned_steps(r) for r in runs}
    for members in by_key.values():
        members = sorted(members, key=lambda r: steps[r.name], reverse=True)  # stable: spec order within ties
        if workers == 1:
            groups += [members[i : i + max_group_size] for i in range(0, len(members), max_group_size)]
            continue
        n_bins = _n_bins(len(members), max_group_size, workers)
        bins = _spread(members, steps, n_bins, max_group_size)
        if pack_long:
            spread_cost = _makespan(bins, steps)
            packed = _pack_under_cap(members, steps, n_bins, max_group_size, spread_cost)
            bins = [b for b in packed if b] if _makespan(packed, steps) < spread_cost else bins
        groups += bins
    cost = {id(g): group_cost([steps[r.name] for r in g]) for g in groups}
    return sorted(groups, key=lambda g: cost[id(g)], reverse=True)  # stable


def _n_bins(n_runs: int, max_group_size: int, workers: int) -> int:
    """How many groups ``n_runs`` runs of one shape get with several workers: enough for the size limit, and one
    per worker while there are runs for it."""
    return max(-(-n_runs // max_group_size), min(workers, n_runs))


def _spread(members: Sequence[RunSpec], steps: dict[str, int], n_bins: int, max_size: int) -> list[list[RunSpec]]:
    """``members`` (longest first) in ``n_bins`` groups, each run to the group it leaves cheapest (the plan for
    several workers; ``benchmarks/bench_sweep.py`` times it as ``spread``)."""
    bins: list[list[RunSpec]] = [[] for _ in range(n_bins)]
    for r in members:
        open_bins = [b for b in bins if len(b) < max_size]
        min(open_bins, key=lambda b: group_cost([steps[m.name] for m in b] + [steps[r.name]])).append(r)
    return bins


def _makespan(bins: Sequence[Sequence[RunSpec]], steps: dict[str, int]) -> float:
    return max((group_cost([steps[r.name] for r in b]) for b in bins), default=0.0)


def _pack_under_cap(
    members: Sequence[RunSpec], steps: dict[str, int], n_bins: int, max_size: int, hi: float
) -> list[list[RunSpec]]:
    """``members`` (longest first) in ``n_bins`` groups under the smallest cost cap found by bisection below ``hi``:
    each run goes where it adds least (``group_cost`` after minus before), among the groups it fits under the cap.
    Unlike spreading the longest runs over the groups, this keeps long runs together, so fewer groups pay the
    per-step overhead for the longest time (Fig. 4a on two workers: 2.53 h predicted by ``group_cost``, against the
    2.67 h its eager protocol run took with the longest runs spread; but its big group pays more beside a neighbour
    than a + bK says, so ``plan_groups`` uses it only with ``pack_long``: benchmarks/README.md).
    """

    def pack(cap: float) -> list[list[RunSpec]] | None:
        bins: list[list[RunSpec]] = [[] for _ in range(n_bins)]
        longest, total = [0] * n_bins, [0] * n_bins  # group_cost = GROUP_STEP_OVERHEAD * longest + total
        for r in members:
            s = steps[r.name]
            fits = []
            for i, b in enumerate(bins):
                added = GROUP_STEP_OVERHEAD * max(0, s - longest[i]) + s  # group_cost after minus before
                if len(b) < max_size and GROUP_STEP_OVERHEAD * longest[i] + total[i] + added <= cap:
                    fits.append((added, i))
            if not fits:
                return None
            i = min(fits)[1]
            bins[i].append(r)
            longest[i], total[i] = max(longest[i], s), total[i] + s
        return bins

    lo, best = 0.0, None
    for _ in range(40):
        mid = (lo + hi) / 2
        packed = pack(mid)
        if packed is None:
            lo = mid
        else:
            hi, best = mid, packed
    if best is None:  # no cap below ``hi`` found: pack without one (always fits: n_bins x max_size >= members)
        best = pack(float("inf"))
    if best is None:
        raise RuntimeError(f"cannot pack {len(members)} runs into {n_bins} groups of at most {max_size}")
    return best


def group_name(index: int, group: Sequence[RunSpec]) -> str:
    """The name of the ``index``-th group of a sweep's plan, training runs ``group``: ``g<index>-<hash>``, the hash
    of its runs' names in order (so a plan written on one machine names the same groups on every other, and a
    group's folder, ``groups/<name>``, is found again on resume).

    Example:
        >>> from hooked_clip1d.sweeps.spec import SPECS_DIR
        >>> spec = load_spec(SPECS_DIR / "captioning.toml")
        >>> group_name(0, spec.runs[:1])  # a captioner trains alone: one run a group
        'g000-17fb6eb3'
    """
    h = hashlib.sha256(json.dumps([r.name for r in group]).encode()).hexdigest()[:8]
    return f"g{index:03d}-{h}"


def _row(run: RunSpec, run_dir: Path) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    row: dict[str, Any] = {"run": run.name, **run.params}
    lines = [ln for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    last = json.loads(lines[-1]) if lines else {}
    row.update(
        {
            "n_labels": run.model_cfg.n_labels,
            "n2": run.data_cfg.n2,
            "seed": run.train_cfg.seed,
            "epochs": summary["epochs"],
            "steps": summary["steps"],
            "train_seconds": summary["train_seconds"],
            "final_loss": last.get("loss"),
        }
    )
    for split in SPLITS:
        m = summary["final_metrics"].get(split, {})
        for metric in ("acc", "relaxed", "label_set"):
            row[f"{split}.{metric}"] = m.get(metric)
    row["path"] = str(run_dir)
    return row


def results_table(spec: SweepSpec, out_dir: str | Path) -> list[dict[str, Any]]:
    """One row per finished run of ``spec`` under ``out_dir`` (grid values, final metrics, steps, seconds, path).

    Example:
        >>> results_table(load_spec(text="[grid]\\nseed = [0]"), "/nonexistent")
        []
    """
    out = Path(out_dir)
    rows = []
    for r in spec.runs:
        d = out / "runs" / r.name
        if (d / "summary.json").exists():
            _check_trained_as_specified(r, d)
            rows.append(_row(r, d))
    return rows


def _check_trained_as_specified(r: RunSpec, run_dir: Path) -> None:
    """A finished run whose recipe differs from what the spec now asks (e.g. a spec that relies on a package
    default which has changed since the run trained) is an error naming the field, never a silent result."""
    from hooked_clip1d.training.run_config import comparable_train_config

    saved = json.loads((run_dir / "config.json").read_text())
    have, want = comparable_train_config(saved["train_config"]), comparable_train_config(r.train_cfg.to_dict())
    diffs = [
        f"train_config.{k}: trained with {have.get(k)!r}, the spec asks {v!r}"
        for k, v in want.items()
        if have.get(k) != v
    ]
    trained = CLIPConfig.from_dict(saved["model_config"])
    for tower in ("vision", "text"):
        a, b = getattr(trained, tower).init_std, getattr(r.model_cfg, tower).init_std
        if a != b:
            diffs.append(f"model_config.{tower}.init_std: trained with {a!r}, the spec asks {b!r}")
    if diffs:
        raise ValueError(
            f"finished run {str(run_dir)!r} was not trained as its spec now asks ({'; '.join(diffs)}): pin these "
            "fields in the spec or use a new out_dir"
        )


def sweeps_home() -> Path:
    """Where sweeps keep their runs unless told otherwise: ``$HOOKED_CLIP1D_SWEEPS``, else
    ``$XDG_DATA_HOME/hooked_clip1d/sweeps`` (``~/.local/share/hooked_clip1d/sweeps``). Outside any checkout, so a
    sweep interrupted today resumes tomorrow from a fresh clone (``sweep`` and ``reproduce`` both look there).

    Example:
        >>> import os
        >>> os.environ["HOOKED_CLIP1D_SWEEPS"] = "/data/sweeps"
        >>> str(sweeps_home())
        '/data/sweeps'
        >>> del os.environ["HOOKED_CLIP1D_SWEEPS"]
    """
    env = os.environ.get("HOOKED_CLIP1D_SWEEPS")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hooked_clip1d" / "sweeps"


def _spec_data(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{str(path)!r} is not a readable sweep spec ({e}); use a new out_dir") from e


def progress_table(spec: SweepSpec, out_dir: str | Path) -> list[dict[str, Any]]:
    """One row per run of ``spec`` under ``out_dir`` that has been evaluated at least once, finished or not.

    A finished run's row is ``results_table``'s; an unfinished run's has the same keys from its latest evaluation
    (``epochs``: the epoch it was taken at, ``steps``, ``train_seconds`` and the split metrics then) plus
    ``finished=False``. Every row has ``epochs_planned``. What an interim reading of a sweep is built from.

    Example:
        >>> progress_table(load_spec(text="[grid]\\nseed = [0]"), "/nonexistent")
        []
    """
    out = Path(out_dir)
    rows = []
    for r in spec.runs:
        d = out / "runs" / r.name
        if (d / "summary.json").exists():
            rows.append({**_row(r, d), "epochs_planned": r.train_cfg.epochs, "finished": True})
            continue
        path = d / "metrics.jsonl"
        lines = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []
        evals = [ln for ln in lines if ln.get("eval")]
        if not evals:
            continue
        last = evals[-1]
        row: dict[str, Any] = {"run": r.name, **r.params}
        row.update(
            n_labels=r.model_cfg.n_labels,
            n2=r.data_cfg.n2,
            seed=r.train_cfg.seed,
            epochs=last["epoch"],
            steps=last["step"],
            train_seconds=last.get("elapsed_s"),
            final_loss=last.get("loss"),
        )
        for split in SPLITS:
            m = last["eval"].get(split, {})
            for metric in ("acc", "relaxed", "label_set"):
                row[f"{split}.{metric}"] = m.get(metric)
        rows.append({**row, "path": str(d), "epochs_planned": r.train_cfg.epochs, "finished": False})
    return rows


def write_results(rows: Sequence[dict[str, Any]], out_dir: str | Path, name: str = "sweep") -> None:
    """``results.json`` and ``results.csv`` in ``out_dir`` (atomic writes)."""
    out = Path(out_dir)
    atomic_write_text(out / "results.json", json.dumps({"sweep": name, "runs": list(rows)}, indent=2))
    cols: list[str] = []
    for row in rows:
        cols.extend(c for c in row if c not in cols)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    atomic_write_text(out / "results.csv", buf.getvalue())


def format_results(rows: Sequence[dict[str, Any]]) -> str:
    """A text table of ``run_sweep`` rows: run, steps, seconds, final loss and each split's accuracy.

    Example:
        >>> row = {"run": "a", "steps": 10, "train_seconds": 1.5, "final_loss": 0.5, "train.acc": 1.0,
        ...        "val_single.acc": 0.9, "val_seen.acc": 0.8, "val_unseen.acc": 0.1}
        >>> print(format_results([row]))
        run  steps  seconds   loss  train  single  seen  unseen
        a       10      1.5  0.500  1.000   0.900 0.800   0.100
    """
    if not rows:
        return "(no finished runs)"
    w = max(3, *(len(r["run"]) for r in rows))
    head = f"{'run':<{w}}  {'steps':>5}  {'seconds':>7}  {'loss':>5}  {'train':>5}  {'single':>6} {'seen':>5}  "
    lines = [head + f"{'unseen':>6}"]

    def acc(r: dict[str, Any], split: str) -> str:
        v = r.get(f"{split}.acc")
        return "-" if v is None else f"{v:.3f}"

    for r in rows:
        loss = r.get("final_loss")
        lines.append(
            f"{r['run']:<{w}}  {r['steps']:>5}  {r['train_seconds']:>7}  "
            f"{'-' if loss is None else f'{loss:.3f}':>5}  {acc(r, 'train'):>5}  {acc(r, 'val_single'):>6} "
            f"{acc(r, 'val_seen'):>5}  {acc(r, 'val_unseen'):>6}"
        )
    return "\n".join(lines)


def _with_execution_settings(
    spec: SweepSpec,
    compile: bool | None,  # noqa: A002
    cudagraphs: bool | None,
    graph_step: bool | None,
    streams: bool | None,
    threads: int | None,
) -> SweepSpec:
    """``spec`` with ``run_sweep``'s execution settings (those not None) in place of its ``run`` table's, checked
    together (they change no output and no folder)."""
    if compile is not None:
        if compile and spec.run["dropout_rng"] != "fast":
            raise ValueError("compile=True needs the spec's run.dropout_rng = 'fast'")
        spec = dataclasses.replace(spec, run={**spec.run, "compile": bool(compile)})
    if cudagraphs is not None:
        if cudagraphs and not spec.run["compile"]:
            raise ValueError("cudagraphs=True needs compile (the spec's run.compile or compile=True)")
        spec = dataclasses.replace(spec, run={**spec.run, "cudagraphs": bool(cudagraphs)})
    if graph_step is not None:
        if graph_step and cudagraphs:
            raise ValueError(
                "graph_step=True captures the whole step itself: pass compile=True for inductor's kernels inside it, "
                "not cudagraphs=True"
            )
        run = {**spec.run, "graph_step": bool(graph_step)}
        if graph_step:  # the call's whole-step graph replaces the spec's CUDA-graph settings; compile only if asked
            run |= {"compile": bool(compile), "cudagraphs": False}
        spec = dataclasses.replace(spec, run=run)
    if streams is not None:  # an execution setting: the towers on two CUDA streams
        spec = dataclasses.replace(spec, run={**spec.run, "streams": bool(streams)})
    if threads is not None:
        threads = check_int(threads, "threads")
        spec = dataclasses.replace(spec, run={**spec.run, "threads": threads})
    return spec


def run_sweep(
    spec_path: str | Path,
    out_dir: str | Path | None = None,
    *,
    device: str = "cpu",
    progress: bool = True,
    runner: str = "local",
    resume: bool = True,
    max_steps: int | None = None,
    compile: bool | None = None,  # noqa: A002
    workers: int = 1,
    threads: int | None = None,
    max_seconds: float | int | None = None,
    cudagraphs: bool | None = None,
    graph_step: bool | None = None,
    groups: Sequence[str] | None = None,
    streams: bool | None = None,
) -> list[dict[str, Any]]:
    """Run (or resume) the sweep of ``spec_path``; returns the results table (also written to ``out_dir``).

    ``out_dir`` defaults to ``sweeps_home() / <spec name>`` (outside the work tree); ``runner`` is ``"local"``
    (groups one after another in this
    process, or ``workers`` of them at once in worker processes) or ``"ray"`` (groups as Ray tasks);
    ``resume=False`` refuses an ``out_dir`` that already holds runs.
    ``max_steps`` stops every group after that many steps in this call (checkpointed; the next call continues),
    for time-sliced or preemptible jobs; ``max_seconds`` likewise stops every group once this call has trained that
    long (checked after every step; groups not started by then wait for the next call), e.g. for a GPU lent in
    10-minute commands. ``cudagraphs`` overrides ``run.cudagraphs`` (with compile, on a GPU: each step replayed
    as CUDA graphs); ``graph_step`` overrides ``run.graph_step`` (on a GPU: each whole step, optimizer included,
    replayed as one CUDA graph; it replaces the spec's ``run.compile`` and ``run.cudagraphs``, and with
    ``compile=True`` too captures inductor's fused kernels: the compiled whole step);
    ``streams`` overrides ``run.streams`` (on a GPU: the two towers on two CUDA streams).
    ``compile`` overrides the spec's ``run.compile`` (an execution setting: the spec, and so the output folder, stays
    the same); so does ``threads`` (the spec's ``run.threads``: torch threads per group; 1 when other processes
    share the cores, since oversubscribed threads can slow a step several-fold).
    ``groups`` trains only these groups of the plan (names as in ``plan.json``); the others wait for a later call
    (for a caller that chooses the groups itself, e.g. ``tools/gpu/gpu_window.py``); such a call claims its groups
    and lets calls on other groups train beside it (``sweeps.claims``; ``tools/cpu/long_runs.sh``'s lanes).
    The table has the runs finished so far. See the module
    docstring for the spec format and the files written.
    """
    max_steps = check_int(max_steps, "run_sweep: max_steps", none_ok=True)
    if max_seconds is not None:
        check_real(max_seconds, "run_sweep: max_seconds", strict=True)
    workers = check_int(workers, "workers")
    spec = load_spec(spec_path)
    spec = _with_execution_settings(spec, compile, cudagraphs, graph_step, streams, threads)
    if runner not in ("local", "ray"):
        raise ValueError(f"runner must be 'local' or 'ray', got {runner!r}")
    if workers > 1 and runner != "local":
        raise ValueError(f"workers={workers} is for the local runner; Ray places the groups itself")
    out = Path(out_dir) if out_dir is not None else sweeps_home() / spec.name
    if out.is_dir() and not (out / "spec.toml").exists() and any(e.name != ".lock" for e in out.iterdir()):
        raise FileExistsError(f"{str(out)!r} is not empty and holds no sweep (no spec.toml); use a new out_dir")
    with folder_lock(out, groups) as lock:  # a call naming groups waits for another lane's seconds of planning
        deadline = None if max_seconds is None else time.time() + max_seconds  # the wait for the lock not counted
        settings = (device, progress, runner, resume, max_steps, workers, deadline, groups)
        return _run_sweep_locked(spec, out, *settings, lock)


def _saved_plan(
    out: Path, runs: list[RunSpec], max_group_size: int, workers: int = 1
) -> list[tuple[str, list[RunSpec]]]:
    """The sweep's groups: those saved in ``out/plan.json`` by an earlier start (kept as they were, so their
    group checkpoints resume) for the runs still in the spec, then ``plan_groups`` of the runs added since."""
    by_name = {r.name: r for r in runs}
    plan: list[tuple[str, list[RunSpec]]] = []
    path = out / "plan.json"
    if path.exists():
        for gname, names in json.loads(path.read_text()):
            if all(n in by_name for n in names):
                plan.append((gname, [by_name.pop(n) for n in names]))
    new = [r for r in runs if r.name in by_name]
    for group in plan_groups(new, max_group_size, workers):
        plan.append((group_name(len(plan), group), group))
    return plan


def _extends(old: SweepSpec, new: SweepSpec) -> bool:
    """Whether ``new`` keeps every run of ``old`` (same name, same three configs) and its ``[run]`` settings: a
    sweep that grew (a recipe or seed added to its grid) resumes in the same folder; its finished runs are kept."""

    def configs(r: RunSpec) -> tuple[Any, ...]:
        return r.model_cfg.to_dict(), r.data_cfg.to_dict(), r.train_cfg.to_dict()

    have = {r.name: configs(r) for r in new.runs}
    execution = (
        "compile",
        "threads",
        "cudagraphs",
        "graph_step",
        "streams",
    )  # execution settings (the command line may override them)
    same_run = {k: v for k, v in old.run.items() if k not in execution} == {
        k: v for k, v in new.run.items() if k not in execution
    }
    return old.name == new.name and same_run and all(have.get(r.name) == configs(r) for r in old.runs)


def _run_sweep_locked(
    spec: SweepSpec,
    out: Path,
    device: str,
    progress: bool,
    runner: str,
    resume: bool,
    max_steps: int | None,
    workers: int,
    deadline: float | None = None,
    only: Sequence[str] | None = None,
    lock: RunLock | None = None,
) -> list[dict[str, Any]]:
    runs = [_with_device(r, device) for r in spec.runs]
    groups = _saved_plan(out, runs, spec.run["max_group_size"], workers if runner == "local" else 1)
    unknown = sorted(set(only or ()) - {gname for gname, _ in groups})
    if unknown:
        raise ValueError(f"groups {unknown} are not in the sweep's plan ({[g for g, _ in groups]})")
    old_spec = out / "spec.toml"
    if old_spec.exists() and _spec_data(old_spec) != tomllib.loads(spec.source):  # comments and layout may change
        if not _extends(load_spec(old_spec), spec):
            raise ValueError(
                f"{str(out)!r} holds a different sweep spec (a spec may only add runs to it, every run it had "
                "unchanged, with the same [run] settings); use a new out_dir"
            )
    if not resume and (out / "runs").exists() and any((out / "runs").iterdir()):
        raise FileExistsError(f"{str(out)!r} already holds runs of this sweep; resume it or use a new out_dir")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(old_spec, spec.source)
    atomic_write_text(out / "plan.json", json.dumps([[gname, [r.name for r in g]] for gname, g in groups]) + "\n")
    tasks = []
    for gname, group in groups:
        if only is not None and gname not in only:
            continue
        tasks.append(
            GroupTask(
                name=gname,
                runs=group,
                group_dir=str(out / "groups" / gname),
                run_dirs=[str(out / "runs" / r.name) for r in group],
                run=spec.run,
                resume=resume,
                progress=progress and runner == "local",
                max_steps=max_steps,
                deadline=deadline,
                position=len(tasks) % workers if workers > 1 else None,
            )
        )
    names, held = [t.name for t in tasks], True
    if only is not None and lock is not None:  # named groups: claimed, trained beside calls on others (sweeps.claims)
        held = train_beside(lock, out, names, lambda: run_groups(tasks, runner, workers, spec.run.get("threads")))
    else:
        refuse_claimed(out, names)
        run_groups(tasks, runner, workers, spec.run.get("threads"))
    rows = results_table(dataclasses.replace(spec, runs=runs), out)
    if held:
        write_results(rows, out, spec.name)
    return rows
