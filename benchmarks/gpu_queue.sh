#!/usr/bin/env bash
# One chunk of the GPU queue, sized for a lent GPU's 10-minute command (run from the repository root there):
#
#     bash benchmarks/gpu_queue.sh check [ARGS] # first call on a machine: install check + benchmarks/gpu_check.py
#                                               # (ARGS: --no-throughput, ~2 min: the table is recorded in
#                                               # benchmarks/records/gpu_check_h100.json; --budget S)
#     bash benchmarks/gpu_queue.sh [SECONDS]    # then: train the queue for SECONDS (default 480), pack what finished
#
# The queue, in order (docs/cli.md, "On a GPU"): fig10 (5 full models; its weight-decay-0.2 cell is the zoo's
# full-ntot20-n2-10 under the default recipe), fig3 (12 full models), fig4a (36 simplified models; finished on the
# CPU on 2026-11-25, so on a GPU it only measures issue 15's target of under 10 minutes). Each call resumes
# the first unfinished sweep from its checkpoints on the machine's local disk ($STATE: kept while the machine stays
# warm between calls) and packs the runs finished so far (configs, metrics, float16 weights: 3.2 MB per full model)
# into $OUT/<sweep>/runs-NNN.tar (at most 15 MiB each). Here, unpack them into the sweep folder and read the figure:
#
#     hooked-clip1d unpack <files_at>/fig3/*.tar --into <sweeps home>/fig3   (the sweeps home: docs/cli.md)
#     hooked-clip1d reproduce fig3 --no-sweeps && hooked-clip1d results-page
#
# A session's plan (30 minutes of device time; learned on 2026-11-24): the machine goes back 30 s after a call ends,
# taking $STATE with it, so issue each call at once after the last (no fixing in between), and put the check and
# the first chunk in one command:
#
#     call 1: bash benchmarks/gpu_queue.sh check --no-throughput && \
#             bash benchmarks/gpu_queue.sh 420          (timeout_s 600, carry [".whl", ".gpu-carry"])
#     call 2, 3: bash benchmarks/gpu_queue.sh 560   (the same default $STATE on the machine's disk; SECONDS covers
#                                                   training and packing, ~20 s of start-up come on top)
#
# Starting a machine costs 1-2 minutes of the 30, and the check ~2 (its full table, with --budget 150, ~5).
#
# Across sessions: every call also packs the runs that finished in a sweep still training, so what a session
# finished is never lost with the machine. A later session does not retrain them: unpack them here as above, then
#
#     bash benchmarks/gpu_queue.sh carry        # here: finished runs' configs, metrics, summaries -> .gpu-carry/
#
# and name .gpu-carry in every call's carry (beside .whl): a fresh $STATE starts each sweep from them, so its
# groups train only the runs not yet finished (from their first step: a group's optimizer state, 19.4 MB per
# full model, is not carried; benchmarks/README.md, "Across sessions").
#
# The package is not installed there: it runs from this checkout (PYTHONPATH), with the machine's own torch, and
# with the wheels carried in .whl/: run `bash benchmarks/gpu_wheels.sh` here first (no device time), then name .whl
# in every call's `carry` (a call prints the first module it cannot import and exits 3).
set -uo pipefail
MODE=${1:-480}
QUEUE=${QUEUE:-"fig10 fig3 fig4a"}                   # overridable, with the rest, for a smoke test on a CPU:
SPEC_DIR=${SPEC_DIR:-hooked_clip1d/sweeps}            #   DEVICE=cpu FLAGS= WHEELS=- QUEUE=t SPEC_DIR=my-specs bash
CARRY=${CARRY:-.gpu-carry}

if [ "$MODE" = carry ]; then  # here, not on the GPU: the finished runs of this machine's sweeps -> $CARRY
  rm -rf "$CARRY.tmp"
  for sweep in ${CARRY_SWEEPS-${QUEUE//fig4a/}}; do  # not fig4a's (on the CPU), as on a GPU it measures its time
    # results_table checks each run against the spec here, before any device time is spent
    python3 - "$SPEC_DIR/$sweep.toml" "$CARRY.tmp" <<'EOF' || exit 3
import shutil, sys
from pathlib import Path
from hooked_clip1d.sweeps.runner import load_spec, results_table, sweeps_home
spec = load_spec(sys.argv[1])
src, dest = sweeps_home() / spec.name, Path(sys.argv[2]) / spec.name
rows = results_table(spec, src)
for r in rows:
    (dest / "runs" / r["run"]).mkdir(parents=True)
    for f in ("config.json", "summary.json", "metrics.jsonl"):
        shutil.copy2(Path(r["path"]) / f, dest / "runs" / r["run"] / f)
if rows:  # the spec they ran under: the GPU's sweep folder starts as this sweep's
    shutil.copy2(sys.argv[1], dest / "spec.toml")
print(f"== {spec.name}: {len(rows)} finished runs from {src}")
EOF
  done
  rm -rf "$CARRY" && mkdir -p "$CARRY.tmp" && mv "$CARRY.tmp" "$CARRY" && echo "== -> $CARRY"
  exit
fi

OUT=${OUT:?set OUT to the folder whose files come back (the device tool sets it)}
STATE=${STATE:-${TMPDIR:-/tmp}/hc1d-gpu}  # the machine's local disk; kept while it stays warm
DEVICE=${DEVICE:-cuda}
FLAGS=${FLAGS-$(cat "$STATE/flags" 2>/dev/null || echo --compile --cudagraphs)}  # the check's choice, if it ran
export HOOKED_CLIP1D_SWEEPS=$STATE/sweeps PYTHONUNBUFFERED=1
mkdir -p "$STATE" "$OUT"
WHEELS=${WHEELS:-.whl}  # carried wheels for the GPU image's Python 3.12 (gpu_wheels.sh)
if ls "$WHEELS"/*.whl >/dev/null 2>&1 && [ ! -e "$STATE/wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STATE/site" "$WHEELS"/*.whl \
    && touch "$STATE/wheels" || exit 3
fi
export PYTHONPATH=$PWD:$STATE/site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import hooked_clip1d.sweeps.runner, torch; assert '$DEVICE' == 'cpu' or torch.cuda.is_available()" || exit 3
hc() { python3 -m hooked_clip1d "$@"; }

if [ "$MODE" = check ]; then  # extra arguments go to gpu_check.py (e.g. --budget 150)
  python3 benchmarks/gpu_check.py --out "$OUT" --seconds 1 "${@:2}" 2>&1 | tee "$OUT/check.log"
  rc=$?  # pipefail: gpu_check's status; non-zero when an eager (required) check failed: do not train
  # the flags the queue trains with: the whole-step graph if its check passed, else compiled with CUDA graphs if
  # that passed, else eager (--no-compile: fig4a.toml compiles by itself, for the CPU)
  if grep -q "whole-step graph vs eager.* yes$" "$OUT/check.log"; then echo "--graph-step"
  elif grep -q "compile+cudagraphs vs eager.* yes$" "$OUT/check.log"; then echo "--compile --cudagraphs"
  else echo "--no-compile"; fi >"$STATE/flags"
  echo "== queue flags on this machine: '$(cat "$STATE/flags")' (gpu_check exit $rc)"
  exit $rc
fi

start=$(date +%s)
for sweep in $QUEUE; do
  [ -e "$STATE/done-$sweep" ] && continue
  name=$(python3 -c "import sys, tomllib; print(tomllib.load(open(sys.argv[1], 'rb'))['name'])" "$SPEC_DIR/$sweep.toml") \
    || exit 3
  here=$HOOKED_CLIP1D_SWEEPS/$name
  if [ -d "$CARRY/$name/runs" ]; then  # runs finished in earlier sessions (gpu_queue.sh carry)
    if [ -e "$here" ]; then
      [ -e "$STATE/carried-$sweep" ] || echo "== $sweep: WARNING: $CARRY/$name not used: $here was started without it"
    elif ! cmp -s "$CARRY/$name/spec.toml" "$SPEC_DIR/$sweep.toml"; then
      echo "== $sweep: WARNING: $CARRY/$name not used: its spec.toml differs from $SPEC_DIR/$sweep.toml (carry again)"
    else
      mkdir -p "$HOOKED_CLIP1D_SWEEPS" && cp -r "$CARRY/$name" "$here" && touch "$STATE/carried-$sweep" || exit 3
      echo "== $sweep: $(ls "$CARRY/$name/runs" | wc -l) runs finished in earlier sessions (carried), not retrained"
    fi
  fi
  left=$(( MODE - ($(date +%s) - start) ))
  [ "$left" -lt 90 ] && break
  echo "== $sweep: training for up to $((left - 30)) s (30 s kept for packing)"
  rc=0
  # shellcheck disable=SC2086
  hc sweep "$SPEC_DIR/$sweep.toml" --device "$DEVICE" $FLAGS --max-seconds $((left - 30)) --no-progress --json \
    >"$STATE/$sweep-rows.json" || rc=4
  hc sweep "$SPEC_DIR/$sweep.toml" --status  # each group's steps/s on this machine: the next plan's input
  # the finished runs come back with every call, also while the sweep trains on, and also when it failed; runs
  # carried from an earlier session have no weights here and are not packed again
  n_new=$(find "$here/runs" -mindepth 2 -maxdepth 2 -name model.safetensors 2>/dev/null | wc -l)
  if [ "$n_new" -gt 0 ]; then
    hc pack "$here" "$OUT/$sweep" --max-mib 15 || { [ "$rc" = 0 ] && rc=5; }
  fi
  [ "$rc" = 0 ] || { echo "== $sweep: stopped with exit $rc ($n_new finished runs packed first)"; exit "$rc"; }
  read -r n_done n_all < <(python3 -c "
import json, sys
print(len(json.load(open(sys.argv[1]))), sum(len(g[1]) for g in json.load(open(sys.argv[2]))))
" "$STATE/$sweep-rows.json" "$here/plan.json") || exit 4
  echo "== $sweep: $n_done of $n_all runs finished ($n_new of them trained on this machine)"
  [ "$n_done" = "$n_all" ] && touch "$STATE/done-$sweep"
done
ls -la "$OUT"/* 2>/dev/null || true
