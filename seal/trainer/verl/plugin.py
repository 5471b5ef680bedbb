"""The module verl loads through the `verl.plugins` entry point: importing it registers
the project's extensions with verl.

verl 0.9.1 imports every `verl.plugins` entry point while `import verl` runs, in every
process (Ray workers too), and swallows a failing import at debug level. A broken
plugin therefore shows up only later, as "Agent loop seal_bfcl not registered" deep
in a rollout worker; `check_registrations()` turns that into an error at start-up,
naming what is missing.
"""

from __future__ import annotations

# isort: off
# First: importing verl.trainer.ppo.v1 (below) resolves verl's platform, and a CPU run
# selects this one, so it must be registered by then.
import seal.trainer.verl.cpu.platform  # noqa: F401
# isort: on

from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1 import get_trainer_cls

# The CPU test backend's engine, replica, weight sync and trainer register on import.
import seal.trainer.verl.cpu.engine  # noqa: F401
import seal.trainer.verl.cpu.rollout  # noqa: F401
import seal.trainer.verl.cpu.trainer  # noqa: F401
import seal.trainer.verl.cpu.weight_sync  # noqa: F401
from seal.trainer.verl.agent_loop import AGENT_NAME, SealBfclAgentLoop
from seal.trainer.verl.trainer import TRAINER_MODE, SealPPOTrainer

ENTRY_POINT_GROUP = "verl.plugins"
ENTRY_POINT = "seal = seal.trainer.verl.plugin"
"""The line of pyproject.toml's [project.entry-points."verl.plugins"] table."""


def missing_registrations() -> list[str]:
    """What verl's registries lack of this plugin (empty when all is registered)."""
    missing = []
    # verl 0.9.1 has no public getter for agent loops; the worker reads this dict.
    entry = _agent_loop_registry.get(AGENT_NAME)
    target = f"{SealBfclAgentLoop.__module__}.{SealBfclAgentLoop.__qualname__}"
    if entry is None or entry.get("_target_") != target:
        missing.append(f"agent loop {AGENT_NAME!r} -> {target} (registered: {entry})")
    try:
        trainer = get_trainer_cls(TRAINER_MODE)
    except (KeyError, ValueError) as error:
        trainer = error
    if trainer is not SealPPOTrainer:
        missing.append(f"trainer {TRAINER_MODE!r} -> SealPPOTrainer (registered: {trainer})")
    return missing + missing_cpu_backend()


def missing_cpu_backend() -> list[str]:
    """What verl's registries lack of the CPU test backend (seal/trainer/verl/cpu)."""
    from verl.checkpoint_engine.base import CheckpointEngineRegistry
    from verl.plugin.platform.platform_manager import PlatformRegistry
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from seal.trainer.verl.cpu import PLATFORM_NAME
    from seal.trainer.verl.cpu.platform import PlatformSealCPU
    from seal.trainer.verl.cpu.rollout import ROLLOUT_NAME, HFCPUReplica
    from seal.trainer.verl.cpu.trainer import (
        TRAINER_MODE_CPU,
        TRAINER_MODE_CPU_VLLM,
        SealPPOTrainerCPU,
        SealPPOTrainerCPUvLLM,
    )
    from seal.trainer.verl.cpu.weight_sync import BACKEND, GlooCheckpointEngine

    found = {
        f"platform {PLATFORM_NAME!r}": (PlatformRegistry.get(PLATFORM_NAME), PlatformSealCPU),
        f"rollout replica {ROLLOUT_NAME!r}": (
            _lookup(RolloutReplicaRegistry.get, ROLLOUT_NAME), HFCPUReplica,
        ),
        f"checkpoint engine {BACKEND!r}": (
            _lookup(CheckpointEngineRegistry.get, BACKEND), GlooCheckpointEngine,
        ),
        f"trainer {TRAINER_MODE_CPU!r}": (_lookup(get_trainer_cls, TRAINER_MODE_CPU), SealPPOTrainerCPU),
        f"trainer {TRAINER_MODE_CPU_VLLM!r}": (
            _lookup(get_trainer_cls, TRAINER_MODE_CPU_VLLM), SealPPOTrainerCPUvLLM,
        ),
    }  # fmt: skip
    return [f"{what} (registered: {got})" for what, (got, want) in found.items() if got is not want]


def _lookup(getter, name):
    try:
        return getter(name)
    except (KeyError, ValueError) as error:
        return error


def check_registrations() -> None:
    """Raise if anything this plugin registers is missing from verl."""
    missing = missing_registrations()
    if missing:
        raise RuntimeError("seal verl plugin not registered: " + "; ".join(missing))
