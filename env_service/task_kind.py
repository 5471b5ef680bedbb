"""What the service does differently per kind of task, behind one interface, `TaskKind`.

The engine asks an episode's kind to admit its create, make the episode, open its
backends, run its calls and evaluate it, and tells it when the episode goes. BFCL's
multi-turn tasks are `MultiTurnKind` (below: backends on the pool's workers, verified by
the diagnosis); BFCL V4's agentic tasks are env_service/agentic/kind.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from env_service.episode import EpisodeCaps, EpisodeMachine
from env_service.execution import (
    EVALUATION_TIME_BUDGET,
    REBUILD_TIME_BUDGET,
    STEP_TIME_BUDGET,
    RunResult,
)
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import Diagnosis
from seal.bfcl.multi_turn import BfclTask
from seal.bfcl.tasks import CATEGORIES
from seal.service_contract import EpisodeSettings

if TYPE_CHECKING:
    from env_service.in_process import InProcessPool
    from env_service.workers import WorkerPool

    Pool = WorkerPool | InProcessPool


class TaskKind(Protocol):
    def owns(self, task: BfclTask) -> bool:
        """`task` is of this kind."""

    def admit(
        self, task: BfclTask, episodes: Mapping[str, EpisodeMachine], expire: Callable[[str], None]
    ) -> None:
        """Refuse a create this service cannot run right (a ServiceError); `episodes`: the
        live ones; `expire` ends one (as the TTL does)."""

    def episode(
        self, task: BfclTask, settings: EpisodeSettings, profile: dict | None
    ) -> EpisodeMachine:
        """A new episode of `task` (admitted)."""

    async def open(self, episode_id: str, episode: EpisodeMachine, pool: Pool) -> None:
        """Build the new episode's backends and complete its prompt (the engine closes
        an episode whose open raised)."""

    async def run(
        self, episode_id: str, episode: EpisodeMachine, calls: list[ToolCall], pool: Pool
    ) -> RunResult:
        """Run a step's admitted calls."""

    async def evaluate(self, episode_id: str, episode: EpisodeMachine, pool: Pool) -> dict:
        """The episode's evaluation (service_contract.Evaluation, as a dict)."""

    def closed(self, episode_id: str) -> None:
        """The episode has gone (closed or expired)."""

    def stats(self) -> dict:
        """Its figures for /v1/stats."""

    async def stop(self) -> None:
        """The service stops."""


async def run_on_worker(pool: Pool, episode_id: str, calls: list[ToolCall]) -> RunResult:
    """Run a step's calls on the worker holding the episode's backends."""
    result = await pool.run(episode_id, calls)
    if result.stopped in (STEP_TIME_BUDGET, REBUILD_TIME_BUDGET):
        pool.close(episode_id)  # the episode has ended: its backends are of no use
    return result


class MultiTurnKind:
    """BFCL's four multi-turn categories (the paper's training and validation tasks)."""

    def __init__(self, caps: EpisodeCaps):
        self.caps = caps

    def owns(self, task: BfclTask) -> bool:
        return task.category in CATEGORIES

    def admit(
        self, task: BfclTask, episodes: Mapping[str, EpisodeMachine], expire: Callable[[str], None]
    ) -> None:
        """Every shipped multi-turn task can run."""

    def episode(
        self, task: BfclTask, settings: EpisodeSettings, profile: dict | None
    ) -> EpisodeMachine:
        return EpisodeMachine(task.task_id, settings, profile=profile, caps=self.caps)

    async def open(self, episode_id: str, episode: EpisodeMachine, pool: Pool) -> None:
        await pool.open(episode_id, episode.task.task_id)

    async def run(
        self, episode_id: str, episode: EpisodeMachine, calls: list[ToolCall], pool: Pool
    ) -> RunResult:
        return await run_on_worker(pool, episode_id, calls)

    async def evaluate(self, episode_id: str, episode: EpisodeMachine, pool: Pool) -> dict:
        """The diagnosis of the calls that ran (seal/bfcl/diagnosis.py), on a worker."""
        if episode.evaluated:
            return episode.evaluation()
        verdict = await pool.diagnose(episode_id, episode.task.task_id, episode.model_turns)
        if isinstance(verdict, Diagnosis):
            return episode.evaluation_for(verdict)
        return episode.evaluation_for(None, EVALUATION_TIME_BUDGET)

    def closed(self, episode_id: str) -> None:
        """Nothing of its own to forget (the engine closes its backends)."""

    def stats(self) -> dict:
        return {}

    async def stop(self) -> None:
        """Nothing of its own to stop (the engine stops the pool)."""
