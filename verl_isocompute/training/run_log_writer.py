"""The isocompute trainer's run log: the compute counter, the header and one row per step.

A mixin of :class:`verl_isocompute.training.trainer.IsoComputeTrainer` (which fills in ``self.compute`` and the
settings these read). The file format is :mod:`verl_isocompute.runlog`'s; the rows carry what ``isocompute fit``
and the comparisons read (``step``, ``n``, ``b_problem``, C as ``rollouts`` and ``tokens``, ``epoch``, ``lr``,
the training reward, validation avg@k / best@k / worst@k) and the diagnostics of :data:`RUN_LOG_METRICS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf

from verl_isocompute.cpu.dtype import cpu_capability, cpu_model
from verl_isocompute.training import guided_mixture
from verl_isocompute.guided.metrics import GUIDED_METRICS, mixture_counts
from verl_isocompute.runlog import GUIDANCE_SPEND, GUIDED_MIXTURE, metric_key
from verl_isocompute.rules import metrics as iso_metrics
from verl_isocompute.training.adaptive_config import header as adaptive_header
from verl_isocompute.training.config import lr_from_rule
from verl_isocompute.rules.lr import rule_batch_rollouts

PREFIX_CHECKED = metric_key("guided_prefix_checked")  # guided rows whose prefix was checked this step
# Per-prompt n (scaling/adaptive.py): the n_i spread and what the split bought in expectation.
PER_PROMPT_METRICS = ("group_n_min", "group_n_max", "group_n_mean", "expected_zero_var_share",
                      "expected_zero_var_share_fixed_n", "expected_nonzero_groups", "expected_nonzero_groups_fixed_n")
RUN_LOG_METRICS = (
    *map(metric_key, (
        "train_acc", "zero_var_group_frac", "reg_active_frac", "trained_frac", "trained_per_group_min",
        "trained_per_group_max", "padding_rows", "singleton_rows", "evicted_groups", "evicted_rollouts",
        "reg_entropy_mean", "reg_kl_mean", "reg_token_share", "reg_seq_share")),
    "training/rollout_probs_diff_max", "response_length/mean",  # verl's
    *GUIDED_METRICS, PREFIX_CHECKED,
    # added in 0.2: the share of rollouts in zero-variance groups, and per-prompt n's metrics (when it is on)
    metric_key("zero_var_rollout_share"), *map(metric_key, PER_PROMPT_METRICS),
)


@dataclass
class ComputeCounter:
    """Cumulative sampling compute of a run: C in rollouts, and generated tokens."""

    rollouts: int = 0
    tokens: int = 0

    def add(self, rollouts: int, tokens: int) -> None:
        self.rollouts += int(rollouts)
        self.tokens += int(tokens)


class RunLogWriterMixin:
    """The run log's header and rows (module docstring)."""

    def _header(self) -> dict:
        from importlib.metadata import version

        cfg = self.config
        rule = OmegaConf.select(cfg, "isocompute.lr.rule", default=None)
        n, lr = self.n, cfg.actor_rollout_ref.actor.optim.lr
        schedule = self.adaptive.schedule if self.adaptive is not None else None
        if schedule is not None:  # n and lr move with the schedule: the header has step 1's, the rows each step's
            first = schedule.first_step()
            n, lr = first.n, first.peak_lr
        return {
            "recipe": OmegaConf.select(cfg, "isocompute.recipe", default=None),
            "model": cfg.actor_rollout_ref.model.path,
            "dataset_size": len(self.train_dataset),
            "n": n,
            "b_problem": self.b_problem,
            "n_train": self.n_train,
            "b_max": OmegaConf.select(cfg, "isocompute.allocation.b_max", default=None),
            "adv_estimator": cfg.algorithm.adv_estimator,
            "zero_variance_mode": self.zero_var_mode,
            "lr": lr,
            "lr_warmup_steps": cfg.actor_rollout_ref.actor.optim.lr_warmup_steps,
            "lr_rule": rule,
            # false: optim.lr / lr_warmup_steps were set in the config or on the command line, not by the rule
            "lr_from_rule": lr_from_rule(cfg) if OmegaConf.select(cfg, "isocompute.lr") is not None else False,
            # B of the LR rule: rollouts per step that enter the gradient (n_train per problem when decoupled)
            "lr_batch_rollouts": rule_batch_rollouts(self.b_problem, n, self.n_train) if rule else None,
            "val_n": cfg.actor_rollout_ref.rollout.val_kwargs.n,
            # what a rollout's samples depend on: its dtype (the trainer's too on the CPU platform) and seed
            "rollout_dtype": OmegaConf.select(cfg, "actor_rollout_ref.rollout.dtype", default=None),
            "rollout_seed": OmegaConf.select(cfg, "actor_rollout_ref.rollout.seed", default=None),
            **({GUIDANCE_SPEND: guided_mixture.spend.as_json(self.guidance_spend), "spend_problems": self.spend_problems}
               if self.with_guidance else {}),
            **self._mixture(),
            **adaptive_header(self.adaptive),  # the n schedule / per-prompt n settings, when on
            "total_training_steps": self.total_training_steps,
            "started_at": self.started_at,
            # the machine: a run's numbers depend on the vector ISA torch dispatches to (docs/EVIDENCE.md reports it)
            "cpu_capability": cpu_capability(),
            "cpu_model": cpu_model(),
            "verl_version": version("verl"),
            "isocompute_version": version("verl-isocompute"),
        }

    def _mixture(self) -> dict:
        """``guided_mixture``: guided / unguided rows of the training set verl built (after its filter), the real
        ratio (docs/GUIDED.md); nothing for a dataset without guided marks."""
        frame = getattr(self.train_dataset, "dataframe", None)
        if frame is None or "extra_info" not in frame.column_names:
            return {}
        counts = mixture_counts(frame["extra_info"])
        return {GUIDED_MIXTURE: counts} if counts else {}

    def _row(self, step: int, metrics: dict) -> dict:
        row = {
            "step": step,
            "n": self.n,
            "b_problem": self.b_problem,
            "rollouts": self.compute.rollouts,
            "tokens": self.compute.tokens,
            **self._with_guidance(),
            "epoch": iso_metrics.epochs(step, self.b_problem, len(self.train_dataset)),
        }
        if metrics:
            row["lr"] = metrics.get("actor/lr")
            row["train/reward"] = metrics.get("critic/score/mean")
            row.update({key: metrics[key] for key in RUN_LOG_METRICS if key in metrics})
            row.update(self._adaptive_row(step, metrics))
        row.update(self._val_info)
        return row

    def _with_guidance(self) -> dict:
        """C and tokens including the rollouts spent before training on the guided data (PrefixRL's
        comparison, arXiv 2601.18795), when ``isocompute.guided.spend`` names its spend files."""
        if not self.with_guidance:
            return {}
        return guided_mixture.spend.with_guidance(self.compute.rollouts, self.compute.tokens, self.guidance_spend)
