"""`seal_cpu`: a verl platform whose device is the CPU and whose collectives are gloo.

It answers verl's platform questions (device, memory, RNG, synchronisation, process-group
backend, Ray resource) with the CPU's own facilities, and reserves logical `num_gpus`
slots because verl checks the cluster for GPU resources only. Selected only explicitly
(VERL_PLATFORM=seal_cpu), never by auto-detection. Each answer and why:
docs/verl_notes.md.
"""

from __future__ import annotations

import contextlib
import resource
from types import SimpleNamespace
from typing import Any

import psutil
import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from seal.trainer.verl.cpu import PLATFORM_NAME


def _resident_bytes(*_args, **_kwargs) -> int:
    return psutil.Process().memory_info().rss


def _peak_resident_bytes(*_args, **_kwargs) -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _mem_get_info(*_args, **_kwargs) -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


def _no_op(*_args, **_kwargs) -> None:
    return None


CPU_DEVICE_MODULE = SimpleNamespace(
    __name__="seal_cpu_device",
    is_available=lambda: True,
    is_initialized=lambda: True,
    current_device=lambda: "cpu",
    device_count=lambda: 1,
    set_device=_no_op,
    synchronize=_no_op,
    empty_cache=_no_op,
    set_per_process_memory_fraction=_no_op,
    reset_peak_memory_stats=_no_op,
    manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed,
    get_rng_state=lambda *_a, **_k: torch.get_rng_state(),
    set_rng_state=lambda state, *_a, **_k: torch.set_rng_state(state),
    memory_allocated=_resident_bytes,
    memory_reserved=_resident_bytes,
    max_memory_allocated=_peak_resident_bytes,
    max_memory_reserved=_peak_resident_bytes,
    mem_get_info=_mem_get_info,
    ipc_collect=_no_op,
    get_device_name=lambda *_a, **_k: "CPU",  # verl's FLOPs table has no CPU row: inf
    get_device_properties=lambda *_a, **_k: SimpleNamespace(
        name="CPU", total_memory=psutil.virtual_memory().total
    ),
    Stream=torch.cpu.Stream,
    Event=torch.cpu.Event,
    stream=torch.cpu.stream,
    current_stream=torch.cpu.current_stream,
)
"""What verl calls on `torch.<device>` (get_torch_device()), answered for the CPU."""


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformSealCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: VERL_PLATFORM=seal_cpu selects it

    def current_device(self) -> str:
        # verl passes the current device id to `.to(...)` and `torch.device(...)`; an int
        # means an accelerator's index there, so the CPU's id is the device itself.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass  # CUDA caching-allocator settings; the CPU allocator has none

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for the logical GPU slots; nothing reads it on this platform.
        return "CUDA_VISIBLE_DEVICES"

    def ray_resource_name(self) -> str:
        return "GPU"  # logical worker slots (docs/verl_notes.md, platform)

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def cudart(self) -> Any:
        return None
