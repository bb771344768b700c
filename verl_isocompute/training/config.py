"""Our ``isocompute:`` config block, resolved into plain verl settings before verl builds anything.

Used by the entry point (:mod:`verl_isocompute.main`), the sweep and curation (which compose recipes
outside ``hydra.main`` with :func:`compose_recipe`). What :func:`prepare` resolves:

- the platform: ``isocompute.platform=cpu`` selects our CPU backend (sets ``VERL_PLATFORM=cpu`` before
  verl is imported, starts Ray with logical GPUs) and rejects GPU-only settings;
- the model: ``isocompute.model=smollm2|tiny`` builds (once) and uses a built-in model; otherwise
  ``actor_rollout_ref.model.path`` is checked to be a usable local checkpoint with a chat template;
- the data: ``isocompute.data.source=arithmetic`` generates the seeded demo problem set;
- the allocation hook (``isocompute.allocation.enable``): a budget becomes ``rollout.n``,
  ``data.train_batch_size``, steps and lr (:func:`verl_isocompute.scaling.allocation.apply_allocation`);
- the learning rate (``isocompute.lr``): lr = base_lr * sqrt(B_problem * n / b_ref) with a linear
  warm-up, written into verl's optimizer config (:mod:`verl_isocompute.training.lr`), so no worker resolves it;
- the run directory ``isocompute.run_dir``: hydra's record of the config, our run log
  (``isocompute.jsonl``), verl's metrics (``verl_metrics.jsonl``), checkpoints and validation generations.

A setting given explicitly on the command line is never silently replaced by the allocation or the LR
rule: that is an error naming both values.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_isocompute.runlog import VERL_METRICS

# Estimators that compare samples within a group (GRPO family): a group of one has no baseline.
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "grpo_passk", "optimal_token_baseline",
                    "isocompute_grpo", "isocompute_grpo_decoupled")
GPU_ONLY_ROLLOUTS = ("vllm", "sglang", "trtllm")


class RecipeError(ValueError):
    """A configuration a run cannot start with; the message names the key and the fix."""


def _select(cfg: DictConfig, key: str, default=None):
    return OmegaConf.select(cfg, key, default=default)


def prepare_platform(cfg: DictConfig) -> None:
    """Select the CPU backend for this process and its Ray workers when the recipe asks for it."""
    platform = _select(cfg, "isocompute.platform")
    if platform not in (None, "auto", "cpu"):
        raise RecipeError(f"isocompute.platform={platform!r}: use cpu, or auto to let verl detect the accelerator")
    env_platform = os.environ.get("VERL_PLATFORM", "").strip().lower()
    if platform == "cpu":
        if env_platform and env_platform != "cpu":
            raise RecipeError(f"VERL_PLATFORM={env_platform} conflicts with isocompute.platform=cpu; unset one of them")
        os.environ["VERL_PLATFORM"] = "cpu"
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != "cpu":
        return
    rollout = _select(cfg, "actor_rollout_ref.rollout.name")
    if rollout in GPU_ONLY_ROLLOUTS:
        raise RecipeError(
            f"actor_rollout_ref.rollout.name={rollout} needs a GPU, but this run uses the CPU platform "
            "(VERL_PLATFORM=cpu / isocompute.platform=cpu): set actor_rollout_ref.rollout.name=hf, "
            "or run on a GPU machine with isocompute.platform=auto"
        )
    for role in ("actor", "ref"):
        strategy = _select(cfg, f"actor_rollout_ref.{role}.strategy")
        if strategy not in (None, "fsdp2"):
            raise RecipeError(
                f"actor_rollout_ref.{role}.strategy={strategy}: on the CPU platform only fsdp2 works "
                f"(FSDP1 needs a GPU to sync module states); set actor_rollout_ref.{role}.strategy=fsdp2"
            )


def prepare_model(cfg: DictConfig) -> None:
    from verl_isocompute.cpu.models import check_model_path, ensure_model

    name = _select(cfg, "isocompute.model")
    with open_dict(cfg):
        if name:
            cfg.actor_rollout_ref.model.path = str(ensure_model(name))
    check_model_path(cfg.actor_rollout_ref.model.path)


def prepare_data(cfg: DictConfig) -> None:
    source = _select(cfg, "isocompute.data.source")
    if source in (None, "files"):
        for key in ("data.train_files", "data.val_files"):
            for f in _files(cfg, key):
                # remote paths (hdfs://, ...) are verl's to fetch; local ones must exist now, not mid-run
                if "://" not in f and not Path(os.path.expanduser(f)).is_file():
                    raise RecipeError(f"{key}: {f} does not exist; pass parquet files in verl's format")
        return
    if source != "arithmetic":
        raise RecipeError(f"isocompute.data.source={source!r}: use arithmetic (generated demo set) or files")
    from verl_isocompute.cpu.models import cache_dir
    from verl_isocompute.data.arithmetic import ArithmeticSpec, write_arithmetic_dataset

    spec = ArithmeticSpec(**{k: v for k, v in OmegaConf.to_container(cfg.isocompute.data).items() if k != "source"})
    train, val = write_arithmetic_dataset(cache_dir() / "data" / spec.name, spec)
    with open_dict(cfg):
        cfg.data.train_files = str(train)
        cfg.data.val_files = str(val)


def prepare_run_dir(cfg: DictConfig) -> Path:
    run_dir = Path(os.path.expanduser(str(cfg.isocompute.run_dir))).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    with open_dict(cfg):
        cfg.isocompute.run_dir = str(run_dir)
    # verl's file logger reads its path from the environment of the TaskRunner (a child of this process).
    os.environ["VERL_FILE_LOGGER_PATH"] = str(run_dir / VERL_METRICS)
    return run_dir


def check_group_size(cfg: DictConfig) -> None:
    estimator = _select(cfg, "algorithm.adv_estimator")
    n = _select(cfg, "actor_rollout_ref.rollout.n")
    if estimator in GROUP_ESTIMATORS and n is not None and int(n) < 2:
        raise RecipeError(
            f"algorithm.adv_estimator={estimator} compares rollouts of the same problem, but "
            f"actor_rollout_ref.rollout.n={n}: set actor_rollout_ref.rollout.n to 2 or more (the recipes use >= 4)"
        )


def _files(cfg: DictConfig, key: str) -> list[str]:
    value = _select(cfg, key)
    return [str(f) for f in OmegaConf.to_container(value, resolve=True)] if OmegaConf.is_list(value) else [str(value)]


def _dataset_size(cfg: DictConfig) -> int:
    import pyarrow.parquet as pq

    try:
        return sum(pq.ParquetFile(os.path.expanduser(f)).metadata.num_rows for f in _files(cfg, "data.train_files"))
    except (OSError, ValueError) as exc:
        raise RecipeError(
            f"could not count the training problems in data.train_files ({exc}); "
            "set isocompute.allocation.dataset_size=D"
        ) from None


def prepare_allocation(cfg: DictConfig, explicit_keys: set[str]) -> bool:
    """Apply ``isocompute.allocation`` when enabled; returns whether it ran."""
    from verl_isocompute.training.allocation_hook import (
        AllocationError,
        apply_allocation,
        format_decision,
    )

    if not _select(cfg, "isocompute.allocation.enable", default=False):
        return False
    with open_dict(cfg):
        if _select(cfg, "isocompute.allocation.dataset_size") is None:
            cfg.isocompute.allocation.dataset_size = _dataset_size(cfg)
    try:
        allocation = apply_allocation(cfg, explicit_keys)
    except (AllocationError, ValueError) as exc:
        raise RecipeError(str(exc)) from None
    print(f"[isocompute] allocation: {format_decision(allocation)}", flush=True)
    return True


LR_KEYS = ("actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.optim.lr_warmup_steps")


def prepare_lr(cfg: DictConfig, explicit_keys: set[str]) -> None:
    """Write the recipe's LR rule into verl's optimizer config (before any worker exists)."""
    from verl_isocompute.training.lr import resolve_lr

    rule = _select(cfg, "isocompute.lr.rule")
    if rule in (None, "none", "null"):
        return
    try:
        decision = resolve_lr(
            b_problem=int(cfg.data.train_batch_size), n=int(cfg.actor_rollout_ref.rollout.n),
            base_lr=float(cfg.isocompute.lr.base_lr), b_ref=float(cfg.isocompute.lr.b_ref), rule=str(rule),
            warmup_steps=int(cfg.isocompute.lr.warmup_steps),
        )
    except ValueError as exc:
        raise RecipeError(f"isocompute.lr: {exc}") from None
    # A value given on the command line stays only if it is what the rule gives (e.g. pasted from
    # `isocompute allocate --format overrides`); anything else would be silently replaced: refuse.
    resolved = dict(zip(LR_KEYS, (decision.lr, decision.warmup_steps)))
    conflicts = [k for k in sorted(explicit_keys & set(LR_KEYS)) if not math.isclose(float(_select(cfg, k)), resolved[k], rel_tol=1e-6)]
    if conflicts:
        raise RecipeError(
            f"{', '.join(f'{k}={_select(cfg, k)}' for k in conflicts)} given on the command line, but "
            f"isocompute.lr.rule={rule} sets {', '.join(f'{k}={resolved[k]:g}' for k in conflicts)}; drop the override, "
            "or set isocompute.lr.rule=null to use your own learning rate"
        )
    with open_dict(cfg):
        cfg.actor_rollout_ref.actor.optim.lr = decision.lr
        cfg.actor_rollout_ref.actor.optim.lr_warmup_steps = decision.warmup_steps
        cfg.actor_rollout_ref.actor.optim.lr_warmup_steps_ratio = 0.0
    print(
        f"[isocompute] lr: {decision.lr:.3g} ({rule} rule: {decision.base_lr:g} * sqrt({decision.batch_rollouts} / "
        f"{decision.b_ref:g}) for B = {cfg.data.train_batch_size} x {cfg.actor_rollout_ref.rollout.n} rollouts), "
        f"warm-up {decision.warmup_steps} steps",
        flush=True,
    )


def prepare(cfg: DictConfig, explicit_keys: set[str] | None = None) -> DictConfig:
    """Resolve our ``isocompute`` block into plain verl settings. Raises :class:`RecipeError`.

    ``explicit_keys``: dotted keys the user set on the command line (protected from the allocation
    hook and the LR rule).
    """
    explicit_keys = explicit_keys or set()
    prepare_platform(cfg)
    prepare_model(cfg)
    prepare_data(cfg)
    # The allocation sets n, B_problem and the lr through the same LR rule; otherwise the rule runs here.
    if not prepare_allocation(cfg, explicit_keys):
        prepare_lr(cfg, explicit_keys)
    check_group_size(cfg)
    prepare_run_dir(cfg)
    return cfg


RECIPES_MODULE = "verl_isocompute.recipes"


def compose_recipe(recipe: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The composed config of ``recipe`` with verl-style ``overrides``; :class:`RecipeError` names a bad one."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(RECIPES_MODULE, version_base=None):
            return compose(config_name=recipe, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RecipeError(f"recipe {recipe!r} with overrides {list(overrides)}: {first}") from None
