"""How well each first-order attribution method's signs agree with exact patching of the same metric, by how the
metric is linearised (issue 49): CLIP's logit difference (``norm="live"``) differentiated through the cosine
(``linearise="live"``, the default until 2026-11-28), with the embeddings' norms held out of the backward pass
(``"held"``, the default of AtP and EAP 2026-11-28/29), or with the towers alone linearised and CLIP's head
evaluated exactly (``"readout"``, the default of AtP and EAP since 2026-11-29; EAP-IG keeps ``"live"``), beside the
old opt-in metric ``norm="frozen"`` (a different metric).

    python benchmarks/attribution_signs.py --out benchmarks/records/attribution_signs.json
    python benchmarks/attribution_signs.py --methods EAP-IG EAP-IG-ports --settings live:live --models ...  # a part

On the mirror task of zoo models (every unseen-pair validation image; by default the three the defaults were chosen
on, ``--models`` for others):
node methods on every node kind, edge methods on every edge; sign agreement over the items exact patching moves, and
over those whose |exact effect| is at least ``FLOOR`` of the largest (the stated floor), and Pearson's r.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from hooked_clip1d import load_model
from hooked_clip1d.analysis.circuits.attribution import agreement, moved
from hooked_clip1d.analysis.circuits.methods import METHODS
from hooked_clip1d.analysis.circuits.scores import ground_truth_inputs
from hooked_clip1d.analysis.circuits.task import mirror_task

# the flagship (since 2026-11-28: the masked loss), the flagship before it (standard loss) and the no-b_Q model
MODELS = ("simplified-ntot20-n2-10", "simplified-ntot20-n2-10-standard-loss", "simplified-ntot20-n2-10-no-qk-bias")
KINDS = ["heads", "embed", "pos", "resid", "q", "k", "v", "terms"]
# (norm, linearise); None (each method's default) is readout for AtP and EAP and live for EAP-IG: rows of its own
SETTINGS = (("live", "live"), ("live", "held"), ("live", "readout"), ("frozen", "live"))
FIRST_ORDER = ("AtP", "AtP+QK", "EAP", "EAP+QK", "EAP-IG", "EAP-IG-ports")
FLOOR = 0.05  # |exact| >= 5 % of the largest |exact|: the stated floor of the default-row check


def signs_above(result, exact, floor: float) -> tuple[int, int]:
    keep = moved(exact) & (exact.scores.abs() >= floor * float(exact.scores.abs().max()))
    got = result.subset(exact.names).scores if hasattr(result, "subset") else result.scores
    agree = (torch.sign(got[keep]) == torch.sign(exact.scores[keep])).sum()
    return int(agree), int(keep.sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/attribution_signs.json")
    ap.add_argument("--models", nargs="+", default=list(MODELS), help="zoo models (default: %(default)s)")
    ap.add_argument("--methods", nargs="+", default=list(FIRST_ORDER), choices=FIRST_ORDER, help="(default: all)")
    every = [f"{n}:{lin}" for n, lin in SETTINGS]
    ap.add_argument("--settings", nargs="+", default=every, help="norm:linearise pairs (default: all)")
    a = ap.parse_args()
    settings = [tuple(x.split(":", 1)) for x in a.settings]
    if any(x not in SETTINGS for x in settings):
        ap.error(f"--settings takes norm:linearise pairs among {[f'{n}:{lin}' for n, lin in SETTINGS]}")
    torch.set_num_threads(1)
    rows = []
    for name in a.models:
        model = load_model(name)
        images, captions = ground_truth_inputs(model, "val_unseen")
        for norm, lin in settings:
            task = mirror_task(model, images, captions, target="clip", norm=norm, linearise=lin)
            t0 = time.perf_counter()
            exact_n = METHODS["exact patching"](task, KINDS)
            exact_e = METHODS["path patching"](task)
            for method in a.methods:
                m = METHODS[method]
                res = m(task, KINDS if m.unit == "node" else None)
                exact = exact_n if m.unit == "node" else exact_e
                ag = agreement(res, exact)
                ok, n = signs_above(res, exact, FLOOR)
                rows.append(
                    {
                        "model": name,
                        "norm": norm,
                        "linearise": lin,
                        "method": method,
                        "unit": m.unit,
                        "sign_agreement": ag["sign_agreement"],
                        "n_moved": ag["n"],
                        "pearson": ag["pearson"],
                        "signs_above_floor": ok,
                        "n_above_floor": n,
                        "seconds": res.seconds,
                    }
                )
                r = rows[-1]
                print(
                    f"{name:<36} norm={norm:<6} lin={str(lin):<4} {method:<12} signs {r['sign_agreement']:.2f} "
                    f"({r['n_moved']}), above floor {ok}/{n}, pearson {r['pearson']:.2f}",
                    flush=True,
                )
            print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"floor": FLOOR, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
