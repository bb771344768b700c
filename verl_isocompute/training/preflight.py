"""Before Ray starts, also under verl's own ``python -m verl.trainer.main_ppo``: a hydra callback.

verl's main_ppo composes the config, validates it and starts Ray; our settings are read much later, in the
TaskRunner (a Ray actor), where a bad one surfaces as an interpolation error ~1,000 lines into a Ray
traceback. Hydra runs the callbacks of ``hydra.callbacks`` after composing the config and before the task
function, in the driver, and every piece of ours adds this one (``recipes/isocompute/*.yaml``, the CPU
overlay ``recipes/platform/cpu.yaml``; the recipes through their pieces). It

- prints, once, the settings ``+platform=cpu`` changed on the command line's config: the config is composed
  again without the overlay and the two compared (raw values; our interpolations are shown as the run will
  resolve them where that needs no resolver with side effects);
- under main_ppo: checks the ``isocompute`` block against its schema (:mod:`verl_isocompute.training.schema`),
  resolves the whole config (model, data, allocation, lr, run dir), checks the model checkpoint and the data
  files, and runs :func:`~verl_isocompute.training.config.check_config` (the platform, the estimator, group
  sizes, what our trainer needs, the LR rule and the allocation, the reuse of the rollout's log-probs, the
  zero-variance mode and whether it has any effect); an error is one line, ``isocompute: error: ...``, and
  exit status 2; a piece with no effect prints one warning line. Our entry point runs the same checks in
  :func:`~verl_isocompute.training.prepare.prepare`. Resolving makes the launch's one allocation decision
  (:func:`verl_isocompute.training.allocation_hook.decide`), which verl's own reads and its TaskRunner then find
  made.

Hydra turns an exception in a callback into a warning and carries on, so an error leaves through
``sys.exit``.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

OVERLAY = "platform=cpu"


class Preflight(Callback):
    """The hydra callback (see the module docstring)."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from verl_isocompute.training import resolvers

        overrides = list(OmegaConf.select(config, "hydra.overrides.task", default=[]) or [])
        if any(o.lstrip("+") == OVERLAY for o in overrides):
            try:
                line = overlay_line(config, overrides)
            except Exception as exc:  # e.g. an override that needs the overlay: the checks below must still run
                line = f"[isocompute] +platform=cpu: could not list the settings it changed ({str(exc).splitlines()[0]})"
            print(line, flush=True)
        if not resolvers.ENTRY_SETS_PLATFORM:  # our entry point checks in prepare(), with the same functions
            check_stock_run(config)


def check_stock_run(config: DictConfig) -> None:
    """The checks our entry point makes before Ray, on a copy of ``config`` (verl resolves its own later)."""
    from verl_isocompute.cpu.models import ModelError
    from verl_isocompute.training.config import RecipeError, check_config, check_model_setting, check_settings, resolve
    from verl_isocompute.training.prepare import prepare_data, prepare_model

    cfg = _job_config(config)
    try:
        check_settings(cfg)  # the isocompute block's types first: resolving it builds the model and data
        check_model_setting(cfg)
        resolve(cfg)
        prepare_model(cfg)
        prepare_data(cfg)
        notices = check_config(cfg)
    except (RecipeError, ModelError) as exc:
        print(f"isocompute: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    for notice in notices:
        print(notice, flush=True)


def overlay_line(config: DictConfig, overrides: list[str]) -> str:
    """``[isocompute] +platform=cpu changed N settings for the CPU: key: before -> after; ...``: every setting
    whose value differs from the same command line without the overlay (our recipes' CPU sizes included)."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    without = [o for o in overrides if o.lstrip("+") != OVERLAY]
    for _ in range(len(without) + 1):
        try:
            before = compose(config_name=HydraConfig.get().job.config_name, overrides=without)
            break
        except Exception as exc:  # an override of a key only the overlay brings (isocompute.cpu.dtype=...): drop it
            key = re.search(r"override '([^']+)'", str(exc))
            dropped = [o for o in without if key and o.lstrip("+~").split("=", 1)[0] == key.group(1)]
            if not dropped:
                raise
            without = [o for o in without if o not in dropped]
    after = _job_config(config)
    raw_before, raw_after = OmegaConf.to_container(before), OmegaConf.to_container(after)
    changes = []
    for key in sorted(set(_leaves(raw_before)) | set(_leaves(raw_after))):
        old, new = _raw(raw_before, key), _raw(raw_after, key)
        if old == new and "isocompute.on_cpu" not in str(new):
            continue
        old, new = _value(before, key, old), _value(after, key, new)
        if old != new:
            changes.append(f"{key}: {old} -> {new}")
    return f"[isocompute] +platform=cpu changed {len(changes)} settings for the CPU: " + "; ".join(changes)


def _job_config(config: DictConfig) -> DictConfig:
    """``config`` without hydra's own node, as the task function receives it."""
    cfg = config.copy()
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


def _leaves(tree: Any, prefix: str = "") -> list[str]:
    if isinstance(tree, dict) and tree:
        return [leaf for key, value in tree.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [prefix[:-1]]


_UNSET = "(unset)"


def _raw(tree: dict, key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return _UNSET if isinstance(node, dict) else node  # an empty mapping: its keys, if any, are shown instead


def _value(cfg: DictConfig, key: str, raw: Any) -> Any:
    """The value as the run will see it: interpolations resolved (the raw text where that fails here)."""
    if raw is _UNSET or not (isinstance(raw, str) and "${" in raw):
        return raw
    try:
        return OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except Exception:  # a resolver that needs what only the run has (a model, a curve): show what is written
        return raw
