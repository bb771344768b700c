"""Our ``isocompute:`` config block, resolved into plain verl settings before verl builds anything.

Used by the entry point (:mod:`verl_isocompute.main`), the sweep and curation (which compose recipes
outside ``hydra.main`` with :func:`compose_recipe`). What :func:`prepare` resolves:

- the platform: ``isocompute.platform=cpu`` selects our CPU backend (sets ``VERL_PLATFORM=cpu`` before
  verl is imported, starts Ray with logical GPUs) and rejects GPU-only settings; on the CPU the dtype
  follows ``isocompute.cpu.dtype`` (:mod:`verl_isocompute.cpu.dtype`: bf16 only where native);
- ``isocompute.reuse_rollout_log_probs``: skip the old-log-prob pass of a fully on-policy recipe
  (:mod:`verl_isocompute.training.on_policy`);
- the model: ``isocompute.model=smollm2|tiny`` builds (once) and uses a built-in model; otherwise
  ``actor_rollout_ref.model.path`` is checked to be a usable local checkpoint with a chat template;
- the data: ``isocompute.data.source=arithmetic`` generates the seeded demo problem set;
- the allocation hook (``isocompute.allocation.enable``): a budget becomes ``rollout.n``,
  ``data.train_batch_size``, steps and lr (:func:`verl_isocompute.training.allocation_hook.apply_allocation`);
- the learning rate (``isocompute.lr``): lr = base_lr * sqrt(B / b_ref), B = B_problem * n (n_train under
  the decoupled baseline), with update k at lr * min(1, k / W), written into verl's optimizer config
  (:mod:`verl_isocompute.training.lr`), so no worker resolves it;
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
from verl_isocompute.training.lr import VERL_WARMUP_SCHEDULE, resolve_lr
from verl_isocompute.training.names import DECOUPLED_ESTIMATOR, ESTIMATORS
from verl_isocompute.training.on_policy import prepare_reuse_rollout_log_probs

# Estimators that compare samples within a group (GRPO family): a group of one has no baseline.
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "grpo_passk", "optimal_token_baseline",
                    *ESTIMATORS)
GPU_ONLY_ROLLOUTS = ("vllm", "sglang", "trtllm")


class RecipeError(ValueError):
    """A configuration a run cannot start with; the message names the key and the fix."""


def _select(cfg: DictConfig, key: str, default=None):
    return OmegaConf.select(cfg, key, default=default)


def prepare_platform(cfg: DictConfig, explicit_keys: set[str] | frozenset[str] = frozenset()) -> None:
    """Select the CPU backend for this process and its Ray workers when the recipe asks for it; on the CPU,
    :func:`prepare_cpu` (``explicit_keys``: dtype keys given on the command line are kept)."""
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
    prepare_cpu(cfg, explicit_keys)


def prepare_cpu(cfg: DictConfig, explicit_keys: set[str] | frozenset[str]) -> None:
    """On the CPU platform: the dtype from the CPU (verl_isocompute.cpu.dtype), the workers' thread count."""
    from verl_isocompute.cpu import cpu_selected, record_cpu_threads

    if not cpu_selected():
        return
    from verl_isocompute.cpu.dtype import prepare_cpu_dtype

    record_cpu_threads()
    try:
        prepare_cpu_dtype(cfg, explicit_keys)
    except ValueError as exc:
        raise RecipeError(str(exc)) from None


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
    """Group estimators need rollout.n >= 2; the decoupled baseline needs 1 <= n_train <= n (a config error,
    caught before the run: the estimators themselves give a group of one advantage 0 and never raise)."""
    estimator = _select(cfg, "algorithm.adv_estimator")
    n = _select(cfg, "actor_rollout_ref.rollout.n")
    if estimator in GROUP_ESTIMATORS and n is not None and int(n) < 2:
        raise RecipeError(
            f"algorithm.adv_estimator={estimator} compares rollouts of the same problem, but "
            f"actor_rollout_ref.rollout.n={n}: set actor_rollout_ref.rollout.n to 2 or more (the recipes use >= 4)"
        )
    n_train = _select(cfg, "isocompute.decoupled.n_train")
    if estimator == DECOUPLED_ESTIMATOR and (n_train is None or not 1 <= int(n_train) <= int(n)):
        raise RecipeError(
            f"algorithm.adv_estimator={DECOUPLED_ESTIMATOR} trains on n_train of the actor_rollout_ref.rollout.n={n} "
            f"rollouts per problem, but isocompute.decoupled.n_train={_show(n_train)}: set it in [1, {n}]"
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


OPTIM = "actor_rollout_ref.actor.optim"
# Keys of verl's optimizer config that prepare_lr writes: the rule's lr and warm-up, and the schedule that
# makes update k run at lr * min(1, k / W) (training.lr.VERL_WARMUP_SCHEDULE).
LR_KEYS = tuple(f"{OPTIM}.{key}" for key in ("lr", "lr_warmup_steps", *VERL_WARMUP_SCHEDULE))


def _same(value, wanted) -> bool:
    if isinstance(wanted, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return math.isclose(float(value), wanted, rel_tol=1e-6)
    return value == wanted


def _show(value) -> str:
    """A config value as it is written on the command line."""
    if value is None or isinstance(value, bool):
        return str(value).lower().replace("none", "null")
    return f"{value:g}" if isinstance(value, float) else str(value)


def prepare_lr(cfg: DictConfig, explicit_keys: set[str], allocated: bool = False) -> None:
    """Write the recipe's LR rule and warm-up schedule into verl's optimizer config (before any worker exists).

    The schedule keys are always written: update k (1-based) runs at lr * min(1, k / W). The rule's lr and
    W are written when ``isocompute.lr.rule`` is set, unless the allocation hook already wrote them
    (``allocated``). B of the rule counts the rollouts trained on: b_problem * n, or b_problem * n_train under
    the decoupled baseline. A key given on the command line that disagrees is an error naming both values.
    """
    rule = _select(cfg, "isocompute.lr.rule")
    if rule in ("none", "null"):
        rule = None
    resolved: dict = {f"{OPTIM}.{key}": value for key, value in VERL_WARMUP_SCHEDULE.items()}
    decision = None
    n_train = _select(cfg, "isocompute.decoupled.n_train") if _select(cfg, "algorithm.adv_estimator") == DECOUPLED_ESTIMATOR else None
    if rule is not None and not allocated:
        try:
            decision = resolve_lr(
                b_problem=int(cfg.data.train_batch_size), n=int(cfg.actor_rollout_ref.rollout.n),
                base_lr=float(cfg.isocompute.lr.base_lr), b_ref=float(cfg.isocompute.lr.b_ref), rule=str(rule),
                warmup_steps=int(cfg.isocompute.lr.warmup_steps), n_train=None if n_train is None else int(n_train),
            )
        except ValueError as exc:
            raise RecipeError(f"isocompute.lr: {exc}") from None
        resolved[f"{OPTIM}.lr"] = decision.lr
        resolved[f"{OPTIM}.lr_warmup_steps"] = decision.warmup_steps
    # A value given on the command line stays only if it is what the rule gives (e.g. pasted from
    # `isocompute allocate --format overrides`); anything else would be silently replaced: refuse.
    conflicts = [k for k in sorted(explicit_keys & set(resolved)) if not _same(_select(cfg, k), resolved[k])]
    if conflicts:
        fix = ("drop the override, or set isocompute.lr.rule=null to use your own learning rate" if decision else
               "drop the override: the recipe's warm-up runs update k at lr * min(1, k / lr_warmup_steps)")
        raise RecipeError(
            f"{', '.join(f'{k}={_select(cfg, k)}' for k in conflicts)} given on the command line, but "
            f"isocompute.lr sets {', '.join(f'{k}={_show(resolved[k])}' for k in conflicts)}; {fix}"
        )
    with open_dict(cfg):
        for key, value in resolved.items():
            OmegaConf.update(cfg, key, value, merge=False)
    if decision is not None:
        per_problem = f"n_train {n_train}" if n_train is not None else f"n {cfg.actor_rollout_ref.rollout.n}"
        print(
            f"[isocompute] lr: {decision.lr:.3g} ({rule} rule: {decision.base_lr:g} * sqrt(B / {decision.b_ref:g}) with "
            f"B = B_problem {cfg.data.train_batch_size} x {per_problem} = {decision.batch_rollouts} rollouts trained on per step), "
            f"warm-up {decision.warmup_steps} steps (update k at lr * min(1, k / {decision.warmup_steps}))",
            flush=True,
        )


def prepare(cfg: DictConfig, explicit_keys: set[str] | None = None) -> DictConfig:
    """Resolve our ``isocompute`` block into plain verl settings. Raises :class:`RecipeError`.

    ``explicit_keys``: dotted keys the user set on the command line (protected from the allocation
    hook and the LR rule).
    """
    explicit_keys = explicit_keys or set()
    prepare_platform(cfg, explicit_keys)
    prepare_model(cfg)
    prepare_data(cfg)
    # The allocation sets n, B_problem and the lr through the same LR rule; otherwise the rule runs here.
    # The warm-up schedule is written either way.
    allocated = prepare_allocation(cfg, explicit_keys)
    check_group_size(cfg)
    prepare_lr(cfg, explicit_keys, allocated=allocated)
    try:
        prepare_reuse_rollout_log_probs(cfg)
    except ValueError as exc:
        raise RecipeError(str(exc)) from None
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
