"""One-command GPU check of the training engines: correctness, then every step mode proven and timed, in one run.

    python benchmarks/gpu_check.py --out $OUT            # on a GPU machine (device cuda), CPU numbers beside
    python benchmarks/gpu_check.py --device cpu --quick  # smoke test of the script itself, anywhere

The whole table takes minutes (two compiled modes compile ~1 min each): it is issue 43's step table, run as
``bash tools/gpu/gpu_queue.sh table`` in a window of its own. A queue window checks only the mode it trains with
(``gpu_window.check_one``, with this module's checks and tolerances) and falls back in ``gpu_window.MODES`` order.

**Against the CPU** (dropout 0, so both devices compute the same function):

- loss and gradients: one batched step (simplified and full presets, K = 2), loss within ``LOSS_TOL`` = 1e-5
  relative, every gradient but ``b_K``'s within ``GRAD_TOL`` = 1e-4 of its largest entry, and ``b_K``'s (exactly
  zero in exact arithmetic: rounding noise, never comparable as a relative error) at most ``ZERO_GRAD_TOL`` = 1e-6
  of the largest gradient entry on both devices (``grad_checks``, the one comparison every check uses);
- trajectory: 200 steps (simplified, K = 2), every weight within ``TRAJ_TOL`` = 1e-3 of its largest entry (float
  reductions differ between devices and AdamW normalises the differences; ``b_K`` left out: see stacked.py);
- the standard ``Trainer`` on the device: 3 epochs, finite loss, files.

**Each step mode against fp32 eager on the device** (full preset, K = 2, dropout 0; the baseline is today's eager
step on the per-tensor layout, ``MODES["eager"]``): the summed loss of 5 steps and the gradients of the 5th (the
whole-step graph replays from its 5th step), and every weight after 200 steps, within the mode's tolerances
(``TOLS``: fp32 modes 1e-5 / 1e-4 / 1e-3 as above; TF32 1e-3 / 3e-2 / 5e-2; bf16 autocast 2e-2 / 1e-1 / 2e-1).
TF32 and bf16 are also checked over 2,000 steps (``--long-steps``): the mean loss within 5e-3 (TF32) / 2e-2 (bf16)
of fp32's and every member's final accuracies (every split) within ``ACC_TOL`` = 0.05.

**Timing** (full preset, K = 1, 5, 12, dropout 0.1, as the sweeps train), per mode: ms per step, model-steps/s,
kernels per step (device kernels and copies the profiler sees, graphs included) and host launches per step (kernel,
graph, copy launches), achieved FLOP/s (the step's matmul FLOPs, counted once by ``FlopCounterMode``, over its time)
against the peak measured in the same run for that mode's precision (fp32, TF32, bf16 ``torch.mm`` 8192^3), with
the previous GPU modes (eager and compiled with CUDA graphs on the per-tensor layout) and this machine's CPU in the
same table. Rows stop after ``--budget`` seconds (the rows that decide the queue first).

**The pick**: of the fp32 modes the sweeps can train with (``QUEUE_FLAGS``) whose checks passed, the one with the
least estimated time for the queue's groups (full-variants K = 1, fig10 K = 5, fig3 K = 12) goes to
``queue_flags.txt`` in ``--out`` (a record: the queue window checks its modes itself). TF32 and bf16 are reported, not
picked: the paper's runs are fp32, and a reduced precision enters the queue only once its 2,000-step check has
passed on a GPU and a sweep setting carries it.

Prints the tables and writes ``gpu_check.json`` to ``--out``. Makes no assertions about timings; exits 1 when a
required check (eager against the CPU) fails. The first run on an H100 (2026-11-24): ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from hooked_clip1d.data.dataset import DataConfig
from hooked_clip1d.evaluation import evaluate
from hooked_clip1d.model.clip import CLIPConfig
from hooked_clip1d.training.batched import BatchedTrainer, Member
from hooked_clip1d.training.graph_step import matmul_precision, set_flat
from hooked_clip1d.training.run_config import RunConfig
from hooked_clip1d.training.trainer import TrainConfig, Trainer

GRAD_TOL, LOSS_TOL, TRAJ_TOL, BF16_TOL = 1e-4, 1e-5, 1e-3, 2e-2
ZERO_GRAD_TOL = 1e-6  # b_K's gradient (zero by construction): its largest entry over the largest gradient entry
ACC_TOL = 0.05
DATA = DataConfig(n_labels=20, n2=10)

# step modes: BatchedTrainer arguments, the layout (flat: StackedCLIP.flat_layout), matmul precision, two streams
MODES: dict[str, dict] = {
    "eager": dict(flat=False),  # the baseline: today's eager step, per-tensor layout (a previous GPU mode)
    "compile+cudagraphs": dict(compile=True, cudagraphs=True, flat=False),  # the previous GPU mode
    "flat": dict(flat=True),  # eager on the flat layout: fused QKV views, one fused AdamW call
    "graph-step/per-tensor": dict(graph_step=True, flat=False),  # the whole-step graph alone
    "graph-step": dict(graph_step=True, flat=True),  # the whole-step graph on the flat layout
    "graph-step+streams": dict(graph_step=True, flat=True, streams=True),  # the towers on two streams in the graph
    "compile+cudagraphs/flat": dict(compile=True, cudagraphs=True, flat=True),
    # issue 51 item 4: inductor's fused forward/backward kernels captured inside the whole-step graph
    "graph-step+compile": dict(graph_step=True, compile=True, flat=True),
    "graph-step+compile+tf32": dict(graph_step=True, compile=True, flat=True, precision="tf32"),
    "graph-step+tf32": dict(graph_step=True, flat=True, precision="tf32"),
    "graph-step+bf16": dict(graph_step=True, flat=True, amp=True),
}
# the fp32 modes the sweeps train with today (sweep flags; on a GPU the layout is flat by default)
QUEUE_FLAGS = {
    "graph-step+compile": "--graph-step --compile",
    "graph-step": "--graph-step",
    "compile+cudagraphs/flat": "--compile --cudagraphs",
    "flat": "--no-compile",
}
# (loss, gradients, 200-step weights) tolerances of a mode against fp32 eager
TOLS = {"fp32": (LOSS_TOL, GRAD_TOL, TRAJ_TOL), "tf32": (1e-3, 3e-2, 5e-2), "bf16": (2e-2, 1e-1, 2e-1)}
LONG_TOLS = {"tf32": 5e-3, "bf16": BF16_TOL}  # mean loss over the long trajectory
# the queue's groups: (K, steps) of full-variants (two groups of one), fig10 and fig3's longest group
QUEUE_WORK = ((1, 880_000), (5, 440_000), (12, 1_170_000))


def _precision(mode: str) -> str:
    m = MODES[mode]
    return "bf16" if m.get("amp") else m.get("precision", "fp32")


def _cfg(preset: str, dropout: float = 0.0) -> CLIPConfig:
    return CLIPConfig.from_preset(preset, n_labels=20, dropout=dropout)


def _group(
    device: str,
    preset: str,
    k: int,
    steps: int,
    *,
    amp: bool = False,
    compile: bool = False,  # noqa: A002
    dropout: float = 0.0,
    cudagraphs: bool = False,
    graph_step: bool = False,
    flat: bool | None = None,
    precision: str = "fp32",
    streams: bool = False,
) -> tuple[BatchedTrainer, float]:
    """A group of ``k`` members (seeds 0..k-1) after ``steps`` steps, and the seconds they took. ``flat``: the
    layout (None: the device's default, flat on CUDA); ``precision``: ``graph_step.matmul_precision``."""
    members = [
        Member(_cfg(preset, dropout), DATA, TrainConfig(seed=s, device=device, epochs=10_000, eval_every=10_000))
        for s in range(k)
    ]
    bt = BatchedTrainer(
        members, None, dropout_rng="fast", amp=amp, compile=compile, cudagraphs=cudagraphs, graph_step=graph_step
    )
    if flat is not None:
        set_flat(bt, flat)
    if streams:
        bt.state.model.use_streams()
    bt.precision = precision
    return bt, _advance(bt, steps)


def _advance(bt: BatchedTrainer, steps: int) -> float:
    t0 = time.perf_counter()
    with matmul_precision(getattr(bt, "precision", "fp32"), bt.state.device):
        bt.run(progress=False, max_steps=steps)
    if bt.state.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _mode_group(
    device: str, mode: str, k: int, steps: int, dropout: float = 0.0, preset: str = "full"
) -> tuple[BatchedTrainer, float]:
    return _group(device, preset, k, steps, dropout=dropout, **MODES[mode])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def zero_by_construction(name: str) -> bool:
    """``b_K``: softmax is shift-invariant per query, so its true gradient is exactly 0 and what two runs compute for
    it is rounding noise over rounding noise (see training/stacked.py): compared by its own magnitude, never as a
    relative error."""
    return name.endswith("attn.b_K")


def _worst(a: BatchedTrainer, b: BatchedTrainer) -> tuple[float, str]:
    return max(
        (_rel(p, q), n)
        for n, p, q in zip(a.state.model.names, a.state.model.flat, b.state.model.flat, strict=True)
        if not zero_by_construction(n)  # b_K's value is not reproducible (Adam normalises its noise)
    )


def grad_checks(
    label: str, names: Sequence[str], got: Sequence[torch.Tensor | None], ref: Sequence[torch.Tensor | None], tol: float
) -> list[dict]:
    """The one gradient comparison of ``check_step``, ``check_mode`` and the window's check (``gpu_window.check_one``):
    every parameter but ``b_K`` by its relative error (the largest difference over the reference's largest entry,
    within ``tol``); ``b_K`` by its own magnitude: its largest entry at most ``ZERO_GRAD_TOL`` of the largest gradient
    entry of any parameter, in both runs (read before anything else changes them: the optimizer does not touch
    ``.grad``). A missing gradient counts as zeros; a non-finite one fails (NaN compares false).

    Example:
        >>> g = [torch.tensor([1.0, -2.0]), torch.tensor([3e-9])]
        >>> h = [torch.tensor([1.0, -2.00001]), torch.tensor([-5e-9])]  # b_K: noise of the opposite sign
        >>> [(r["value"] < 1e-4, r["ok"]) for r in grad_checks("x", ["W_Q", "blocks.0.attn.b_K"], g, h, 1e-4)]
        [(True, True), (True, True)]
    """
    rel, worst, big, zero = 0.0, "-", [0.0, 0.0], [0.0, 0.0]
    for n, p, q in zip(names, got, ref, strict=True):
        p = torch.zeros(()) if p is None else p.detach().float().cpu()
        q = torch.zeros(()) if q is None else q.detach().float().cpu()
        for i, g in enumerate((p, q)):
            m = float(g.abs().max()) if g.numel() else 0.0
            big[i] = max(big[i], m) if m == m else float("nan")
            if zero_by_construction(n):
                zero[i] = max(zero[i], m) if m == m else float("nan")
        if not zero_by_construction(n):
            r = _rel(p, q)
            if rel == rel and not r <= rel:  # a NaN, once met, stays the worst
                rel, worst = r, n
    ratio = max(z / b if b > 0 else (0.0 if z == 0 else float("inf")) for z, b in zip(zero, big, strict=True))
    if any(v != v for v in (*zero, *big)):
        ratio = float("nan")
    return [
        {"check": f"{label}: gradients but b_K (worst: {worst})", "value": rel, "tol": tol, "ok": rel <= tol},
        {
            "check": f"{label}: b_K's gradient is zero (largest |grad b_K| / largest |grad|)",
            "value": ratio,
            "tol": ZERO_GRAD_TOL,
            "ok": ratio <= ZERO_GRAD_TOL,
        },
    ]


def check_step(device: str) -> list[dict]:
    rows = []
    for preset in ("simplified", "full"):
        dev, _ = _group(device, preset, 2, 1)
        cpu, _ = _group("cpu", preset, 2, 1)
        loss = _rel(dev.state.loss_sum, cpu.state.loss_sum)
        rows.append({"check": f"{preset}: loss, one step", "value": loss, "tol": LOSS_TOL, "ok": loss <= LOSS_TOL})
        grads = ([p.grad for p in dev.state.model.flat], [q.grad for q in cpu.state.model.flat])
        rows += grad_checks(f"{preset}: one step", dev.state.model.names, *grads, GRAD_TOL)
    return rows


def check_trajectory(device: str, steps: int) -> list[dict]:
    dev, _ = _group(device, "simplified", 2, steps)
    cpu, _ = _group("cpu", "simplified", 2, steps)
    worst = _worst(dev, cpu)
    return [
        {
            "check": f"simplified: weights after {steps} steps (worst: {worst[1]})",
            "value": worst[0],
            "tol": TRAJ_TOL,
            "ok": worst[0] <= TRAJ_TOL,
        }
    ]


def five_then(device: str, mode: str, steps: int, preset: str = "full") -> dict:
    """One group of ``mode`` (K = 2, ``preset``): its summed loss and gradients after 5 steps, then the group after
    ``steps`` (one group, so a compiled mode compiles once)."""
    bt, _ = _mode_group(device, mode, 2, 5, preset=preset)
    out = {"loss": bt.state.loss_sum.clone(), "grads": [p.grad.detach().clone() for p in bt.state.model.flat]}
    _advance(bt, steps - 5)
    return {**out, "traj": bt}


def mode_rows(mode: str, got: dict, base: dict, steps: int) -> list[dict]:
    """The rows of ``mode`` (``got``) against fp32 eager (``base``), both ``five_then`` results: 5-step loss, the 5th
    step's gradients (``grad_checks``), weights after ``steps`` steps, within the mode's ``TOLS``."""
    lt, gt, wt = TOLS[_precision(mode)]
    loss = _rel(got["loss"], base["loss"])
    worst = _worst(got["traj"], base["traj"])
    rows = [{"check": f"{mode}: loss of 5 steps vs fp32 eager", "value": loss, "tol": lt, "ok": loss <= lt}]
    rows += grad_checks(f"{mode}: step 5 vs fp32 eager", got["traj"].state.model.names, got["grads"], base["grads"], gt)
    rows.append(
        {
            "check": f"{mode}: weights after {steps} steps vs fp32 eager ({worst[1]})",
            "value": worst[0],
            "tol": wt,
            "ok": worst[0] <= wt,
        }
    )
    return [{**r, "mode": mode} for r in rows]


def check_mode(device: str, mode: str, steps: int, base: dict, preset: str = "full") -> list[dict]:
    """``mode`` against fp32 eager (``base``: ``five_then`` of eager on the same ``preset``, built once): 5-step
    loss, 5th-step gradients, weights after ``steps`` steps (module docstring; ``mode_rows``)."""
    return mode_rows(mode, five_then(device, mode, steps, preset), base, steps)


def _accuracies(bt: BatchedTrainer) -> list[float]:
    out = []
    for i in bt.state.active:
        metrics = evaluate(bt.state.member_model(i), bt.state.datasets[i])
        out += [metrics[split]["acc"] for split in sorted(metrics)]
    return out


def check_long(device: str, mode: str, steps: int, fp32: BatchedTrainer) -> list[dict]:
    """A reduced-precision mode over ``steps`` steps against fp32 eager: the mean loss and the final accuracies."""
    bt, _ = _mode_group(device, mode, 2, steps)
    diff = float(((bt.state.loss_sum - fp32.state.loss_sum).abs() / steps).max())
    acc = max(abs(a - b) for a, b in zip(_accuracies(bt), _accuracies(fp32), strict=True))
    tol = LONG_TOLS[_precision(mode)]
    return [
        {
            "check": f"{mode}: mean loss over {steps} steps vs fp32",
            "value": diff,
            "tol": tol,
            "ok": diff <= tol,
            "mode": mode,
        },
        {
            "check": f"{mode}: accuracies after {steps} steps vs fp32",
            "value": acc,
            "tol": ACC_TOL,
            "ok": acc <= ACC_TOL,
            "mode": mode,
        },
    ]


def check_trainer(device: str, out: Path) -> list[dict]:
    d = Path(tempfile.mkdtemp()) / "trainer_run"  # not under --out: a device tool brings back only a few files
    cfg = CLIPConfig.from_preset("simplified", n_labels=8, d_model=32, d_head=8)
    tc = TrainConfig(epochs=3, eval_every=1, checkpoint_every=3, device=device)
    run = Trainer(RunConfig(cfg, DataConfig(n_labels=8, n_heldout=3, n2=3), tc), d).run(progress=False)
    lines = (d / "metrics.jsonl").read_text().splitlines()
    ok = len(lines) == 3 and all(json.loads(ln)["loss"] == json.loads(ln)["loss"] for ln in lines)
    return [
        {
            "check": "standard Trainer on the device: 3 epochs, finite loss, files",
            "value": run.step,
            "tol": None,
            "ok": ok and (d / "model.safetensors").exists(),
        }
    ]


def _guarded(label: str, fn, *args) -> list[dict]:  # noqa: ANN001
    """An optional check: a mode that crashes is a failed check (the queue trains without it), not the end."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        err = f"{label}: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        return [{"check": err, "value": float("nan"), "tol": None, "ok": False, "mode": label}]


# ---- timing -----------------------------------------------------------------------------------------------------
def peaks(device: str) -> dict[str, float]:
    """Measured matmul peaks, FLOP/s: fp32 (TF32 off), TF32 and bf16 on a GPU; fp32 on the CPU."""
    out = {}
    n = 8192 if device.startswith("cuda") else 1024
    for prec in ("fp32", "tf32", "bf16") if device.startswith("cuda") else ("fp32",):
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        a = torch.randn(n, n, device=device, dtype=dtype)
        with matmul_precision("tf32" if prec == "tf32" else "fp32", device):
            best = float("inf")
            for _ in range(5):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(3):
                    a @ a
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                best = min(best, (time.perf_counter() - t0) / 3)
        out[prec] = 2 * n**3 / best
    return out


def step_flops(device: str, k: int) -> float:
    """Matmul FLOPs of one training step (forward and backward) of the full preset at K (``FlopCounterMode``)."""
    from torch.utils.flop_counter import FlopCounterMode

    bt, _ = _group(device, "full", k, 0, flat=False)
    with FlopCounterMode(display=False) as fc:
        bt.run(progress=False, max_steps=1)
    return float(fc.get_total_flops())


def kernels_per_step(bt: BatchedTrainer, steps: int = 10) -> tuple[float, float]:
    """(device kernels and copies, host launches) per step, from the profiler over ``steps`` steps."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _advance(bt, steps)
    events = prof.events()
    device = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    launch = ("cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync", "cuLaunchKernel")
    host = sum(1 for e in events if e.name in launch)
    return device / steps, host / steps


def time_mode(device: str, mode: str, k: int, seconds: float, flops: float, peak: dict[str, float]) -> dict:
    """One timing row: warm-up (compile, capture), then steps until ``seconds`` have passed."""
    kw = MODES[mode] if mode != "cpu" else dict(flat=False)
    bt, _ = _group(device, "full", k, 10, dropout=0.1, **kw)
    n, done, dt = 10, 0, 0.0
    while dt < seconds and n <= 20_000:
        dt, done, n = dt + _advance(bt, n), done + n, n * 2
    ms = 1e3 * dt / done
    row = {"mode": mode, "K": k, "device": device, "ms_per_step": round(ms, 3)}
    row["model_steps_per_s"] = round(k / ms * 1e3)
    prec = _precision(mode) if mode in MODES else "fp32"
    row["gflop_s"] = round(flops / (ms / 1e3) / 1e9, 1)
    row["pct_peak"] = round(100 * flops / (ms / 1e3) / peak[prec], 2) if prec in peak else None
    if device.startswith("cuda"):
        row["kernels_per_step"], row["launches_per_step"] = (round(v, 1) for v in kernels_per_step(bt))
    return row


def timing(device: str, ks: list[int], seconds: float, budget: float, log: Path, cpu_too: bool) -> list[dict]:
    """The timing table: the rows that decide the queue first, then the other levers, then the previous modes and
    the CPU; stops adding rows after ``budget`` seconds."""
    start, rows = time.perf_counter(), []
    peak = {device: peaks(device)}
    flops = {k: step_flops(device, k) for k in ks}
    cuda = device.startswith("cuda")
    order = (
        [
            "graph-step",
            "graph-step+compile",
            "eager",
            "flat",
            "graph-step+tf32",
            "graph-step/per-tensor",
            "graph-step+streams",
            "graph-step+bf16",
            "compile+cudagraphs/flat",
            "compile+cudagraphs",
        ]
        if cuda
        else ["eager"]
    )
    plan = [(m, k, device) for m in order for k in ks]
    if cpu_too and cuda:
        peak["cpu"] = peaks("cpu")
        plan += [("cpu", k, "cpu") for k in ks]
    for mode, k, dev in plan:
        if time.perf_counter() - start > budget:
            print(f"  (timing budget of {budget:.0f} s spent: remaining rows skipped)")
            break
        t0 = time.perf_counter()
        try:
            row = time_mode(dev, mode, k, seconds, flops[k], peak[dev])
            print(
                f"  {mode:<24} K={k:<3} {dev:<5} {row['ms_per_step']:9.3f} ms  {row['model_steps_per_s']:7d} "
                f"model-steps/s  kernels {row.get('kernels_per_step', '-')!s:>6}  launches "
                f"{row.get('launches_per_step', '-')!s:>6}  {row['gflop_s']:8.1f} GFLOP/s  "
                f"{row['pct_peak']!s:>6} % peak",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001 - a broken mode is a finding, not the end of the table
            row = {"mode": mode, "K": k, "device": dev, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"  {mode:<24} K={k:<3} {dev:<5} FAILED {row['error']}", flush=True)
        row["row_seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        log.write_text(json.dumps({"peak_flop_s": peak, "step_flops": flops, "rows": rows}, indent=2))
    return rows


def pick(checks: list[dict], rows: list[dict]) -> tuple[str | None, float | None]:
    """The fastest fp32 queue mode whose checks passed and which was timed at every K of the queue's groups: its
    sweep flags and the estimated hours of the queue's groups (module docstring)."""
    failed = {c["mode"] for c in checks if c.get("mode") and not c["ok"]}
    best = None
    for mode, flags in QUEUE_FLAGS.items():
        if mode in failed or not any(c.get("mode") == mode for c in checks):
            continue
        ms = {r["K"]: r["ms_per_step"] for r in rows if r["mode"] == mode and "ms_per_step" in r}
        if not all(k in ms for k, _ in QUEUE_WORK):
            continue
        hours = sum(ms[k] * n for k, n in QUEUE_WORK) / 3.6e6
        if best is None or hours < best[1]:
            best = (flags, hours)
    return best if best is not None else (None, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="device to check against the CPU (default cuda)")
    ap.add_argument("--out", default="results/gpu_check", help="folder for gpu_check.json and queue_flags.txt")
    ap.add_argument("--quick", action="store_true", help="small K and few steps (a smoke test)")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per timing row")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 on a busy machine)")
    ap.add_argument("--budget", type=float, default=float("inf"), help="seconds for the whole timing table")
    ap.add_argument("--long-steps", type=int, default=2000, help="steps of the TF32 / bf16 trajectory check")
    ap.add_argument("--no-throughput", action="store_true", help="the correctness checks only (~2 min on an H100)")
    ap.add_argument("--no-cpu", action="store_true", help="leave the CPU rows out of the timing table")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("gpu_check: --device cuda, but this torch build sees no CUDA device", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = 20 if a.quick else 200
    checks = check_step(a.device) + check_trajectory(a.device, steps) + check_trainer(a.device, out)
    for c in checks:
        c["required"] = True
    base = five_then(a.device, "eager", steps)
    modes = [m for m in MODES if m != "eager" and (cuda or not (MODES[m].get("graph_step") or "cudagraphs" in m))]
    if a.quick:
        modes = [m for m in modes if "compile" not in m]
    for mode in modes:
        checks += _guarded(mode, check_mode, a.device, mode, steps, base)
    if cuda:
        long = 200 if a.quick else a.long_steps
        fp32, _ = _mode_group(a.device, "eager", 2, long)
        for mode in ("graph-step+compile+tf32", "graph-step+tf32", "graph-step+bf16"):
            checks += _guarded(mode, check_long, a.device, mode, long, fp32)
    print(f"{'check':<72} {'value':>10} {'tol':>8}  ok")
    for c in checks:
        tol = "-" if c["tol"] is None else f"{c['tol']:.0e}"
        print(f"{c['check']:<72} {c['value']:>10.3g} {tol:>8}  {'yes' if c['ok'] else 'NO'}")
    ks = [1, 2] if a.quick else [1, 5, 12]
    rows = (
        []
        if a.no_throughput
        else timing(a.device, ks, 0.3 if a.quick else a.seconds, a.budget, out / "timing.json", not a.no_cpu)
    )
    flags, hours = pick(checks, rows)
    if flags is not None:
        (out / "queue_flags.txt").write_text(flags + "\n")
        print(f"queue flags: {flags} (the queue's groups: ~{hours:.2f} h at the timed step)")
    else:
        print("queue flags: none picked (no fp32 queue mode passed and was timed at every K)")
    info = {
        "torch": torch.__version__,
        "device": a.device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    record = {"info": info, "checks": checks, "timing": rows, "queue_flags": flags, "queue_hours": hours}
    (out / "gpu_check.json").write_text(json.dumps(record, indent=2))
    print(f"wrote {out / 'gpu_check.json'}")
    # exit 1 only if a required check (eager against the CPU) failed: a failed mode is trained without
    return 0 if all(c["ok"] for c in checks if c.get("required")) else 1


if __name__ == "__main__":
    sys.exit(main())
