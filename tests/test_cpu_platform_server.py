"""The cpu platform and the hf rollout server (in a real local Ray instance)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import torch

from verl_isocompute.cpu.platform import PlatformCPU


def test_cpu_platform_answers_like_a_device_without_memory():
    p = PlatformCPU()
    assert (p.device_name, p.communication_backend_name(), p.ray_resource_name()) == ("cpu", "gloo", "GPU")
    assert p.current_device() == torch.device("cpu") and not p.is_ipc_supported()
    dev = p.device_module
    dev.empty_cache(), dev.synchronize(), dev.set_device(0)
    assert dev.memory_allocated() == 0 and dev.device_count() == 1 and dev.is_available()
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    state = dev.get_rng_state()
    a = torch.rand(3)
    dev.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))


@pytest.mark.e2e  # verl imported in a fresh process
def test_cpu_platform_is_never_auto_detected():
    assert PlatformCPU().is_platform_available(use_smi_check=True) is False
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    code = ("import verl; from verl.plugin.platform import get_platform; import verl.utils.distributed as d; "
            "print(type(get_platform()).__name__, hasattr(d.initialize_global_process_group_ray, '__wrapped__'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["PlatformCUDA", "False"]  # verl's own fallback, and none of our CPU adjustments


@pytest.fixture(scope="module")
def ray_server(tiny_model_path):
    import ray
    from omegaconf import OmegaConf

    from verl_isocompute.cpu.hf_rollout import HFRolloutServer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rollout = OmegaConf.create({"name": "hf", "dtype": "float32", "prompt_length": 64, "response_length": 8,
                                "max_num_seqs": 64, "tensor_model_parallel_size": 1})
    server = ray.remote(HFRolloutServer).options(max_concurrency=256).remote(rollout, OmegaConf.create({"path": str(tiny_model_path)}))
    ray.get(server.get_stats.remote())
    yield server
    ray.shutdown()


def _fire(server, prompts, params):
    async def go():
        return await asyncio.gather(*[server.generate.remote(p, dict(params), f"r{i}") for i, p in enumerate(prompts)])

    return asyncio.run(go())


@pytest.mark.e2e  # a real Ray instance
def test_concurrent_requests_are_sampled_as_one_batch(ray_server):
    import ray

    before = ray.get(ray_server.get_stats.remote())
    prompts = [[5, 6, 7 + i % 5] for i in range(24)]
    outs = _fire(ray_server, prompts, {"temperature": 1.0, "max_tokens": 6, "ignore_eos": True, "logprobs": True})
    after = ray.get(ray_server.get_stats.remote())
    assert after["sequences"] - before["sequences"] == 24
    assert after["batches"] - before["batches"] == 1  # all 24 requests in one padded batch
    assert all(len(o.token_ids) == 6 and len(o.log_probs) == 6 for o in outs)


@pytest.mark.e2e  # a real Ray instance
def test_new_weights_are_used_for_the_next_rollout(ray_server, tiny_model_path):
    import ray
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    greedy = {"temperature": 0, "max_tokens": 6, "ignore_eos": True, "logprobs": True}
    prompt = [[5, 6, 7]]
    (old,) = _fire(ray_server, prompt, greedy)
    torch.manual_seed(1)
    state = {k: v + 0.5 * torch.randn_like(v) for k, v in model.state_dict().items()}
    assert ray.get(ray_server.update_weights.remote(state, 7)) == len(state)
    (new,) = _fire(ray_server, prompt, greedy)
    model.load_state_dict(state)
    expected = model.generate(torch.tensor(prompt), max_new_tokens=6, min_new_tokens=6, do_sample=False)[0, 3:].tolist()
    assert new.token_ids == expected and new.token_ids != old.token_ids
    assert new.extra_fields["global_steps"] == 7


@pytest.mark.e2e  # verl imported in a fresh process
def test_plugin_registers_whatever_is_imported_first():
    """Importing our CPU helpers before verl must not break the plugin (verl would hide the error)."""
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    code = ("import verl_isocompute.cpu.models, verl_isocompute.data.arithmetic; import verl; "
            "from verl_isocompute.registration_probes import check_registrations; print(all(check_registrations().values()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "True"


def test_cpu_threads_replace_rays_one_thread(monkeypatch):
    """Ray starts workers with OMP_NUM_THREADS=1; our CPU workers use the cores (or what the user asked for)."""
    from verl_isocompute.cpu import THREADS_ENV, cpu_threads, record_cpu_threads

    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as in a Ray worker
    assert cpu_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(THREADS_ENV, "3")
    assert cpu_threads() == 3
    monkeypatch.delenv(THREADS_ENV)
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # set by the user in the driver: kept for the workers
    assert record_cpu_threads() == 5 and os.environ[THREADS_ENV] == "5"


@pytest.mark.e2e  # verl imported in a fresh process
def test_cpu_runtime_keeps_the_threads_past_transfer_queue():
    """In a process started as Ray starts workers (OMP_NUM_THREADS=1), with TransferQueue imported first (it
    remembers the thread count it saw and restores it after each tensor copy), the CPU runtime's thread count holds."""
    code = (
        "import os; os.environ['VERL_PLATFORM'] = 'cpu'\n"
        "import torch, transfer_queue.utils.common as c\n"
        "import verl\n"
        "from verl_isocompute.cpu import apply_cpu_runtime, cpu_threads\n"
        "apply_cpu_runtime()\n"
        "with c.limit_pytorch_auto_parallel_threads(): pass\n"
        "print(torch.get_num_threads(), cpu_threads())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ISOCOMPUTE_CPU_THREADS"}
    env.update(OMP_NUM_THREADS="1", ISOCOMPUTE_CPU_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["2", "2"]
