#!/usr/bin/env bash
# Written 2026-12-01 (session 41, while the run trained; modelled on ship_app_l.sh, which ran). DRY RUN, session 42:
# every step ran (80 s) in a scratch worktree (PYTHONPATH on it) on a 4-epoch run of this spec, snapshots 0-4; fig3
# and fig10 were not run there only because a 4-epoch run is no grid cell (the real run's config.json is fig3's cell
# (20, 10, seed 0) and fig10's (w = 0.2, seed 0): checked with sweep_figs.grid_cell). The README's test command in
# that tree afterwards: 1,952 passed, 1 failed, only because a 4-epoch run has no snapshots 5-50 (test_a_shipped_
# trajectory wants their accuracies). Not yet run on the real run.
# Ship the full model at protocol (full-protocol.toml, seed 0, lane 2 of tools/cpu/long_runs.sh) once its run
# finished, as docs/fidelity.md states (Fig. 11a, b: pre-registration and amendment of 2026-12-01):
#   1. keep today's partial full model (1,000 epochs, pre-study recipe all-decay) as the named variant
#      full-ntot20-n2-10-all-decay-partial (its files copied, name and description changed; weights untouched);
#   2. export the run over full-ntot20-n2-10 (float16 weights: the zoo's 4 MiB rule), its description from the
#      run's own numbers (edit the machine and sessions if it was made elsewhere);
#   3. ship its trajectory with --metrics-epochs all (every other snapshot's float32 accuracies and sha256, for
#      Fig. 11a's phases) and --epochs 0: a full checkpoint is ~2.9 MB (float16, xz); the budget was raised to 33 MB
#      for it on 2026-12-01 (27.2 MB used); never drop the --metrics-epochs (fig11a is not run without them);
#      if ship-trajectory is refused, the new model is already exported: `git checkout hooked_clip1d/pretrained/weights/`
#      restores the partial one (and `git clean -n hooked_clip1d/pretrained/` lists what step 1 added) before a retry;
#   4. move the partial model's byte pins to its new name in tests/test_forward_pins.py and list the new full model
#      unpinned (its pins are recorded on the AMX machine that records the digests); record the value pins of both;
#   5. rerun fig11a, and fig3 and fig10 on their zoo cells (--no-sweeps: their sweeps are days of CPU), into
#      $OUT_DIR; the results page; the zoo tables. Then read the diffs, write fidelity.md's reading, README (Fig. 3,
#      10, 11a lines), run the README's test command, commit.
#   bash tools/cpu/ship_full.sh     # env: VENV (~/venv), SWEEPS (~/sweeps), OUT_DIR (~/repro-full)
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
VENV="${VENV:-$HOME/venv}"
SWEEPS="${SWEEPS:-$HOME/sweeps}"
OUT_DIR="${OUT_DIR:-$HOME/repro-full}"
export OMP_NUM_THREADS=1
RUN="$SWEEPS/full-protocol/runs/seed-0"
test -f "$RUN/summary.json" || { echo "not finished"; exit 2; }
W=hooked_clip1d/pretrained/weights
OLD=full-ntot20-n2-10-all-decay-partial
if [ ! -f "$W/$OLD.json" ]; then
  cp "$W/full-ntot20-n2-10.safetensors.xz" "$W/$OLD.safetensors.xz"
  "$VENV"/bin/python - "$W/full-ntot20-n2-10.json" "$W/$OLD.json" <<'PY'
import json, sys
from pathlib import Path
m = json.loads(Path(sys.argv[1]).read_text())
m["name"] = "full-ntot20-n2-10-all-decay-partial"
m["description"] = ("The zoo's full model until the full model at protocol shipped (shipped as full-ntot20-n2-10 "
                    "until then): " + m["description"])
from hooked_clip1d.files import json_text  # the kept JSON layout (tests/test_records.py)
Path(sys.argv[2]).write_text(json_text(m))
PY
fi
DESC=$("$VENV"/bin/python - "$RUN" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
s = json.loads((run / "summary.json").read_text())
fm = s["final_metrics"]
print(
    "Fig. 3, 10, 11a: the full model (MB = 2, Mrep = 2: 4 pre-LN blocks with GeLU MLPs, 4 heads, d_model 128) in "
    "both towers, Ntot = 20, n2 = 10, left captions, at the paper's protocol (10,000 epochs) under the package's "
    "default recipe (cls-exempt-init002-temp-nodecay-distinct: the flagship's). Seed 0 of sweep full-protocol.toml "
    f"(group g000-8f63fd85), trained on a 2-core AVX-512 CPU from session 40 on, resumed from its checkpoints "
    f"({s['train_seconds']:,.0f} s; one thread, two from 2026-12-01 at its epoch ~1,600, one again from its epoch ~7,150; torch.compile'd: "
    "execution settings), with its 43 "
    "snapshots. Unseen-pair accuracy (the run's float32 evaluation) "
    f"{fm['val_unseen']['acc']:.2f} at epoch 10,000 (label set {fm['val_unseen']['label_set']:.2f}; seen pairs "
    f"{fm['val_seen']['acc']:.2f}; single-object {fm['val_single']['acc']:.2f}). The partial pre-study model it "
    "replaces is full-ntot20-n2-10-all-decay-partial. Weights stored as float16 (the zoo's accuracies measured on them), with "
    "its training trajectory (the accuracies of every snapshot recorded, weights of epoch 0 and the last)."
)
PY
)
echo "$DESC"
"$VENV"/bin/hooked-clip1d export "$RUN" --name full-ntot20-n2-10 --weights-dtype float16 --description "$DESC"
"$VENV"/bin/hooked-clip1d ship-trajectory "$RUN" --name full-ntot20-n2-10 --epochs 0 --metrics-epochs all \
  --tolerance-images 2
"$VENV"/bin/python - tests/test_forward_pins.py <<'PY'
import sys
from pathlib import Path
p = Path(sys.argv[1])
s = p.read_text()
old_key, new_key = '    "full-ntot20-n2-10": [', '    "full-ntot20-n2-10-all-decay-partial": ['
if old_key in s:  # the partial model's digests follow its weights; the new model waits for the AMX machine
    s = s.replace(old_key, new_key, 1)
    s = s.replace('UNPINNED = (\n', 'UNPINNED = (\n    "full-ntot20-n2-10",\n', 1)
    p.write_text(s)
PY
"$VENV"/bin/ruff format -q tests/test_forward_pins.py  # the renamed entry's line is past 120 characters
(cd tests && "$VENV"/bin/python test_value_pins.py --record full-ntot20-n2-10 full-ntot20-n2-10-all-decay-partial)
rm -rf "$OUT_DIR"
for f in fig11a fig3 fig10; do
  /usr/bin/time -f "$f %e s" "$VENV"/bin/hooked-clip1d reproduce $f --out "$OUT_DIR" --no-sweeps --no-progress
done
"$VENV"/bin/hooked-clip1d results-page --results "$OUT_DIR"
"$VENV"/bin/hooked-clip1d list --markdown --update docs/zoo.md
git status --short
