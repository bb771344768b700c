"""The allocation hook: a recipe's ``isocompute.allocation`` block decides n, B_problem, steps and lr in verl's config.

The rule itself is pure and lives in :mod:`verl_isocompute.scaling.allocation`; this module is its verl
side: which verl keys an allocation sets (:func:`verl_values`, :func:`overrides`), reading the block
from a composed config (:func:`allocation_settings`), and writing the decision before verl builds
anything (:func:`apply_allocation`), without silently replacing what the user gave on the command line
(:func:`explicit_keys_from_overrides`).

What it writes: ``actor_rollout_ref.rollout.n``, ``data.train_batch_size`` and
``actor_rollout_ref.actor.ppo_mini_batch_size`` (both b_problem: one optimizer step per rollout batch,
fully on-policy), ``trainer.total_training_steps``, ``trainer.total_epochs`` (raised so the epoch loop
cannot end the run before M steps), ``actor_rollout_ref.actor.optim.lr``, ``.lr_warmup_steps`` and
``.lr_warmup_steps_ratio`` (0.0, so that 0 warm-up steps means none: verl falls back to the ratio for
non-positive step counts).

Under the decoupled baseline (``algorithm.adv_estimator=isocompute_grpo_decoupled``) the allocation
reads ``isocompute.decoupled.n_train``: n is never below it and the LR rule counts b_problem * n_train.

Using it from another verl project's entry point (``my_trainer.yaml`` inherits ``ppo_trainer`` and adds
the ``isocompute.allocation`` block)::

    import hydra
    from hydra.core.hydra_config import HydraConfig
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl_isocompute.training.allocation_hook import apply_allocation, explicit_keys_from_overrides, format_decision

    @hydra.main(config_path="config", config_name="my_trainer", version_base=None)
    def main(cfg):
        explicit = explicit_keys_from_overrides(HydraConfig.get().overrides.task)
        allocation = apply_allocation(cfg, explicit)  # None when isocompute.allocation.enable is false
        if allocation is not None:
            print(format_decision(allocation))
        run_ppo(cfg, task_runner_class=TaskRunnerV1)  # verl 0.9's v1 trainer, as its main_ppo runs it

Until 0.3 the 0.1 module ``verl_isocompute.allocation`` (rule and hook in one) is this module; the
rule's names are importable from here for that reason (``__all__``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from verl_isocompute import verl_keys
from verl_isocompute.scaling.allocation import (
    Allocation,
    AllocationConfig,
    AllocationError,
    allocate,
    allocate_config,
    format_decision,
)
from verl_isocompute.scaling.curve import CurveError
from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR
from verl_isocompute.training.schema import SettingsError, check_block

__all__ = [
    "CONFIG_PATH", "allocation_settings", "apply_allocation", "decoupled_n_train",
    "explicit_keys_from_overrides", "overrides", "verl_values",
    # the pure rule, for one import of the whole allocation API (and the 0.1 path verl_isocompute.allocation)
    "Allocation", "AllocationConfig", "AllocationError", "allocate", "format_decision",
]

CONFIG_PATH = "isocompute.allocation"
# trainer.total_epochs only bounds the epoch loop: a larger value the user set already lets M steps run.
_AT_LEAST_KEYS = frozenset({"trainer.total_epochs"})


def verl_values(allocation: Allocation) -> dict[str, Any]:
    """The verl config keys an allocation sets, dotted key -> value (one source for the hook and the CLI)."""
    if allocation.dataset_size is not None:
        steps_per_epoch = allocation.dataset_size // allocation.b_problem  # verl's loader drops the last partial batch
        total_epochs = math.ceil(allocation.steps / steps_per_epoch)
    else:
        # Without D, one step per epoch is the safe bound: total_training_steps is what ends the run.
        total_epochs = allocation.steps
    return {
        verl_keys.N: allocation.n,
        verl_keys.B_PROBLEM: allocation.b_problem,
        "actor_rollout_ref.actor.ppo_mini_batch_size": allocation.b_problem,
        verl_keys.STEPS: allocation.steps,
        verl_keys.EPOCHS: total_epochs,
        "actor_rollout_ref.actor.optim.lr": allocation.lr,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": allocation.warmup_steps,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.0,
    }


def overrides(allocation: Allocation) -> list[str]:
    """verl command-line overrides (``key=value``) for ``python -m verl.trainer.main_ppo``."""
    return [f"{key}={value!r}" for key, value in verl_values(allocation).items()]


def explicit_keys_from_overrides(override_strings: Iterable[str]) -> set[str]:
    """Dotted keys named by hydra command-line overrides: ``key=v``, ``+key=v``, ``++key=v`` and ``~key``.

    Pass ``HydraConfig.get().overrides.task`` (or ``sys.argv[1:]``'s overrides) to :func:`apply_allocation`.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(list(override_strings))
    except OverrideParseException as exc:
        raise AllocationError(f"cannot read the command-line overrides: {exc}") from None
    return {override.key_or_group for override in parsed}


def allocation_settings(cfg: DictConfig) -> AllocationConfig:
    """The ``isocompute.allocation`` block of a composed config, typed and checked by the schema
    (:mod:`verl_isocompute.training.schema`: an unknown key names the nearest known one)."""
    node = OmegaConf.select(cfg, CONFIG_PATH)
    block = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_dict(node) else node
    try:
        return check_block(block, AllocationConfig, CONFIG_PATH)
    except SettingsError as exc:
        raise AllocationError(str(exc)) from None


def decoupled_n_train(cfg: DictConfig) -> int | None:
    """``isocompute.decoupled.n_train`` when the run uses the decoupled baseline, else None."""
    if OmegaConf.select(cfg, "algorithm.adv_estimator") != DECOUPLED_ESTIMATOR:
        return None
    n_train = OmegaConf.select(cfg, "isocompute.decoupled.n_train")
    if n_train is None:
        raise AllocationError(
            f"algorithm.adv_estimator={DECOUPLED_ESTIMATOR} needs isocompute.decoupled.n_train (rollouts trained on "
            "per problem) before the allocation can choose n >= n_train; set it"
        )
    return n_train


def apply_allocation(cfg: DictConfig, explicit_keys: set[str] | None = None) -> Allocation | None:
    """Apply ``cfg.isocompute.allocation`` to a verl config in place; returns the Allocation, or None if disabled.

    ``explicit_keys`` are the dotted keys the user gave on the command line
    (:func:`explicit_keys_from_overrides`). The allocation refuses to change one of them (AllocationError
    naming both values) unless ``isocompute.allocation.override_user`` is true. Values that came from a
    recipe are overwritten: that is the point of the hook. Prints nothing; see :func:`format_decision`.
    """
    if OmegaConf.select(cfg, CONFIG_PATH) is None:
        return None
    settings = allocation_settings(cfg)
    if not settings.enable:
        return None
    try:
        allocation = allocate_config(settings, n_train=decoupled_n_train(cfg))
    except (AllocationError, CurveError) as exc:
        raise AllocationError(f"{CONFIG_PATH}: {exc}") from None

    values = verl_values(allocation)
    for key in _AT_LEAST_KEYS:
        current = OmegaConf.select(cfg, key)
        if isinstance(current, int) and current >= values[key]:
            del values[key]
    if not settings.override_user:
        conflicts = [
            f"{key}={OmegaConf.select(cfg, key)!r} (command line) vs {value!r} (allocation)"
            for key, value in values.items()
            if key in (explicit_keys or set()) and OmegaConf.select(cfg, key) != value
        ]
        if conflicts:
            raise AllocationError(
                f"the allocation would overwrite values set on the command line: {'; '.join(conflicts)}. "
                f"Drop those overrides, or set {CONFIG_PATH}.override_user=true to let the allocation win"
            )
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return allocation
