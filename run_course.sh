#!/usr/bin/env bash
# Every course-scale experiment of the README, then every figure, on the CPU:
#     bash run_course.sh [OUT]            # runs into OUT (default runs/course), figures into figures/
# Figures 1-5 at the paper's scale (T=200, d_e=170, 100k steps), on a GPU, compiled with CUDA graphs:
#     bash run_course.sh runs/paper paper # figures into runs/paper/figures; TF_FLAGS replaces
#                                         # "--device cuda --compile reduce-overhead" (e.g. a CPU check)
# Each line is also the command for one experiment alone.
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-runs/course}
SCALE=${2:-course}
case $SCALE in
  course) FIGURES=figures; TF_FLAGS=${TF_FLAGS-} ;;
  paper) FIGURES=$OUT/figures; TF_FLAGS=${TF_FLAGS-"--device cuda --compile reduce-overhead"} ;;
  *) echo "run_course.sh: error: scale must be course or paper (got $SCALE)" >&2; exit 2 ;;
esac
TF="python train_tf.py --preset $SCALE --force $TF_FLAGS"
$TF --pe stochastic fixed --seed 0 1 --out "$OUT/sgd"           # Figures 1, 2, 4 (SGD, attend tokens)
$TF --attend query --out "$OUT/query"                            # Figure 1 as the paper ran it: attend [Z, z_q]
$TF --init random --init-scale 0.1 --out "$OUT/random_init"      # Figure 3: from a random initialisation
$TF --optimizer adam --pe stochastic fixed --out "$OUT/adam"     # Figure 5: Adam
if [ "$SCALE" = course ]; then                                   # ours and Edelman et al.'s, course scale
  $TF --de 8 16 32 64 128 256 --n-test 1024 --out "$OUT/floor"  # ours: the loss floor against d_e
  $TF --pe onehot --n-test 1024 --out "$OUT/floor"               #   and its zero-floor reference
  python train_fcn.py --preset course --sweep --force --out "$OUT/fcn_sweep"  # ours: width FCN vs transformer
  python train_bool.py --force --out "$OUT/bool"                # Edelman et al.: sparse-AND critical m
fi
python plots.py "$OUT" --out "$FIGURES"
