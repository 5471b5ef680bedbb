"""The math of the SEAL hooks (seal/trainer/seal_hooks.py calls it for both trainers).

After GRPO has normalised the rewards within each task's group, the capability state
observes every sample's outcome and turn tags, moves the dynamic tag weights, and
A-Patch scales each sample's advantages by the weights of its tags. Both backends reach
`observe_and_reweight` with the same inputs, so they patch advantages identically
(tests/seal/trainer/verl/test_trainer.py checks the verl side against this function).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from seal.runs.interface_log import interface_row, write_interface
from seal.tocf.apatch import APatchConfig, apply_apatch, tag_weights
from seal.tocf.state import CapabilityState, TrajectoryOutcome


@dataclass(frozen=True)
class SampleOutcome:
    """What the SEAL hooks need of one sample (an EpisodeSample has these attributes)."""

    task_id: str
    category: str
    reward: float
    accuracy: int
    failure_tags: Sequence[str]
    paper_label: str | None = None
    """The failed sample's label in the paper's Table 5 (reports only; A-Patch reads the
    turn tags)."""
    interface: Mapping | None = None
    """The training-time interface its episode was given (EpisodeInterface as a dict)."""


def observe_and_reweight(
    capability: CapabilityState,
    samples: Sequence[SampleOutcome],
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: APatchConfig,
    *,
    step: int,
    epoch: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Observe the samples, update the tag weights, return (patched advantages, metrics)."""
    for s in samples:
        outcome = TrajectoryOutcome(
            s.category, s.task_id, s.reward, bool(s.accuracy), list(s.failure_tags), step, epoch
        )
        capability.observe(outcome)
    capability.update_weights()
    tags = [list(s.failure_tags) for s in samples]
    advantages, apatch_metrics = apply_apatch(
        advantages, response_mask, tags, config, step=step, weights=tag_weights(config, capability)
    )
    return advantages, {**capability.metrics(), **apatch_metrics}


def record_interface(
    run_dir: Path,
    step: int,
    samples: Sequence[SampleOutcome],
    served_profile: dict | None,
    capability: CapabilityState,
) -> dict:
    """The step's interface state beside its failure profiles (seal/runs/interface_log.py):
    what the samples' episodes were shown, the profile that chose it, the step's own.
    Returns the record."""
    interfaces = [s.interface for s in samples]
    row = interface_row(step, interfaces, served_profile, capability.failure_profile())
    write_interface(run_dir, row)
    return row
