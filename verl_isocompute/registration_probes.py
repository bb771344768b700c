"""What our plugin registers into verl, as probes that only *look* (importing this registers nothing).

``isocompute doctor`` imports verl in a fresh process and runs these probes: since verl swallows errors
raised while loading plugins, a missing name here is how a user learns the plugin is broken.
"""

from __future__ import annotations

import importlib
from typing import Callable

from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR, GRPO_ESTIMATOR, PLATFORM_NAME, PREFIX_AGENT, ROLLOUT_NAME, TRAINER


def _attr(module: str, name: str):
    return getattr(importlib.import_module(module), name)


# name -> probe returning True when verl can see the registration in this process.
EXPECTED: dict[str, Callable[[], bool]] = {
    f"platform {PLATFORM_NAME}": lambda: _attr("verl.plugin.platform", "PlatformRegistry").get(PLATFORM_NAME) is not None,
    f"rollout {ROLLOUT_NAME} (replica)": lambda: ROLLOUT_NAME in _attr("verl.workers.rollout.replica", "RolloutReplicaRegistry")._registry,
    f"rollout {ROLLOUT_NAME} (adapter)": lambda: (ROLLOUT_NAME, "async") in _attr("verl.workers.rollout.base", "_ROLLOUT_REGISTRY"),
    **{
        f"estimator {name}": (lambda name=name: name in _attr("verl.trainer.ppo.core_algos", "ADV_ESTIMATOR_REGISTRY"))
        for name in (GRPO_ESTIMATOR, DECOUPLED_ESTIMATOR)
    },
    f"trainer {TRAINER}": lambda: TRAINER in _attr("verl.trainer.ppo.v1.trainer_base", "TRAINER_REGISTRY"),
    f"agent loop {PREFIX_AGENT}": lambda: PREFIX_AGENT in _attr("verl.experimental.agent_loop.agent_loop", "_agent_loop_registry"),
}


def check_registrations() -> dict[str, bool]:
    """Which of our registrations verl can see in this process."""
    results = {}
    for name, probe in EXPECTED.items():
        try:
            results[name] = bool(probe())
        except Exception:
            results[name] = False
    return results
