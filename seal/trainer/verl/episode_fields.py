"""`EpisodeFields`: what the agent loop hands the SEAL trainer about one episode.

It rides in `AgentLoopOutput.extra_fields` (`to_extra_fields`, the one encoding): as a
dict, which the SEAL hooks read back from TransferQueue (its msgpack keeps strings,
numbers, None, lists and dicts); beside verl's own keys, the weight versions and
`reward_extra_info`, which verl's validation gathers into columns it averages (numbers)
or skips (strings): there the episode travels as its JSON text, read back for the
validation records. Why: docs/verl_notes.md, "Which code path verl runs".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from seal.rollout.driver import EpisodeSample
from seal.trainer.reweight import SampleOutcome

EPISODE_KEY = "seal_episode"
"""The episode's key in `extra_fields`."""
EPISODE_TEXT_KEY = "seal_episode_json"
"""Its JSON text's key in `reward_extra_info` (not EPISODE_KEY: verl's older batch path
puts both dicts' keys in one set of columns)."""


class EpisodeFields(BaseModel):
    """One episode as the trainer reads it (its reward is verl's `rm_scores`)."""

    # strict: a field decoded with another type is an error, not converted.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    task_id: str
    category: str
    accuracy: int
    progress: float
    failure_tags: list[str]
    """One diagnosis tag per ground-truth turn (empty when the task has none)."""
    paper_label: str | None
    """The failed episode's label in the paper's Table 5; None when there is none."""
    interface: dict[str, Any]
    """The interface the episode was shown (the create reply's `interface`)."""
    num_generations: int
    stop_reason: str
    tool_calls: int
    invalid_calls: int
    tool_errors: int
    turns_reached: int
    min_weight_version: int
    """The version of the weights of the episode's first generation (verl's
    `min_global_steps`: its step metrics measure staleness with it)."""
    max_weight_version: int
    """The same of its last generation (verl's `max_global_steps`)."""

    @classmethod
    def of_episode(cls, sample: EpisodeSample, weight_versions: Sequence[int]) -> EpisodeFields:
        evaluation = sample.evaluation
        return cls(
            task_id=sample.task_id,
            category=sample.category,
            accuracy=int(sample.accuracy),
            progress=float(sample.progress),
            failure_tags=list(sample.failure_tags),
            paper_label=sample.paper_label,
            interface=sample.interface,
            num_generations=sample.num_generations,
            stop_reason=sample.stop_reason,
            tool_calls=evaluation["tool_calls"],
            invalid_calls=evaluation["invalid_calls"],
            tool_errors=evaluation["tool_errors"],
            turns_reached=evaluation["turns_reached"],
            min_weight_version=min(weight_versions),
            max_weight_version=max(weight_versions),
        )

    def to_extra_fields(self) -> dict[str, Any]:
        """The `AgentLoopOutput.extra_fields` of the episode."""
        return {
            "min_global_steps": self.min_weight_version,
            "max_global_steps": self.max_weight_version,
            EPISODE_KEY: self.model_dump(),
            # Numbers only beside the text: verl averages each into its validation
            # metrics (acc is its core one) and would fail on a list or a dict.
            "reward_extra_info": {
                "acc": self.accuracy,
                "turns": self.num_generations,
                "progress": self.progress,
                EPISODE_TEXT_KEY: self.model_dump_json(),
            },
        }

    @classmethod
    def from_extra_fields(cls, extra_fields: Mapping[str, Any]) -> EpisodeFields:
        """The episode of one sample's `extra_fields`, read back from TransferQueue."""
        return cls.model_validate(extra_fields[EPISODE_KEY])

    @classmethod
    def from_validation_columns(cls, columns: Mapping[str, list], i: int) -> EpisodeFields:
        """Sample i's episode of the columns verl's validation gathers from each sample's
        `reward_extra_info` (what it hands `_dump_generations`)."""
        return cls.model_validate_json(columns[EPISODE_TEXT_KEY][i])

    def outcome(self, reward: float) -> SampleOutcome:
        """What the SEAL hooks need of the sample."""
        return SampleOutcome(
            task_id=self.task_id,
            category=self.category,
            reward=reward,
            accuracy=self.accuracy,
            failure_tags=self.failure_tags,
            paper_label=self.paper_label,
            interface=self.interface,
        )

    def evaluation(self, reward: float) -> dict[str, Any]:
        """The evaluation a validation record is built from (seal.runs.records)."""
        return {
            "task_id": self.task_id,
            "category": self.category,
            "accuracy": self.accuracy,
            "reward": reward,
            "failure_tags": self.failure_tags,
            "paper_label": self.paper_label,
            "progress": self.progress,
        }
