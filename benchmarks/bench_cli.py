"""Time the command line's answers that should not wait for torch: ``--help``, ``--version``, an argument error,
``list``.

    python benchmarks/bench_cli.py [--runs 7]

Each command runs as a fresh process (``farm-bench`` style); prints min / median / max seconds. No assertions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "--help": ["--help"],
    "--version": ["--version"],
    "bad argument": ["reproduce"],  # missing figure: argparse error, exit 2
    "train --help (loads the config defaults)": ["train", "--help"],
    "list (reads the manifests)": ["list"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    print(f"{'command':<44} {'min s':>7} {'median s':>9} {'max s':>7}")
    for label, args in COMMANDS.items():
        times = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hooked_clip1d", *args], capture_output=True)
            times.append(time.perf_counter() - t0)
        print(f"{label:<44} {min(times):7.2f} {statistics.median(times):9.2f} {max(times):7.2f}")


if __name__ == "__main__":
    main()
