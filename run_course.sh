#!/usr/bin/env bash
# Every experiment of the README, then every figure, on the CPU:
#     bash run_course.sh [OUT]             # course scale: runs into OUT (default results/course), figures into figures/
#     bash run_course.sh results/paper paper   # Figures 1-5 at the paper's scale (T=200, d_e=170, 100k steps):
#                                          # ~90 min on 2 CPU cores; figures into figures/paper_*.png
# A paper-scale run cut off (a session's end, SIGKILL) goes on with RESUME=1 bash run_course.sh results/paper paper.
# TF_FLAGS adds flags to every train_tf.py command (e.g. "--device cuda").
# Each line is also the command for one experiment alone.
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-results/course}
SCALE=${2:-course}
case $SCALE in
  course) SEEDS="0 1 2"; PREFIX="" ;;
  paper) SEEDS="0"; PREFIX="paper_" ;;   # one seed: ~90 min on 2 cores
  *) echo "run_course.sh: error: scale must be course or paper (got $SCALE)" >&2; exit 2 ;;
esac
MODE=--force; [ "${RESUME:-0}" = 1 ] && MODE=--resume
TF="python train_tf.py --preset $SCALE ${TF_FLAGS:-}"
# Figures 1-5: SGD stochastic + fixed (sgd/), attend query (query/), random init (random_init/), Adam (adam/),
# all runs of a seed in one process, sharing each step's draws
$TF --figure-set --seed $SEEDS $MODE --out "$OUT"
if [ "$SCALE" = course ]; then                                   # ours and Edelman et al.'s, course scale
  $TF --de 8 16 32 64 128 256 --seed $SEEDS --n-test 1024 --force --out "$OUT/floor"  # ours: the floor against d_e
  $TF --pe onehot --seed $SEEDS --n-test 1024 --force --out "$OUT/floor"               #   and its zero-floor reference
  python sts.py --floor --T 20 --q 3 --d 5 --de 8 16 32 64 128 256 --json "$OUT/floor/family_floor.json"  # its prediction
  $TF --T 64 --de 32 --test-T 80 96 112 128 --pe stochastic fixed --seed $SEEDS --force --out "$OUT/de_below_T"  # q_test, d_e < T
  python train_fcn.py --preset course --sweep --force --out "$OUT/fcn_sweep"  # ours: width FCN vs transformer
  python train_bool.py --force --out "$OUT/bool"                # Edelman et al.: sparse-AND critical m
  python plots.py "$OUT" --out figures
else
  python sts.py --floor --T 200 --q 3 --d 5 --de 170 --json "$OUT/sgd/family_floor.json"   # the floor random PEs allow
  python plots.py "$OUT" --out "$OUT/figures"
  for f in "$OUT"/figures/*.png; do cp "$f" "figures/$PREFIX$(basename "$f")"; done
fi
