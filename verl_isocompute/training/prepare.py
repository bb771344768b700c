"""Preparing a run of our entry point: what :func:`prepare` does to a composed recipe before Ray starts.

:func:`verl_isocompute.training.config.check_config` makes every check that needs nothing built; this module
builds and reports what a run needs besides, in this order (:func:`prepare`):

- the platform: ``isocompute.platform=cpu`` selects our CPU backend (sets ``VERL_PLATFORM=cpu`` before
  verl is imported, which verl's entry point cannot do); on the CPU it prints the dtype
  ``isocompute.cpu.dtype`` gives (:mod:`verl_isocompute.cpu.dtype`: bf16 only where native);
- resolving the whole config now, so that a bad setting stops the run with one line before Ray starts,
  then checking the model (a usable local checkpoint with a chat template), the data files and group sizes;
- ``isocompute.guided.enable``: the training files become a mixture with guided copies of the problems
  (docs/GUIDED.md; through verl's main_ppo our trainer does it), and a validation file with guided rows is refused;
- one line each for the allocation and the learning rate, both from the config's one decision
  (:func:`verl_isocompute.training.allocation_hook.decide`, made while the config is checked; lr = base_lr *
  sqrt(B / b_ref), B = B_problem * n, n_train under the decoupled baseline, update k at lr * min(1, k / W):
  :mod:`verl_isocompute.rules.lr`);
  an lr given on the command line replaces the rule, as in verl's entry point, and the line says so;
- ``isocompute.reuse_rollout_log_probs``: skip the old-log-prob pass of a fully on-policy recipe
  (:mod:`verl_isocompute.training.on_policy`; our entry point only);
- the run directory ``isocompute.run_dir``: hydra's copy of the config, our run log
  (``isocompute.jsonl``), verl's metrics (``verl_metrics.jsonl``), checkpoints and validation generations.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, open_dict

from verl_isocompute.runlog import VERL_METRICS
from verl_isocompute.training.allocation_hook import decide, format_decision
from verl_isocompute.training.conf import files, select
from verl_isocompute.training.config import (
    RecipeError,
    check_config,
    check_model_setting,
    check_platform,
    lr_from_rule,
    resolve,
)
from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR, PLATFORM_NAME
from verl_isocompute.training.input_checks import check_reference_answers
from verl_isocompute.training.on_policy import prepare_reuse_rollout_log_probs
from verl_isocompute.training.schema import ROOT, GuidedSettings, check_block


def prepare_platform(cfg: DictConfig) -> None:
    """Select the CPU backend for this process and its Ray workers when the recipe asks for it (after
    :func:`~verl_isocompute.training.config.check_platform`); on the CPU, :func:`prepare_cpu`."""
    if select(cfg, "isocompute.platform") == PLATFORM_NAME and os.environ.get("VERL_PLATFORM", "").strip().lower() in ("", PLATFORM_NAME):
        os.environ["VERL_PLATFORM"] = PLATFORM_NAME
    check_platform(cfg)
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
        prepare_cpu(cfg)


def prepare_cpu(cfg: DictConfig) -> None:
    """On the CPU platform: the dtype from the CPU (verl_isocompute.cpu.dtype), the workers' thread count."""
    from verl_isocompute.cpu import cpu_selected, record_cpu_threads

    if not cpu_selected():
        return
    from verl_isocompute.cpu.dtype import prepare_cpu_dtype

    record_cpu_threads()
    try:
        prepare_cpu_dtype(cfg)
    except ValueError as exc:
        raise RecipeError(str(exc)) from None


def prepare_model(cfg: DictConfig) -> None:
    """The model path (``isocompute.model`` builds a built-in one) must be a usable local checkpoint."""
    from verl_isocompute.cpu.models import check_model_path

    check_model_path(cfg.actor_rollout_ref.model.path)


def prepare_data(cfg: DictConfig) -> None:
    """Local data files must exist now, not mid-run (``isocompute.data.source=arithmetic`` generates them), and
    our reward must be able to grade their reference answers
    (:func:`~verl_isocompute.training.input_checks.check_reference_answers`)."""
    for key in ("data.train_files", "data.val_files"):
        for f in files(cfg, key):
            # remote paths (hdfs://, ...) are verl's to fetch
            if "://" not in f and not Path(os.path.expanduser(f)).is_file():
                raise RecipeError(f"{key}: {f} does not exist; pass parquet files in verl's format")
    try:
        check_reference_answers(cfg)
    except ValueError as exc:
        raise RecipeError(str(exc)) from None


def prepare_guided_data(cfg: DictConfig) -> None:
    """``isocompute.guided``: the training files become a guided mixture (before the dataset is counted); its
    spend files must be readable, validation files unguided, and every guided row of the training files must
    survive verl's prompt-length filter (all checked again by the trainer, for main_ppo)."""
    from verl_isocompute.training.guided_mixture import check_validation_files, guidance_spend, guided_block, prepare_guided
    from verl_isocompute.training.guided_training_set import check_guided_lengths, training_problems

    try:
        check_block(guided_block(cfg), GuidedSettings, f"{ROOT}.guided")  # also when called alone, not by prepare()
        check_validation_files(cfg)
        guidance_spend(cfg)
        prepare_guided(cfg)
        check_guided_lengths(cfg)  # every guided row reaches training as made (docs/GUIDED.md)
        guidance_spend(cfg, training_problems(cfg))
    except ValueError as exc:
        raise RecipeError(str(exc)) from None


def prepare_run_dir(cfg: DictConfig) -> Path:
    run_dir = Path(os.path.expanduser(str(cfg.isocompute.run_dir))).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    with open_dict(cfg):
        cfg.isocompute.run_dir = str(run_dir)
    # verl's file logger reads its path from the environment of the TaskRunner (a child of this process); a
    # VERL_FILE_LOGGER_ROOT of the user's (<root>/<project>/<experiment>.jsonl) wins, as in verl.
    if "VERL_FILE_LOGGER_ROOT" not in os.environ:
        os.environ["VERL_FILE_LOGGER_PATH"] = str(run_dir / VERL_METRICS)
    return run_dir


def report_allocation(cfg: DictConfig) -> None:
    """Print the allocation an enabled ``isocompute.allocation`` decided (the config's one decision, already in
    the resolved config)."""
    chosen = decide(cfg).allocation
    if chosen is not None:
        print(f"[isocompute] allocation: {format_decision(chosen)}", flush=True)


def report_lr(cfg: DictConfig) -> None:
    """Print the learning rate the run uses and where it came from."""
    decision = decide(cfg).lr
    optim = cfg.actor_rollout_ref.actor.optim
    if not lr_from_rule(cfg):
        print(
            f"[isocompute] lr: {float(optim.lr):g}, warm-up {optim.lr_warmup_steps} steps, as set in the config or on "
            f"the command line (the {decision.rule} rule of isocompute.lr would give {decision.lr:.3g}, warm-up "
            f"{decision.warmup_steps})",
            flush=True,
        )
        return
    n_train = select(cfg, "isocompute.decoupled.n_train") if cfg.algorithm.adv_estimator == DECOUPLED_ESTIMATOR else None
    per_problem = f"n_train {n_train}" if n_train is not None else f"n {cfg.actor_rollout_ref.rollout.n}"
    print(
        f"[isocompute] lr: {decision.lr:.3g} ({decision.rule} rule: {decision.base_lr:g} * sqrt(B / {decision.b_ref:g}) with "
        f"B = B_problem {cfg.data.train_batch_size} x {per_problem} = {decision.batch_rollouts} rollouts trained on per step), "
        f"warm-up {decision.warmup_steps} steps (update k at lr * min(1, k / {decision.warmup_steps}))",
        flush=True,
    )


def prepare(cfg: DictConfig) -> DictConfig:
    """Resolve our ``isocompute`` block into plain verl settings, as verl's entry point would, and check
    them before Ray starts. Raises :class:`RecipeError` (or the model's ModelError)."""
    prepare_platform(cfg)
    check_model_setting(cfg)  # on the composed config: it reads how the model path is written
    notices = check_config(cfg)  # every settings check, before anything is built (the sweep's dry run makes the same)
    resolve(cfg)
    prepare_model(cfg)
    prepare_data(cfg)
    prepare_guided_data(cfg)
    for notice in notices:
        print(notice, flush=True)
    report_allocation(cfg)
    report_lr(cfg)
    try:
        prepare_reuse_rollout_log_probs(cfg)
    except ValueError as exc:
        raise RecipeError(str(exc)) from None
    prepare_run_dir(cfg)
    return cfg
