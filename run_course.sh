#!/usr/bin/env bash
# Every course-scale experiment of the README, then every figure, on the CPU:
#     bash run_course.sh [OUT]        # runs into OUT (default runs/course), figures into figures/
# Each line is also the command for one experiment alone; add --device cuda and drop --preset course
# (or use --preset paper) for the paper's scale.
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-runs/course}
TF="python train_tf.py --preset course --force"
$TF --pe stochastic fixed --seed 0 1 --out "$OUT/sgd"           # Figures 1, 2, 4 (SGD, attend tokens)
$TF --attend query --out "$OUT/query"                            # Figure 1 as the paper ran it: attend [Z, z_q]
$TF --init random --init-scale 0.1 --out "$OUT/random_init"      # Figure 3: from a random initialisation
$TF --optimizer adam --pe stochastic fixed --out "$OUT/adam"     # Figure 5: Adam
$TF --de 8 16 32 64 128 256 --n-test 1024 --out "$OUT/floor"    # ours: the loss floor against d_e
$TF --pe onehot --n-test 1024 --out "$OUT/floor"                 #   and its zero-floor reference
python train_fcn.py --preset course --sweep --force --out "$OUT/fcn_sweep"  # ours: width FCN vs transformer
python train_bool.py --force --out "$OUT/bool"                  # Edelman et al.: sparse-AND critical m
python plots.py "$OUT" --out figures
