#!/usr/bin/env bash
# Every experiment of the README, then every figure, on the CPU:
#     bash run_course.sh [OUT]             # course scale: runs into OUT (default runs/course), figures into OUT/figures
#     bash run_course.sh results/paper paper   # Figures 1-5 at the paper's scale (T=200, d_e=170, 100k steps):
#                                          # ~80 min on 2 CPU cores, then the predicted floors (~2 min) into
#                                          # OUT/sgd/family_floor.json and the figures into OUT/figures
# Everything is written under OUT: the committed gallery figures/ is left alone unless GALLERY=1, which
# draws the course figures into figures/ and copies the paper ones to figures/paper_*.png.
# QUICK=1 runs every line at a tiny size (a few steps, short T, small grids): both scales in a couple of
# minutes, to check the whole course end to end; its numbers mean nothing.
# A paper-scale run cut off (a session's end, SIGKILL) goes on with RESUME=1 bash run_course.sh results/paper paper.
# TF_FLAGS adds flags to every train_tf.py command (e.g. "--device cuda").
# Each line is also the command for one experiment alone (QUICK=1 appends its $Q_... flags: the last value wins).
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-runs/course}
SCALE=${2:-course}
case $SCALE in
  course) SEEDS="0 1 2" ;;
  paper) SEEDS=${SEEDS:-0 1 2} ;;   # ~85 min a seed on 2 cores (bench.py: 78 min of steps, plus evaluations);
                                    # SEEDS=1 bash run_course.sh ... trains one seed at a time
  *) echo "run_course.sh: error: scale must be course or paper (got $SCALE)" >&2; exit 2 ;;
esac
for flag in QUICK GALLERY RESUME; do
  case ${!flag:-0} in 0|1) ;; *) echo "run_course.sh: error: $flag must be 0 or 1 (got ${!flag})" >&2; exit 2 ;; esac
done
MODE=--force; [ "${RESUME:-0}" = 1 ] && MODE=--resume
TF="python train_tf.py --preset $SCALE --n-final 32768 ${TF_FLAGS:-}"   # finals on 32,768 common sequences a set
FIGS=$OUT/figures; [ "${GALLERY:-0}" = 1 ] && FIGS=figures
Q_TF="" Q_FLOOR="" Q_DE="" Q_LONG="" Q_TABLE="" Q_FCN="" Q_BOOL="" Q_PLOTS=""   # QUICK=1's sizes, appended to each line (empty otherwise)
if [ "${QUICK:-0}" = 1 ]; then
  Q_TF="--steps 20 --eval-every 10 --n-test 64 --n-final 64 --T 8 --test-T 10 12"
  Q_FLOOR="--T 8 10 12"       # course: the family's floor at the quick runs' lengths (every --de of the line)
  Q_DE="--T 8" Q_LONG="--T 10 12"   # paper: the d_e sweep at the training T, the test lengths at d_e = 170
  Q_TABLE="--T 8 --positions 12 24" # randomized PE's floors: two table sizes at the training T
  Q_FCN="--steps 20 --eval-every 20 --n-test 64 --seed 0 --sweep-T 6 8 --sweep-width 8 16 --sweep-de 4 8"
  Q_BOOL="--T 8 16 --m-max 64 --seeds 3 --s 2 --per-octave 2"
  Q_PLOTS="--formats png"     # a PDF doubles the drawing time
fi

child=
in_turn() { "$@" & child=$!; wait $child; }   # in the background, so that a signal reaches the trap at once
forward() {   # Ctrl-C (130) or SIGTERM (143): the run under way checkpoints and writes its summaries; then exit
  trap - INT TERM
  [ -z "$child" ] || { kill -"$1" $child 2>/dev/null || true; wait $child || true; }
  echo "run_course.sh: stopped; the runs' summaries say where, RESUME=1 goes on" >&2
  exit "$2"
}
if [ "$SCALE" = paper ]; then
  mkdir -p "$OUT/logs"
  trap 'forward INT 130' INT
  trap 'forward TERM 143' TERM
  in_turn $TF --figure-set --seed $SEEDS $MODE --out "$OUT" $Q_TF   # Figures 1-5: the seven runs in one process, on shared draws
  # randomized PE (Ruoss et al. 2023): tables of L = 400 (the longest test length) and 1,600 positions
  in_turn $TF --pe randomized --positions 400 1600 --seed $SEEDS $MODE --out "$OUT/randomized" $Q_TF
  # and its two predicted floors at each table size: W = c W*, and a W that learns its table (L = 200: fixed PE)
  in_turn python sts.py --floor --T 200 --q 3 --d 5 --de 170 --positions 200 400 1600 --json "$OUT/randomized/table_floor.json" $Q_TABLE
  # the floor random PEs allow: against d_e at T=200 (the floor figure), and at the test lengths for d_e=170
  # (the length figure); every (T, d_e) pair in one call would cost ~4x as long; the two merged into one file
  in_turn python sts.py --floor --T 200 --q 3 --d 5 --de 32 64 128 170 256 512 --json "$OUT/logs/floor_de.json" $Q_DE
  in_turn python sts.py --floor --T 250 300 350 400 --q 3 --d 5 --de 170 --json "$OUT/logs/floor_T.json" $Q_LONG
  python -c 'import json, sys; from pathlib import Path; import runlog; a, b = (json.loads(Path(p).read_text()) for p in sys.argv[1:3]); runlog.write_json(Path(sys.argv[3]), dict(a, rows=a["rows"] + b["rows"]))' \
    "$OUT/logs/floor_de.json" "$OUT/logs/floor_T.json" "$OUT/sgd/family_floor.json"
  in_turn python plots.py "$OUT" --out "$OUT/figures" $Q_PLOTS
  if [ "${GALLERY:-0}" = 1 ]; then
    for f in "$OUT"/figures/*.png; do cp "$f" "figures/paper_$(basename "$f")"; done
  fi
  exit 0
fi

# Course scale: two lanes side by side, one per core (a course-scale step is too small to keep two cores busy
# on its own), balanced by their measured times (about 18 min each); each lane's output goes to OUT/logs/.
lane_a() {
  # Figures 1-5: SGD stochastic + fixed (sgd/), attend query (query/), random init (random_init/), Adam (adam/)
  $TF --figure-set --seed $SEEDS $MODE --out "$OUT" $Q_TF
  # ours: the loss floor against d_e (d_e = 64 is the figure set's sgd/ stochastic run, the same configuration:
  # copied, not trained twice); one writer per folder, so every run of floor/ is in this lane
  $TF --de 8 16 32 128 256 --seed $SEEDS $MODE --out "$OUT/floor" $Q_TF
  for s in $SEEDS; do rm -rf "$OUT/floor/stochastic-de64-seed$s"; cp -r "$OUT/sgd/stochastic-de64-seed$s" "$OUT/floor/"; done
  $TF --pe onehot --seed $SEEDS $MODE --out "$OUT/floor" $Q_TF              #   and its zero-floor reference
}
lane_b() {
  $TF --T 64 --de 32 --test-T 80 96 112 128 --pe stochastic fixed --seed $SEEDS $MODE --out "$OUT/de_below_T" $Q_TF  # q_test, d_e < T
  for opt in sgd adam; do   # randomized PE: tables of L = 2T ... 16T positions, and L = T (no longer test lengths)
    $TF --optimizer $opt --pe randomized --positions 40 80 160 320 --seed $SEEDS $MODE --out "$OUT/randomized/$opt" $Q_TF
    $TF --optimizer $opt --pe randomized --positions 20 --test-T --seed $SEEDS $MODE --out "$OUT/randomized/$opt" $Q_TF
    # its two predicted floors at each L: W = c W*, and a W that learns its table
    python sts.py --floor --T 20 --q 3 --d 5 --de 64 --positions 20 40 80 160 320 --json "$OUT/randomized/$opt/table_floor.json" $Q_TABLE
  done
  python sts.py --floor --T 20 --q 3 --d 5 --de 8 16 32 64 128 256 --json "$OUT/floor/family_floor.json" $Q_FLOOR  # its prediction
  python sts.py --floor --T 20 25 30 35 40 --q 3 --d 5 --de 64 --json "$OUT/sgd/family_floor.json" $Q_FLOOR  # and at the test lengths
  python train_fcn.py --preset course --sweep --force --out "$OUT/fcn_sweep" $Q_FCN   # ours: width FCN vs transformer
  python train_bool.py --force --out "$OUT/bool" $Q_BOOL                              # Edelman et al.: sparse-AND critical m
}
mkdir -p "$OUT/logs"
echo "run_course.sh: two lanes; follow them with: tail -f $OUT/logs/lane_a.log $OUT/logs/lane_b.log"
lane_a > "$OUT/logs/lane_a.log" 2>&1 & A=$!
lane_b > "$OUT/logs/lane_b.log" 2>&1 & B=$!
stop() {   # Ctrl-C (exit 130) or SIGTERM (143): stop both lanes and the run each has under way (it writes its summary)
  trap - INT TERM
  runs=$(pgrep -P "$A,$B" || true)
  kill $A $B 2>/dev/null || true
  [ -z "$runs" ] || kill -TERM $runs 2>/dev/null || true
  wait
  while [ -n "$runs" ] && kill -0 $runs 2>/dev/null; do sleep 0.2; done   # the runs are the lanes' children
  echo "run_course.sh: stopped; the runs' summaries say where" >&2
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM
status=0
wait $A || status=$?
wait $B || status=$?
if [ $status != 0 ]; then
  echo "run_course.sh: error: a lane failed (exit $status); its log: $OUT/logs/" >&2
  exit $status
fi
for opt in sgd adam; do   # stochastic and fixed PE beside randomized PE: the figure set's runs, copied
  for s in $SEEDS; do for pe in stochastic fixed; do
    rm -rf "$OUT/randomized/$opt/$pe-de64-seed$s"; cp -r "$OUT/$opt/$pe-de64-seed$s" "$OUT/randomized/$opt/"
  done; done
done
python plots.py "$OUT" --out "$FIGS" $Q_PLOTS
