#!/usr/bin/env bash
# From problems to a compute-optimal run, CPU-sized: curate -> pilot sweep -> fit -> allocate -> train.
# Walk-through: docs/WORKFLOW.md. Everything lands in $OUT; rerunning resumes (cached samples, finished cells).
#
#   bash run_examples/workflow_cpu.sh                                # SmolLM2-135M-Instruct
#   MODEL=tiny SIZE=24 K=4 N_GRID=2,4 BUDGET=16 TRAIN_BUDGET=16 bash run_examples/workflow_cpu.sh  # plumbing, ~3.5 min
set -euo pipefail

OUT=${OUT:-runs/workflow}
MODEL=${MODEL:-smollm2}          # smollm2 | tiny | a local checkpoint directory
SIZE=${SIZE:-96}                 # generated arithmetic problems
K=${K:-8}                        # samples per problem (the paper: 16)
SET=${SET:-hard}                 # the curated set to sweep and train on (a small model finds most problems hard)
B_PROBLEM=${B_PROBLEM:-4}        # problems per step in the pilot and the final run
N_GRID=${N_GRID:-2,4,8}          # rollouts per problem swept by the pilot
BUDGET=${BUDGET:-192}            # rollouts per pilot cell
TRAIN_BUDGET=${TRAIN_BUDGET:-384}
PRESET=${PRESET:-paper:qwen2.5-7b-hard}   # used when the pilot is too small to fit n*(C)
mkdir -p "$OUT"

echo "== 1. curate: avg@$K of the base model on $SIZE problems"
isocompute curate --generate basic_arithmetic --size "$SIZE" --gen-arg max_digits=2 \
    --out "$OUT/curated" --model "$MODEL" --k "$K" --sets "$SET"
TRAIN="$OUT/curated/sets/$SET/train.parquet"
VAL="$OUT/curated/sets/$SET/val.parquet"
if [[ ! -f "$TRAIN" ]]; then
    echo "the $SET set has fewer than 2 problems (see $OUT/curated/report.md): try SET=easy|very_easy or a larger SIZE" >&2
    exit 1
fi

echo "== 2. pilot sweep: B_problem=$B_PROBLEM x n in {$N_GRID}, $BUDGET rollouts per cell"
cat > "$OUT/pilot.yaml" <<EOF
name: pilot
recipe: cpu_demo                  # the Hard recipe on our CPU platform
overrides: [isocompute.model=$MODEL]
data:
  train_files: $(realpath "$TRAIN")
  val_files: $(realpath "$VAL")
budget_rollouts: $BUDGET
b_problem: [$B_PROBLEM]
n: [$N_GRID]
val_points: 6
sweep_dir: runs/pilot             # relative to this file
fit: {bootstrap: 50}
EOF
isocompute sweep --plan "$OUT/pilot.yaml"        # prints the cells first (alone: --dry-run)

echo "== 3. fit: $OUT/runs/pilot/fit/report.md"
CURVE="$OUT/runs/pilot/fit/curve.json"
if [[ ! -f "$CURVE" ]]; then
    echo "the pilot fitted no n*(C) curve (reason in $OUT/runs/pilot/sweep_state.json); allocating from $PRESET"
    CURVE=$PRESET
fi

echo "== 4. allocate $TRAIN_BUDGET rollouts with $CURVE"
# Steps 4 and 5 read the same allocation block of the same recipe (cpu_demo: its LR rule has base_lr 1e-5),
# so the lr printed here is the lr the run uses.
ALLOCATION=(isocompute.allocation.curve="$CURVE" isocompute.allocation.budget_rollouts="$TRAIN_BUDGET"
            isocompute.allocation.b_problem="$B_PROBLEM" "isocompute.allocation.n_grid=[$N_GRID]")
D=$(python -c "import pyarrow.parquet as pq, sys; print(pq.ParquetFile(sys.argv[1]).metadata.num_rows)" "$TRAIN")
isocompute allocate --dataset-size "$D" --recipe cpu_demo "${ALLOCATION[@]}"

echo "== 5. train with the allocation"
python -m verl_isocompute.main --config-name cpu_demo isocompute.model="$MODEL" \
    isocompute.data.source=files data.train_files="$(realpath "$TRAIN")" data.val_files="$(realpath "$VAL")" \
    isocompute.allocation.enable=true "${ALLOCATION[@]}" isocompute.run_dir="$OUT/train" > "$OUT/train.log" 2>&1 \
    || { tail -20 "$OUT/train.log"; exit 1; }
echo "done: run log $OUT/train/isocompute.jsonl (verl output: $OUT/train.log)"
