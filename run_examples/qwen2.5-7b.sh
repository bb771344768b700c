#!/usr/bin/env bash
# The paper's Qwen2.5-7B-Instruct runs on one node of 8 GPUs with vLLM rollout:
#   easy: the isocompute_easy recipe (KL + entropy on), n from the Easy curve
#   hard: the isocompute_hard recipe (KL and entropy off), n from the Hard curve
# B_problem = 32; n and steps for a budget C come from the paper's curves, e.g. for C = 1e6 rollouts:
#   isocompute allocate --curve paper:qwen2.5-7b-easy --budget 1e6 --format overrides   (n = 128, 244 steps)
#   isocompute allocate --curve paper:qwen2.5-7b-hard --budget 1e6 --format overrides   (n = 64, 488 steps)
# Usage: TRAIN=... VAL=... [N=... STEPS=...] bash run_examples/qwen2.5-7b.sh easy|hard [key=value ...]
# DRY_RUN=1 prints the command instead of running it.
set -euo pipefail
SET=${1:?usage: qwen2.5-7b.sh easy|hard [key=value ...]}
shift
case "$SET" in
  easy) DEFAULT_N=128; DEFAULT_STEPS=244 ;;
  hard) DEFAULT_N=64; DEFAULT_STEPS=488 ;;
  *) echo "qwen2.5-7b.sh: the set is easy or hard, got '$SET'" >&2; exit 2 ;;
esac
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
TRAIN=${TRAIN:-$HOME/data/isocompute/$SET/train.parquet}
VAL=${VAL:-$HOME/data/isocompute/$SET/val.parquet}
N=${N:-$DEFAULT_N}               # rollouts per problem: n*(1e6) on the set's curve
STEPS=${STEPS:-$DEFAULT_STEPS}   # floor(1e6 / (32 * n))
GPUS=${GPUS:-8}

OVERRIDES=(
  actor_rollout_ref.model.path="$MODEL"
  data.train_files="$TRAIN"
  data.val_files="$VAL"
  data.train_batch_size=32
  data.max_prompt_length=1024
  actor_rollout_ref.rollout.n="$N"
  trainer.total_training_steps="$STEPS"
  trainer.total_epochs=100
  trainer.test_freq=10
  trainer.save_freq=50
  trainer.n_gpus_per_node="$GPUS"
  trainer.nnodes=1
  trainer.logger='[console,file]'
  trainer.project_name=isocompute
  trainer.experiment_name="qwen2.5-7b-$SET-n$N"
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.ref.strategy=fsdp2
  actor_rollout_ref.actor.use_dynamic_bsz=true
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576
  actor_rollout_ref.model.enable_gradient_checkpointing=true
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.tensor_model_parallel_size=2
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true
  actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true
)
CMD=(python -m verl_isocompute.main --config-name "isocompute_$SET" "${OVERRIDES[@]}" "$@")
if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%s\n' "${CMD[@]}"; else "${CMD[@]}"; fi
