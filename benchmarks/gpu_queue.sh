#!/usr/bin/env bash
# One chunk of the GPU queue, sized for a lent GPU's 10-minute command (run from the repository root there):
#
#     bash benchmarks/gpu_queue.sh check [ARGS] # first call on a machine: install check + benchmarks/gpu_check.py,
#                                               # which proves every step mode against fp32 eager, times them at
#                                               # K = 1, 5, 12 and picks the fastest fp32 mode that passes for the
#                                               # queue (ARGS: --no-throughput, --budget S, --quick)
#     bash benchmarks/gpu_queue.sh [SECONDS]    # then: train the queue for SECONDS (default 480), pack what finished
#
# The queue, in order (docs/cli.md, "On a GPU"): full-variants (the zoo's full model both ways: 4 independent blocks
# and 2 weight-tied blocks applied twice; two groups of one), fig10 (5 full models; its weight-decay-0.2 cell is the
# zoo's full-ntot20-n2-10 under the default recipe), fig3 (12 full models), fig4a (36 simplified models; finished on
# the CPU on 2026-11-25, so on a GPU it only measures issue 15's target of under 10 minutes). Each call resumes the
# first unfinished sweep from its checkpoints on the machine's local disk ($STATE: kept while the machine stays warm
# between calls) and brings back in $OUT/<sweep>/ (transfer.pack_for_transfer; at most 8 files, 62 MiB): the runs
# finished since the last call (runs-NNN.tar: configs, metrics, float16 weights, 3.2 MB per full model), then the
# resumable state of the groups still training (state-NNN.tar: fp32 weights and AdamW moments, 19.4 MB per full
# model before compression, if within STATE_MIB, default 40: one or two full models), then the runs sent before
# (resent-NNN.tar) while room is left. Here, oldest call first:
#
#     bash benchmarks/gpu_queue.sh unpack <files_at> [<files_at> ...]   # into the sweeps home (docs/cli.md)
#     hooked-clip1d reproduce fig3 --no-sweeps && hooked-clip1d results-page
#
# A session's plan (30 minutes of device time; learned on 2026-11-24): the machine goes back 30 s after a call ends,
# taking $STATE with it, so issue each call at once after the last (no fixing in between), and put the check and
# the first chunk in one command:
#
#     call 1: bash benchmarks/gpu_queue.sh check --budget 150   (timeout_s 600, carry [".whl", ".gpu-carry"])
#     call 2, 3: bash benchmarks/gpu_queue.sh 560   (the same default $STATE on the machine's disk; SECONDS covers
#                                                   training and packing, ~20 s of start-up come on top)
#
# Starting a machine costs 1-2 minutes of the 30; the check ~6-8 (two compiled modes compile ~1 min each, the timing
# table takes --budget seconds; --no-throughput: ~4, and the queue then falls back to its grep rule).
#
# Across sessions: unpack what came back (above), then
#
#     bash benchmarks/gpu_queue.sh carry        # here: finished runs' configs, metrics, summaries and the
#                                               # unfinished groups' resumable state -> .gpu-carry/
#
# and name .gpu-carry in every call's carry (beside .whl): a fresh $STATE starts each sweep from it, so finished runs
# are not retrained and a group whose state came back resumes where it stopped, bit for bit (a group whose state
# stayed behind trains its unfinished runs from their first step). What travels must fit a call's 64 MiB with the
# working tree (~21 MB) and the wheels (3 MB): `carry` leaves the state out beyond CARRY_MIB (default: 64 MiB less
# the tree and the wheels, less 1 MiB; ~39 today, room for two full models' state, 37 MiB with their files).
#
# The package is not installed there: it runs from this checkout (PYTHONPATH), with the machine's own torch, and
# with the wheels carried in .whl/: run `bash benchmarks/gpu_wheels.sh` here first (no device time), then name .whl
# in every call's `carry` (a call prints the first module it cannot import and exits 3).
set -uo pipefail
MODE=${1:-480}
QUEUE=${QUEUE:-"full-variants fig10 fig3 fig4a"}     # overridable, with the rest, for a smoke test on a CPU:
SPEC_DIR=${SPEC_DIR:-hooked_clip1d/sweeps}            #   DEVICE=cpu FLAGS= WHEELS=- QUEUE=t SPEC_DIR=my-specs bash
CARRY=${CARRY:-.gpu-carry}

if [ "$MODE" = carry ]; then  # here, not on the GPU: this machine's sweeps -> $CARRY
  # what may travel beside the working tree and the wheels in a call's 64 MiB (less 1 MiB of margin)
  tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  wheels=$(du -cb "${WHEELS:-.whl}"/*.whl 2>/dev/null | tail -1 | cut -f1)
  CARRY_MIB=${CARRY_MIB:-$(( (64 * 1048576 - ${tree:-0} - ${wheels:-0}) / 1048576 - 1 ))}
  rm -rf "$CARRY.tmp" && mkdir -p "$CARRY.tmp"
  for sweep in ${CARRY_SWEEPS-${QUEUE//fig4a/}}; do  # not fig4a's (on the CPU), as on a GPU it measures its time
    # results_table checks each finished run against the spec here, before any device time is spent
    python3 - "$SPEC_DIR/$sweep.toml" "$CARRY.tmp" "$CARRY_MIB" <<'EOF' || exit 3
import shutil, sys
from pathlib import Path
from hooked_clip1d.sweeps.runner import load_spec, sweeps_home
from hooked_clip1d.sweeps.transfer import carry_sweep
spec, room = load_spec(sys.argv[1]), float(sys.argv[3]) * 2**20
src, dest = sweeps_home() / spec.name, Path(sys.argv[2]) / spec.name
used = sum(p.stat().st_size for p in Path(sys.argv[2]).rglob("*") if p.is_file())
got = carry_sweep(spec, src, dest)
if got["groups"] and used + got["bytes"] > room:  # the state does not fit what travels: the finished runs alone
    left = [g["name"] for g in got["groups"]]
    shutil.rmtree(dest)
    got = carry_sweep(spec, src, dest, state=False)
    print(f"== {spec.name}: WARNING: the state of {left} left out, over CARRY_MIB={sys.argv[3]} (restarts there)")
if dest.exists():
    shutil.copy2(sys.argv[1], dest / "spec.toml")  # byte for byte the spec the GPU side compares with
state = "; ".join(f"{g['name']} at step {g['step']} ({len(g['active'])} runs)" for g in got["groups"])
print(f"== {spec.name}: {len(got['runs'])} finished runs from {src}" + (f"; resumable state: {state}" if state else ""))
EOF
  done
  rm -rf "$CARRY" && mv "$CARRY.tmp" "$CARRY" && echo "== -> $CARRY ($(du -sh "$CARRY" | cut -f1))"
  exit
fi

if [ "$MODE" = unpack ]; then  # here: what calls brought back (their files_at folders) -> the sweeps home
  python3 - "${@:2}" <<'EOF' || exit 3
import sys
from pathlib import Path
from hooked_clip1d.sweeps.runner import sweeps_home
from hooked_clip1d.sweeps.transfer import unpack_runs
if not sys.argv[1:]:
    sys.exit("usage: bash benchmarks/gpu_queue.sh unpack FILES_AT [FILES_AT ...] (oldest first)")
for files_at in sys.argv[1:]:
    for d in sorted(p for p in Path(files_at).iterdir() if p.is_dir() and any(p.glob("*.tar"))):
        names = unpack_runs(sorted(d.glob("*.tar")), sweeps_home() / d.name)
        state = " and the resumable state" if any(d.glob("state-*.tar")) else ""
        print(f"== {d.name}: {len(names)} runs{state} -> {sweeps_home() / d.name}")
EOF
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
  # the flags the queue trains with: the fastest fp32 mode the sweeps can run that passed its check (gpu_check
  # writes them), else the whole-step graph if its check passed, else compiled with CUDA graphs if that passed,
  # else eager (--no-compile: fig4a.toml compiles by itself, for the CPU)
  if [ -s "$OUT/queue_flags.txt" ]; then cat "$OUT/queue_flags.txt"
  elif grep -q "whole-step graph vs eager.* yes$" "$OUT/check.log"; then echo "--graph-step"
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
  if [ -d "$CARRY/$name/runs" ]; then  # runs finished in earlier sessions, state of unfinished groups (carry)
    if [ -e "$here" ]; then
      [ -e "$STATE/carried-$sweep" ] || echo "== $sweep: WARNING: $CARRY/$name not used: $here was started without it"
    elif ! cmp -s "$CARRY/$name/spec.toml" "$SPEC_DIR/$sweep.toml"; then
      echo "== $sweep: WARNING: $CARRY/$name not used: its spec.toml differs from $SPEC_DIR/$sweep.toml (carry again)"
    else
      mkdir -p "$HOOKED_CLIP1D_SWEEPS" && cp -r "$CARRY/$name" "$here" && touch "$STATE/carried-$sweep" || exit 3
      n_fin=$(find "$here/runs" -mindepth 2 -maxdepth 2 -name summary.json | wc -l)
      n_grp=$(find "$here/groups" -mindepth 2 -maxdepth 2 -name group_checkpoint.safetensors 2>/dev/null | wc -l)
      echo "== $sweep: $n_fin runs finished in earlier sessions (carried), not retrained; $n_grp groups resume"
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
  # what finished, and the state of what did not, come back with every call, also while the sweep trains on, and
  # also when it failed; runs carried from an earlier session have no weights here and are not packed again
  n_new=$(find "$here/runs" -mindepth 2 -maxdepth 2 -name model.safetensors 2>/dev/null | wc -l)
  python3 - "$here" "$OUT" "$sweep" "$STATE/sent-$sweep" "${STATE_MIB:-40}" <<'EOF' || { [ "$rc" = 0 ] && rc=5; }
import sys
from pathlib import Path
from hooked_clip1d.sweeps.transfer import pack_for_transfer
here, out, sweep, sent_file = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
state_mib = float(sys.argv[5])
if here.is_dir():
    used = [p for p in out.rglob("*") if p.is_file()]  # what earlier sweeps of this call packed
    sent = sent_file.read_text().split() if sent_file.exists() else []
    r = pack_for_transfer(here, out / sweep, sent=sent, max_files=8 - len(used), state_mib=state_mib,
                          max_total_mib=62 - sum(p.stat().st_size for p in used) / 2**20)
    sent_file.write_text("".join(f"{n}\n" for n in sent + r["runs"]))
    state = ", ".join(f"{g['name']} at step {g['step']}" for g in r["state"]) or "none"
    print(f"== {sweep}: packed {len(r['runs'])} new runs, {len(r['resent'])} sent before, resumable state: {state}")
    if r["left"]:
        print(f"== {sweep}: WARNING: runs {r['left']} did not fit this call's transfer; the next call brings them")
    if r["state_left"]:
        print(f"== {sweep}: the state of {r['state_left']} stays on this machine (no room; STATE_MIB={state_mib:g})")
EOF
  [ "$rc" = 0 ] || { echo "== $sweep: stopped with exit $rc (what finished packed first)"; exit "$rc"; }
  read -r n_done n_all < <(python3 -c "
import json, sys
print(len(json.load(open(sys.argv[1]))), sum(len(g[1]) for g in json.load(open(sys.argv[2]))))
" "$STATE/$sweep-rows.json" "$here/plan.json") || exit 4
  echo "== $sweep: $n_done of $n_all runs finished ($n_new of them trained on this machine)"
  [ "$n_done" = "$n_all" ] && touch "$STATE/done-$sweep"
done
ls -la "$OUT"/* 2>/dev/null || true
