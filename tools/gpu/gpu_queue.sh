#!/usr/bin/env bash
# The GPU queue, one lent-GPU window at a time (issue 43; docs/cli.md, "On a GPU", has the exact calls):
#
#     bash tools/gpu/gpu_queue.sh window [LIMIT [again]]   # on the GPU, from the repository root: one window
#                                                   # in LIMIT seconds (default 540; timeout_s 600): the carried
#                                                   # wheels installed, the carried state in, the <= 60 s check of
#                                                   # the step mode (falling back to the next one), training until
#                                                   # 60 s before LIMIT, what finished and the resumable state packed
#                                                   # into $OUT (tools/gpu/gpu_window.py); `again`: a second
#                                                   # call, which goes on only on the first call's machine
#     bash tools/gpu/gpu_queue.sh unpack FILES_AT [FILES_AT ...]   # here: what came back -> the sweeps home
#     bash tools/gpu/gpu_queue.sh carry            # here, before every window: the sweeps home -> .gpu-carry/,
#                                                   # and the tree slimmed (tools/gpu/slim_tree.py: the zoo's weights
#                                                   # and trajectories out of what a call sends; SLIM_TREE=0: not)
#     (unpack also puts the slimmed files back: run it after the window's last call, before any commit)
#     bash tools/gpu/gpu_queue.sh table [ARGS]     # on the GPU, optional: gpu_check.py's full step table
#
# The queue, in order (issue 51): full-protocol (the full model at protocol, default recipe, with its trajectory),
# fig10 (5 weight decays), full-variants (the full model under each candidate default recipe, 4 independent blocks
# and 2 tied blocks applied twice), fig3 (12 cells); a run identical to one finished is copied, not trained again. The package is not installed there:
# it runs from this checkout (PYTHONPATH) with the machine's own torch and the wheels carried in .whl/ (made here
# by `bash tools/gpu/gpu_wheels.sh`; no device time). The step modes tried, in order, are gpu_window.py's MODES
# unless MODES is set. Overridable for a test on a CPU:
#     DEVICE=cpu QUEUE=t SPEC_DIR=my-specs MODES=graph-step,flat CHECK_PRESET=simplified CHECK_STEPS=20 \
#     WHEELS=- STATE="$(mktemp -d)" OUT="$(mktemp -d)" bash tools/gpu/gpu_queue.sh window 120
set -uo pipefail
started=$(date +%s.%N)
cd "$(dirname "$0")/../.." || exit 3
MODE=${1:-window}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # this checkout's package, here and there
case "$MODE" in
  carry) { [ "${SLIM_TREE:-1}" = 0 ] || python3 tools/gpu/slim_tree.py slim || exit 3; }  # the zoo stays here
         exec python3 tools/gpu/gpu_window.py carry --dest "${CARRY:-.gpu-carry}" --wheels "${WHEELS:-.whl}" \
           --queue "${QUEUE:-full-protocol fig10 full-variants fig3}" --spec-dir "${SPEC_DIR:-hooked_clip1d/sweeps}" \
           ${TRAVEL_MIB:+--travel-mib "$TRAVEL_MIB"} ;;
  unpack) python3 tools/gpu/gpu_window.py unpack "${@:2}" || exit $?
          [ "${SLIM_TREE:-1}" = 0 ] || exec python3 tools/gpu/slim_tree.py restore
          exit 0 ;;
  window|table) ;;
  *) echo "usage: bash tools/gpu/gpu_queue.sh window [LIMIT] | unpack FILES_AT... | carry | table [ARGS]" >&2
     exit 2 ;;
esac

OUT=${OUT:?set OUT to the folder whose files come back (the device tool sets it)}
STATE=${STATE:-${TMPDIR:-/tmp}/hc1d-gpu}  # the machine's local temp disk: kept while it stays warm between calls
WHEELS=${WHEELS:-.whl}
export PYTHONUNBUFFERED=1
mkdir -p "$STATE" "$OUT"
if ls "$WHEELS"/*.whl >/dev/null 2>&1 && [ ! -e "$STATE/wheels" ]; then  # once per machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STATE/site" \
    "$WHEELS"/*.whl && touch "$STATE/wheels" || exit 3
fi
export PYTHONPATH=$PYTHONPATH:$STATE/site

if [ "$MODE" = table ]; then  # the step table of issue 43's item 2 (every mode, K = 1, 5, 12); not the queue
  python3 benchmarks/gpu_check.py --out "$OUT" "${@:2}" 2>&1 | tee "$OUT/check.log"
  exit "${PIPESTATUS[0]}"
fi
# shellcheck disable=SC2086
exec python3 tools/gpu/gpu_window.py window --started "$started" --limit "${2:-540}" --out "$OUT" --state "$STATE" \
  --carry "${CARRY:-.gpu-carry}" --device "${DEVICE:-cuda}" --queue "${QUEUE:-full-protocol fig10 full-variants fig3}" \
  --spec-dir "${SPEC_DIR:-hooked_clip1d/sweeps}" ${MODES:+--modes "$MODES"} \
  --check-steps "${CHECK_STEPS:-200}" --check-preset "${CHECK_PRESET:-full}" ${3:+--"$3"} ${WINDOW_ARGS:-}
