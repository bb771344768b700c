"""The allocation's one decision per launch: an ``isocompute.allocation`` block decides n, B_problem, steps and lr.

The rule itself is pure and lives in :mod:`verl_isocompute.scaling.allocation` (the IsoCompute playbook, arXiv
2603.12151: n from the fitted n*(C), B_problem moderate, M = C / (B_problem * n), the sqrt LR rule at B). This
module is its verl side, and the one path from the block to verl's keys for every entry point:

- :func:`decide` computes the decision of a config, the allocation and the lr that follows from it, **once**:
  the result is kept in the config's own OmegaConf cache (:func:`omegaconf.OmegaConf.get_cache`), which travels
  with the config's copies and with the pickle Ray sends to verl's TaskRunner, and in a small per-process
  table keyed by everything it reads (the block, ``n_train``, the training files and curve file as they are on
  disk), for the copy hydra makes of the config before its callbacks run. Every verl key, report and check reads
  this decision: the recipes' interpolations (:func:`allocated_value` behind ``${isocompute.allocation:KEY,...}``,
  and ``${isocompute.lr:lr}``), the entry point's report lines and checks, our trainer's run-log header.
- :func:`check_allocation_keys` is the one conflict rule: a verl key the allocation decides that the config sets
  to another value is an error naming both values (a value equal to the decision, pasted from ``isocompute
  allocate --format overrides``, is fine; ``trainer.total_epochs`` only needs to be at least the decision's).
- :func:`verl_values` says which verl key gets which value (:func:`overrides`: as command-line overrides).
- :func:`apply_allocation` is the same path for another verl project's entry point: it decides, checks the
  keys given on the command line with the same rule, and writes the decided values.

What the decision sets: ``actor_rollout_ref.rollout.n``, ``data.train_batch_size`` and
``actor_rollout_ref.actor.ppo_mini_batch_size`` (both b_problem: one optimizer step per rollout batch, fully
on-policy), ``trainer.total_training_steps``, ``trainer.total_epochs`` (raised so the epoch loop cannot end the
run before M steps), ``actor_rollout_ref.actor.optim.lr``, ``.lr_warmup_steps`` and ``.lr_warmup_steps_ratio``
(0.0, so that 0 warm-up steps means none: verl falls back to the ratio for non-positive step counts). Under the
decoupled baseline (``algorithm.adv_estimator=isocompute_grpo_decoupled``) the allocation reads
``isocompute.decoupled.n_train``: n is never below it and the LR rule counts b_problem * n_train.

Using it from another verl project's entry point (``my_trainer.yaml`` inherits ``ppo_trainer`` and adds the
``isocompute.allocation`` block)::

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
import os
from dataclasses import dataclass, replace
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from verl_isocompute import verl_keys
from verl_isocompute.rules.lr import B_REF, BASE_LR, WARMUP_STEPS, LRDecision, resolve_lr
from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR
from verl_isocompute.scaling.allocation import (
    Allocation,
    AllocationConfig,
    AllocationError,
    allocate,
    allocate_config,
    format_decision,
)
from verl_isocompute.scaling.curve import CurveError
from verl_isocompute.training.conf import files, flag, select
from verl_isocompute.training.schema import SettingsError, check_block

__all__ = [
    "ALLOCATION_KEYS", "CONFIG_PATH", "Decision", "NO_VALUE", "allocated_value", "allocation_settings", "apply_allocation",
    "check_allocation_keys", "dataset_size", "decide", "decoupled_n_train", "explicit_keys_from_overrides",
    "overrides", "verl_values",
    # the pure rule, for one import of the whole allocation API (and the 0.1 path verl_isocompute.allocation)
    "Allocation", "AllocationConfig", "AllocationError", "allocate", "format_decision",
]

CONFIG_PATH = "isocompute.allocation"
OPTIM = "actor_rollout_ref.actor.optim"
# The verl key each ${isocompute.allocation:KEY,...} interpolation stands for.
ALLOCATION_KEYS = {
    "n": verl_keys.N,
    "b_problem": verl_keys.B_PROBLEM,
    "steps": verl_keys.STEPS,
    "total_epochs": verl_keys.EPOCHS,
}
_NO_DEFAULT = object()
NO_VALUE = "???"  # the third value of ${isocompute.allocation:KEY,DEFAULT,OUTSIDE} that means "no value": an error
# Our entry in OmegaConf's per-config cache: copied with the config and pickled with it, so the TaskRunner of
# verl's main_ppo reads the driver's decision instead of deciding again.
_CACHE_KEY = f"{__name__}.decide"
_MEMO_SIZE = 64  # decisions kept per process (a sweep's dry run decides once per cell)
_memo: dict[tuple, "Decision"] = {}


@dataclass(frozen=True)
class Decision:
    """What a config's ``isocompute.allocation`` block and LR rule decide: the allocation (None when it is off) and
    the lr the run uses (the allocation's, or the rule at the config's own B_problem and n)."""

    allocation: Allocation | None
    lr: LRDecision


def decide(cfg: DictConfig) -> Decision:
    """The decision of ``cfg`` (a whole config), computed once: see the module docstring.

    With the allocation off the lr is the LR rule at the config's ``data.train_batch_size`` and ``rollout.n``
    (``isocompute.lr.rule=null``: base_lr at any batch), read afresh: it costs a multiplication. Raises
    :class:`AllocationError` (a ValueError) naming the block or key.
    """
    if not flag(cfg, f"{CONFIG_PATH}.enable"):
        return Decision(None, _rule_lr(cfg))
    settings, n_train = allocation_settings(cfg), decoupled_n_train(cfg)
    # The config's own cache is keyed by the block alone: a config keeps the decision it was first resolved with,
    # also after our trainer turns its training files into a guided mixture.
    kept = OmegaConf.get_cache(cfg)[_CACHE_KEY]
    key = (settings, n_train)
    if key not in kept:
        on_disk = key + _files_on_disk(cfg, settings)
        if on_disk not in _memo:
            _memo[on_disk] = _decide(cfg, settings, n_train)
            while len(_memo) > _MEMO_SIZE:
                del _memo[next(iter(_memo))]
        kept[key] = _memo[on_disk]
    return kept[key]


def _decide(cfg: DictConfig, settings: AllocationConfig, n_train: int | None) -> Decision:
    """The allocation (:func:`~verl_isocompute.scaling.allocation.allocate_config`) and its lr: the one evaluation."""
    if settings.dataset_size is None:
        settings = replace(settings, dataset_size=dataset_size(cfg))
    try:
        chosen = allocate_config(settings, n_train=n_train)
    except (AllocationError, CurveError) as exc:
        raise AllocationError(f"{CONFIG_PATH}: {exc}") from None
    lr = resolve_lr(chosen.b_problem, chosen.n, settings.base_lr, settings.b_ref, chosen.lr_rule, chosen.warmup_steps,
                    chosen.n_train)
    return Decision(chosen, lr)


def _files_on_disk(cfg: DictConfig, settings: AllocationConfig) -> tuple:
    """What the decision reads from disk besides the block, with sizes and times: the training files (when the block
    leaves the dataset size to them) and a curve file (not a ``paper:`` preset)."""

    def stat(path: str) -> tuple:
        try:
            info = os.stat(os.path.expanduser(path))
            return path, info.st_mtime_ns, info.st_size
        except OSError:
            return path, None, None

    read = [stat(str(settings.curve))] if settings.curve and not str(settings.curve).startswith("paper:") else []
    if settings.dataset_size is None:
        try:
            read += [stat(f) for f in files(cfg, verl_keys.TRAIN_FILES)]
        except ValueError as exc:  # the decision names the key and the fix (dataset_size)
            read.append(("unreadable", str(exc)))
    return tuple(read)


def _rule_lr(cfg: DictConfig) -> LRDecision:
    """The LR rule of ``isocompute.lr`` at the config's B_problem and n (n_train under the decoupled baseline)."""
    b_problem = int(select(cfg, verl_keys.B_PROBLEM))
    n = int(select(cfg, verl_keys.N))
    n_train = decoupled_n_train(cfg)  # an error naming the key when the decoupled baseline lacks it
    rule = select(cfg, "isocompute.lr.rule", default="sqrt")
    base_lr = float(select(cfg, "isocompute.lr.base_lr", default=BASE_LR))
    b_ref = float(select(cfg, "isocompute.lr.b_ref", default=B_REF))
    warmup = int(select(cfg, "isocompute.lr.warmup_steps", default=WARMUP_STEPS))
    try:
        if rule in (None, "none", "null"):
            return LRDecision(base_lr, warmup, "null", b_problem * n, base_lr, b_ref)
        return resolve_lr(b_problem, n, base_lr, b_ref, str(rule), warmup, None if n_train is None else int(n_train))
    except ValueError as exc:
        raise ValueError(f"isocompute.lr: {exc}") from None


def allocated_value(key: str, cfg: DictConfig, default: Any = _NO_DEFAULT, outside: Any = _NO_DEFAULT) -> Any:
    """What ``${isocompute.allocation:KEY[,DEFAULT[,OUTSIDE]]}`` resolves to: the decision's value of KEY (n,
    b_problem, steps, total_epochs) after the conflict rule, or, with the allocation off, DEFAULT.

    OUTSIDE replaces DEFAULT in a config that is not one of our recipes (no ``isocompute.recipe``): the allocation
    piece (recipes/isocompute/allocation.yaml) writes our recipes' sizes as DEFAULT, and, added to a config of one's
    own, it has replaced that config's own value. ``???`` (or no DEFAULT): no value, an error naming the key.
    """
    if key not in ALLOCATION_KEYS:
        raise ValueError(f"${{isocompute.allocation:{key},...}}: use one of {', '.join(ALLOCATION_KEYS)}")
    if outside is not _NO_DEFAULT and select(cfg, "isocompute.recipe") is None:
        default = outside
    if not flag(cfg, f"{CONFIG_PATH}.enable"):
        if default is _NO_DEFAULT or default == NO_VALUE:
            raise ValueError(
                f"isocompute.allocation.enable=false, but the allocation piece replaced {ALLOCATION_KEYS[key]}: "
                f"set {ALLOCATION_KEYS[key]} on the command line, or drop the piece"
            )
        return default
    chosen = decide(cfg).allocation
    check_allocation_keys(cfg, chosen)
    value = verl_values(chosen)[ALLOCATION_KEYS[key]]
    if key == "total_epochs" and default not in (None, _NO_DEFAULT, NO_VALUE):
        return max(int(default), value)  # it only bounds the epoch loop: a larger default already lets M steps run
    return value


def _is_ours(raw: Any) -> bool:
    """A raw (unresolved) value that is one of our interpolations, or derived from one (``${data.train_batch_size}``)."""
    return isinstance(raw, str) and "${" in raw


def check_allocation_keys(cfg: DictConfig, chosen: Allocation, given: set[str] | None = None) -> None:
    """The conflict rule: every verl key the allocation decides must be an interpolation (the recipes'), or equal to
    the decision (``trainer.total_epochs``: at least the decision's); else one AllocationError naming both values.

    ``given``: the keys that are the user's (:func:`apply_allocation`: those on the command line); None: every
    plain value in the config (the recipes write the decided keys as interpolations)."""
    conflicts = []
    for key, wanted in verl_values(chosen).items():
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key)
        node = parent._get_node(leaf) if OmegaConf.is_dict(parent) else None  # not `leaf in parent`: that resolves
        raw = node._value() if node is not None else None
        if raw is None or _is_ours(raw) or (given is not None and key not in given):
            continue
        if key == ALLOCATION_KEYS["total_epochs"]:
            if int(raw) < wanted:
                conflicts.append(f"{key}={raw} (allocation needs at least {wanted})")
        elif isinstance(wanted, float) and isinstance(raw, (int, float)):
            if abs(float(raw) - wanted) > 1e-6 * abs(wanted):
                conflicts.append(f"{key}={raw} (allocation: {wanted!r})")
        elif raw != wanted:
            conflicts.append(f"{key}={raw} (allocation: {wanted!r})")
    if conflicts:
        fix = (f"set {CONFIG_PATH}.override_user=true to let the allocation win" if given is not None else
               f"set {CONFIG_PATH}.enable=false"
               + (" (override_user applies to the Python hook apply_allocation only)"
                  if flag(cfg, f"{CONFIG_PATH}.override_user") else ""))
        raise AllocationError(
            f"{CONFIG_PATH}.enable=true decides these keys, but the config or the command line sets them: "
            f"{'; '.join(conflicts)}. Drop those settings, or {fix}"
        )


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
        f"{OPTIM}.lr": allocation.lr,
        f"{OPTIM}.lr_warmup_steps": allocation.warmup_steps,
        f"{OPTIM}.lr_warmup_steps_ratio": 0.0,
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


def dataset_size(cfg: DictConfig) -> int:
    """Training problems D: rows of ``data.train_files``."""
    import pyarrow.parquet as pq

    try:
        return sum(pq.ParquetFile(os.path.expanduser(f)).metadata.num_rows for f in files(cfg, verl_keys.TRAIN_FILES))
    except (OSError, ValueError) as exc:
        raise AllocationError(
            f"could not count the training problems in data.train_files ({exc}); set isocompute.allocation.dataset_size=D"
        ) from None


def apply_allocation(cfg: DictConfig, explicit_keys: set[str] | None = None) -> Allocation | None:
    """Apply ``cfg.isocompute.allocation`` to a verl config in place; returns the Allocation, or None if disabled.

    The decision is :func:`decide`'s and the conflict rule :func:`check_allocation_keys`'s, as for the recipes:
    ``explicit_keys`` are the dotted keys the user gave on the command line (:func:`explicit_keys_from_overrides`),
    and one of them set to another value is an AllocationError naming both values, unless
    ``isocompute.allocation.override_user`` is true. The other keys the allocation decides are the config's
    defaults (verl's ``ppo_trainer``): the decided values replace them (``trainer.total_epochs`` only if it is
    smaller). Prints nothing; see :func:`format_decision`.
    """
    if OmegaConf.select(cfg, CONFIG_PATH) is None:
        return None
    settings = allocation_settings(cfg)  # a bad block is an error, also when it is off
    if not settings.enable:
        return None
    chosen = decide(cfg).allocation
    given = set() if settings.override_user else set(explicit_keys or ())
    check_allocation_keys(cfg, chosen, given)
    for key, value in verl_values(chosen).items():
        current = OmegaConf.select(cfg, key)
        if key == verl_keys.EPOCHS and isinstance(current, int):
            value = max(current, value)  # it only bounds the epoch loop: a larger value already lets M steps run
        OmegaConf.update(cfg, key, value, force_add=True)
    return chosen
