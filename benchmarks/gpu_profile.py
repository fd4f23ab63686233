"""Where a GPU training step's time goes: torch.profiler over a few steps of one batched group (prepared on the CPU,
run on a lent GPU; its first run on an H100 measured a full-model step at ~5.7 ms compiled with CUDA graphs, far
above a launch-bound floor).

    python benchmarks/gpu_profile.py --out $OUT [--k 5 --mode graph-step --steps 50]   (modes: gpu_check.MODES)

Prints the step time (events, median of 5 chunks), then the profiler's top rows by self CPU time and by device
time, and writes ``profile_<preset>_k<K>.txt`` to ``--out``. No assertions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import MODES, _advance, _mode_group  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="full", choices=["simplified", "full"])
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--mode", default="graph-step", choices=sorted(MODES), help="a step mode of gpu_check.MODES")
    ap.add_argument("--steps", type=int, default=50, help="steps under the profiler")
    ap.add_argument("--out", default="results/gpu_profile")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.preset != "full":
        raise SystemExit("gpu_profile: the step modes are defined for the full preset")
    t0 = time.perf_counter()
    bt, _ = _mode_group(a.device, a.mode, a.k, 10, dropout=0.1)
    print(f"build + 10 warm-up steps (compile): {time.perf_counter() - t0:.1f} s", flush=True)
    cuda = a.device.startswith("cuda")
    times = []
    for _ in range(5):
        times.append(_advance(bt, 100) / 100)
    med = statistics.median(times)
    print(f"{a.preset} K={a.k} {a.mode}: {med * 1e3:.2f} ms per step ({a.k / med:.0f} model-steps/s)", flush=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        _advance(bt, a.steps)
    ka = prof.key_averages()
    text = [f"{a.preset} K={a.k} {a.mode}: {med * 1e3:.2f} ms per step; profiled {a.steps} steps", ""]
    text.append(ka.table(sort_by="self_cpu_time_total", row_limit=30))
    if cuda:
        text.append(ka.table(sort_by="self_cuda_time_total", row_limit=20))
    report = "\n".join(text)
    (out / f"profile_{a.preset}_k{a.k}_{a.mode}.txt").write_text(report)
    print(report[:9000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
