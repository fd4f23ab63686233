"""Training-step throughput of hooked_clip1d against a plain PyTorch reference, in one process on the same batches.

For each preset it times (a) ``plain_reference.py`` (one-file PyTorch model, ``AdamW(model.parameters(), ...)``
with torch's default implementation) and (b) the loop body of ``hooked_clip1d.training.Trainer.run``::

    loss = model.loss(images[idx], captions[idx], validate=False)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()

Both see the same sequence of index batches (batch 50 from shuffled permutations of the real training pairs).
After ``--warmup`` steps each, ``--rounds`` timing rounds of ``--steps`` steps alternate between the two (the order
flips every round), and the median steps/s over rounds is reported.

FLOPs (one training step, batch B; each tower t with n_t tokens, L layers, H heads, d_head, d_model d, d_mlp m):

    forward(t) = L * [ 2*B*n_t*d*(3*H*d_head)        # QKV projection
                     + 2*B*H*n_t*n_t*d_head          # scores q.k (full n x n, also for the causal text tower)
                     + 2*B*H*n_t*n_t*d_head          # pattern . V
                     + 2*B*n_t*(H*d_head)*d          # output projection W_O
                     + 2 * 2*B*n_t*d*m ]             # MLP W_in and W_out (0 when attention only)
    forward    = forward(vision, n=11) + forward(text, n=4)
                 + 2*B*d*d                           # text projection W_proj (on the B EOT readouts)
                 + 2*B*B*d                           # image-text cosine similarity matrix
    step       = 3 * forward                         # backward ~ 2x forward (grads w.r.t. inputs and weights)

Only matmul FLOPs are counted; embeddings, LayerNorm, softmax, GeLU, dropout, loss and AdamW are not (they are
memory/overhead bound and make up the gap between achieved and peak GFLOP/s). The peak is the best fp32
``torch.mm`` rate measured in the same process on this model's shapes and on a large square matmul.

Run: ``python benchmarks/bench_training.py [--steps 200] [--rounds 5] [--threads N] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import plain_reference  # noqa: E402

from hooked_clip1d import CLIPConfig, DataConfig, TrainConfig, build_dataset  # noqa: E402
from hooked_clip1d.training import Trainer  # noqa: E402

BATCH = 50
N_LABELS = 20


# ---- FLOPs and peak ---------------------------------------------------------------------------------------------
def forward_flops(cfg: CLIPConfig, batch: int) -> dict[str, int]:
    """Matmul FLOPs of one forward pass by component (formula in the module docstring)."""
    out = {"qkv": 0, "scores": 0, "pattern_v": 0, "out_proj": 0, "mlp": 0, "text_proj": 0, "similarity": 0}
    for t in (cfg.vision, cfg.text):
        B, n, d, H, dh, L = batch, t.n_ctx, t.d_model, t.n_heads, t.d_head, t.n_layers
        out["qkv"] += L * 2 * B * n * d * 3 * H * dh
        out["scores"] += L * 2 * B * H * n * n * dh
        out["pattern_v"] += L * 2 * B * H * n * n * dh
        out["out_proj"] += L * 2 * B * n * H * dh * d
        if not t.attn_only:
            out["mlp"] += L * 2 * 2 * B * n * d * t.d_mlp
    out["text_proj"] = 2 * batch * cfg.text.d_model * cfg.vision.d_model
    out["similarity"] = 2 * batch * batch * cfg.vision.d_model
    return out


def step_flops(cfg: CLIPConfig, batch: int) -> int:
    """Forward + backward matmul FLOPs of one training step (3x forward)."""
    return 3 * sum(forward_flops(cfg, batch).values())


def time_mm(m: int, k: int, n: int, min_seconds: float = 0.3, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of fp32 ``torch.mm`` [m,k] @ [k,n] (each repeat runs >= min_seconds / repeats)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    for _ in range(3):
        torch.mm(a, b, out=out)
    reps = 1
    while True:  # calibrate the number of calls per repeat
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        dt = time.perf_counter() - t0
        if dt >= min_seconds / repeats:
            break
        reps *= 2
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * m * k * n / best / 1e9


def measure_peak() -> dict[str, float]:
    shapes = {
        "550x128 @ 128x384 (vision QKV)": (550, 128, 384),
        "550x128 @ 128x512 (vision MLP in)": (550, 128, 512),
        "550x512 @ 512x128 (vision MLP out)": (550, 512, 128),
        "1024x1024 @ 1024x1024": (1024, 1024, 1024),
    }
    return {name: time_mm(*s) for name, s in shapes.items()}


# ---- implementations ---------------------------------------------------------------------------------------------
def make_plain(preset: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    _, _, step = plain_reference.make_trainer(preset, N_LABELS, seed=0)
    return lambda images, captions, idx: step(images[idx], captions[idx])


def make_ours(preset: str, tmpdir: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    trainer = Trainer(
        CLIPConfig.from_preset(preset, n_labels=N_LABELS),
        DataConfig(),
        TrainConfig(epochs=10**9),
        Path(tmpdir) / preset,
    )
    model, opt = trainer.model, trainer.opt
    model.train()

    def step(images: torch.Tensor, captions: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        # the loop body of Trainer.run
        loss = model.loss(images[idx], captions[idx], validate=False)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def run_steps(step, images, captions, batches, start: int, n: int) -> float:
    """Seconds for ``n`` steps on batches ``start..start+n`` (cyclic)."""
    t0 = time.perf_counter()
    for i in range(start, start + n):
        loss = step(images, captions, batches[i % len(batches)])
    loss.item()  # nothing is asynchronous on CPU, but make sure the last step finished
    return time.perf_counter() - t0


def make_batches(m: int, n_batches: int, seed: int = 0) -> list[torch.Tensor]:
    """Index batches of ``BATCH`` from successive seeded permutations (like ``Trainer.run``)."""
    gen = torch.Generator().manual_seed(seed)
    out: list[torch.Tensor] = []
    while len(out) < n_batches:
        out.extend(torch.randperm(m, generator=gen).split(BATCH))
    return out[:n_batches]


def bench_preset(preset: str, images, captions, args, tmpdir: str, peak: float) -> dict:
    impls = {"plain": make_plain(preset), "ours": make_ours(preset, tmpdir)}
    batches = make_batches(len(images), args.warmup + args.steps)
    for step in impls.values():
        run_steps(step, images, captions, batches, 0, args.warmup)
    rates: dict[str, list[float]] = {k: [] for k in impls}
    for r in range(args.rounds):
        order = list(impls) if r % 2 == 0 else list(reversed(impls))
        for name in order:  # the same batches for both in every round
            dt = run_steps(impls[name], images, captions, batches, args.warmup, args.steps)
            rates[name].append(args.steps / dt)
    cfg = CLIPConfig.from_preset(preset, n_labels=N_LABELS)
    flops = step_flops(cfg, BATCH)
    res = {"preset": preset, "K": 1, "step_flops": flops, "forward_flops": forward_flops(cfg, BATCH)}
    for name, rs in rates.items():
        sps = statistics.median(rs)
        res[name] = {
            "steps_per_s": sps,
            "steps_per_s_rounds": rs,
            "gflops": sps * flops / 1e9,
            "frac_peak": sps * flops / 1e9 / peak,
        }
    res["ratio_ours_over_plain"] = res["ours"]["steps_per_s"] / res["plain"]["steps_per_s"]
    return res


# ---- main --------------------------------------------------------------------------------------------------------
def markdown(results: list[dict], peak: float) -> str:
    head = (
        "| preset | K | step MFLOP | plain steps/s | ours steps/s | ours/plain "
        "| plain GFLOP/s | ours GFLOP/s | plain % peak | ours % peak |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in results:
        if r.get("status"):
            lines.append(f"| {r['preset']} | {r['K']} | {r['status']} |" + " |" * 7)
            continue
        p, o = r["plain"], r["ours"]
        lines.append(
            f"| {r['preset']} | {r['K']} | {r['step_flops'] / 1e6:.1f} | {p['steps_per_s']:.1f} "
            f"| {o['steps_per_s']:.1f} | {r['ratio_ours_over_plain']:.2f} | {p['gflops']:.1f} | {o['gflops']:.1f} "
            f"| {100 * p['frac_peak']:.1f} | {100 * o['frac_peak']:.1f} |"
        )
    lines.append(f"\nfp32 matmul peak (best torch.mm rate measured above): {peak:.1f} GFLOP/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="training steps per timing round")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per implementation (median is reported)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed steps per implementation first")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    ap.add_argument("--presets", nargs="+", default=["simplified", "full"], choices=sorted(plain_reference.PRESETS))
    ap.add_argument("--out", type=Path, default=None, help="directory for benchmark.json")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        ap.error("--steps and --rounds must be >= 1, --warmup >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)

    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
    }
    print(
        f"machine: {machine['platform']} ({machine['processor']}), {machine['cpu_count']} CPUs; "
        f"python {machine['python']}, torch {machine['torch']}, threads {machine['threads']}"
    )
    print(f"settings: steps {args.steps} x rounds {args.rounds}, warmup {args.warmup}, batch {BATCH}")

    peak_by_shape = measure_peak()
    peak = max(peak_by_shape.values())
    for name, g in peak_by_shape.items():
        print(f"  torch.mm {name}: {g:.1f} GFLOP/s")

    ds = build_dataset(DataConfig(n_labels=N_LABELS, n2=10))
    images, captions = ds.training_pairs()
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for preset in args.presets:
            print(f"timing {preset} ...", flush=True)
            results.append(bench_preset(preset, images, captions, args, tmpdir, peak))
    for preset in args.presets:
        results.append({"preset": preset, "K": ">1", "status": "not implemented yet (batched K>1 training)"})

    print()
    print(markdown(results, peak))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {
            "machine": machine,
            "settings": {"steps": args.steps, "rounds": args.rounds, "warmup": args.warmup, "batch": BATCH},
            "matmul_gflops": peak_by_shape,
            "peak_gflops": peak,
            "results": results,
        }
        (args.out / "benchmark.json").write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.out / 'benchmark.json'}")


if __name__ == "__main__":
    main()
