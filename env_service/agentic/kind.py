"""BFCL V4's agentic tasks as a task kind (env_service/task_kind.py's interface).

A memory task's backends live on the pool's workers like a multi-turn task's, but start
from the memory its scenario's conversations saved (seal/bfcl/agentic/memory.py), show
that memory in their prompt, and a prerequisite conversation's memory is saved before it
is evaluated; a web-search task has nothing on a worker: its calls are outside calls
(web_calls.py). Admission: episode_admission.py; the episode's own rules: agentic_episode.py.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from env_service.agentic.agentic_episode import AgenticEpisode
from env_service.agentic.episode_admission import admit_agentic, memory_start
from env_service.agentic.web_calls import TO_TEXT_S, WebCalls
from env_service.episode import EpisodeCaps, EpisodeMachine
from env_service.errors import ServiceStartError, StorageError
from env_service.execution import RunResult
from env_service.service_config import ServiceConfig
from env_service.task_kind import run_on_worker
from seal.bfcl.agentic import memory, web_search
from seal.bfcl.agentic.backends import AgenticBackends
from seal.bfcl.agentic.tasks import WEB_SEARCH, AgenticTask
from seal.bfcl.calls import ToolCall
from seal.bfcl.multi_turn import BfclTask
from seal.service_contract import EpisodeSettings

if TYPE_CHECKING:
    from env_service.task_kind import Pool


def memory_context(backends: AgenticBackends) -> str:
    """The memory backend's dump of its memory for the prompt (run on its worker)."""
    return backends.memory_context()


def save_memory(backends: AgenticBackends) -> str | None:
    """Save a prerequisite conversation's memory (run on its worker); why it could not
    be written (a full disk, a folder made read-only), or None."""
    try:
        backends.save_memory()
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return None


def search_limits(config: ServiceConfig) -> web_search.SearchLimits:
    """The web search's limits, from the service's `web_search_*` and `web_fetch_*` keys."""
    return web_search.SearchLimits(
        min_interval_s=config.web_search_interval_s,
        attempts=config.web_search_attempts,
        timeout_s=config.web_search_timeout_s,
        backoff_s=config.web_search_backoff_s,
        fetch_timeout_s=config.web_fetch_timeout_s,
        max_page_bytes=config.web_fetch_max_bytes,
    )


def _calls_the_web(task: AgenticTask) -> bool:
    """Its calls are outside calls, made by web_calls.py, not by a worker."""
    return task.kind == WEB_SEARCH


class AgenticKind:
    def __init__(self, config: ServiceConfig, caps: EpisodeCaps):
        """Raises ServiceStartError for a snapshot folder it cannot use. Process-wide, and
        before any worker forks: the workers hold the backends."""
        self.config = config
        self.caps = caps
        limits = search_limits(config)
        # A web-search step's own budget (its episodes only): one search with its tries
        # and one page fetch, turned into text.
        web_seconds = limits.worst_case_s() + limits.fetch_timeout_s + 2 * TO_TEXT_S
        self.web_caps = dataclasses.replace(
            caps,
            budget=dataclasses.replace(
                caps.budget, max_seconds=max(caps.budget.max_seconds, web_seconds)
            ),
        )
        self.web_calls = WebCalls(config.web_search_processes, limits, threads=config.workers == 0)
        try:
            memory.configure(config.memory_snapshot_dir, config.embedding_model_dir)
        except OSError as e:
            raise ServiceStartError(f"--memory-snapshot-dir: {e}") from None
        web_search.configure(limits)

    def owns(self, task: BfclTask) -> bool:
        return isinstance(task, AgenticTask)

    def admit(
        self,
        task: AgenticTask,
        episodes: Mapping[str, EpisodeMachine],
        expire: Callable[[str], None],
    ) -> None:
        admit_agentic(task, episodes, self.config.memory_lease_s, expire)

    def episode(
        self, task: AgenticTask, settings: EpisodeSettings, profile: dict | None
    ) -> AgenticEpisode:
        caps = self.web_caps if _calls_the_web(task) else self.caps
        return AgenticEpisode(task.task_id, settings, profile=profile, caps=caps)

    async def open(self, episode_id: str, episode: AgenticEpisode, pool: Pool) -> None:
        task = episode.task
        memory_version = await memory_start(task) if task.is_memory else None
        if not _calls_the_web(task):  # a web-search episode has nothing on a worker
            build = functools.partial(AgenticBackends, memory_version=memory_version)
            await pool.open(episode_id, task.task_id, build)
        if episode.system is None:  # a memory task: show what its backend loaded
            episode.set_memory_context(await pool.ask(episode_id, memory_context))

    async def run(
        self, episode_id: str, episode: AgenticEpisode, calls: list[ToolCall], pool: Pool
    ) -> RunResult:
        if _calls_the_web(episode.task):
            return await self.web_calls.run(
                episode_id, episode.task.task_id, calls, episode.caps.budget
            )
        return await run_on_worker(pool, episode_id, calls)

    async def evaluate(self, episode_id: str, episode: AgenticEpisode, pool: Pool) -> dict:
        if episode.needs_memory_save():
            why = await pool.ask(episode_id, save_memory)
            if why is not None:
                raise StorageError(
                    f"the memory {episode.task.task_id} left could not be saved ({why}); "
                    "the conversation has not finished: fix the snapshot folder, then "
                    "evaluate it again or play it again"
                )
            episode.memory_saved()
        return episode.agentic_evaluation()

    def closed(self, episode_id: str) -> None:
        self.web_calls.forget(episode_id)

    def stats(self) -> dict:
        return self.web_calls.stats()

    async def stop(self) -> None:
        await self.web_calls.stop()
