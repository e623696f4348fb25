#!/usr/bin/env bash
# Every experiment of the README, then every figure, on the CPU:
#     bash run_course.sh [OUT]             # course scale: runs into OUT (default runs/course), figures into OUT/figures
#     bash run_course.sh runs/paper paper  # Figures 1-5 at the paper's scale (T=200, d_e=170, 100k steps):
#                                          # ~80 min on 2 CPU cores, then the predicted floors and theory.json
#                                          # (16,384 sequences each: ~1 h loaded) and the figures into OUT/figures
#     bash run_course.sh OUT [SCALE] --list   # print the lines instead of running them: each runs alone from
#                                          # this folder, in any order; the last after all (README: on a cluster)
# Everything is written under OUT (results/ holds the committed runs: compare yours with them, RESULTS.md
# says how; only a maintainer regenerates them there); GALLERY=1 draws the course figures into figures/ and copies the paper ones
# to figures/paper_*.png. QUICK=1 runs every line at a tiny size (both scales in a couple of minutes; its
# numbers mean nothing). RESUME=1 goes on from where cut-off runs stopped (a session's end, SIGKILL), listed
# lines too. TF_FLAGS adds flags to every train_tf.py command (e.g. "--device cuda").
set -euo pipefail
CALLER=$PWD; cd "$(dirname "$0")"
LIST=0 ARGS=()
for arg in "$@"; do
  case $arg in
    --list) LIST=1 ;;
    -h|--help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]##*/}"; exit 0 ;;   # the lines above
    *) ARGS+=("$arg") ;;
  esac
done
OUT=${ARGS[0]:-runs/course}; [ "${OUT:0:1}" = / ] || [ "$CALLER" -ef . ] || OUT=$CALLER/$OUT  # relative: the caller's
SCALE=${ARGS[1]:-course}
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
TF="python train_tf.py --preset $SCALE --n-final 32768${TF_FLAGS:+ $TF_FLAGS}"   # finals on 32,768 common sequences a set
O=$(printf %q "$OUT")             # OUT as a shell reads it back, in the lines below
FIGS=$O/figures; [ "${GALLERY:-0}" = 1 ] && FIGS=figures
Q_TF="" Q_FLOOR="" Q_DE="" Q_LONG="" Q_TABLE="" Q_FCN="" Q_BUDGETS="" Q_NEEDED="" Q_BOOL="" Q_PLOTS="" Q_DYN="" Q_PLATEAU=""   # QUICK=1's sizes, appended to each line (empty otherwise)
PAPER_ANNEAL=50000   # the paper's runs' lr anneal step, which theory.py --dynamics must share (QUICK: theirs)
NF="--n 16384" NT=16384            # sequences per predicted floor and per theory.json set (se ~ 1% / 4)
if [ "${QUICK:-0}" = 1 ]; then
  NF="--n 512" NT=512
  Q_TF=" --steps 20 --eval-every 10 --n-test 64 --n-final 64 --T 8 --test-T 10 12"
  Q_FLOOR=" --T 8 10 12"       # course: the family's floor at the quick runs' lengths (every --de of the line)
  Q_DE=" --T 8" Q_LONG=" --T 10 12"   # paper: the d_e sweep at the training T, the test lengths at d_e = 170
  Q_TABLE=" --T 8 --positions 12 24" # randomized PE's floors: two table sizes at the training T
  Q_FCN=" --steps 20 --eval-every 20 --n-test 64 --seed 0 --sweep-T 6 8 --sweep-width 8 16 --sweep-de 4 8"
  Q_BUDGETS=" --sweep-steps 20 40 --eval-every 20 --n-test 64 --seed 0 --sweep-T 6 8 --sweep-width 8 16 --sweep-de 4 8"
  Q_NEEDED=" --T 6 8"
  Q_BOOL=" --T 8 16 --m-max 64 --seeds 3 --s 2 --per-octave 2"
  Q_PLOTS=" --formats png"     # a PDF doubles the drawing time
  Q_DYN=" --T 8 --steps 20 --every 10" PAPER_ANNEAL=10   # theory.py --dynamics at the quick runs' T, steps, rate
  Q_PLATEAU=" --T 8 --steps 20 --every 10 --n 256 --draws 2"   # theory.py --plateau: the same, fewer sequences
fi
copy() {   # copy FROM TO NAME...: the line that copies the runs NAME... of folder FROM into TO, file over
           # file: what else a user keeps in TO/NAME stays (no rm -rf)
  local from=$1 to=$2; shift 2
  printf 'for r in %s; do mkdir -p %s/$r && cp -r %s/$r/. %s/$r/; done' "$*" "$to" "$from" "$to"
}
runs() { local s; for s in $SEEDS; do printf '%s ' "${@/%/-de64-seed$s}"; done; }   # runs PE...: their d_e = 64 runs' names

# floors merged into one file (the last argument): the d_e sweep, the test lengths, the test q
MERGE='import json, sys; from pathlib import Path; import runlog; parts = [json.loads(Path(p).read_text()) for p in sys.argv[1:-1]]; runlog.write_json(Path(sys.argv[-1]), dict(parts[0], rows=[r for a in parts for r in a["rows"]]))'
# The lines. LANE_A and LANE_B hold the experiments (a lane's lines run in turn, the two lanes side by side;
# any order would give the same files); AFTER comes after both.
if [ "$SCALE" = paper ]; then
  LANE_A=(
    # Figures 1-5: the seven runs in one process, on shared draws
    "$TF --figure-set --seed $SEEDS $MODE --out $O$Q_TF"
    # randomized PE (Ruoss et al. 2023): tables of L = 400 (the longest test length) and 1,600 positions
    "$TF --pe randomized --positions 400 1600 --seed $SEEDS $MODE --out $O/randomized$Q_TF"
    # and its two predicted floors at each table size: W = c W*, and a W that learns its table (L = 200: fixed PE)
    "mkdir -p $O/randomized && python theory.py --floor --T 200 --q 3 --d 5 --de 170 --positions 200 400 1600 $NF --json $O/randomized/table_floor.json$Q_TABLE"
    # the floor random PEs allow: against d_e at T=200 (the floor figure), and at the test lengths for d_e=170
    # (the length figure), and at q_test (the q figure); every (T, d_e) pair in one call would cost ~4x as long
    "mkdir -p $O/logs $O/sgd && python theory.py --floor --T 200 --q 3 --d 5 --de 32 64 128 170 256 512 $NF --json $O/logs/floor_de.json$Q_DE && python theory.py --floor --T 250 300 350 400 --q 3 --d 5 --de 170 $NF --json $O/logs/floor_T.json$Q_LONG && python theory.py --floor --T 200 --q 2 4 6 --d 5 --de 170 $NF --json $O/logs/floor_q.json$Q_DE && python -c '$MERGE' $O/logs/floor_de.json $O/logs/floor_T.json $O/logs/floor_q.json $O/sgd/family_floor.json"
  )
  LANE_B=(
    # the training curve the family W = c W*, V = alpha V* predicts (sts.family_dynamics), beside the
    # seeds of sgd/; and the plateau at n = 1,024 (the seeds' 256: 4x less SGD noise), seed 0, 10,000 steps
    # (GD's and SGD's at n = 256, through the plateau and the drop: 20,000 steps, about 10 min)
    "mkdir -p $O/sgd && python theory.py --dynamics --T 200 --de 170 --steps 20000 --anneal-at $PAPER_ANNEAL --every 100 --json $O/sgd/family_dynamics.json$Q_DYN && python theory.py --plateau --T 200 --de 170 --steps 100000 --anneal-at $PAPER_ANNEAL --batch 256 --every 500 --n 1024 --draws 2 --test-T 250 300 350 400 --test-q 2 4 6 --json $O/sgd/plateau_model.json$Q_PLATEAU"
    "$TF --batch 1024 --steps 10000 --anneal-at 50000 --eval-every 100 --test-T --test-q --seed 0 $MODE --out $O/plateau/n1024$Q_TF && python theory.py --dynamics --T 200 --de 170 --steps 10000 --anneal-at 50000 --every 100 --json $O/plateau/n1024/family_dynamics.json$Q_DYN && python theory.py --plateau --T 200 --de 170 --steps 10000 --anneal-at 50000 --batch 1024 --every 100 --n 1024 --json $O/plateau/n1024/plateau_model.json$Q_PLATEAU"
    # t_1/2 registered before the run (results/predictions/plateau_registered.json): T = 100, seed 0
    "$TF --T 100 --steps 8000 --anneal-at 50000 --eval-every 100 --test-T --test-q --seed 0 $MODE --out $O/plateau/T100$Q_TF && python theory.py --dynamics --T 100 --de 170 --steps 4000 --anneal-at 50000 --every 100 --json $O/plateau/T100/family_dynamics.json$Q_DYN && python theory.py --plateau --T 100 --de 170 --steps 8000 --anneal-at 50000 --batch 256 --every 100 --n 2048 --json $O/plateau/T100/plateau_model.json$Q_PLATEAU"
    # the whole curve registered before the run (results/predictions/curve_registered_T150.json): T = 150, seed 0
    "$TF --T 150 --steps 12000 --anneal-at 6000 --eval-every 100 --n-test 2048 --test-T 200 300 --test-q 2 6 --seed 0 $MODE --out $O/plateau/T150$Q_TF && python theory.py --dynamics --T 150 --de 170 --steps 12000 --anneal-at 6000 --every 100 --json $O/plateau/T150/family_dynamics.json$Q_DYN && python theory.py --plateau --T 150 --de 170 --steps 12000 --anneal-at 6000 --batch 256 --every 100 --n 2048 --test-T 200 300 --test-q 2 6 --json $O/plateau/T150/plateau_model.json$Q_PLATEAU"
  )
  AFTER="python theory.py --own $O/sgd --n $NT && python plots.py $O --out $O/figures$Q_PLOTS"
  [ "${GALLERY:-0}" = 1 ] && AFTER+=" && (set -e; for f in $O/figures/*.png; do cp \"\$f\" \"figures/paper_\${f##*/}\"; done)"
else
  # Course scale: two lanes, one per core (a course-scale step is too small to keep two cores busy on its
  # own), balanced by their measured times (about 18 min each before the FCN's budgets and the AND's
  # m50 were added: now about 1.5 h and 1 h, measured loaded); each lane's output goes to OUT/logs/.
  LANE_A=(
    # Figures 1-5: SGD stochastic + fixed (sgd/), attend query (query/), random init (random_init/), Adam (adam/)
    "$TF --figure-set --seed $SEEDS $MODE --out $O$Q_TF"
    # ours: the loss floor against d_e (d_e = 64 is the figure set's sgd/ stochastic run, the same
    # configuration: copied after, not trained twice), and its zero-floor reference
    "$TF --de 8 16 32 128 256 --seed $SEEDS $MODE --out $O/floor$Q_TF && $TF --pe onehot --seed $SEEDS $MODE --out $O/floor$Q_TF"
    # the FCN's width at three budgets (~1.5 h on one core): where the budget stops mattering
    "python train_fcn.py --preset course --sweep --sweep-T 10 20 40 80 --sweep-steps 1500 6000 24000 $MODE --out $O/fcn_budgets$Q_BUDGETS"
  )
  LANE_B=(
    "$TF --T 64 --de 32 --test-T 80 96 112 128 --pe stochastic fixed --seed $SEEDS $MODE --out $O/de_below_T$Q_TF"  # q_test, d_e < T
  )
  for opt in sgd adam; do   # randomized PE: tables of L = 2T ... 16T positions, and L = T (no longer test lengths),
    # and its two predicted floors at each L: W = c W*, and a W that learns its table
    LANE_B+=("$TF --optimizer $opt --pe randomized --positions 40 80 160 320 --seed $SEEDS $MODE --out $O/randomized/$opt$Q_TF && $TF --optimizer $opt --pe randomized --positions 20 --test-T --seed $SEEDS $MODE --out $O/randomized/$opt$Q_TF && python theory.py --floor --T 20 --q 3 --d 5 --de 64 --positions 20 40 80 160 320 $NF --json $O/randomized/$opt/table_floor.json$Q_TABLE")
  done
  LANE_B+=(
    "mkdir -p $O/floor && python theory.py --floor --T 20 --q 3 --d 5 --de 8 16 32 64 128 256 $NF --json $O/floor/family_floor.json$Q_FLOOR"  # its prediction
    # and at the test lengths and q_test
    "mkdir -p $O/logs $O/sgd && python theory.py --floor --T 20 25 30 35 40 --q 3 --d 5 --de 64 $NF --json $O/logs/floor_T.json$Q_FLOOR && python theory.py --floor --T 20 --q 2 4 6 --d 5 --de 64 $NF --json $O/logs/floor_q.json$Q_FLOOR && python -c '$MERGE' $O/logs/floor_T.json $O/logs/floor_q.json $O/sgd/family_floor.json"
    # SGD's randomized PE at L = 40, 80 trained on to 40,000 steps (the first 10,000 as above), beside its construction
    "$TF --optimizer sgd --pe randomized --positions 40 80 --steps 40000 --anneal-at 5000 --eval-every 250 --seed $SEEDS $MODE --out $O/randomized_long/sgd$Q_TF && python theory.py --floor --T 20 --q 3 --d 5 --de 64 --positions 40 80 $NF --json $O/randomized_long/sgd/table_floor.json$Q_TABLE"
    # ours: width FCN vs transformer at 1,500 steps; then the transformer's width from its family floor
    "python train_fcn.py --preset course --sweep $MODE --out $O/fcn_sweep$Q_FCN && python theory.py --needed-de --T 10 20 40 80 160 320 640 1280 --eps 0.3 --json $O/fcn_sweep/needed_de.json$Q_NEEDED"
    "python train_bool.py $MODE --out $O/bool$Q_BOOL"                              # Edelman et al.: sparse-AND m50
    # the family's predicted training curves beside the stochastic-PE SGD runs (sts.family_dynamics)
    "mkdir -p $O/sgd && python theory.py --dynamics --T 20 --de 64 --steps 10000 --every 100 --json $O/sgd/family_dynamics.json$Q_DYN && python theory.py --plateau --T 20 --de 64 --steps 10000 --batch 256 --every 100 --n 2048 --test-T 25 30 35 40 --test-q 2 4 6 --json $O/sgd/plateau_model.json$Q_PLATEAU"
  )
  # the plateau's length t_1/2 around the course point (T 20, d_e 64, lr 1, q 3, n 256), 3 seeds a point
  # (2 to 6 min each, d_e = 256 about 14), each beside family_dynamics' GD and SGD at its n. Most of the time
  # is the 8,192 validation sequences every 5 steps: with 512, the set's error, shared by the seeds, moved
  # the crossings at T = 10 and q = 6 by more than 5%
  for point in "base:" "T10:--T 10" "T40:--T 40" "T80:--T 80 --steps 3000" "de16:--de 16" "de32:--de 32" \
      "de128:--de 128" "de256:--de 256 --steps 3000" "lr0.25:--lr 0.25 --steps 3000" "lr0.5:--lr 0.5" "lr2:--lr 2" \
      "q2:--q 2" "q6:--q 6" "n64:--batch 64" "n1024:--batch 1024" "n4096:--steps 1000 --batch 4096" \
      "T12q6:--T 12 --q 6" "T40n32:--T 40 --batch 32" "T8:--T 8"; do   # the last three registered before their runs
    name=${point%%:*} flags="--steps 2000 ${point#*:}"
    LANE_B+=("$TF $flags --eval-every 5 --n-test 8192 --test-T --test-q --seed $SEEDS $MODE --out $O/plateau/$name$Q_TF && python theory.py --dynamics ${flags%%--batch*} --every 5 --json $O/plateau/$name/family_dynamics.json$Q_DYN && python theory.py --plateau --batch 256 $flags --every 5 --n 2048 --json $O/plateau/$name/plateau_model.json$Q_PLATEAU")
  done
  # the whole curve registered before its run (n16: results/predictions/curve_registered_n16.json) and SGD's
  # noise beyond the grid (n8, d_e = 16 at n = 64 and 16), each logged every 10 steps on 4,096 sequences
  for point in "n16:--batch 16 --test-T 30 40 --test-q 2 6" "n8:--batch 8" "de16n64:--de 16 --batch 64" \
      "de16n16:--de 16 --batch 16"; do
    name=${point%%:*} flags="--steps 2000 ${point#*:}" sets=""
    [[ $flags == *--test-T* ]] || sets=" --test-T --test-q"
    LANE_B+=("$TF $flags$sets --eval-every 10 --n-test 4096 --seed $SEEDS $MODE --out $O/plateau/$name$Q_TF && python theory.py --dynamics ${flags%%--batch*} --every 10 --json $O/plateau/$name/family_dynamics.json$Q_DYN && python theory.py --plateau $flags --every 10 --n 2048 --json $O/plateau/$name/plateau_model.json$Q_PLATEAU")
  done
  # the figure set's runs, copied: stochastic d_e = 64 into floor/, and stochastic and fixed PE beside
  # randomized PE; then every figure
  AFTER="$(copy "$O/sgd" "$O/floor" $(runs stochastic))"
  for opt in sgd adam; do AFTER+=" && $(copy "$O/$opt" "$O/randomized/$opt" $(runs stochastic fixed))"; done
  AFTER+=" && python theory.py --own $O/sgd $O/floor --n $NT && python plots.py $O --out $FIGS$Q_PLOTS"
fi

[ $LIST = 0 ] || { printf '%s\n' "${LANE_A[@]}" ${LANE_B[@]+"${LANE_B[@]}"} "$AFTER"; exit 0; }

LANES=()   # the lanes under way
lane() {   # in a subshell of its own: each run is its child. RESUME=1 makes a line's --out first: a line the
           # cut-off never reached goes on from nothing (--resume refuses an --out that is not there)
  local line out
  for line; do
    [ "${RESUME:-0}" = 0 ] || for out in $(grep -o -- '--out [^ ]*' <<< "$line" | cut -c7-); do eval mkdir -p "$out"; done
    eval "$line"
  done
}
stop() {   # Ctrl-C (exit 130), SIGTERM (143) or SIGHUP (129, a closed terminal): stop the lanes and the run
           # each has under way (it checkpoints and writes its summaries)
  trap - INT TERM HUP
  local runs
  runs=$(pgrep -P "$(IFS=,; echo "${LANES[*]}")" || true)
  kill "${LANES[@]}" 2>/dev/null || true
  [ -z "$runs" ] || kill -TERM $runs 2>/dev/null || true
  wait || true
  while [ -n "$runs" ] && kill -0 $runs 2>/dev/null; do sleep 0.2; done   # the runs are the lanes' children
  echo "run_course.sh: stopped; the runs' summaries say where, RESUME=1 goes on" >&2
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP
mkdir -p "$OUT/logs"
if [ ${#LANE_B[@]} = 0 ]; then
  lane "${LANE_A[@]}" & LANES=($!)
else
  echo "run_course.sh: two lanes; follow them with: tail -f $OUT/logs/lane_a.log $OUT/logs/lane_b.log"
  lane "${LANE_A[@]}" > "$OUT/logs/lane_a.log" 2>&1 & LANES=($!)
  lane "${LANE_B[@]}" > "$OUT/logs/lane_b.log" 2>&1 & LANES+=($!)
fi
status=0
for pid in "${LANES[@]}"; do wait "$pid" || status=$?; done
[ $status = 0 ] || { echo "run_course.sh: error: a lane failed (exit $status); its output: above, or" \
  "$OUT/logs/" >&2; exit $status; }
lane "$AFTER" & LANES=($!)
wait $!
