"""The plugin registers the estimators, the trainer and the prefix agent loop when verl imports their registries
(verl_isocompute.plugin.ON_IMPORT), not at ``import verl``: a verl process that never looks a trainer up (a
training worker, a reward worker) does not import verl's v1 trainer, and every process that does look one up
finds ours, whichever module it imported first. Each case runs in a fresh process, as verl's workers start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e  # fresh processes that import verl

REGISTRIES = """
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR, GRPO_ESTIMATOR, PREFIX_AGENT, TRAINER
    assert get_trainer_cls(TRAINER).__module__ == "verl_isocompute.training.trainer"
    assert core_algos.get_adv_estimator_fn(GRPO_ESTIMATOR).__module__ == "verl_isocompute.training.advantage"
    assert core_algos.get_adv_estimator_fn(DECOUPLED_ESTIMATOR).__module__ == "verl_isocompute.training.advantage"
    assert PREFIX_AGENT in _agent_loop_registry
    print("registered")
"""


def _python(*parts: str, platform: str | None = None) -> subprocess.CompletedProcess:
    code = "\n".join(textwrap.dedent(part) for part in parts)
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_PLUGINS")}
    if platform:
        env["VERL_PLATFORM"] = platform
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)


def test_a_training_worker_does_not_import_verls_trainer_and_a_lookup_still_finds_ours():
    proc = _python("""
        import sys
        import verl.workers.engine_workers  # what verl's actor/rollout worker imports
        loaded = [m for m in ("verl.trainer.ppo.v1", "verl_isocompute.training.trainer", "verl.experimental.agent_loop")
                  if m in sys.modules]
        assert not loaded, loaded
        assert "verl_isocompute.training.advantage" in sys.modules  # the worker imported core_algos: estimators are in
    """, REGISTRIES)
    assert proc.returncode == 0 and "registered" in proc.stdout, proc.stderr[-3000:]


def test_a_cpu_process_that_neither_rolls_out_nor_trains_imports_neither_for_us_and_the_cpu_pieces_come_with_them():
    """Under VERL_PLATFORM=cpu, ``import verl`` loads the plugin in every process of a run, the driver's and the
    reward loop's included: the CPU rollout's registrations and the CPU engine adjustments are made when verl imports
    the modules they go into (importing those was ~4 s of CPU in each process), and are all there once it has.
    (Fails if the plugin imports verl's rollout package or FSDP engine itself again, or a hook misses its module.)"""
    proc = _python("""
        import sys
        import verl
        eager = [m for m in ("verl.workers.rollout.base", "verl.workers.rollout.replica",
                             "verl.workers.engine.fsdp.transformer_impl") if m in sys.modules]
        assert not eager, eager
        from verl.workers.rollout import base
        from verl.workers.rollout.replica import RolloutReplicaRegistry
        from verl.utils.distributed import initialize_global_process_group_ray
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.engine.fsdp import transformer_impl
        from verl_isocompute.cpu import ADAPTER_PATH
        from verl_isocompute.rules.names import PLATFORM_NAME, ROLLOUT_NAME
        assert base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] == ADAPTER_PATH
        assert RolloutReplicaRegistry.get(ROLLOUT_NAME).__name__ == "HFReplica"
        assert initialize_global_process_group_ray.__code__.co_name == "init_process_group_cpu"
        engines = EngineRegistry._engines["language_model"]["fsdp2"]
        assert engines[PLATFORM_NAME] is engines["cuda"]
        assert transformer_impl.CPUOffloadPolicy(pin_memory=True).pin_memory is False  # as verl calls it
        print("registered")
    """, platform="cpu")
    assert proc.returncode == 0 and "registered" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("first", ["verl_isocompute.training.advantage", "verl_isocompute.training.trainer",
                                   "verl_isocompute.training.guided_agent_loop", "verl.trainer.ppo.v1.trainer_base",
                                   "verl.experimental.agent_loop.agent_loop"])
def test_whichever_module_comes_first_every_registration_is_there(first):
    # our modules first: each imports verl, which loads the plugin while that module is still half-initialised
    proc = _python(f"import {first}", REGISTRIES)
    assert proc.returncode == 0 and "registered" in proc.stdout, proc.stderr[-3000:]
