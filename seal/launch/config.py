"""The run configuration: every key, its default and its meaning, in one place.

`exp/*.yaml` files are merged onto these dataclasses (OmegaConf structured configs), so
a misspelt key is an error at start-up rather than a silently ignored setting, and
`python launcher.py --conf X.yaml -- service.port=8090` overrides any key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seal.trainer.config import TrainerConfig


@dataclass
class ServiceSettings:
    """The BFCL environment service the run talks to."""

    start: bool = True
    """Start `python -m env_service` for the run (reused instead if one already answers)."""
    host: str = "127.0.0.1"
    port: int = 8082
    startup_timeout_s: float = 60.0
    """Give up (and fail the run) if the service is not healthy after this long."""
    max_live_episodes: int = 1024
    """Passed to the service: live episodes before it answers 'busy'."""


@dataclass
class ReplaySettings:
    """The `replay` job: scripted policies through the service, scored per category."""

    split: str = "eval"
    """Tasks to replay: `train`, `eval` (400 each, data/seal_split.json) or `all` (800)."""
    policies: list[str] = field(default_factory=lambda: ["ground_truth", "drop_call"])
    """`ground_truth` answers with BFCL's ground truth; `drop_call` omits one ground-truth
    call in one turn per task, which exercises the diagnosis."""
    concurrency: int = 64
    """Episodes in flight at once."""
    seed: int = 0
    """Seed for the corrupted policies' choices."""


@dataclass
class RunConfig:
    name: str = "replay_demo"
    """Run name; outputs go to `{output_dir}/{name}`."""
    job: str = "replay"
    """What the launcher runs: `replay` (a scripted policy through the service) or `local`
    (the single-process GRPO trainer, seal/trainer/local.py)."""
    output_dir: str = "outputs"
    service: ServiceSettings = field(default_factory=ServiceSettings)
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
