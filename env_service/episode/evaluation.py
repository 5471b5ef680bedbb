"""An episode's evaluation (service_contract.Evaluation, as a dict): a multi-turn task's from
the verification of what ran. `evaluation` builds every kind's (BFCL V4's agentic tasks:
env_service/agentic/agentic_episode.py)."""

from __future__ import annotations

from typing import Protocol

from env_service.episode.records import Counters, EpisodeCaps
from seal.bfcl import tags as T
from seal.bfcl.diagnosis import Diagnosis, paper_label
from seal.bfcl.multi_turn import BfclTask
from seal.service_contract import EpisodeSettings


class Played(Protocol):
    """What an evaluation reads of an episode (env_service.episode.EpisodeMachine)."""

    task: BfclTask
    settings: EpisodeSettings
    caps: EpisodeCaps
    counters: Counters
    turn: int
    turn_signals: list[dict[str, int]]
    terminated: bool
    truncated: bool
    ended_on_malformed_call: bool
    aborted: str | None


def multi_turn_evaluation(
    episode: Played, diagnosis: Diagnosis | None, aborted: str | None = None
) -> dict:
    """The evaluation given a verification made by the engine's pool, or None with
    `aborted` (EVALUATION_TIME_BUDGET) when it could not finish."""
    task = episode.task
    aborted = episode.aborted or aborted
    if diagnosis is None:
        n = task.num_turns
        budget = episode.caps.max_evaluation_seconds
        note = f"verification stopped: it ran over the service's time budget of {budget} s"
        accuracy, progress, tags, notes = 0, 0.0, [T.CHECKER_ERROR] * n, [note] * n
    else:
        accuracy, progress = diagnosis.accuracy, diagnosis.progress
        tags, notes = diagnosis.tags, diagnosis.notes
    if aborted:
        accuracy = 0  # the service ended the episode: a failure whatever ran before
    reward = 0.0 if aborted else episode.settings.reward.reward(accuracy, progress)
    # An episode the service ended has no label: its failure is the service's cap.
    label = None if aborted else paper_label(tags, task.ground_truth, episode.turn_signals)
    return evaluation(episode, accuracy, reward, progress, tags, notes, label, aborted)


def evaluation(
    episode: Played,
    accuracy: int,
    reward: float,
    progress: float,
    tags: list[str],
    notes: list[str],
    label: str | None,
    aborted: str | None,
) -> dict:
    task, c = episode.task, episode.counters
    return {
        "accuracy": accuracy,
        "reward": reward,
        "progress": progress,
        "failure_tags": tags,
        "tag_notes": notes,
        "paper_label": label,
        "num_turns": task.num_turns,
        "turns_reached": min(episode.turn + 1, task.num_turns),
        "terminated": episode.terminated,
        "truncated": episode.truncated,
        "aborted": aborted,
        "ended_on_malformed_call": episode.ended_on_malformed_call,
        "steps": c.steps,
        "tool_calls": c.tool_calls,
        "invalid_calls": c.invalid_calls,
        "invalid_by_kind": dict(c.invalid_by_kind),
        "tool_errors": c.tool_errors,
        "task_id": task.task_id,
        "category": task.category,
    }
