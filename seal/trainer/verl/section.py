"""The `seal` section of a verl config: what verl's own keys cannot hold.

The launcher writes it from the run config (seal/trainer/verl/verl_config.py); the agent loop
and the SEAL trainer read it with `from_config`. It carries the run's whole `trainer`
section, so the episode limits, observation layers, reward, A-Patch and capability
settings are the very objects the local trainer reads. Where verl has its own key for a
setting (rollout.n, temperature, top_p, the optimizer and loss), verl's key is the one
verl uses; the mapping sets it from the same `trainer` value. Unknown keys are errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import OmegaConf

from seal.rollout.env_client import EnvClientSettings
from seal.trainer_config import TrainerConfig


@dataclass
class SealSection:
    env_url: str = "http://127.0.0.1:8082"
    """The environment service every agent-loop worker and the trainer talk to."""
    run_dir: str = "outputs/verl_run"
    """Validation records (validation/), capability state, tocf summaries, best checkpoint."""
    client: EnvClientSettings = field(default_factory=EnvClientSettings)
    """How the agent loops and the trainer wait for and retry the service (the run
    config's `service.client`)."""
    max_env_connections: int = 256
    """Connections per agent-loop worker to the service."""
    dump_advantages: bool = False
    """Write each step's samples (group, outcome, GRPO and final advantage) to
    {run_dir}/advantages/step_N.json (the run config's `verl.dump_advantages`)."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """The run config's `trainer` section."""

    @classmethod
    def from_config(cls, config) -> SealSection:
        """The typed section of a verl DictConfig (defaults if it has none)."""
        section = config.get("seal") if config is not None else None
        merged = OmegaConf.merge(OmegaConf.structured(cls), section or {})
        return OmegaConf.to_object(merged)
