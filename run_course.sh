#!/usr/bin/env bash
# Every experiment of the README, then every figure, on the CPU:
#     bash run_course.sh [OUT]             # course scale: runs into OUT (default results/course), figures into figures/
#     bash run_course.sh results/paper paper   # Figures 1-5 at the paper's scale (T=200, d_e=170, 100k steps):
#                                          # ~80 min on 2 CPU cores; figures into figures/paper_*.png
# A paper-scale run cut off (a session's end, SIGKILL) goes on with RESUME=1 bash run_course.sh results/paper paper.
# TF_FLAGS adds flags to every train_tf.py command (e.g. "--device cuda").
# Each line is also the command for one experiment alone.
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-results/course}
SCALE=${2:-course}
case $SCALE in
  course) SEEDS="0 1 2" ;;
  paper) SEEDS="0" ;;   # one seed: ~80 min on 2 cores (73 min of steps by bench.py, plus evaluations)
  *) echo "run_course.sh: error: scale must be course or paper (got $SCALE)" >&2; exit 2 ;;
esac
MODE=--force; [ "${RESUME:-0}" = 1 ] && MODE=--resume
TF="python train_tf.py --preset $SCALE ${TF_FLAGS:-}"

if [ "$SCALE" = paper ]; then
  $TF --figure-set --seed $SEEDS $MODE --out "$OUT"        # Figures 1-5: the six runs in one process, on shared draws
  python sts.py --floor --T 200 --q 3 --d 5 --de 170 --json "$OUT/sgd/family_floor.json"   # the floor random PEs allow
  python plots.py "$OUT" --out "$OUT/figures"
  for f in "$OUT"/figures/*.png; do cp "$f" "figures/paper_$(basename "$f")"; done
  exit 0
fi

# Course scale: two lanes side by side, one per core (a course-scale step is too small to keep two cores busy
# on its own), balanced by their measured times (about 18 min each); each lane's output goes to OUT/logs/.
lane_a() {
  # Figures 1-5: SGD stochastic + fixed (sgd/), attend query (query/), random init (random_init/), Adam (adam/)
  $TF --figure-set --seed $SEEDS --force --out "$OUT"
  # ours: the loss floor against d_e (d_e = 64 is the figure set's sgd/ stochastic run, the same configuration:
  # copied, not trained twice; 256 runs in lane b)
  $TF --de 8 16 32 128 --seed $SEEDS --force --out "$OUT/floor"
  for s in $SEEDS; do rm -rf "$OUT/floor/stochastic-de64-seed$s"; cp -r "$OUT/sgd/stochastic-de64-seed$s" "$OUT/floor/"; done
  $TF --pe onehot --seed $SEEDS --force --out "$OUT/floor"              #   and its zero-floor reference
  $TF --T 64 --de 32 --test-T 80 96 112 128 --pe stochastic fixed --seed $SEEDS --force --out "$OUT/de_below_T"  # q_test, d_e < T
}
lane_b() {
  $TF --de 256 --seed $SEEDS --force --out "$OUT/floor"                 # ours: the floor's largest d_e
  python sts.py --floor --T 20 --q 3 --d 5 --de 8 16 32 64 128 256 --json "$OUT/floor/family_floor.json"  # its prediction
  python train_fcn.py --preset course --sweep --force --out "$OUT/fcn_sweep"   # ours: width FCN vs transformer
  python train_bool.py --force --out "$OUT/bool"                               # Edelman et al.: sparse-AND critical m
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
python plots.py "$OUT" --out figures
