"""The ``isocompute`` v1 trainer (``trainer.v1.trainer_mode=isocompute``): verl's synchronous on-policy
trainer plus what the IsoCompute playbook (arXiv 2603.12151) needs to be measured and followed.

On top of ``PPOTrainerSync`` it:

- installs our loss in the actor workers (:func:`verl_isocompute.training.regularizers.isocompute_ppo_loss`,
  through the workers' ``set_loss_fn``), and marks per sample what the loss should do:
  ``isocompute.zero_variance.mode`` = ``off`` | ``groups`` (zero-variance groups leave every loss term
  and the token normaliser) | ``regularizers`` (KL / entropy only on groups whose accuracy varies);
- runs the decoupled baseline of appendix C (``algorithm.adv_estimator=isocompute_grpo_decoupled``,
  ``isocompute.decoupled.n_train``): baseline from all n_est = ``rollout.n`` rollouts, training on a seeded
  uniform subset of n_train per group, the rest masked out of every loss term and the normaliser;
- counts compute in one place (:class:`ComputeCounter`): cumulative rollouts C (every sampled rollout,
  n_est of them under the decoupled baseline) and generated tokens;
- computes validation avg@k / best@k / worst@k with the unbiased combinatorial estimators
  (:mod:`verl_isocompute.training.metrics`), overall and per data source, and the per-problem training pass-rate
  distribution of each epoch (the paper's interference diagnostic);
- writes the run log ``<isocompute.run_dir>/isocompute.jsonl`` (contract in ARCHITECTURE.md): a header,
  then one row per step (a step-0 row carries the validation before training). A run resumed from a
  checkpoint continues C and tokens from the log and drops rows past the resumed step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_isocompute.runlog import RunLogWriter
from verl_isocompute.training import metrics as iso_metrics
from verl_isocompute.training.advantage import (
    compute_isocompute_grpo_decoupled,
    decoupled_train_mask,
    group_has_variance,
)
from verl_isocompute.training.regularizers import (
    MODES,
    REG_MASK_FIELD,
    isocompute_ppo_loss,
)

TRAINER_NAME = "isocompute"
DECOUPLED = "isocompute_grpo_decoupled"


@dataclass
class ComputeCounter:
    """Cumulative sampling compute of a run: C in rollouts, and generated tokens."""

    rollouts: int = 0
    tokens: int = 0

    def add(self, rollouts: int, tokens: int) -> None:
        self.rollouts += int(rollouts)
        self.tokens += int(tokens)


def _acc_of(extra_fields: list, scores: torch.Tensor) -> np.ndarray:
    """Binary accuracy per sample: the reward's ``acc`` when it gives one, else score > 0."""
    acc = []
    for extra, score in zip(extra_fields, scores.tolist(), strict=True):
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        acc.append(float(bool(info["acc"])) if "acc" in info and info["acc"] is not None else float(score > 0))
    return np.asarray(acc, dtype=np.float32)


@register_trainer(TRAINER_NAME)
class IsoComputeTrainer(PPOTrainerSync):
    """verl's sync on-policy trainer with the IsoCompute recipe's loss, compute accounting and run log."""

    def __init__(self, config) -> None:
        super().__init__(config)
        iso = config.get("isocompute") or {}
        self.zero_var_mode = str(OmegaConf.select(config, "isocompute.zero_variance.mode", default="off"))
        if self.zero_var_mode not in MODES:
            raise ValueError(f"isocompute.zero_variance.mode={self.zero_var_mode!r}: use one of {', '.join(MODES)}")
        self.n = int(config.actor_rollout_ref.rollout.n)
        self.b_problem = int(config.data.train_batch_size)
        self.n_train = OmegaConf.select(config, "isocompute.decoupled.n_train", default=None)
        if config.algorithm.adv_estimator == DECOUPLED:
            if self.n_train is None or not (1 <= int(self.n_train) <= self.n):
                raise ValueError(
                    f"algorithm.adv_estimator={DECOUPLED} needs isocompute.decoupled.n_train in [1, "
                    f"actor_rollout_ref.rollout.n={self.n}], got {self.n_train}"
                )
            self.n_train = int(self.n_train)
        self.pass_rate_bins = int(OmegaConf.select(config, "isocompute.pass_rate_bins", default=10))
        run_dir = iso.get("run_dir") or config.trainer.default_local_dir
        self.run_log = RunLogWriter(run_dir)
        self.compute = ComputeCounter()
        self._step_info: dict = {}
        self._val_info: dict = {}
        self._epoch_records: list[dict] = []

    # -- set-up --------------------------------------------------------------------------------------
    def on_init_end(self) -> None:
        super().on_init_end()
        from verl.utils.config import omega_conf_to_dataclass

        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(partial(isocompute_ppo_loss, config=actor_config))
        last = self.run_log.resume(self.global_steps)
        self.compute = ComputeCounter(last["rollouts"], last["tokens"]) if last else ComputeCounter()
        self.run_log.write_header(self._header())

    def _header(self) -> dict:
        from importlib.metadata import version

        cfg = self.config
        return {
            "recipe": OmegaConf.select(cfg, "isocompute.recipe", default=None),
            "model": cfg.actor_rollout_ref.model.path,
            "dataset_size": len(self.train_dataset),
            "n": self.n,
            "b_problem": self.b_problem,
            "n_train": self.n_train,
            "b_max": OmegaConf.select(cfg, "isocompute.allocation.b_max", default=None),
            "adv_estimator": cfg.algorithm.adv_estimator,
            "zero_variance_mode": self.zero_var_mode,
            "lr": cfg.actor_rollout_ref.actor.optim.lr,
            "lr_warmup_steps": cfg.actor_rollout_ref.actor.optim.lr_warmup_steps,
            "val_n": cfg.actor_rollout_ref.rollout.val_kwargs.n,
            "total_training_steps": self.total_training_steps,
            "verl_version": version("verl"),
            "isocompute_version": version("verl-isocompute"),
        }

    # -- advantages, masks, compute ------------------------------------------------------------------
    def _compute_advantage(self, batch, metrics: dict):
        import transfer_queue as tq
        from tensordict import TensorDict
        from verl.protocol import DataProto
        from verl.trainer.ppo.ray_trainer import apply_kl_penalty
        from verl.trainer.ppo.rollout_corr_helper import (
            compute_rollout_correction_and_add_to_batch,
        )
        from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
        from verl.workers.utils.padding import response_to_nested

        fields = ["uid", "response_mask", "loss_mask", "rm_scores", "rollout_log_probs", "old_log_probs",
                  "ref_log_prob", "values", "extra_fields"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        response_mask = data["response_mask"]
        extra_fields = data.pop("extra_fields").tolist()
        loss_mask_nested = data.pop("loss_mask")
        data = DataProto(batch=data.to_padded_tensor())
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        uids = np.array(data.batch.pop("uid").tolist(), dtype=object)
        data.non_tensor_batch["uid"] = uids
        real = torch.tensor([not tag.get("is_padding", False) for tag in batch.tags])

        # Compute spent: every sampled rollout (all n_est under the decoupled baseline) and its tokens.
        lengths = data.batch["response_mask"].sum(dim=-1)
        self._step_info = {"rollouts": int(real.sum()), "tokens": int(lengths[real].sum())}

        if self.config.algorithm.use_kl_in_reward:
            data, kl_metrics = apply_kl_penalty(data, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=self.config.algorithm.kl_penalty)
            metrics.update(kl_metrics)
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]

        rollout_corr_config = self.config.algorithm.get("rollout_correction", None)
        bypass = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)
        rollout_correction = rollout_corr_config is not None and "rollout_log_probs" in data.batch and not bypass
        if rollout_correction:
            data, is_metrics = compute_rollout_correction_and_add_to_batch(data, rollout_corr_config)
            metrics.update(is_metrics)

        # Which samples each loss term sees. Variance is judged on the binary accuracy.
        acc = _acc_of(extra_fields, data.batch["rm_scores"].sum(dim=-1))
        varies = group_has_variance(acc, uids)
        keep = torch.ones(len(uids), dtype=torch.bool)  # samples left in every loss term and the normaliser
        if self.config.algorithm.adv_estimator == DECOUPLED:
            seed = (int(self.config.actor_rollout_ref.actor.data_loader_seed), int(self.global_steps))
            adv, ret = compute_isocompute_grpo_decoupled(
                token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                index=uids, config=self.config.algorithm, n_train=self.n_train, seed=seed,
            )
            keep &= decoupled_train_mask(uids, self.n_train, seed)
            data.batch["advantages"], data.batch["returns"] = adv, ret
        else:
            data = compute_advantage_for_multi_trajectories(
                data, batch_keys=batch.keys, adv_estimator=self.config.algorithm.adv_estimator,
                gamma=self.config.algorithm.gamma, lam=self.config.algorithm.lam,
                num_repeat=self.n, norm_adv_by_std_in_grpo=self.config.algorithm.get("norm_adv_by_std_in_grpo", True),
                config=self.config.algorithm,
            )
        if self.zero_var_mode == "groups":
            keep &= varies

        metrics["isocompute/zero_var_group_frac"] = self._zero_var_group_frac(varies, uids, real)
        metrics["isocompute/reg_active_frac"] = (
            float(varies[real].float().mean()) if self.zero_var_mode == "regularizers" else float(keep[real].float().mean())
        )
        metrics["isocompute/trained_frac"] = float(keep[real].float().mean())
        metrics["isocompute/train_acc"] = float(acc[real.numpy()].mean())
        self._epoch_records.extend({"uid": u, "acc": a} for u, a, r in zip(uids, acc, real.tolist(), strict=True) if r)

        output = {
            "advantages": response_to_nested(data.batch["advantages"], response_mask),
            "returns": response_to_nested(data.batch["returns"], response_mask),
        }
        if self.config.algorithm.use_kl_in_reward:
            output["token_level_rewards"] = response_to_nested(data.batch["token_level_rewards"], response_mask)
        new_response_mask = data.batch["response_mask"] * keep[:, None].to(data.batch["response_mask"].dtype)
        if rollout_correction or not bool(keep.all()):
            output["response_mask"] = response_to_nested(new_response_mask, response_mask)
        if not bool(keep.all()):
            # the token normaliser is the loss mask: dropped samples must leave it too
            loss_mask = loss_mask_nested.to_padded_tensor(0) * keep[:, None].to(new_response_mask.dtype)
            output["loss_mask"] = response_to_nested(loss_mask, response_mask)
        if rollout_correction and "rollout_is_weights" in data.batch:
            output["rollout_is_weights"] = response_to_nested(data.batch["rollout_is_weights"], response_mask)
        if self.zero_var_mode == "regularizers":
            output[REG_MASK_FIELD] = varies.to(torch.float32)
        output = TensorDict(output, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

    @staticmethod
    def _zero_var_group_frac(varies: torch.Tensor, uids: np.ndarray, real: torch.Tensor) -> float:
        groups = {u: bool(v) for u, v, r in zip(uids, varies.tolist(), real.tolist(), strict=True) if r}
        return 1.0 - sum(groups.values()) / max(1, len(groups))

    # -- validation ----------------------------------------------------------------------------------
    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, expected_acc_counts=None):
        metric_dict = super()._val_metrics_update(
            data_sources, sample_uids, reward_extra_infos_dict, sample_turns, expected_acc_counts=expected_acc_counts
        )
        scores = reward_extra_infos_dict["reward"]
        acc = reward_extra_infos_dict.get("acc") or [None] * len(scores)
        records = {
            "uid": list(sample_uids),
            "data_source": [str(d) for d in data_sources],
            "acc": [float(bool(a)) if a is not None else float(s > 0) for a, s in zip(acc, scores, strict=True)],
        }
        k = int(self.config.actor_rollout_ref.rollout.val_kwargs.n)
        self._val_info = iso_metrics.validation_metrics(records, k=k, prefix="val")
        metric_dict.update(self._val_info)
        return metric_dict

    # -- the run log ---------------------------------------------------------------------------------
    def on_train_begin(self) -> None:
        super().on_train_begin()
        # Validation before training is logged as step 0 of a fresh run; a resumed run already has it.
        if self._val_info and self.global_steps == 1:
            self.run_log.append(self._row(step=0, metrics={}))
        self._val_info = {}

    def _row(self, step: int, metrics: dict) -> dict:
        row = {
            "step": step,
            "n": self.n,
            "b_problem": self.b_problem,
            "rollouts": self.compute.rollouts,
            "tokens": self.compute.tokens,
            "epoch": iso_metrics.epochs(step, self.b_problem, len(self.train_dataset)),
        }
        if metrics:
            row["lr"] = metrics.get("actor/lr")
            row["train/reward"] = metrics.get("critic/score/mean")
            for key in ("isocompute/train_acc", "isocompute/zero_var_group_frac", "isocompute/reg_active_frac",
                        "isocompute/trained_frac", "isocompute/trained_per_group_min", "isocompute/trained_per_group_max",
                        "training/rollout_probs_diff_max", "response_length/mean"):
                if key in metrics:
                    row[key] = metrics[key]
        row.update(self._val_info)
        return row

    def _trained_per_group(self, batch) -> tuple[int, int]:
        """(min, max) over groups of sequences that carry loss tokens, read back from the TransferQueue
        fields the actor workers train on (so it checks what reached them, not what we meant to send)."""
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "loss_mask"])
        uids = data.pop("uid").tolist()
        trained = (data["loss_mask"].to_padded_tensor(0).sum(dim=-1) > 0).tolist()
        per_group: dict[str, int] = {}
        for uid, t, tag in zip(uids, trained, batch.tags, strict=True):
            if not tag.get("is_padding", False):
                per_group[uid] = per_group.get(uid, 0) + int(t)
        return min(per_group.values()), max(per_group.values())

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        metrics["isocompute/trained_per_group_min"], metrics["isocompute/trained_per_group_max"] = self._trained_per_group(batch)
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        self.compute.add(self._step_info.get("rollouts", 0), self._step_info.get("tokens", 0))
        metrics["isocompute/rollouts"] = self.compute.rollouts
        metrics["isocompute/tokens"] = self.compute.tokens
        row = self._row(global_steps, metrics)
        end_of_epoch = global_steps % max(1, self.steps_per_epoch) == 0
        if self._epoch_records and (end_of_epoch or global_steps >= self.total_training_steps):
            hist = iso_metrics.pass_rate_histogram(self._epoch_records, bins=self.pass_rate_bins)
            row["train/pass_rate_hist"] = {**hist, "complete_epoch": end_of_epoch}
            self._epoch_records = []
        self.run_log.append(row)
        self._val_info = {}
