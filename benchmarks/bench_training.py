"""Training throughput of hooked_clip1d against a plain PyTorch reference, in one process, interleaved.

Implementations (each trains on the real training pairs of ``DataConfig(n_labels=20, n2=10)``, batch 50):

- ``plain``: ``plain_reference.py`` (one-file PyTorch model, ``AdamW(model.parameters())``, torch's default
  implementation), K = 1: the baseline of every ratio;
- ``plain+captioning``, ``trainer+captioning`` and ``batched+captioning`` (``--captioning``): the plain reference,
  the single-model trainer and the batched engine (K as ``--ks``, and 1) on the captioning objective
  (``plain_reference.PlainCaptioner``; ``CLIPConfig(objective="captioning")``), their ratios against the first;
- ``trainer``: the loop body of ``hooked_clip1d.training.trainer.Trainer.run`` (the single-model trainer), K = 1;
- ``batched``: ``hooked_clip1d.training.batched.BatchedTrainer.run`` with K members (different seeds), fast dropout
  (masks drawn only where the loss reads them, a different random stream than ``Trainer``), fp32, eager;
- ``batched+matched``: the same with ``dropout_rng="matched"`` (each member's masks equal ``Trainer``'s);
- ``batched+compile`` / ``batched+bf16``: with ``torch.compile`` of the stacked loss / bfloat16 autocast;
- ``vmap``: ``torch.func.functional_call`` + ``vmap`` over K copies of the existing ``CLIP1D`` (stacked weights,
  fused AdamW), the alternative to an explicitly stacked forward;
- ``batched@REV`` (``--versions REV,...``): ``batched`` as of git revision REV, timed in the same process as today's
  (the package at REV is copied under another name, ``version_package``), so a change of speed between versions is
  read in the same rounds as the baseline; each version trains with its own default ``TrainConfig`` (``--all-decay``:
  every version and today's rows with ``no_decay=()``, ``frozen=()``, where the version has those fields).

Timing: after warm-up, ``--rounds`` rounds each run every implementation of a preset for about ``--seconds``
(the order rotates every round), so all of them see the same machine load. Reported: the median model-steps/s
over rounds (K x steps/s) and ``x plain``, the median over rounds of the ratio to ``plain`` in the same round.

FLOPs. ``ref GFLOP/s`` = model-steps/s x the matmul FLOPs of one reference training step (formula below; what
``plain`` executes); ``exec GFLOP/s`` = model-steps/s x the matmul FLOPs the implementation really executes per model
step, counted by ``torch.utils.flop_counter.FlopCounterMode`` over one forward + backward. The batched trainer
computes the same function with fewer FLOPs (readout-only last block, layer-0 tables, a shared query), so its ref
GFLOP/s may exceed the matmul peak; exec GFLOP/s may not. The peak is the best fp32 ``torch.mm`` rate measured in the
same process (this model's shapes and a 1024^3 matmul).

Reference FLOPs (one training step, batch B; tower t with n_t tokens, L layers, H heads, d_head, d_model d, d_mlp m)::

    forward(t) = L * [ 2*B*n_t*d*(3*H*d_head) + 2 * 2*B*H*n_t*n_t*d_head + 2*B*n_t*(H*d_head)*d + 2 * 2*B*n_t*d*m ]
    forward    = forward(vision, n=11) + forward(text, n=4) + 2*B*d*d (W_proj) + 2*B*B*d (similarities)
    step       = 3 * forward

- ``batched+distinct`` (``--distinct``): ``batched`` under the default loss since 2026-11-28 (identical captions in
  a batch masked out, ``TrainConfig.negatives="distinct"``); every other batched row trains the standard loss, the
  computation ``plain`` does.

Run: ``python benchmarks/bench_training.py [--threads N] [--out DIR] [--compile] [--bf16] [--matched] [--vmap]
[--distinct] [--versions REV,...] [--all-decay]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import plain_reference  # noqa: E402

from hooked_clip1d import CLIPConfig, DataConfig, TrainConfig, build_dataset  # noqa: E402
from hooked_clip1d.model.clip import CLIP1D, clip_loss  # noqa: E402
from hooked_clip1d.training.batched import BatchedTrainer, Member  # noqa: E402
from hooked_clip1d.training.run_config import RunConfig  # noqa: E402
from hooked_clip1d.training.trainer import Trainer  # noqa: E402

BATCH = 50
N_LABELS = 20
PAPER_STEPS = 440_000  # 10,000 epochs x 44 steps


# ---- FLOPs and peak ---------------------------------------------------------------------------------------------
def forward_flops(cfg: CLIPConfig, batch: int) -> dict[str, int]:
    """Reference matmul FLOPs of one forward pass by component (formula in the module docstring)."""
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
    """Forward + backward reference matmul FLOPs of one training step (3x forward)."""
    return 3 * sum(forward_flops(cfg, batch).values())


def time_mm(m: int, k: int, n: int, min_seconds: float = 0.3, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of fp32 ``torch.mm`` [m,k] @ [k,n]."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    for _ in range(3):
        torch.mm(a, b, out=out)
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        if time.perf_counter() - t0 >= min_seconds / repeats:
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


def counted_flops(fn: Callable[[], torch.Tensor]) -> int:
    """Matmul FLOPs of one forward + backward of ``fn`` (a loss), counted by FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn().sum().backward()
    return int(fc.get_total_flops())


# ---- implementations ---------------------------------------------------------------------------------------------
class Impl:
    """A named training loop: ``run(n)`` takes n steps of K models; ``flops_per_model_step`` counted once."""

    def __init__(self, name: str, K: int, run: Callable[[int], None], flops: int):
        self.name, self.K, self.run, self.flops = name, K, run, flops


def _batches(m: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    while True:
        yield from torch.randperm(m, generator=gen).split(BATCH)


def make_plain(preset: str, images, captions, captioning: bool = False) -> Impl:
    model, opt, step = plain_reference.make_trainer(preset, N_LABELS, seed=0, captioning=captioning)
    batches = _batches(len(images))
    b = next(batches)
    flops = counted_flops(lambda: model.loss(images[b], captions[b]))
    opt.zero_grad(set_to_none=True)

    def run(n: int) -> None:
        for _ in range(n):
            idx = next(batches)
            loss = step(images[idx], captions[idx])
        loss.item()

    return Impl("plain+captioning" if captioning else "plain", 1, run, flops)


def make_trainer(preset: str, images, captions, tmpdir: str, captioning: bool = False) -> Impl:
    objective = "captioning" if captioning else "contrastive"
    cfg = CLIPConfig.from_preset(preset, n_labels=N_LABELS, objective=objective)
    run = RunConfig(cfg, DataConfig(), TrainConfig(epochs=10**9))
    tr = Trainer(run, Path(tmpdir) / f"trainer-{preset}-{objective}")
    model, opt = tr.model, tr.opt
    model.train()
    batches = _batches(len(images))
    b = next(batches)
    flops = counted_flops(lambda: model.loss(images[b], captions[b], validate=False))
    opt.zero_grad(set_to_none=True)

    def run(n: int) -> None:
        for _ in range(n):
            idx = next(batches)
            loss = model.loss(images[idx], captions[idx], validate=False)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        loss.item()

    return Impl("trainer+captioning" if captioning else "trainer", 1, run, flops)


def make_batched(
    preset: str,
    K: int,
    *,
    dropout_rng="fast",
    compile=False,  # noqa: A002
    amp=False,
    name="batched",
    train_kw=None,
    objective="contrastive",
) -> Impl:
    members = [
        Member(
            CLIPConfig.from_preset(preset, n_labels=N_LABELS, objective=objective),
            DataConfig(),
            # the standard CLIP loss, as the plain reference computes (the default masks identical captions since
            # 2026-11-28: a different computation); a benchmark that wants the default passes train_kw
            TrainConfig(
                epochs=10**6,
                seed=s,
                eval_every=10**6,
                checkpoint_every=10**6,
                **({"negatives": "all"} | (train_kw or {})),
            ),
        )
        for s in range(K)
    ]
    tr = BatchedTrainer(members, None, dropout_rng=dropout_rng, compile=compile, amp=amp)
    # count the executed FLOPs of one stacked step (eager, fp32: the math compile/bf16 run too)
    st, tables = tr.state.model, tr.state.tables
    imgs = tables.images[:, :BATCH]
    caps = tables.captions[:, :BATCH]
    r = tables.text_readout if tables.text_readout is not None else caps[..., -1]
    flops = counted_flops(lambda: st.loss(imgs, caps[..., :-1], r))
    tr.state.opt.zero_grad()
    if compile:  # compile outside the timed rounds
        t0 = time.perf_counter()
        tr.run(progress=False, max_steps=3)
        print(f"    compiled {name} K={K} in {time.perf_counter() - t0:.0f} s", flush=True)

    def run(n: int) -> None:
        tr.run(progress=False, max_steps=n)

    return Impl(name, K, run, flops // K)


def version_package(rev: str, dest: Path) -> str:
    """The package as of git revision ``rev`` (of the checkout this script is in; or, where ``rev`` is a folder, the
    ``hooked_clip1d`` in it, e.g. another worktree), copied into ``dest`` as ``hooked_clip1d_<rev>`` with every import
    of it rewritten, so that it imports beside today's package; returns the new package's name (``dest`` must be on
    ``sys.path``)."""
    name = "hooked_clip1d_" + re.sub(r"\W", "_", Path(rev).name if Path(rev).is_dir() else rev)
    if Path(rev).is_dir():
        shutil.copytree(Path(rev) / "hooked_clip1d", dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        root = Path(__file__).resolve().parent.parent
        tar = subprocess.run(["git", "archive", "--format=tar", rev, "hooked_clip1d"], cwd=root, capture_output=True)
        if tar.returncode:
            raise SystemExit(f"--versions: git archive {rev} failed: {tar.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
            t.extractall(dest / f"src-{name}", filter="data")
        (dest / f"src-{name}" / "hooked_clip1d").rename(dest / name)
    pattern = re.compile(r"\bhooked_clip1d\b(?=[.\s'\"]|$)", re.MULTILINE)
    for f in (dest / name).rglob("*.py"):
        f.write_text(pattern.sub(name, f.read_text()))
    return name


def make_version(pkg: str, rev: str, preset: str, K: int, flops: int, train_kw: dict | None = None) -> Impl:
    """``batched`` (fast dropout, fp32, eager) of the package copy ``pkg`` (``version_package``), K members; its
    FLOPs are today's at the same K (the same function). ``train_kw`` fields the version's ``TrainConfig`` lacks are
    left out (before 2026-11-23 every parameter was decayed and none frozen: ``--all-decay``'s recipe)."""
    top = importlib.import_module(pkg)
    try:
        b = importlib.import_module(f"{pkg}.training.batched")
    except ImportError:  # before the move into folders (e960e6e)
        b = importlib.import_module(f"{pkg}.batched")
    known = {f.name for f in dataclasses.fields(top.TrainConfig)}  # an old version may lack a recipe field
    kw = {k: v for k, v in ({"negatives": "all"} | (train_kw or {})).items() if k in known}  # the same loss
    members = [
        b.Member(
            top.CLIPConfig.from_preset(preset, n_labels=N_LABELS),
            top.DataConfig(),
            top.TrainConfig(epochs=10**6, seed=s, eval_every=10**6, checkpoint_every=10**6, **kw),
        )
        for s in range(K)
    ]
    tr = b.BatchedTrainer(members, None, dropout_rng="fast")

    def run(n: int) -> None:
        tr.run(progress=False, max_steps=n)

    return Impl(f"batched@{Path(rev).name if Path(rev).is_dir() else rev}", K, run, flops)


def make_vmap(preset: str, K: int, images, captions) -> Impl:
    """functional_call + vmap over K stacked copies of the existing CLIP1D (fused AdamW on the stacked weights)."""
    from torch.func import functional_call, stack_module_state, vmap

    torch.manual_seed(0)
    models = [CLIP1D(CLIPConfig.from_preset(preset, n_labels=N_LABELS), seed=s).train() for s in range(K)]
    params, buffers = stack_module_state(models)
    params = {k: torch.nn.Parameter(v) for k, v in params.items()}
    base = models[0]
    opt = torch.optim.AdamW(params.values(), lr=1e-4, weight_decay=0.2, fused=True)

    def loss_one(p, b, im, cap):
        return clip_loss(functional_call(base, (p, b), (im, cap), {"validate": False}))

    vloss = vmap(loss_one, in_dims=(0, 0, 0, 0), randomness="different")
    streams = [_batches(len(images), seed=s) for s in range(K)]

    def batch():
        idx = torch.stack([next(s) for s in streams])  # [K, B]
        return images[idx], captions[idx]

    im, cap = batch()
    flops = counted_flops(lambda: vloss(params, buffers, im, cap))
    opt.zero_grad(set_to_none=True)

    def run(n: int) -> None:
        for _ in range(n):
            im, cap = batch()
            loss = vloss(params, buffers, im, cap).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        loss.item()

    return Impl("vmap", K, run, flops // K)


# ---- timing ------------------------------------------------------------------------------------------------------
def calibrate(impl: Impl, seconds: float) -> int:
    n = 2
    while True:
        t0 = time.perf_counter()
        impl.run(n)
        dt = time.perf_counter() - t0
        if dt >= seconds / 4 or n >= 4096:
            return max(2, int(n * seconds / max(dt, 1e-9)))
        n *= 2


def bench(impls: list[Impl], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Model-steps/s per round for every implementation (rounds interleaved, order rotating)."""
    steps = {}
    for im in impls:
        steps[im.name, im.K] = calibrate(im, seconds)
    rates: dict[str, list[float]] = {f"{im.name}|{im.K}": [] for im in impls}
    for r in range(rounds):
        order = impls[r % len(impls) :] + impls[: r % len(impls)]
        for im in order:
            n = steps[im.name, im.K]
            t0 = time.perf_counter()
            im.run(n)
            rates[f"{im.name}|{im.K}"].append(im.K * n / (time.perf_counter() - t0))
    return rates


def markdown(rows: list[dict], peak: float) -> str:
    head = (
        "| preset | implementation | K | model-steps/s | x plain | ref GFLOP/s | ref % peak | exec GFLOP/s "
        "| exec % peak | paper run (440k steps) |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        minutes = PAPER_STEPS / r["model_steps_per_s"] / 60
        lines.append(
            f"| {r['preset']} | {r['impl']} | {r['K']} | {r['model_steps_per_s']:.0f} | {r['x_plain']:.2f} "
            f"| {r['ref_gflops']:.0f} | {100 * r['ref_gflops'] / peak:.0f} | {r['exec_gflops']:.0f} "
            f"| {100 * r['exec_gflops'] / peak:.0f} | {minutes:.0f} min per model |"
        )
    lines.append(f"\nfp32 matmul peak (best torch.mm rate measured above): {peak:.1f} GFLOP/s")
    return "\n".join(lines)


def cpu_info() -> dict[str, object]:
    """The CPU a timing was taken on: model, clock, the SIMD extensions torch's kernels use, cores. Timings from
    machines of the same name can differ 2x (2026-11-25: an AVX2-only "AMD EPYC" at 2.4 GHz took 38.7 ms for a
    compiled K = 18 step that another had taken in 19.5 ms), so every record carries this."""
    info: dict[str, object] = {"processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    fields = dict(ln.split(":", 1) for ln in text.splitlines() if ":" in ln)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set((fields.get("flags") or fields.get("Features") or "").split())  # x86 / Arm
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
    info |= {"model": fields.get("model name"), "mhz": fields.get("cpu MHz"), "simd": [f for f in wanted if f in flags]}
    return info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (the median is reported)")
    ap.add_argument("--seconds", type=float, default=1.0, help="target seconds per implementation per round")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    ap.add_argument("--presets", nargs="+", default=["simplified", "full"], choices=sorted(plain_reference.PRESETS))
    ap.add_argument("--ks", type=str, default=None, help="K values, e.g. 'simplified=1,8,32;full=1,4'")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile (compiling takes minutes)")
    ap.add_argument(
        "--compile-ks",
        type=lambda s: [int(k) for k in s.split(",")],
        default=[1],
        help="the K values --compile times, e.g. 1,16 (default 1)",
    )
    ap.add_argument("--bf16", action="store_true", help="also time bfloat16 autocast (smallest and largest K)")
    ap.add_argument("--matched", action="store_true", help="also time dropout_rng='matched' (K=1)")
    ap.add_argument("--vmap", action="store_true", help="also time functional_call + vmap (simplified, K=8)")
    ap.add_argument(
        "--distinct",
        action="store_true",
        help="also time the default loss (negatives='distinct': identical captions masked) at each K; the other "
        "batched rows train the standard loss, as plain does",
    )
    ap.add_argument("--no-trainer", action="store_true", help="skip the single-model Trainer row")
    ap.add_argument(
        "--captioning",
        action="store_true",
        help="also time the captioning objective: plain_reference's PlainCaptioner and the Trainer on a captioning "
        "model (their x plain is against plain+captioning in the same rounds)",
    )
    ap.add_argument(
        "--versions",
        type=lambda s: [r for r in s.split(",") if r],
        default=[],
        help="also time batched as of these git revisions (or folders holding a hooked_clip1d), in the same rounds "
        "(e.g. 5d9d873,903517f)",
    )
    ap.add_argument(
        "--all-decay", action="store_true", help="train every batched row with no_decay=(), frozen=() (one recipe)"
    )
    ap.add_argument("--out", type=Path, default=None, help="directory for benchmark.json")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds must be >= 1 and --seconds > 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    ks = {"simplified": [1, 8, 32], "full": [1, 4]}
    if args.ks:
        for part in args.ks.split(";"):
            preset, vals = part.split("=")
            ks[preset.strip()] = [int(v) for v in vals.split(",")]

    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "cpu": cpu_info(),
    }
    print(
        f"machine: {machine['platform']} ({machine['processor']}), {machine['cpu_count']} CPUs; "
        f"python {machine['python']}, torch {machine['torch']}, threads {machine['threads']}; "
        f"load average {machine['loadavg_start'][0]:.2f}"
    )
    peak_by_shape = measure_peak()
    peak = max(peak_by_shape.values())
    for name, g in peak_by_shape.items():
        print(f"  torch.mm {name}: {g:.1f} GFLOP/s")

    images, captions = build_dataset(DataConfig(n_labels=N_LABELS, n2=10)).training_pairs()
    rows: list[dict] = []
    raw: dict[str, dict[str, list[float]]] = {}
    train_kw = {"no_decay": (), "frozen": ()} if args.all_decay else None
    with tempfile.TemporaryDirectory() as tmpdir:
        sys.path.insert(0, tmpdir)
        versions = {rev: version_package(rev, Path(tmpdir)) for rev in args.versions}
        for preset in args.presets:
            print(f"building {preset} ...", flush=True)
            impls = [make_plain(preset, images, captions)]
            if not args.no_trainer:
                impls.append(make_trainer(preset, images, captions, tmpdir))
            for K in ks[preset]:
                today = make_batched(preset, K, train_kw=train_kw)
                impls.append(today)
                impls += [make_version(pkg, rev, preset, K, today.flops, train_kw) for rev, pkg in versions.items()]
                if args.distinct:
                    kw = {**(train_kw or {}), "negatives": "distinct"}
                    impls.append(make_batched(preset, K, train_kw=kw, name="batched+distinct"))
            if args.matched:
                impls.append(make_batched(preset, 1, dropout_rng="matched", name="batched+matched"))
            if args.compile:
                for K in args.compile_ks:
                    impls.append(make_batched(preset, K, compile=True, name="batched+compile"))
            if args.bf16:
                for K in sorted({min(ks[preset]), max(ks[preset])}):
                    impls.append(make_batched(preset, K, amp=True, name="batched+bf16"))
            if args.captioning:
                impls.append(make_plain(preset, images, captions, captioning=True))
                impls.append(make_trainer(preset, images, captions, tmpdir, captioning=True))
                for K in sorted(set(ks[preset]) | {1}):  # the batched engine on captioners (x22 trains six)
                    impls.append(make_batched(preset, K, objective="captioning", name="batched+captioning"))
            if args.vmap and preset == "simplified":
                impls.append(make_vmap(preset, 8, images, captions))
            print(f"timing {preset}: {', '.join(f'{i.name} K={i.K}' for i in impls)}", flush=True)
            with contextlib.redirect_stderr(sys.stderr):
                rates = bench(impls, args.rounds, args.seconds)
            raw[preset] = rates
            plain = rates["plain|1"]  # a captioning row's baseline is plain+captioning (the same objective)
            cfg = CLIPConfig.from_preset(preset, n_labels=N_LABELS)
            ref = step_flops(cfg, BATCH)
            for im in impls:
                rs = rates[f"{im.name}|{im.K}"]
                base = rates["plain+captioning|1"] if im.name.endswith("+captioning") else plain
                sps = statistics.median(rs)
                rows.append(
                    {
                        "preset": preset,
                        "impl": im.name,
                        "K": im.K,
                        "model_steps_per_s": sps,
                        "rounds": rs,
                        "x_plain": statistics.median(a / b for a, b in zip(rs, base, strict=True)),
                        "ref_flops_per_model_step": ref,
                        "exec_flops_per_model_step": im.flops,
                        "ref_gflops": sps * ref / 1e9,
                        "exec_gflops": sps * im.flops / 1e9,
                    }
                )
    machine["loadavg_end"] = os.getloadavg()
    print()
    print(markdown(rows, peak))
    print(f"load average at the end: {machine['loadavg_end'][0]:.2f}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {
            "machine": machine,
            "settings": {"rounds": args.rounds, "seconds": args.seconds, "batch": BATCH, "ks": ks},
            "matmul_gflops": peak_by_shape,
            "peak_gflops": peak,
            "results": rows,
        }
        (args.out / "benchmark.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out / 'benchmark.json'}")


if __name__ == "__main__":
    main()
