"""Write a sweep folder's plan as one-run groups, before its first start (tools/cpu/long_runs.sh, on a new machine).

On this CPU a full model trains no faster per run-step in a batched group than alone (long_runs.sh, 2026-12-01), and
two one-thread lanes scale ~2x, so Fig. 10's and Fig. 3's runs train one a group, split over the lanes. A sweep
keeps the plan its folder holds (``plan.json``, fixed at the first start), so writing it first is how a spec's
groups get another size without changing the spec. Group names are the runner's own (index in the grid's order and
hash), so the lanes' items (``fig10:g001-6d9ba655``) name the same runs on every machine (tests/test_reread_s34.py).
A folder that already has a plan is left as it is.

    python tools/cpu/one_run_plan.py hooked_clip1d/sweeps/fig10.toml ~/sweeps/fig10
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hooked_clip1d.files import atomic_write_text
from hooked_clip1d.sweeps import runner
from hooked_clip1d.sweeps.spec import load_spec


def write_plan(spec_path: Path, out: Path) -> list[str]:
    """The one-run groups' names written to ``out/plan.json`` (with ``out/spec.toml``); [] where a plan exists."""
    if (out / "plan.json").exists() or (out / "spec.toml").exists():
        return []
    spec = load_spec(spec_path)
    named = [(runner.group_name(i, [r]), [r.name]) for i, r in enumerate(spec.runs)]  # in the grid's order
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "spec.toml", spec.source)
    atomic_write_text(out / "plan.json", json.dumps(named) + "\n")
    return [f"{g} {names[0]}" for g, names in named]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    for line in write_plan(Path(sys.argv[1]), Path(sys.argv[2])):
        print(line)
