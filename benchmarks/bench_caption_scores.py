"""Caption scoring of a captioning model (``model.captioning.caption_scores``): what one evaluation of a captioner
costs, against a plain PyTorch captioner decoding every (image, caption) pair (``plain_reference.PlainCaptioner``).

Three implementations, interleaved in rounds in one process (each round times each once), on the flagship's data
(``DataConfig(n_labels=20, n2=10)``: the train split's 2,200 images x the 250 captions of the table, the largest
split an evaluation scores) at the flagship's size (``simplified``, d_model 128):

| implementation | what runs |
|---|---|
| `plain` | `PlainCaptioner.scores`: every pair decoded whole, in chunks of 50,000 pairs |
| `every-pair` | `caption_scores(..., share_stems=False)`: ours, every pair decoded whole in chunks (the path before) |
| `shared-stems` | `caption_scores(...)`: positions 0-2 once per (image, caption stem), position 3 per pair (KV cache) |

Prints each one's median seconds and its ratio to `plain` (> 1: faster), and checks that ours agree with each
other (max |difference| of the scores and the share of images whose best caption is the same).

    python benchmarks/bench_caption_scores.py --threads 1 --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import plain_reference  # noqa: E402

from hooked_clip1d import CLIP1D, CLIPConfig, DataConfig, build_dataset  # noqa: E402
from hooked_clip1d.model.captioning import caption_scores  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--preset", default="simplified")
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ds = build_dataset(DataConfig(n_labels=20, n2=10))
    images, captions = ds.splits[args.split].images, ds.captions
    cfg = dataclasses.replace(CLIPConfig.from_preset(args.preset, n_labels=20), objective="captioning")
    ours = CLIP1D(cfg, seed=0).eval()
    torch.manual_seed(0)
    plain = plain_reference.PlainCaptioner(args.preset, n_labels=20).eval()
    impls = {
        "plain": lambda: plain.scores(images, captions),
        "every-pair": lambda: caption_scores(ours, images, captions, share_stems=False),
        "shared-stems": lambda: caption_scores(ours, images, captions),
    }
    times: dict[str, list[float]] = {k: [] for k in impls}
    with torch.no_grad():
        for fn in impls.values():  # warm-up
            fn()
        for _ in range(args.rounds):
            for name, fn in impls.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        whole, shared = impls["every-pair"](), impls["shared-stems"]()
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "pairs": images.shape[0] * captions.shape[0],
        "threads": args.threads,
        "rounds": args.rounds,
        "median_s": med,
        "ratio_to_plain": {k: med["plain"] / v for k, v in med.items()},
        "max_abs_diff": float((whole - shared).abs().max()),
        "same_best_caption": float((whole.argmax(1) == shared.argmax(1)).float().mean()),
    }
    print(
        f"{result['pairs']:,} pairs ({images.shape[0]} images x {captions.shape[0]} captions), {args.threads} thread(s)"
    )
    for k in impls:
        print(f"{k:>13}: {med[k]:7.2f} s (median of {args.rounds})  {result['ratio_to_plain'][k]:5.2f}x plain")
    diff, same = result["max_abs_diff"], result["same_best_caption"]
    print(f"max |every-pair - shared-stems| = {diff:.2e}; same best caption: {same:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
