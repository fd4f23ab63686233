"""Step time of one batched group by its size K, on one thread: where does a bigger group stop paying?

A sweep's planner (``sweep.plan_groups``) assumes a group step costs a + bK (``sweep.GROUP_STEP_OVERHEAD`` = a / b).
Fig. 4a's protocol run measured K = 17 at 20.9 ms a step and K = 18 at 29.0 ms (benchmarks/README.md), a jump the
line does not have. This script times K copies (seeds 0..K-1) of one run of a sweep spec, for each K of ``--ks``:
``--warmup`` steps, then ``--steps`` timed steps, one torch thread, no files written. With ``--pair`` a second
process runs the same scan at the same time (two workers on two cores, as a sweep with ``--workers 2`` does), to
see what a neighbour costs. With ``--compile`` each K is also timed with the step compiled (``torch.compile`` of
the stacked loss, as ``sweep --compile`` does; the compile is in the warmup, its time reported apart), to find the
group sizes where compiling pays. Run on an otherwise idle machine::

    python benchmarks/bench_group_size.py --ks 1,8,16,17,18,20,24,29 [--pair] [--compile] [--out DIR]

No assertions about timings are made.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import cpu_info  # noqa: E402

from hooked_clip1d.sweeps.runner import load_spec, planned_steps
from hooked_clip1d.training.batched import BatchedTrainer, Member  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def scan(
    spec_path: str,
    run_name: str | None,
    ks: list[int],
    warmup: int,
    steps: int,
    compile: bool = False,  # noqa: A002
) -> dict[str, dict[int, float]]:
    """ms per step of a group of K copies of the run, for each K: ``{"eager": {K: ms}}``, and with ``compile``
    also ``"compiled"`` (ms per step) and ``"compile_s"`` (seconds of the warmup, the compile included)."""
    torch.set_num_threads(1)
    spec = load_spec(spec_path)
    run = max(spec.runs, key=planned_steps) if run_name is None else next(r for r in spec.runs if r.name == run_name)
    out: dict[str, dict[int, float]] = {"eager": {}}
    if compile:
        out |= {"compiled": {}, "compile_s": {}}
    for k in ks:
        members = [
            Member(run.model_cfg, run.data_cfg, dataclasses.replace(run.train_cfg, seed=s, threads=1), name=f"s{s}")
            for s in range(k)
        ]
        for mode in ["eager", "compiled"] if compile else ["eager"]:
            trainer = BatchedTrainer(members, None, dropout_rng=spec.run["dropout_rng"], compile=mode == "compiled")
            t0 = time.perf_counter()
            trainer.run(progress=False, max_steps=warmup)
            if mode == "compiled":
                out["compile_s"][k] = time.perf_counter() - t0
            t0 = time.perf_counter()
            trainer.run(progress=False, max_steps=steps)
            ms = out[mode][k] = 1000 * (time.perf_counter() - t0) / steps
            print(f"  K = {k:>2} {mode:>8}: {ms:6.2f} ms a step, {ms / k:5.2f} ms a member", flush=True)
    return out


def _scan_star(args: tuple[Any, ...]) -> dict[str, dict[int, float]]:
    return scan(*args)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "hooked_clip1d" / "sweeps" / "fig4a.toml"))
    ap.add_argument("--run", default=None, help="the run to copy (default: the spec's longest)")
    ap.add_argument("--ks", default="1,8,16,17,18,20,24,29")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pair", action="store_true", help="a second process scans at the same time")
    ap.add_argument("--compile", action="store_true", help="also time each K with the step compiled")
    ap.add_argument("--out", default=None, help="directory for bench_group_size.json")
    a = ap.parse_args(argv)
    ks = [int(k) for k in a.ks.split(",")]
    job = (a.spec, a.run, ks, a.warmup, a.steps, a.compile)
    if a.pair:
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            results = pool.map(_scan_star, [job, job])
    else:
        results = [scan(*job)]
    mean = {m: {k: sum(r[m][k] for r in results) / len(results) for k in ks} for m in results[0]}
    if a.compile:
        print("| K | eager ms a step | compiled ms a step | compiled speed-up | compile (s) |\n|---|---|---|---|---|")
        for k in ks:
            e, c = mean["eager"][k], mean["compiled"][k]
            print(f"| {k} | {e:.2f} | {c:.2f} | {e / c:.2f}x | {mean['compile_s'][k]:.0f} |")
    else:
        print("| K | ms a step | ms a member |\n|---|---|---|")
        for k in ks:
            print(f"| {k} | {mean['eager'][k]:.2f} | {mean['eager'][k] / k:.2f} |")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        record = {"ks": ks, "ms_per_step": [r["eager"] for r in results], "pair": a.pair, "warmup": a.warmup}
        record |= {"steps": a.steps, "spec": Path(a.spec).name, "run": a.run, "torch": torch.__version__}
        record |= {"machine": platform.machine(), "cpu": cpu_info()}
        if a.compile:  # per process, as ms_per_step
            record |= {"compiled_ms_per_step": [r["compiled"] for r in results]}
            record |= {"compile_s": [r["compile_s"] for r in results]}
        (Path(a.out) / "bench_group_size.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
