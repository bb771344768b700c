"""A ``cpu`` platform for verl's platform registry, so verl's own trainer runs on a machine with no GPU.

verl resolves its device through ``verl.plugin.platform``: the platform says which torch device module
to use, which collective backend, which Ray resource a worker asks for. verl ships CUDA, NPU and ROCm
platforms only, and falls back to CUDA when none is found, so on a CPU machine it asks for NCCL and
CUDA devices. This platform answers with the CPU and gloo instead.

Selection is explicit: ``VERL_PLATFORM=cpu`` (our CPU recipe and ``isocompute demo`` set it). The
platform reports itself unavailable to verl's auto-detection, so installing this package changes nothing
for GPU users or for verl's own tests.

Two choices need explaining:
- Ray resource: workers still ask for Ray's ``GPU`` resource, and the run starts Ray with *logical*
  GPUs (``ray_kwargs.ray_init.num_gpus``). verl's resource pools count GPUs; giving them logical ones
  keeps every placement decision of verl unchanged. CUDA is never touched.
- Device module: verl calls ``get_torch_device().<fn>`` for caches, streams, RNG state and memory
  statistics. ``torch.cpu`` has only some of these, so :class:`_CPUDeviceModule` forwards to it and
  answers the rest as a host with no device memory would (no-ops, zeros).
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from types import ModuleType
from typing import Any, Optional

import torch
from verl.plugin.platform import PlatformBase


class _CPUDeviceModule(ModuleType):
    """``torch.cuda``-shaped view of the CPU: forwards to ``torch.cpu``, fills the gaps."""

    def __init__(self) -> None:
        super().__init__("verl_isocompute.cpu.device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    # memory management: the host has no separate device memory to manage
    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        return None

    def memory_allocated(self, device: Any = None) -> int:
        return 0

    def memory_reserved(self, device: Any = None) -> int:
        return 0

    def max_memory_allocated(self, device: Any = None) -> int:
        return 0

    def max_memory_reserved(self, device: Any = None) -> int:
        return 0

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        free = os.sysconf("SC_AVPHYS_PAGES") * page_size
        return free, pages * page_size

    # device selection: there is one CPU device
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def set_device(self, device: Any) -> None:
        return None

    def get_device_name(self, device: Any = None) -> str:
        return "CPU"

    def synchronize(self, device: Any = None) -> None:
        return None

    # RNG: the CPU generator is torch's default one
    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)


_DEVICE_MODULE = _CPUDeviceModule()


class PlatformCPU(PlatformBase):
    """verl platform for running on CPU processes (gloo collectives, logical Ray GPUs)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only VERL_PLATFORM=cpu selects it, so GPU hosts and verl's own
        # behaviour on CPU-only hosts (its fallback) stay exactly as they were.
        return False

    def current_device(self) -> torch.device:  # type: ignore[override]
        # A device object rather than an index: verl builds tensors with `.to(get_device_id())`, and
        # an integer there would mean an accelerator ordinal.
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets this for actors holding (logical) GPUs; nothing on the CPU path reads it.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        with nullcontext():
            yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
