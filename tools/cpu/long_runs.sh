#!/usr/bin/env bash
# The long CPU trainings still owed to the records, one lane a core, each from a git worktree of its own outside the
# work tree (so changing the package cannot break a run in flight) and with its sweep folder under $HOME (so a later
# session on the same machine resumes it from its checkpoints).
#
#   bash tools/cpu/long_runs.sh start    # make the worktrees (at HEAD) where missing, start or resume every lane
#   bash tools/cpu/long_runs.sh status   # how far each sweep has come (safe beside the runs)
#   bash tools/cpu/long_runs.sh stop     # SIGTERM: each run writes a checkpoint and stops (~10 min before a session ends)
#
# The lanes (edit LANES when a run is added or ships; the groups are those of each sweep's plan.json):
#   lane1: App. L's order-blind control, seed 0 (issue 50; guards Fig. 23's counted checks): ~7 h of one core
#   lane2: Fig. 21b under the default recipe, d_head 32, 64, 256, then 128 (issue 48): ~12 h of one core
# A new machine starts from scratch (the runs are never committed); the worktrees keep the commit a lane started at.
# When a lane finishes (pre-registered in docs/fidelity.md, amendments of 2026-11-29):
#   lane1: hooked-clip1d export ~/sweeps/controls-distinct-vision2/runs/<seed 0's run> --weights-dtype float16 \
#            --name control-shuffled-distinct-vision2-ntot25-n2-15 --description "Trained control (issue 50) ..."
#          then `hooked-clip1d reproduce fig23 --guard-record docs/records --sweeps-dir ~/sweeps` (docs/reproducing.md)
#   lane2: `git am tools/cpu/pending/fig21b-switch.patch` (Fig. 21b reads fig21b-distinct.toml; the old record kept as
#          the beyond-paper fig21b-all-decay, as fig21 / fig21-all-decay: fill in DATE in its `relabelled`), then
#          `hooked-clip1d reproduce fig21b --sweeps-dir ~/sweeps` and the results page
# Environment: VENV (default ~/venv, with `pip install -e .` done), SWEEPS (default ~/sweeps), LOGS (default ~/long_runs).
set -euo pipefail
REPO="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
VENV="${VENV:-$HOME/venv}"
SWEEPS="${SWEEPS:-$HOME/sweeps}"
LOGS="${LOGS:-$HOME/long_runs}"
LANES=(
  "lane1|controls-distinct-vision2|g000-17fb6eb3"
  "lane2|fig21b-distinct|g000-0bca58d3 g001-6e80b6a8 g003-2ebd8fef g002-75ca3248"
)

lane_script() {  # name spec groups -> the lane's commands, one group after another
  local name=$1 spec=$2 groups=$3 wt="$HOME/wt-$1"
  cat <<SH
cd "$wt"
export PYTHONPATH="$wt" OMP_NUM_THREADS=1
for g in $groups; do
  "$VENV/bin/hooked-clip1d" sweep "hooked_clip1d/sweeps/$spec.toml" --out "$SWEEPS/$spec" --threads 1 --no-progress \\
    --groups "\$g" || { echo "$name: \$g stopped (rc \$?) \$(date)"; exit 1; }
  echo "$name: \$g finished \$(date)"
done
SH
}

case "${1:-}" in
  start)
    [ -x "$VENV/bin/hooked-clip1d" ] || { echo "no $VENV/bin/hooked-clip1d: make the venv as the README says" >&2; exit 2; }
    mkdir -p "$SWEEPS" "$LOGS"
    for lane in "${LANES[@]}"; do
      IFS='|' read -r name spec groups <<<"$lane"
      if pgrep -f -- "--out $SWEEPS/$spec " >/dev/null; then
        echo "$name: already running"; continue
      fi
      [ -d "$HOME/wt-$name" ] || git -C "$REPO" worktree add --detach "$HOME/wt-$name" HEAD >/dev/null
      lane_script "$name" "$spec" "$groups" >"$LOGS/$name.sh"
      nohup setsid bash "$LOGS/$name.sh" >>"$LOGS/$name.log" 2>&1 &
      echo "$name: started ($spec: $groups) from $(git -C "$HOME/wt-$name" rev-parse --short HEAD); log $LOGS/$name.log"
    done ;;
  status)
    for lane in "${LANES[@]}"; do
      IFS='|' read -r name spec groups <<<"$lane"
      echo "== $name ($spec)"
      if [ -d "$SWEEPS/$spec" ]; then
        (cd "$HOME/wt-$name" && PYTHONPATH="$HOME/wt-$name" "$VENV/bin/hooked-clip1d" sweep \
          "hooked_clip1d/sweeps/$spec.toml" --out "$SWEEPS/$spec" --status) || true
      else
        echo "not started on this machine"
      fi
    done ;;
  stop)
    pkill -9 -f "$LOGS/lane[0-9]*.sh" || true  # the lane loops first, so none starts its next group
    for lane in "${LANES[@]}"; do  # only this queue's runs, not another sweep on the machine
      IFS='|' read -r name spec groups <<<"$lane"
      pkill -TERM -f -- "--out $SWEEPS/$spec " || true
    done
    echo "sent SIGTERM: each run checkpoints and stops" ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
esac
