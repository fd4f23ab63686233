"""A whole sweep end to end: Fig. 4a's 36 runs at reduced epochs, on N workers, against single-member rates.

Fig. 4a (``hooked_clip1d/sweeps/fig4a.toml``) trains 36 simplified models (Ntot x n2 x seeds) whose epochs have 5 to
117 steps, so a batched group runs as long as its longest member and the long tail trains at small K. This script
trains the same 36 runs for ``--epochs`` epochs instead of 10,000 (same mix of sizes, same ratios between them, one
evaluation at the end) with ``--workers`` worker processes, under these plans:

- ``spread`` (``plan_groups(..., workers=N)``, what a first start with ``--workers N`` does): N groups, each run
  (longest first) to the group it leaves cheapest, which spreads the longest runs over the groups;
- ``pack`` (``plan_groups(..., workers=N, pack_long=True)``; the default for a day, 2026-11-25, then called
  ``balanced``): at least N groups of equal estimated cost, long runs kept together where ``group_cost`` says that
  costs less;
- ``by-length`` (``plan_groups(..., workers=1)``, the one-worker plan: the 32 longest runs in one group, the rest in
  another), trained with the same N workers: what ``--workers N`` did before ``spread``.

In the same process it measures the single-member rates on one thread (``bench_training``'s ``plain`` reference loop
and the batched engine at K = 1, eager or compiled like the sweep), before and after the sweeps (the mean of the two
is used), and reports each plan's wall time against

- the sum of the members' model-steps at the single-member rate on one core (``x K=1``), and at the plain loop's rate
  (``x plain``), both as if one core trained the runs one after another;
- the same divided by the workers (``per-core efficiency``: 1.0 would be N cores each training at K = 1 speed).

It also extrapolates each plan's training time to the paper's 10,000 epochs (wall x 10,000 / epochs; evaluation and
compilation excluded). Run on an otherwise idle machine::

    python benchmarks/bench_sweep.py --workers 2 --epochs 50 --out DIR      # the table in benchmarks/README.md
    python benchmarks/bench_sweep.py --workers 2 --epochs 2 --runs 8        # smoke test (seconds)

No assertions about timings are made.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_training  # noqa: E402

from hooked_clip1d.sweeps.runner import (  # noqa: E402
    group_cost,
    group_name,
    load_spec,
    plan_groups,
    planned_steps,
    run_sweep,
)

FIG4A = Path(__file__).resolve().parents[1] / "hooked_clip1d" / "sweeps" / "fig4a.toml"
PLANS = {  # name -> the groups of (runs, workers), as described in the module docstring
    "spread": lambda runs, workers: plan_groups(runs, 32, workers=workers),
    "pack": lambda runs, workers: plan_groups(runs, 32, workers=workers, pack_long=True),
    "by-length": lambda runs, workers: plan_groups(runs, 32, workers=1),
}
PAPER_EPOCHS = 10_000


def reduced_spec(epochs: int, runs: int | None) -> str:
    """fig4a.toml with ``epochs`` epochs, one evaluation and one checkpoint at the end (``runs``: keep the first
    seeds only, for a smoke test)."""
    text = FIG4A.read_text()
    text = re.sub(r"(?m)^epochs = .*$", f"epochs = {epochs}", text)
    text = re.sub(r"(?m)^eval_every = .*$", f"eval_every = {epochs}", text)
    text = re.sub(r"(?m)^checkpoint_every = .*$", f"checkpoint_every = {epochs}", text)
    text = re.sub(r"(?m)^name = .*$", 'name = "bench-fig4a"', text)
    if runs is not None:  # fewer seeds first, then fewer cells
        n_seeds = max(1, runs // 12)
        text = re.sub(r"(?m)^seed = .*$", f"seed = {list(range(n_seeds))}", text)
    return text


def single_member_rates(compile: bool, seconds: float) -> dict[str, float]:  # noqa: A002
    """Model-steps/s of the plain loop and the batched engine at K = 1 (one thread, interleaved rounds)."""
    from hooked_clip1d import DataConfig, build_dataset

    images, captions = build_dataset(DataConfig(n_labels=bench_training.N_LABELS, n2=10)).training_pairs()
    impls = [
        bench_training.make_plain("simplified", images, captions),
        bench_training.make_batched("simplified", 1, compile=compile),
    ]
    rates = bench_training.bench(impls, rounds=3, seconds=seconds)
    return {"plain": _median(rates["plain|1"]), "k1": _median(rates["batched|1"])}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def run_plan(spec_path: Path, out: Path, plan: list[list], workers: int, compile: bool) -> float:  # noqa: A002
    """Wall seconds of ``run_sweep`` with ``plan`` saved beforehand (so the sweep trains exactly these groups)."""
    out.mkdir(parents=True)
    (out / "spec.toml").write_text(spec_path.read_text())
    names = [[group_name(i, g), [r.name for r in g]] for i, g in enumerate(plan)]
    (out / "plan.json").write_text(json.dumps(names) + "\n")
    t0 = time.perf_counter()
    run_sweep(spec_path, out, progress=False, workers=workers, threads=1, compile=compile)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=50, help="epochs per run (the paper: 10,000)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=None, help="fewer runs (a multiple of 12), for a smoke test")
    ap.add_argument("--compile", action="store_true", help="compile every group (and the K = 1 reference)")
    ap.add_argument("--seconds", type=float, default=2.0, help="time per single-member measurement round")
    ap.add_argument("--plans", default=",".join(PLANS), help="which plans to time (comma-separated)")
    ap.add_argument("--out", default=None, help="directory for bench_sweep.json")
    a = ap.parse_args(argv)
    chosen = a.plans.split(",")
    if unknown := sorted(set(chosen) - set(PLANS)):  # before any work (and before a temporary folder exists)
        ap.error(f"--plans: unknown {unknown}; the plans are {list(PLANS)} (`balanced` is now `pack`)")
    torch.set_num_threads(1)

    tmp = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    spec_path = tmp / "spec.toml"
    spec_path.write_text(reduced_spec(a.epochs, a.runs))
    runs = load_spec(spec_path).runs
    steps = {r.name: planned_steps(r) for r in runs}
    total = sum(steps.values())
    plans = {name: PLANS[name](runs, a.workers) for name in PLANS if name in chosen}
    print(f"{len(runs)} runs, {a.epochs} epochs, {total} model-steps; workers {a.workers}", flush=True)

    before = single_member_rates(a.compile, a.seconds)
    walls = {}
    for name, plan in plans.items():
        sizes = [len(g) for g in plan]
        costs = [round(group_cost([steps[r.name] for r in g])) for g in plan]
        print(f"  {name}: groups of {sizes}, estimated cost {costs} member-steps ...", flush=True)
        walls[name] = run_plan(spec_path, tmp / name, plan, a.workers, a.compile)
        print(f"    {walls[name]:.1f} s", flush=True)
    after = single_member_rates(a.compile, a.seconds)
    rate = {k: (before[k] + after[k]) / 2 for k in before}

    rows = []
    for name, plan in plans.items():
        wall = walls[name]
        t_k1, t_plain = total / rate["k1"], total / rate["plain"]
        rows.append(
            {
                "plan": name,
                "groups": [len(g) for g in plan],
                "wall_s": round(wall, 1),
                "x_k1": round(t_k1 / wall, 2),
                "x_plain": round(t_plain / wall, 2),
                "per_core_efficiency": round(t_k1 / wall / a.workers, 2),
                "paper_protocol_h": round(wall * PAPER_EPOCHS / a.epochs / 3600, 2),
            }
        )
    lines = [
        "| plan | groups | wall (s) | x K=1 | x plain | per-core efficiency | 10,000 epochs (h) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['plan']} | {r['groups']} | {r['wall_s']} | {r['x_k1']} | {r['x_plain']} | "
            f"{r['per_core_efficiency']} | {r['paper_protocol_h']} |"
        )
    print(
        f"\nsingle-member rates (one thread, mean of before/after): plain {rate['plain']:.0f}, batched K=1 "
        f"{rate['k1']:.0f} model-steps/s (before {before['k1']:.0f}, after {after['k1']:.0f})"
    )
    print("\n".join(lines))
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "epochs": a.epochs,
            "workers": a.workers,
            "compile": a.compile,
            "runs": len(runs),
            "model_steps": total,
            "rates": {"before": before, "after": after, "mean": rate},
            "rows": rows,
            "torch": torch.__version__,
            "machine": platform.processor() or platform.machine(),
            "cpu": bench_training.cpu_info(),
        }
        (out / "bench_sweep.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {out / 'bench_sweep.json'}")


if __name__ == "__main__":
    main()
