"""The verl 0.9.x internals this plugin relies on. If verl moves one, this fails and says which.

Each test names one thing we use and how; a failure here means a verl upgrade needs our code (and the
matching diff in patches/) to follow. Keep this in step with the code: anything we import from verl or
rely on by name belongs here.
"""

from __future__ import annotations

import inspect

import pytest


def _source(obj) -> str:
    return inspect.getsource(obj)


def test_platform_registry():
    from verl.plugin.platform import (  # noqa: F401
        PlatformBase,
        PlatformRegistry,
        get_platform,
        platform_manager,
    )

    assert callable(PlatformRegistry.register) and callable(PlatformRegistry.get)
    assert "VERL_PLATFORM" in _source(platform_manager._detect_platform_name)


def test_verls_rollouts_are_the_ones_the_cpu_check_knows():
    """training/config.check_platform refuses a rollout name it does not know on the CPU platform; a rollout
    verl adds would be refused there as a typo until the check learns whether it runs on a CPU."""
    from verl.workers.rollout import base

    from verl_isocompute.training.config import GPU_ONLY_ROLLOUTS, VLLM_ROLLOUT

    verls = {name for name, _ in base._ROLLOUT_REGISTRY} - {"hf"}  # ours, registered when our plugin is loaded
    assert verls == {VLLM_ROLLOUT, *GPU_ONLY_ROLLOUTS}, verls


def test_cpu_platform_implements_every_abstract_method():
    from verl_isocompute.cpu.platform import PlatformCPU

    PlatformCPU()  # TypeError here: verl added an abstract method to PlatformBase


def test_rollout_registries_and_base_classes():
    from verl.workers.rollout import base, replica

    assert isinstance(replica.RolloutReplicaRegistry._registry, dict)
    assert isinstance(base._ROLLOUT_REGISTRY, dict) and ("vllm", "async") in base._ROLLOUT_REGISTRY
    params = list(inspect.signature(replica.RolloutReplica.__init__).parameters)
    assert params[:5] == ["self", "replica_rank", "config", "model_config", "gpus_per_node"]
    assert {"is_reward_model", "is_teacher_model", "name_suffix"} <= set(params)
    assert replica.RolloutReplica.__abstractmethods__ == frozenset({"launch_servers"})
    assert base.BaseRollout.__abstractmethods__ == frozenset({"resume", "update_weights", "release"})
    fields = set(replica.TokenOutput.model_fields)
    assert {"token_ids", "log_probs", "stop_reason", "extra_fields"} <= fields


def test_hf_backend_classes_instantiate_against_verl_abstracts():
    from verl_isocompute.cpu.hf_rollout import HFReplica, HFServerAdapter

    assert not HFReplica.__abstractmethods__ and not HFServerAdapter.__abstractmethods__


def test_agent_loop_calls_servers_token_in_token_out():
    from verl.experimental.agent_loop import agent_loop
    from verl.workers.rollout.llm_server import LLMServerClient

    src = _source(LLMServerClient.generate)
    assert "server.generate.remote(" in src and "prompt_ids=prompt_ids" in src and "sampling_params=sampling_params" in src
    assert "logprobs=config.calculate_log_probs" in _source(agent_loop)


def test_weight_sync_path():
    from verl.workers import engine_workers

    src = _source(engine_workers.ActorRolloutRefWorker.update_weights)
    assert "self.rollout.update_weights(" in src and "get_per_tensor_param" in src


def test_process_group_init_is_what_patches_expect():
    from verl.utils import distributed
    from verl.workers import engine_workers

    sig = inspect.signature(distributed.initialize_global_process_group_ray)
    assert list(sig.parameters) == ["timeout_second", "backend"]
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in _source(distributed.initialize_global_process_group_ray)
    assert "initialize_global_process_group_ray(timeout_second=None)" in _source(engine_workers)


def test_engine_registry_and_fsdp2_offload_policy():
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    assert "cuda" in EngineRegistry._engines["language_model"]["fsdp2"]
    assert hasattr(transformer_impl, "CPUOffloadPolicy")
    assert "CPUOffloadPolicy(pin_memory=True)" in _source(transformer_impl)


def test_entry_points_we_drive():
    from verl.trainer import main_ppo
    from verl.utils import tracking
    from verl.utils.import_utils import load_module

    assert list(inspect.signature(main_ppo.run_ppo).parameters) == ["config", "task_runner_class"]
    assert hasattr(main_ppo, "TaskRunnerV1")
    assert "VERL_FILE_LOGGER_PATH" in _source(tracking.FileLogger)
    assert load_module("pkg://verl_isocompute.data.arithmetic").DATA_SOURCE == "isocompute/arithmetic"


def test_plugin_entry_point_is_declared():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert eps.get("isocompute") == "verl_isocompute.plugin"


@pytest.mark.parametrize("module", ["verl", "verl.trainer.ppo.core_algos", "verl.workers.engine_workers"])
def test_verl_modules_import(module):
    __import__(module)


def test_single_turn_loop_builds_its_prompt_through_one_overridable_method():
    # verl_isocompute.training.guided_agent_loop overrides only ct_build_initial_tokens: run() must call it and take
    # everything before the generated tokens as the prompt.
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry, register  # noqa: F401
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    run = _source(SingleTurnAgentLoop.run)
    assert "self.ct_build_initial_tokens(" in run and "ct_merge_assistant_token(" in run
    assert "prompt_ids = merge_result.token_ids[: len(merge_result.token_ids) - len(response_mask)]" in run


def test_verls_estimators_are_the_ones_our_config_check_knows():
    # training.config.check_estimator knows verl's names without importing verl (a sweep's dry run)
    from verl.trainer.ppo import core_algos

    from verl_isocompute.training.config import VERL_ESTIMATORS
    from verl_isocompute.rules.names import ESTIMATORS

    assert set(core_algos.ADV_ESTIMATOR_REGISTRY) - set(ESTIMATORS) == set(VERL_ESTIMATORS)


def test_v1_keys_each_output_of_a_session_and_grpo_alone_takes_the_final_one():
    # rules.masks.multi_output_sessions reads these keys; the trainer refuses what verl's grpo would treat apart
    from verl.trainer.ppo.v1 import utils
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    assert 'keys.append(f"{uid}_{session_id}_{i}")' in _source(AgentLoopWorkerTQ._agent_loop_postprocess)
    src = _source(utils.compute_advantage_for_multi_trajectories)
    assert 'key.rsplit("_", 2)' in src and "adv_estimator != core_algos.AdvantageEstimator.GRPO" in src
