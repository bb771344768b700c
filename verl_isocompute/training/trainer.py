"""The ``isocompute`` v1 trainer (``trainer.v1.trainer_mode=isocompute``): verl's synchronous on-policy
trainer plus what the IsoCompute playbook (arXiv 2603.12151) needs to be measured and followed.

On top of ``PPOTrainerSync`` it:

- installs our loss in the actor workers (:func:`verl_isocompute.training.regularizers.isocompute_ppo_loss`,
  through the workers' ``set_loss_fn``);
- after verl's own advantage step (``super()._compute_advantage``, with our estimators told which rows are
  padding and, under the decoupled baseline, n_train and the step's seed: :func:`estimator_context`), turns
  the step's rewards into masks (:func:`verl_isocompute.rules.masks.step_masks`) and moves them into the
  TransferQueue fields the actor workers train on: dropped rows lose their ``response_mask`` and
  ``loss_mask``; ``regularizers`` mode adds the KL / entropy mask; seq-mean aggregation gets the kept
  sequence count; every row gets an id so the loss can report which rows it saw;
- checks before the update that every rollout was sampled with the trainer's current weights (the
  version verl stamps on each trajectory, :mod:`verl_isocompute.rules.weight_version`), and after it
  that the workers trained on exactly those rows; logs the rate the update used as ``actor/lr`` (verl
  reports the rate of the *next* update; kept as ``actor/lr_next``);
- keeps verl's policy for failed rollouts explicit: a group with a failed rollout is evicted and replaced
  by a fresh prompt (verl's ``ReplayBufferAsync``), so every trained group has its n rollouts, and the
  evicted groups' rollouts are still charged to compute;
- counts compute in one place (:class:`ComputeCounter`): cumulative rollouts C (every sampled rollout,
  n_est of them under the decoupled baseline, evicted groups included) and generated tokens (of the
  groups that reached the update: a lower bound when groups were evicted);
- computes validation avg@k / best@k / worst@k with the unbiased combinatorial estimators, a failed
  validation sample counting as a wrong one (:mod:`verl_isocompute.rules.metrics`), overall and per data
  source, with our reward also the rates that tell answer format from skill and per-problem counts in
  ``validation_problems.jsonl`` (:mod:`verl_isocompute.rules.format_metrics`), and the per-problem training
  pass-rate distribution of each epoch (the paper's interference diagnostic);
- on a guided dataset (rows marked ``extra_info.guided``, docs/GUIDED.md), logs the training accuracy of
  guided and unguided rows apart, and per placement when both are in a step
  (:func:`verl_isocompute.guided.metrics.guided_metrics`); checks every step that each assistant-placed
  prefix is prompt, never under a mask the loss reads (:mod:`verl_isocompute.guided.check`); applies
  ``isocompute.guided.enable`` when verl's main_ppo started the run; refuses validation files with guided rows;
  adds the guided data's spend files (``isocompute.guided.spend``) to C in the run log (``*_with_guidance``);
- writes the run log ``<isocompute.run_dir>/isocompute.jsonl`` (:mod:`verl_isocompute.runlog`): a header
  (``started_at``, ``ended_at``), one row per step (step 0: the validation before training), and beside it
  ``train_problems.jsonl`` (each step's problems, rollouts and correct answers). A run resumed from a
  checkpoint continues C and tokens from the log and drops rows past the resumed step; verl's metrics file
  keeps its rows up to that step too; a new run (no checkpoint loaded) in a directory another run wrote
  to moves that run's files aside first (:mod:`verl_isocompute.training.attempts`).
"""

from __future__ import annotations

import math
import os
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_isocompute.guided import check as guided_check
from verl_isocompute.training import guided_mixture, guided_training_set
from verl_isocompute.guided.metrics import guided_metrics
from verl_isocompute.runlog import (
    PREFIX_CHECK_TIMING,
    TRAIN_PROBLEMS,
    VAL_PREFIX,
    VERL_METRICS,
    ProblemRecordsWriter,
    RunLogWriter,
    metric_key,
    utc_now,
)
from verl_isocompute.rules import format_metrics
from verl_isocompute.rules.answers import problem_label
from verl_isocompute.rules import metrics as iso_metrics
from verl_isocompute.training.adaptive_trainer import AdaptiveTrainerMixin
from verl_isocompute.training.advantage import estimator_context
from verl_isocompute.training.attempts import MetricsHistory, missing_step_notice, start_attempt
from verl_isocompute.training.config import (
    check_group_size,
    check_trainer_settings,
    lr_from_rule,
    regularizers_on,
)
from verl_isocompute.rules.lr import VERL_WARMUP_SCHEDULE, lr_for_update
from verl_isocompute.rules.masks import StepMasks, accuracy, check_one_output_per_session, row_ids, step_masks
from verl_isocompute.rules.names import (
    DECOUPLED_ESTIMATOR,
    OFF,
    REG_MASK_FIELD,
    REGULARIZERS,
    ROW_ID_FIELD,
    SEQ_COUNT_FIELD,
    TRAINER,
)
from verl_isocompute.training.on_policy import unapplied_reuse_notice
from verl_isocompute.training.probes import check_probes, log_regularisers, probe_values
from verl_isocompute.rules.progress import PhaseAnnouncer
from verl_isocompute.training.run_log_writer import PREFIX_CHECKED, ComputeCounter, RunLogWriterMixin
from verl_isocompute.rules.weight_version import check_rollout_versions


@register_trainer(TRAINER)
class IsoComputeTrainer(AdaptiveTrainerMixin, RunLogWriterMixin, PhaseAnnouncer, PPOTrainerSync):
    """verl's sync on-policy trainer with the IsoCompute recipe's masks, compute accounting and run log."""

    with_guidance = False  # the run log adds C with the guided data's spend (set by _prepare_guided)

    def __init__(self, config) -> None:
        super().__init__(config)
        self._read_settings(config)
        notice = unapplied_reuse_notice(config)
        if notice:
            print(notice, flush=True)
        run_dir = Path(OmegaConf.select(config, "isocompute.run_dir", default=None) or config.trainer.default_local_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        # verl's file logger (created in fit) writes into the run dir unless told otherwise (a path, or a root:
        # <root>/<project>/<experiment>.jsonl); our entry point sets it in the driver, verl's main_ppo does not.
        if "VERL_FILE_LOGGER_ROOT" not in os.environ:
            os.environ.setdefault("VERL_FILE_LOGGER_PATH", str(run_dir / VERL_METRICS))
        self.started_at = utc_now()  # the run log header's started_at (a resumed run keeps its first)
        self.run_log = RunLogWriter(run_dir)
        self.val_problems = ProblemRecordsWriter(run_dir)
        self.train_problems = ProblemRecordsWriter(run_dir, TRAIN_PROBLEMS)
        self._prepare_guided(config)
        self.compute = ComputeCounter()
        self._step_info: dict = {}
        self._step_problems: list[dict] = []
        self._expected_probes: dict = {}
        self._val_info: dict = {}
        self._epoch_samples: list[dict] = []
        self._metrics_history = MetricsHistory()

    # -- set-up --------------------------------------------------------------------------------------
    def _read_settings(self, config) -> None:
        """Our settings, checked before any worker starts (a bad one is a ValueError naming the key)."""
        check_group_size(config)
        check_trainer_settings(config)  # the same checks our entry point makes before Ray starts
        self.zero_var_mode = str(OmegaConf.select(config, "isocompute.zero_variance.mode", default=OFF))
        self.n = int(config.actor_rollout_ref.rollout.n)
        self.b_problem = int(config.data.train_batch_size)
        self.decoupled = config.algorithm.adv_estimator == DECOUPLED_ESTIMATOR
        self.n_train = int(OmegaConf.select(config, "isocompute.decoupled.n_train")) if self.decoupled else None
        self.pass_rate_bins = int(OmegaConf.select(config, "isocompute.pass_rate_bins", default=10))
        self.regularizers_on = regularizers_on(config)  # else reg_active_frac is 0: nothing for the mask to act on
        # the kept-sequence count is per step: the seq-mean normaliser can use it only if a step is one mini-batch
        self.one_mini_batch = int(config.actor_rollout_ref.actor.ppo_mini_batch_size) == self.b_problem
        self._read_adaptive(config, lr_from_rule)  # the n schedule and per-prompt n (training/adaptive_trainer.py)

    def _prepare_guided(self, config) -> None:
        """docs/GUIDED.md: validation on unguided problems only; the guided mixture when main_ppo started the run
        (our entry point has made it already; verl builds the datasets after this); the guidance spend, read once."""
        guided_mixture.check_validation_files(config)
        guided_mixture.prepare_guided(config)
        guided_training_set.check_guided_lengths(config)  # no guided row dropped or cut by verl's length limit
        problems = guided_training_set.training_problems(config)  # the spend counts only the problems trained on
        self.guidance_spend = guided_mixture.guidance_spend(config, problems)
        self.spend_problems = None if problems is None else len(problems)
        self.with_guidance = bool(guided_mixture.spend_locations(guided_mixture.guided_block(config)))

    def _build_replay_buffer(self):
        """verl's replay buffer, which must evict a group with a failed rollout and sample a fresh prompt in
        its place (``ReplayBufferAsync``; verl picks it for any trainer_mode other than ``sync``). That keeps
        every trained group at n rollouts (the GRPO baseline and n_est as configured); the sync buffer would
        instead train short groups and pad the batch."""
        from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

        buffer = super()._build_replay_buffer()
        if not isinstance(buffer, ReplayBufferAsync):
            raise ValueError(
                f"the isocompute trainer needs a replay buffer that evicts and refills groups with failed rollouts "
                f"(verl's ReplayBufferAsync), got {type(buffer).__name__}: remove trainer.v1.sampler.custom_sampler "
                "or derive it from ReplayBufferAsync"
            )
        return buffer

    def on_init_end(self) -> None:
        super().on_init_end()
        from verl.utils.config import omega_conf_to_dataclass

        from verl_isocompute.training.regularizers import isocompute_ppo_loss

        actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(partial(isocompute_ppo_loss, config=actor_config))
        # verl has loaded its checkpoint (or none): a resume or a new run, by what it loaded
        self._metrics_history = start_attempt(self.config, self.run_log.path.parent, self.global_steps)
        last = self.run_log.resume(self.global_steps)
        self.val_problems.resume(self.global_steps)
        self.train_problems.resume(self.global_steps)
        if notice := missing_step_notice(last, self.global_steps, self.b_problem * self.n):
            print(notice, flush=True)
        self.compute = ComputeCounter(last["rollouts"], last["tokens"]) if last else ComputeCounter()
        self.run_log.write_header(self._header())

    # -- advantages and masks ------------------------------------------------------------------------
    def _decoupled_seed(self) -> tuple[int, int] | None:
        if not self.decoupled:
            return None
        return int(self.config.actor_rollout_ref.actor.data_loader_seed), int(self.global_steps)

    def _compute_advantage(self, batch, metrics: dict):
        import transfer_queue as tq
        from tensordict import TensorDict
        from verl.workers.utils.padding import response_to_nested

        check_one_output_per_session(batch.keys, self.global_steps)  # what our masks and C count per row
        real = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
        seed = self._decoupled_seed()
        with estimator_context(real=real, n_train=self.n_train, seed=seed):
            batch = super()._compute_advantage(batch, metrics)

        fields = ["uid", "response_mask", "loss_mask", "rm_scores", "extra_fields", "extra_info"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]  # after verl's rollout rejection sampling, if any
        response_mask = nested_mask.to_padded_tensor(0)
        loss_mask = data["loss_mask"].to_padded_tensor(0)  # as generated: the agent loop's copy of response_mask
        scores = data["rm_scores"].to_padded_tensor(0).sum(dim=-1)
        uids = np.array(data.pop("uid").tolist(), dtype=object)
        acc = accuracy(data.pop("extra_fields").tolist(), scores.tolist())
        masks = step_masks(uids, acc, real, self.zero_var_mode, self.n_train, seed)
        infos = data.pop("extra_info", None)  # absent when no row carries one
        infos = [] if infos is None else infos.tolist()
        metrics.update(guided_metrics(infos, acc, real))  # guided rows: docs/GUIDED.md
        self._check_prefixes(batch, infos, nested_mask, data["loss_mask"], metrics)

        # Compute spent: every sampled rollout (all n_est under the decoupled baseline) and its tokens.
        self._step_info = {"rollouts": int(real.sum()), "tokens": int(loss_mask.sum(dim=-1)[torch.from_numpy(real)].sum())}
        self._step_problems = iso_metrics.step_problem_counts(uids, acc, real, [problem_label(i) for i in infos] if infos else None)
        self._log_masks(masks, acc, uids, metrics)
        self._adaptive_observe(uids, acc, real, metrics)  # per-prompt n: pass rates, n_i, expected shares

        keep = torch.from_numpy(masks.keep)
        ids = row_ids(batch.keys)
        output = {ROW_ID_FIELD: torch.from_numpy(ids)}
        if not masks.keep.all():  # dropped rows leave every loss term and the normalisers
            output["response_mask"] = response_to_nested(response_mask * keep[:, None].to(response_mask.dtype), nested_mask)
            output["loss_mask"] = response_to_nested(loss_mask * keep[:, None].to(loss_mask.dtype), nested_mask)
        if self.zero_var_mode == REGULARIZERS:
            output[REG_MASK_FIELD] = torch.from_numpy(masks.reg_mask).to(torch.float32)
        if self.one_mini_batch:
            output[SEQ_COUNT_FIELD] = torch.full((len(batch),), float(masks.seq_count))
        self._expected_probes = probe_values(masks, (response_mask * keep[:, None]).sum(dim=-1).numpy(), ids)
        metrics.update({metric_key(name): value for name, value in self._expected_probes.items()})
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(output, batch_size=len(batch)))

    def _check_prefixes(self, batch, infos: list, response_mask, loss_mask, metrics: dict) -> None:
        """Every assistant-placed guided row: prompt ids end with the prefix's ids, and the masks cover the
        response only (:mod:`verl_isocompute.guided.check`); raises at the first row that breaks it. One more
        TransferQueue read of those rows' ids, no forward pass."""
        import transfer_queue as tq

        rows = guided_check.assistant_guided_rows(infos)
        if not rows:
            return
        start = time.perf_counter()
        ids = tq.kv_batch_get(keys=[batch.keys[i] for i in rows], partition_id=batch.partition_id,
                              select_fields=["prompts", "responses", "input_ids"])
        response_masks, loss_masks = response_mask.unbind(), loss_mask.unbind()
        metrics[PREFIX_CHECKED] = guided_check.check_prefixes(
            rows, [guided_check.guided_prefix_ids(self.tokenizer, infos[i]) for i in rows],
            ids["prompts"].unbind(), ids["responses"].unbind(), ids["input_ids"].unbind(),
            [response_masks[i] for i in rows], [loss_masks[i] for i in rows], step=self.global_steps,
        )
        metrics[PREFIX_CHECK_TIMING] = time.perf_counter() - start

    def _log_masks(self, masks: StepMasks, acc: np.ndarray, uids: np.ndarray, metrics: dict) -> None:
        real = masks.real
        metrics[metric_key("zero_var_group_frac")] = 1.0 - masks.varying_groups / max(1, masks.groups)
        # the share of rollouts (not groups) with no gradient: groups differ in size under per-prompt n
        metrics[metric_key("zero_var_rollout_share")] = float(1.0 - masks.varies[real].mean()) if real.any() else 0.0
        active = real.any() and self.regularizers_on
        metrics[metric_key("reg_active_frac")] = float(masks.reg_mask[real].mean()) if active else 0.0
        metrics[metric_key("trained_frac")] = float(masks.keep[real].mean()) if real.any() else 0.0
        metrics[metric_key("train_acc")] = float(acc[real].mean()) if real.any() else 0.0
        metrics[metric_key("padding_rows")] = masks.padding_rows
        metrics[metric_key("singleton_rows")] = masks.singleton_rows
        self._epoch_samples.extend({"uid": u, "acc": a} for u, a in zip(uids[real], acc[real], strict=True))

    # -- the actor update ----------------------------------------------------------------------------
    def _update_actor(self, batch, metrics: dict):
        if not OmegaConf.select(self.config, "skip.rollout_tq.enable", default=False):  # replayed rollouts: on purpose
            version = check_rollout_versions(batch.tags, int(self.global_steps))
            if version is not None:
                metrics[metric_key("rollout_weight_version")] = version
        batch = super()._update_actor(batch, metrics)
        check_probes(self._expected_probes, metrics, self.global_steps)
        log_regularisers(metrics)
        self._log_update_lr(metrics)
        return batch

    def _log_update_lr(self, metrics: dict) -> None:
        """``actor/lr`` := the rate this step's update ran at. verl reads the scheduler after stepping it,
        i.e. the next update's rate; check that it follows our rule and keep it as ``actor/lr_next``. The peak is
        ``optim.lr``, or the n schedule's lr_t for this step."""
        optim = self.config.actor_rollout_ref.actor.optim
        peak, warmup, k = self._peak_lr, int(optim.lr_warmup_steps), int(self.global_steps)
        following = metrics.get("actor/lr")
        if following is None:
            return
        if not math.isclose(following, lr_for_update(k + 1, peak, warmup), rel_tol=1e-6, abs_tol=1e-15):
            raise RuntimeError(
                f"step {k}: verl's LR scheduler moved to {following} for update {k + 1}, the warm-up rule gives "
                f"{lr_for_update(k + 1, peak, warmup)}; check actor_rollout_ref.actor.optim "
                f"({', '.join(f'{key}={optim.get(key)}' for key in VERL_WARMUP_SCHEDULE)})"
            )
        metrics["actor/lr_next"] = following
        metrics["actor/lr"] = lr_for_update(k, peak, warmup)

    # -- validation ----------------------------------------------------------------------------------
    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, expected_acc_counts=None):
        # verl's bootstrap of best/worst/majority over every extra key would add ~1000 resamples per problem for each
        # format flag, and log them again as val-aux: the flags are ours to summarise (format_metrics)
        verls = {key: values for key, values in reward_extra_infos_dict.items() if key not in format_metrics.REWARD_KEYS}
        metric_dict = super()._val_metrics_update(
            data_sources, sample_uids, verls, sample_turns, expected_acc_counts=expected_acc_counts
        )
        scores = reward_extra_infos_dict["reward"]
        acc = reward_extra_infos_dict.get("acc") or [None] * len(scores)
        k = int(self.config.actor_rollout_ref.rollout.val_kwargs.n)
        samples, failed = iso_metrics.validation_samples(
            sample_uids, data_sources,
            [float(iso_metrics.is_correct(s, a)) for a, s in zip(acc, scores, strict=True)],
            expected_counts=expected_acc_counts, default_n=k,
            extra={key: values for key, values in reward_extra_infos_dict.items() if key in format_metrics.REWARD_KEYS},
        )
        self._val_info = iso_metrics.validation_metrics(samples, k=k, prefix=VAL_PREFIX)
        self._val_info[f"{VAL_PREFIX}/failed_samples"] = failed
        if format_metrics.has_flags(samples):  # our reward's format diagnostics: format or skill (docs/EVIDENCE.md)
            self._val_info.update(format_metrics.format_metrics(samples, prefix=VAL_PREFIX))
            self.val_problems.append(format_metrics.problem_counts(samples, self.global_steps))
        metric_dict.update(self._val_info)
        return metric_dict

    # -- the run log ---------------------------------------------------------------------------------
    def on_validate_begin(self) -> None:
        self._metrics_history.restore(self.logger)  # verl's logger exists and has logged nothing yet
        super().on_validate_begin()

    def on_train_begin(self) -> None:
        self._metrics_history.restore(self.logger)
        super().on_train_begin()
        if self.adaptive is not None:
            self._plan_step(self.global_steps)  # the n schedule's first (or resumed) step: row 0 has its n, as the header
        # Validation before training is logged as step 0 of a fresh run; a resumed run already has it.
        if self._val_info and self.global_steps == 1:
            self.run_log.append(self._row(step=0, metrics={}))
        self._val_info = {}

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

    def _charge_compute(self, metrics: dict) -> None:
        """Add this step's sampling compute to C: the rollouts that reached the update, and the n rollouts of
        every group verl sampled and evicted (a failed rollout, ...), whose samples never reached us."""
        evicted, evicted_rollouts = self._adaptive_evictions(iso_metrics.evicted_groups(metrics))  # n_i each
        metrics[metric_key("evicted_groups")] = evicted
        metrics[metric_key("evicted_rollouts")] = evicted_rollouts
        self.compute.add(self._step_info.get("rollouts", 0) + evicted_rollouts, self._step_info.get("tokens", 0))
        metrics[metric_key("rollouts")] = self.compute.rollouts
        metrics[metric_key("tokens")] = self.compute.tokens
        # the run's shape, so that verl's own loggers (file, tensorboard, wandb) are enough for `isocompute fit`
        metrics[metric_key("n")], metrics[metric_key("b_problem")] = self.n, self.b_problem
        metrics.update({metric_key(key): value for key, value in self._with_guidance().items()})

    def fit(self, agent_loop_manager):
        """verl's training loop; its return is the run's planned end (a crash leaves no ``ended_at``)."""
        super().fit(agent_loop_manager)
        self.run_log.update_header(ended_at=utc_now())

    def step(self, metrics: dict, timing_raw: dict):
        """verl's step (rollout, advantages, update), then its compute charged to C before verl decides whether to
        save and validate: groups evicted in it may have spent the budget of an n schedule, which then makes this
        step the run's last (:meth:`AdaptiveTrainerMixin._end_at_spent_budget`)."""
        batch = super().step(metrics, timing_raw)
        self._charge_compute(metrics)
        self._end_at_spent_budget()
        return batch

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        metrics[metric_key("trained_per_group_min")], metrics[metric_key("trained_per_group_max")] = self._trained_per_group(batch)
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        row = self._row(global_steps, metrics)
        end_of_epoch = global_steps % max(1, self.steps_per_epoch) == 0
        if self._epoch_samples and (end_of_epoch or global_steps >= self.total_training_steps):
            hist = iso_metrics.pass_rate_histogram(self._epoch_samples, bins=self.pass_rate_bins)
            row["train/pass_rate_hist"] = {**hist, "complete_epoch": end_of_epoch}
            self._epoch_samples = []
        self.run_log.append(row)
        self.train_problems.append([{"step": global_steps, **record} for record in self._step_problems])
        self._val_info = {}
        if self.adaptive is not None:
            self._adaptive_step_end(global_steps)
