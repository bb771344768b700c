"""Sampling with the base model outside training (curation, the prefix search): the recipe composed and
prepared for it, the model flag as recipe overrides, and what makes cached samples comparable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl_isocompute.rules import answers


def model_overrides(model: str | None) -> list[str]:
    """The recipe overrides of ``--model`` (curation, the prefix search): a built-in name (tiny, smollm2) or a
    local checkpoint path; None keeps the recipe's model."""
    from verl_isocompute.cpu.models import MODEL_NAMES

    if model in MODEL_NAMES:
        return [f"isocompute.model={model}"]
    if model:
        return ["isocompute.model=null", f"actor_rollout_ref.model.path={Path(model).expanduser().absolute()}"]
    return []


def sampling_config(recipe: str, overrides: list[str]):
    """The recipe composed and prepared for sampling with the base model outside training (curation, the
    prefix search): platform, model, the rollout and reward parts resolved, our plugin registered."""
    from omegaconf import OmegaConf

    from verl_isocompute.training.config import compose_recipe, resolve
    from verl_isocompute.training.prepare import prepare_model, prepare_platform

    cfg = compose_recipe(recipe, overrides)
    prepare_platform(cfg)
    # The recipes write the model path, n and dtypes as our resolvers' interpolations, which read the
    # whole config (``_root_``); verl turns ``actor_rollout_ref.model`` into a dataclass on its own, so
    # resolve the parts curation hands to verl now (not the recipe's training data: curation brings its own).
    for key in ("actor_rollout_ref", "reward"):
        if OmegaConf.select(cfg, key) is not None:
            resolve(cfg[key])
    prepare_model(cfg)
    # As in main.run: register our plugin now that VERL_PLATFORM is final (verl swallows a plugin
    # that failed while verl was being imported, e.g. through verl_isocompute.cpu.models).
    from verl_isocompute.plugin import register_all

    register_all()
    return cfg


def sampling_identity(cfg, k: int) -> dict[str, Any]:
    """What makes cached samples comparable: model, rollout backend, k, sampling parameters, reward."""
    rollout = cfg.actor_rollout_ref.rollout
    reward = cfg.reward.get("custom_reward_function") or {}
    return {
        "model": str(cfg.actor_rollout_ref.model.path), "rollout": str(rollout.name), "k": k,
        "temperature": float(rollout.temperature), "top_p": float(rollout.top_p), "top_k": int(rollout.top_k),
        "max_response_length": int(rollout.response_length),
        "reward": f"{reward.get('path')}:{reward.get('name')}" if reward.get("path") else "verl_isocompute.rules.reward:compute_score",
        # how our reward grades (isocompute.reward.answer): samples scored under another grading are not comparable
        "reward_answer": str((reward.get("reward_kwargs") or {}).get("answer") or answers.AUTO),
    }


def sampling_dtype(cfg) -> str | None:
    """The dtype the rollout samples in (``actor_rollout_ref.rollout.dtype``): curation and the prefix search
    sample in it, which need not be the dtype a training run computes in (its own recipe's)."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, "actor_rollout_ref.rollout.dtype", default=None)
    return None if value is None else str(value)
