#!/usr/bin/env bash
# The long CPU trainings still owed to the records, one lane a core, each from a git worktree of its own outside the
# work tree (so changing the package cannot break a run in flight) and with its sweep folder under $HOME (so a later
# session on the same machine resumes it from its checkpoints).
#
#   bash tools/cpu/long_runs.sh start    # make the worktrees (at HEAD) where missing, start or resume every lane
#   bash tools/cpu/long_runs.sh start lane2   # only the lanes named
#   bash tools/cpu/long_runs.sh status   # how far each sweep has come (safe beside the runs)
#   bash tools/cpu/long_runs.sh stop     # SIGTERM: each run writes a checkpoint and stops (~10 min before a session ends)
#
# The lanes (edit LANES when a run is added or ships): each a list of items run one after another, `SPEC:GROUP` (a
# group of sweep SPEC's plan.json) or `fig22-control` (Fig. 22's trained control, `analyze pruning`):
#   lane2: the full model at protocol (DONE 2026-12-01, session 44: shipped, tools/cpu/ship_full.sh; kept as the lane's
#          first item for another machine; full-protocol.toml, the GPU queue's first sweep; ~5 steps/s eager on one AVX2
#          core: 440,000 steps, ~24 h; ~10 steps/s compiled on one core of the AVX-512 machine of 2026-12-01, ~12 h;
#          a GPU window resumes it), compiled, one thread. Then (added 2026-12-01, session 44, before any accuracy of
#          the full model was read) Fig. 10's sweep (fig10.toml) on this CPU, since no GPU has been lent since session
#          22: its w = 0.2 run is the full model at protocol (adopt=: copied, not trained again), the other four train
#          as one batched group, 1,760,000 model-steps. Estimated ~31 h of one core at ~1.4x a single run's ~11.4
#          steps/s; MEASURED (2026-12-01, its first 100 epochs in 2,270 s with compile and a test suite beside it):
#          ~2 group-steps/s, 8 run-steps/s (~10 without compile and suite), no faster than single runs, ~50-60 h
#          of one core. DECIDED 2026-12-01 22:30 (session 45) from those measurements: per run-step the batched
#          group (~10.9 run-steps/s after compile) is no faster than the full model alone (11.2 over its 440,000
#          steps, one thread beside lane 1), and two one-thread lanes scale ~2x where two threads give ~1.46x; so
#          plan.json was rewritten into five one-run groups (the batched group's checkpoint at step 7,593, ~30,000
#          run-steps, was dropped, kept aside in ~/sweeps-dropped) and they train two at a time: lane2 and lane3
#          (lane3 starts when lane1 ends, from a worktree at lane2's commit): ~440,000 steps each, ~10.7 h a run,
#          ~22 h for the four on two cores.
#          Then (added 2026-12-01 23:00, session 45) Fig. 3's sweep on this CPU too, after Fig. 10's: its (20, 10) cell is
#          the full model at protocol (adopt=), the other 11 cells as one-run groups (~/sweeps/fig3/plan.json written
#          so, before its first start), split over lanes 2 and 3, largest Ntot first: ~4,000,000 model-steps, ~50 h of
#          two cores at ~11 steps/s each (a GPU window takes them instead if one is lent: gpu_queue.sh carry; rewrite
#          plan.json first to batch the runs not started, since one-run groups waste a GPU: any partition resumes).
#   fig4a-distinct (lanes 2 and 3; added 2026-12-02, session 46, after its pre-registration was committed): Fig. 4a's
#          grid under the default recipe (issue 48's "rerun every figure"; its record read a no-q/k-bias, standard-loss
#          sweep), three batched groups of 12 (g000 ~1.17 M group-steps, ~5 h of one core; g001 ~2 h; g002 ~0.5 h),
#          first on lane 2 and after x21 on lane 3: they read ~20 h sooner than behind Fig. 10, which they delay ~2.5 h
#          (lane 3, with g001 and g002 before its w = 0.05 and 0.5 runs, sets Fig. 10's end: ~28 h of running from
#          2026-12-02 02:00 against ~26 h for lane 2).
#   lane1 (DONE and read 2026-12-01, record x19; out of LANES since 2026-12-02, when `start` on a new machine began to
#          retrain it): the RoPE oscillation study (rope-oscillation.toml, pre-registered 2026-12-01 in
#          docs/fidelity.md): its two batched groups (8 and 7 runs) in turn, ~65 steps/s each on one core (650,000
#          steps, ~2.75 h a group).
#          Added 2026-12-01 (session 43) while lane 2 still trained (wt-lane1 was moved to a commit with the spec).
#          From 2026-12-01 17:20 lane 2 trains on one thread beside lane 1: two lanes of one core each make more
#          progress than one lane of two threads (~11.4 steps/s and a group's whole core, against ~16.5 steps/s).
#          Group g000 trained 10 min on 2026-12-01 16:47 (a `reproduce x19-rope-oscillation` without --no-sweeps,
#          which trains its sweep; stopped by SIGTERM, checkpointed): it resumes from there.
#   lane3: the RoPE interaction study x21 (rope-interaction.toml, one batched group of 12, ~3 h of one core; added
#          2026-12-01, session 45, after its pre-registration was committed), then Fig. 10's w = 0.05 and 0.5 runs
#          (above); then Fig. 3's cells. x21 moved first on 2026-12-02 (session 46): Fig. 10 waits on w = 0.5, last on
#          the lane either way, so x21 first reads sooner at no cost to Fig. 10; and the lane's worktree (8885c25)
#          predated x21's spec, so the lane was moved to a commit with it (no training code changed between them).
#   NEW MACHINE 2026-12-02 (session 47: an Intel Xeon with AVX-512 and AMX, 2 cores; every run of sessions 39-46 lost
#          with the old machine, the shipped models untouched): restarted from 0 in the order that resolves issue 48
#          first. Lane 2: Fig. 4a's g000 (~5 h), then the full model at protocol (~11 h; here another model than the
#          shipped one, trained only for Fig. 10's and Fig. 3's adopt=, never shipped: ship_full.sh is not run), then
#          Fig. 10 and Fig. 3 as before. Lane 3: Fig. 4a's g002 and g001 (~2.5 h), then x21 (~3-5 h), then as before.
#          `start` writes Fig. 10's and Fig. 3's one-run plans into a new sweep folder (ONE_RUN_PLANS,
#          tools/cpu/one_run_plan.py) before any lane starts, so the items name the same groups on every machine.
#   captioning (lane 2; added 2026-12-02, session 47, after its pre-registration was committed): the captioning
#          study x22 (Open Question 4), behind Fig. 4a's g000. Since session 48 (amendment before any run) its six runs
#          train as one batched group (the batched engine trains captioners, eager fp32: no +compile), ~2-2.5 h of
#          one core, where six single-run groups took ~9 h.
#   `+compile` after an item torch.compiles its step, `+threadsN` gives it N torch threads (execution settings: a run
#   resumes under any of them). The full model trains at ~11.4 steps/s on one thread, ~16.7 on two (both cores, beside
#   light work; 2026-12-01, epochs 1,400-1,500 and 1,600-1,700): two only while no other lane runs.
#   Paces: a batched group of 12 trains at ~61 steps/s alone on one core of the AVX-512 machine (~55 beside the
#   other lane), ~32 on the AVX2 machine of sessions 34-38. Done before: Fig. 22's trained control and App. L's
#   order-blind control (2026-11-30/12-01, shipped and read); x16's temperature study retrained (2026-12-01, read
#   that day); Fig. 20's, the RoPE model's and App. L's zoo groups (2026-12-01, shipped; App. L's, 1,170,000 steps,
#   ran at ~110 steps/s on one AVX-512 core, compiled or not). Lanes may share a sweep (a call on
#   some groups claims them: sweeps/claims.py).
# A new machine starts from scratch (the runs are never committed); the worktrees keep the commit a lane started at.
# When a lane finishes (pre-registered in docs/fidelity.md, amendments of 2026-11-29; App. L's group: tools/cpu/ship_app_l.sh):
#   fig22-control (done 2026-12-01; kept as an item for another machine): `hooked-clip1d reproduce fig22 --guard-record
#          docs/records --sweeps-dir ~/sweeps`, the results page
#   zoo-distinct groups: a retraining on this CPU is not the shipped model (docs/zoo.md: 4 % of Fig. 8's weights
#          differed at float16 by epoch 500), so each replaces its zoo model: `hooked-clip1d export <run> --name <zoo
#          name> --description "..."` (the description says retrained on date, machine, and the model before it), then
#          `ship-trajectory <run> --name <zoo name>`, then rerun the model's figures (Fig. 15; Fig. 20; Fig. 18, 19,
#          x1's RoPE row, x-circuits' RoPE circuit) and the results page; the commit says which verdict moved
#   temperature: `hooked-clip1d reproduce x16-temperature --sweeps-dir ~/sweeps` (the record re-made whole from the
#          retrained runs, as pre-registered), the results page, the README's x16 table across the grid
#   rope-oscillation: read by the rule of its pre-registration (docs/fidelity.md, 2026-12-01), record x19 (written
#          before any run finished): `hooked-clip1d reproduce x19-rope-oscillation --no-sweeps --sweeps-dir ~/sweeps
#          --out ~/repro-x19` (without --no-sweeps, reproduce trains the sweep itself), then `hooked-clip1d
#          results-page --results ~/repro-x19`; a dated reading in docs/fidelity.md, and what the rule finds in the
#          section before it, the README's Fig. 18 line and rope-ntot20-n2-15's zoo description (docs/configs.md too,
#          only under the pre-registration's condition); nothing ships
#   full-protocol: `bash tools/gpu/gpu_queue.sh carry` takes it to a lent GPU window; finished on this CPU:
#          `bash tools/cpu/ship_full.sh` (ran 2026-12-01, session 44: shipped; on another machine the run is another
#          model, so a rerun there would replace the shipped one: read its header first)
#   rope-interaction: read by the rule of its pre-registration (docs/fidelity.md, 2026-12-01, session 45), record
#          x21 (written before any run): `hooked-clip1d reproduce x21-rope-interaction --no-sweeps --sweeps-dir
#          ~/sweeps --out ~/repro-x21`, `hooked-clip1d results-page --results ~/repro-x21`; a dated reading in
#          docs/fidelity.md; README's Fig. 18 line, the RoPE model's zoo description and docs/configs.md only if
#          H-I is supported; nothing ships
#   fig4a-distinct: DONE 2026-12-02 (session 48): all 36 runs finished, Fig. 4a moved to it and read (reproduced);
#          its items left the lanes
#   captioning: when all six runs have finished: `hooked-clip1d reproduce x22-captioning --no-sweeps --sweeps-dir
#          ~/sweeps --out ~/repro-x22`, `hooked-clip1d results-page --results ~/repro-x22`; a dated reading in
#          docs/fidelity.md by its pre-registration (2026-12-02), the README's open-questions paragraph; nothing ships
#   fig10: `hooked-clip1d reproduce fig10 --no-sweeps --sweeps-dir ~/sweeps` (its checks, pre-registered in verdicts
#          v2's permutation null, unchanged), the results page, the README's Fig. 10 line
# Environment: VENV (default ~/venv, with `pip install -e .` done), SWEEPS (default ~/sweeps), LOGS (default ~/long_runs).
set -euo pipefail
REPO="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
VENV="${VENV:-$HOME/venv}"
SWEEPS="${SWEEPS:-$HOME/sweeps}"
LOGS="${LOGS:-$HOME/long_runs}"
LANES=(
  "lane2|captioning:g000-97adaafc full-protocol:g000-8f63fd85+compile adopt=full-protocol,fig10 fig10:g000-b6f62b35+compile fig10:g002-31102b44+compile adopt=full-protocol,fig3 fig3:g011-01f2e004+compile fig3:g009-032b7c49+compile fig3:g005-ed6b9289+compile fig3:g003-0cfd3c8a+compile fig3:g001-195a8f2b+compile"
  "lane3|rope-interaction:g000-794647c3 fig10:g001-6d9ba655+compile fig10:g004-19dcc9f9+compile adopt=full-protocol,fig3 fig3:g010-4849a714+compile fig3:g008-fe1b4fca+compile fig3:g006-a0b5cbb9+compile fig3:g004-c244d86a+compile fig3:g002-af05dc38+compile fig3:g000-025ca59e+compile"
)
ONE_RUN_PLANS="fig10 fig3"  # sweeps trained one run a group on this CPU (the folder's plan.json written before its start)
FIG22_CONTROL="control-shuffled-distinct-ntot20-n2-10"  # reproduce/pruned_heads.py FIG22_CONTROL
FIG22_DIR="$SWEEPS/fig22-retrain-control"  # its runs (pruned_heads.FIG22_CONTROL_RETRAIN under the sweeps root)

bare_item() { echo "${1%%+*}"; }  # an item without its execution suffixes (+compile, +threadsN): what names the run

item_command() {  # one lane item -> the command that runs (or resumes) it
  case "$1" in
    fig22-control)  # no progress bar in the log (TQDM_DISABLE); resumes from its group checkpoint
      echo "TQDM_DISABLE=1 \"$VENV/bin/hooked-clip1d\" analyze pruning --model $FIG22_CONTROL -o 'kept=[2]' \\
    -o epochs=10000 -o \"runs_dir=$FIG22_DIR\" --out \"$FIG22_DIR/analyze\" --json >/dev/null" ;;
    adopt=*)  # adopt=SPEC,SPEC...: a run of these sweeps that computes what a finished run of one of them computed is
      # copied from it, not trained (the GPU queue's rule: tools/gpu/gpu_window.py adopt_identical); prints what it copied
      # a folder the copy made gets its spec.toml (a sweep refuses a folder without one), as the GPU queue's plan does
      # (gpu_window.py adopt, run from this checkout: a lane's worktree may predate the subcommand; the specs and the
      # package are the lane's own)
      echo "\"$VENV/bin/python\" \"$REPO/tools/gpu/gpu_window.py\" adopt $(echo "${1#adopt=}" | tr ',' ' ') \\
    --spec-dir hooked_clip1d/sweeps --home \"$SWEEPS\"" ;;
    *:*)  # SPEC:GROUP[+compile][+threadsN]: execution settings (a run resumes under any of them)
      local it extra="" threads=1 suffix
      it=$(bare_item "$1")
      for suffix in $(echo "${1#"$it"}" | tr '+' ' '); do
        case "$suffix" in
          compile) extra=" --compile" ;;
          threads[1-9]) threads=${suffix#threads} ;;
          *) echo "unknown suffix +$suffix in lane item $1" >&2; return 2 ;;
        esac
      done
      echo "OMP_NUM_THREADS=$threads \"$VENV/bin/hooked-clip1d\" sweep \"hooked_clip1d/sweeps/${it%%:*}.toml\" --out \"$SWEEPS/${it%%:*}\" --threads $threads$extra \\
    --no-progress --groups ${it#*:} >/dev/null" ;;  # its results table (stdout) kept out of the log: the log is safe to
      # read before a study's rule reads the runs (2026-12-02: a finished group printed two of Fig. 4a's rows there);
      # the table is the sweep folder's results.json, errors still reach the log (stderr)
    *) echo "unknown lane item $1" >&2; return 2 ;;
  esac
}

lane_script() {  # name items -> the lane's commands, one item after another
  local name=$1 items=$2 wt="$HOME/wt-$1"
  echo "cd \"$wt\""
  echo "export PYTHONPATH=\"$wt\" OMP_NUM_THREADS=1"
  local cmd
  for item in $items; do
    cmd=$(item_command "$item") || return 2  # an unknown item: no lane script at all, not one that fails halfway
    echo "$cmd || { echo \"$name: $item stopped (rc \$?) \$(date)\"; exit 1; }"
    echo "echo \"$name: $item finished \$(date)\""
  done
}

spec_names() {  # items -> the sweep specs they read, once each: SPEC of SPEC:GROUP, each SPEC of adopt=SPEC,SPEC
  local item it
  for item in $1; do
    it=$(bare_item "$item")
    case "$it" in
      adopt=*) echo "${it#adopt=}" | tr ',' '\n' ;;
      *:*) echo "${it%%:*}" ;;
    esac
  done | sort -u
}

running() {  # whether some process runs this item now
  set -- "$(bare_item "$1")"
  case "$1" in
    fig22-control) pgrep -f -- "runs_dir=$FIG22_DIR" >/dev/null ;;
    adopt=*) return 1 ;;  # a copy of seconds, part of the lane's script
    *) pgrep -f -- "--out $SWEEPS/${1%%:*} .*--groups ${1#*:}" >/dev/null ;;  # lanes may share a sweep (2026-12-01)
  esac
}

case "${1:-}" in
  start)
    [ -x "$VENV/bin/hooked-clip1d" ] || { echo "no $VENV/bin/hooked-clip1d: make the venv as the README says" >&2; exit 2; }
    mkdir -p "$SWEEPS" "$LOGS"
    for spec in $ONE_RUN_PLANS; do  # a new folder only; one with a plan keeps it (the runner's groups resume)
      "$VENV/bin/python" "$REPO/tools/cpu/one_run_plan.py" "$REPO/hooked_clip1d/sweeps/$spec.toml" "$SWEEPS/$spec" >/dev/null
    done
    shift
    for want in "$@"; do  # a lane named that LANES does not have: an error before anything starts
      printf '%s\n' "${LANES[@]}" | cut -d'|' -f1 | grep -qxF -- "$want" || { echo "no lane $want in LANES" >&2; exit 2; }
    done
    todo=() refused=""  # the lanes to start; each checked before any starts
    for lane in "${LANES[@]}"; do
      IFS='|' read -r name items <<<"$lane"
      if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF -- "$name"; then continue; fi
      busy=""
      for item in $items; do running "$item" && busy=1; done
      if [ -n "$busy" ] || pgrep -f -- "$LOGS/$name.sh" >/dev/null; then
        echo "$name: already running"; continue
      fi
      [ -d "$HOME/wt-$name" ] || git -C "$REPO" worktree add --detach "$HOME/wt-$name" HEAD >/dev/null
      missing=""  # a spec the lane's worktree lacks would stop the lane at that item, hours in (2026-12-02: x21 on lane3)
      for spec in $(spec_names "$items"); do
        [ -f "$HOME/wt-$name/hooked_clip1d/sweeps/$spec.toml" ] || missing="$missing $spec"
      done
      if [ -n "$missing" ]; then
        echo "$name: not started: its worktree $HOME/wt-$name ($(git -C "$HOME/wt-$name" rev-parse --short HEAD 2>/dev/null))" \
          "has no spec for:$missing (move it to a commit that has them: git -C $HOME/wt-$name checkout --detach <commit>)" >&2
        refused=1; continue
      fi
      lane_script "$name" "$items" >"$LOGS/$name.sh.new" || { echo "$name: not started (bad lane item)" >&2; exit 2; }
      todo+=("$name|$items")
    done
    if [ -n "$refused" ]; then  # no lane starts while one is refused: fix the worktree, then start them together
      for lane in "${todo[@]}"; do rm -f "$LOGS/${lane%%|*}.sh.new"; done
      echo "nothing started" >&2; exit 2
    fi
    for lane in "${todo[@]}"; do
      IFS='|' read -r name items <<<"$lane"
      mv "$LOGS/$name.sh.new" "$LOGS/$name.sh"
      nohup setsid bash "$LOGS/$name.sh" >>"$LOGS/$name.log" 2>&1 &
      echo "$name: started ($items) from $(git -C "$HOME/wt-$name" rev-parse --short HEAD); log $LOGS/$name.log"
    done ;;
  status)
    for lane in "${LANES[@]}"; do
      IFS='|' read -r name items <<<"$lane"
      echo "== $name ($items)"
      [ -d "$HOME/wt-$name" ] || { echo "-- not started on this machine (no worktree $HOME/wt-$name)"; continue; }
      shown=""
      for item in $items; do
        if [ "$item" = fig22-control ]; then
          echo "-- fig22-control ($FIG22_DIR): $(ls "$FIG22_DIR"/keep-*/summary.json 2>/dev/null | wc -l) of 6 runs finished;" \
            "last group checkpoint $(date -r "$FIG22_DIR/group_checkpoint.safetensors" 2>/dev/null || echo none)"
          continue
        fi
        case "$item" in adopt=*) continue ;; esac
        spec=${item%%:*}
        case " $shown " in *" $spec "*) continue ;; esac
        shown="$shown $spec"
        if [ -d "$SWEEPS/$spec" ]; then
          (cd "$HOME/wt-$name" && PYTHONPATH="$HOME/wt-$name" "$VENV/bin/hooked-clip1d" sweep \
            "hooked_clip1d/sweeps/$spec.toml" --out "$SWEEPS/$spec" --status) || true
        else
          echo "-- $spec: not started on this machine"
        fi
      done
    done ;;
  stop)
    pkill -9 -f "$LOGS/lane[0-9]*.sh" || true  # the lane loops first, so none starts its next group
    for lane in "${LANES[@]}"; do  # only this queue's runs, not another sweep on the machine
      IFS='|' read -r name items <<<"$lane"
      for item in $items; do
        case "$(bare_item "$item")" in
          fig22-control) pkill -TERM -f -- "runs_dir=$FIG22_DIR" || true ;;
          adopt=*) ;;
          *) pkill -TERM -f -- "--out $SWEEPS/${item%%:*} " || true ;;
        esac
      done
    done
    echo "sent SIGTERM: each run checkpoints and stops" ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
esac
