"""What an episode costs and counts, and what a step answers: the episode's records."""

from __future__ import annotations

from dataclasses import dataclass, field

from env_service.execution import StepBudget
from env_service.service_config import ServiceConfig


@dataclass(frozen=True)
class EpisodeCaps:
    """What one step and one episode may cost (ServiceConfig's limits)."""

    max_calls_per_step: int
    max_calls_per_episode: int
    max_episode_call_chars: int
    budget: StepBudget
    max_evaluation_seconds: float

    @classmethod
    def of(cls, config: ServiceConfig) -> EpisodeCaps:
        return cls(
            max_calls_per_step=config.max_calls_per_step,
            max_calls_per_episode=config.max_calls_per_episode,
            max_episode_call_chars=config.max_episode_call_chars,
            budget=StepBudget(
                max_result_chars=config.max_result_chars,
                max_reply_chars=config.max_step_reply_chars,
                max_seconds=config.max_step_seconds,
            ),
            max_evaluation_seconds=config.max_evaluation_seconds,
        )


@dataclass
class Counters:
    steps: int = 0
    tool_calls: int = 0
    invalid_calls: int = 0
    """Unparseable blocks, unknown or unavailable tools, bad argument names."""
    tool_errors: int = 0
    """Calls that ran and failed in the backend (raised, or returned {"error": ...})."""
    invalid_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class StepOutcome:
    seq: int
    """The step's number in its episode (1-based)."""
    messages: list[dict]
    terminated: bool
    reward: float
    truncated: bool
    turn: int
    evaluation: dict | None = None
    """The evaluation, on the step that ended the episode."""
    aborted: str | None = None
    """Why the service ended the episode as a failure (STEP_TIME_BUDGET), or None."""


class EpisodeFinishedError(RuntimeError):
    """A step on an episode that has already ended."""


def tool_message(name: str | None, content: str, hint: str | None = None) -> dict:
    """The answer to one call (observation data: protocol.ObservationMessage)."""
    return {"role": "tool", "name": name, "content": content, "hint": hint}


def env_message(content: str) -> dict:
    """The environment's own answer to a message (the paper's error message)."""
    return {"role": "env", "content": content}
