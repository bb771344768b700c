"""CPU backend for verl: a ``cpu`` platform and an ``hf`` (transformers) rollout.

Layer: verl-facing.

:func:`register` is called by our ``verl.plugins`` entry point in every verl process. It always makes the
``cpu`` platform and the ``hf`` rollout *available* (registrations only: nothing changes until a run
selects them). Only in a process where ``VERL_PLATFORM=cpu`` does it also apply
:func:`apply_cpu_runtime`, the few adjustments verl 0.9.1 needs to train on a CPU that its registries
cannot express. Each of the training ones has an upstreamable diff in ``patches/`` explaining it; those for verl's
vLLM rollout are explained in :mod:`verl_isocompute.cpu.vllm_cpu`.
"""

from __future__ import annotations

import functools
import os
import sys

import wrapt

# Nothing here imports verl at module level: importing verl loads our plugin, which imports this package,
# so a verl import here would run the plugin against a half-initialised package (and verl would hide the
# error). The platform class is imported inside register().
from verl_isocompute.cpu.threads import THREADS_ENV, cpu_threads, record_cpu_threads  # the package's API
from verl_isocompute.cpu.shm import record_shared_memory, removing_at_exit
from verl_isocompute.cpu.vllm_cpu import apply_vllm_cpu_runtime
from verl_isocompute.rules.names import PLATFORM_NAME, ROLLOUT_NAME

ADAPTER_PATH = "verl_isocompute.cpu.hf_rollout.HFServerAdapter"
_rollout_hooked = False
_runtime_applied = False

__all__ = ["ADAPTER_PATH", "PLATFORM_NAME", "ROLLOUT_NAME", "THREADS_ENV", "apply_cpu_runtime", "cpu_selected", "cpu_threads",
           "record_cpu_threads", "register"]


def _load_hf_replica():
    from .hf_rollout import HFReplica

    return HFReplica


def cpu_selected() -> bool:
    """True when this process runs verl on the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME


def register() -> None:
    """Register the ``cpu`` platform and the ``hf`` rollout with verl (idempotent).

    The platform at once (verl resolves it while importing its trainer modules); the rollout when verl imports
    the registries that hold rollouts (a post-import hook), so a verl process that never builds a rollout (the
    driver) does not import verl's rollout package for it.
    """
    global _rollout_hooked
    from verl.plugin.platform import PlatformRegistry

    from .platform import PlatformCPU

    if PlatformRegistry.get(PLATFORM_NAME) is not PlatformCPU:
        PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)
    if not _rollout_hooked:
        wrapt.register_post_import_hook(_register_replica, "verl.workers.rollout.replica")
        wrapt.register_post_import_hook(_register_adapter, "verl.workers.rollout.base")
        _rollout_hooked = True
    if cpu_selected():
        apply_cpu_runtime()


def _register_replica(replica_module) -> None:
    replica_module.RolloutReplicaRegistry._registry[ROLLOUT_NAME] = _load_hf_replica


def _register_adapter(base_module) -> None:
    base_module._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER_PATH


def apply_cpu_runtime() -> None:
    """Adjust verl 0.9.1 for CPU training in this process (idempotent). See ``patches/`` for 1-4.

    1. Process groups: verl builds the backend string ``cpu:gloo,<device>:<backend>``, which on the CPU
       platform names the CPU twice and torch rejects it; on CPU the group uses ``gloo`` alone.
    2. FSDP engines register for ``cuda``/``npu`` only; the same FSDP/FSDP2 engine classes serve ``cpu``.
    3. The reference model's FSDP2 offload policy pins host memory, which needs an accelerator; on CPU
       the parameters already live in host memory, so it is created unpinned.
    4. Torch threads: :func:`cpu_threads` instead of the one thread Ray's ``OMP_NUM_THREADS=1`` gives.
    5. verl's vLLM rollout, for runs that select it: :func:`~verl_isocompute.cpu.vllm_cpu.apply_vllm_cpu_runtime`;
       and the record of the shared memory the run creates, removed when it ends (:mod:`verl_isocompute.cpu.shm`;
       in the driver of a run started by verl's own ``main_ppo``, the plugin opens the record itself).
    """
    global _runtime_applied
    if _runtime_applied:
        return
    import torch

    torch.set_num_threads(cpu_threads())
    # TransferQueue wraps its tensor copies in a context that restores torch's thread count to the value it
    # read when it was imported; imported before this point, that is Ray's one thread.
    tq_common = sys.modules.get("transfer_queue.utils.common")
    if tq_common is not None:
        tq_common.DEFAULT_TORCH_NUM_THREADS = cpu_threads()
    # Each adjustment is made when verl imports the module it adjusts (at once if it is imported already), so a
    # process that never trains (the driver, the reward loop's, the request router's) does not import verl's
    # FSDP engine for it. A post-import hook runs before the importing module gets the name, so every
    # `from verl.utils.distributed import initialize_global_process_group_ray` sees the wrapped function.
    wrapt.register_post_import_hook(_gloo_process_group, "verl.utils.distributed")
    wrapt.register_post_import_hook(_cpu_engines, "verl.workers.engine.fsdp.transformer_impl")
    apply_vllm_cpu_runtime()
    removing_at_exit()
    record_shared_memory()
    _runtime_applied = True


def _gloo_process_group(distributed) -> None:
    """1: on CPU the process group uses ``gloo`` alone."""
    original_init = distributed.initialize_global_process_group_ray

    @functools.wraps(original_init)
    def init_process_group_cpu(timeout_second=None, backend=None):
        return original_init(timeout_second=timeout_second, backend=backend or "gloo")

    distributed.initialize_global_process_group_ray = init_process_group_cpu
    workers = sys.modules.get("verl.workers.engine_workers")  # imported before the hook could run
    if workers is not None:
        workers.initialize_global_process_group_ray = init_process_group_cpu


def _cpu_engines(transformer_impl) -> None:
    """2 and 3: the FSDP engines serve ``cpu``; the reference's offload policy is unpinned."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.base import EngineRegistry

    for model_type in ("language_model", "value_model"):
        for backend in ("fsdp", "fsdp2"):
            registry = EngineRegistry._engines.get(model_type, {}).get(backend, {})
            if "cuda" in registry and PLATFORM_NAME not in registry:
                registry[PLATFORM_NAME] = registry["cuda"]

    def unpinned_offload_policy(*args, **kwargs):
        kwargs["pin_memory"] = False  # verl passes pin_memory=True explicitly
        return CPUOffloadPolicy(*args, **kwargs)

    transformer_impl.CPUOffloadPolicy = unpinned_offload_policy
