"""What `bash install.sh --vllm-cpu` must leave in .venv-vllm for verl's vLLM rollout to run
on the CPU (exp/verl_cpu_vllm_smoke.yaml); install.sh calls `check_vllm_install()` last, so
a broken install fails there, naming what is wrong, not minutes into a run.

Imports nothing from verl or vLLM at module level: the smoke test reads `problems()` from
the main test venv to say why it skips.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util

VLLM_CPU_VERSION = "0.27.0"
"""The vllm-cpu release installed: the first that pins torch 2.13.0+cpu, the build here."""

CUDA_ONLY_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
"""Pulled in by vllm-cpu as CUDA builds; importing them fails on the CPU torch and breaks
transformers' Qwen2 import and vllm.multimodal, so install.sh removes them."""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def problems() -> list[str]:
    """What is wrong with this interpreter's vLLM install for the CPU smoke (empty: ready)."""
    found = []
    if _version("vllm-cpu") != VLLM_CPU_VERSION:
        found.append(f"vllm-cpu {VLLM_CPU_VERSION} is not installed (found {_version('vllm-cpu')})")
    if _version("vllm") != f"{VLLM_CPU_VERSION}+cpu":
        found.append(
            f"the metadata-only `vllm` {VLLM_CPU_VERSION}+cpu (seal/trainer/verl/cpu/"
            f"vllm_metadata) is not installed (found {_version('vllm')})"
        )
    found += [
        f"{name} is installed (a CUDA build)" for name in CUDA_ONLY_PACKAGES if _version(name)
    ]
    if importlib.util.find_spec("verl") is None:
        found.append("verl is not installed")
    return found


def check_vllm_install() -> None:
    """Raise naming every problem; then import vLLM and check it chose its CPU platform."""
    found = problems()
    if found:
        raise SystemExit("vLLM CPU install: " + "; ".join(found))
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        raise SystemExit(f"vLLM chose the {current_platform.device_name!r} platform, not the CPU")
