"""The protocol-independent core of the service: the registry of live episodes and their limits.

Both HTTP protocols are thin layers over `EnvEngine`'s async methods (`acreate`, `astep`,
`aevaluate`): episodes' state machines live here, on the event loop (so the registry needs
no locks), and their backends in the engine's pool of worker processes, so no client's
calls hold up another's requests. Retried creates and steps are answered, not rerun. What
differs per kind of task (admission, backends, where calls run, evaluation):
task_kind.py. The failure profile: profile_source.py. Details: docs/design.md, "The
episode contract".
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict

from env_service.agentic.kind import AgenticKind
from env_service.cpu_share import CpuShares
from env_service.episode import EpisodeCaps, EpisodeMachine, StepOutcome
from env_service.errors import (
    BusyError,
    ConflictError,
    NotFoundError,
    ServiceStartError,
    TooLargeError,
)
from env_service.execution import RunResult
from env_service.ids import check_id
from env_service.in_process import InProcessPool
from env_service.profile_source import ProfileSource
from env_service.release_texts import INLINE_PARSE_CHARS, RELEASE_TEXTS, ParsedMessage
from env_service.service_config import ServiceConfig
from env_service.task_kind import MultiTurnKind, TaskKind
from env_service.workers import WorkerPool
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.multi_turn import BfclTask, UnknownTaskError
from seal.bfcl.tasks import load_task
from seal.service_contract import EpisodeSettings

__all__ = ["EnvEngine", "ServiceConfig"]  # ServiceConfig is imported from here too


class EnvEngine:
    def __init__(self, config: ServiceConfig | None = None):
        self.config = config or ServiceConfig()
        self.caps = EpisodeCaps.of(self.config)
        # Built before any worker forks: a kind may set up process-wide state they share.
        self.kinds: dict[str, TaskKind] = {
            "agentic": AgenticKind(self.config, self.caps),
            "multi_turn": MultiTurnKind(self.caps),
        }
        """What differs per kind of task (env_service/task_kind.py), by kind."""
        self.episodes: dict[str, EpisodeMachine] = {}
        # Final answers of episodes that ended and were closed, for retried final steps:
        # id -> (time ended, answer); oldest first, bounded like the live episodes.
        self.finished: OrderedDict[str, tuple[float, StepOutcome]] = OrderedDict()
        self.totals = {"created": 0, "closed": 0, "expired": 0, "rejected_busy": 0}
        self.pool: WorkerPool | InProcessPool | None = None
        self._pool_lock = asyncio.Lock()
        path = self.config.capability_state_path
        try:  # the failure profile guided episodes get
            self.profiles = ProfileSource(path)
        except (OSError, ValueError) as e:
            raise ServiceStartError(
                f"--capability-state {path}: cannot read a failure profile from it "
                f"({type(e).__name__}: {e}); fix or remove the file"
            ) from None

    # --- the pool that holds the backends -------------------------------------------------

    async def start_pool(self) -> WorkerPool | InProcessPool:
        """The pool, started on first use (the app's lifespan starts it; an app run without
        one, as by httpx.ASGITransport, starts it on its first request): worker processes,
        or the service's own process with `workers=0`."""
        async with self._pool_lock:
            if self.pool is None:
                if self.config.workers == 0:
                    pool = InProcessPool(self.caps.budget, self.config.max_evaluation_seconds)
                else:
                    pool = WorkerPool(
                        self.config.workers,
                        self.caps.budget,
                        self.config.max_evaluation_seconds,
                        self._executed_calls,
                        self.config.worker_niceness,
                        self.config.worker_stall_seconds,
                        # Held back at most a step's budget: a request's own budget plus
                        # this stays inside the clients' timeout (seal/rollout/env_client.py).
                        CpuShares(
                            self.config.episode_cpu_share,
                            self.config.episode_cpu_burst_s,
                            self.caps.budget.max_seconds,
                        ),
                    )
                await pool.start()
                self.pool = pool
        return self.pool

    async def stop_pool(self) -> None:
        if self.pool is not None:
            await self.pool.stop()
            self.pool = None
        for kind in self.kinds.values():
            await kind.stop()

    def _executed_calls(self, episode_id: str) -> list[ToolCall] | None:
        episode = self.episodes.get(episode_id)
        return None if episode is None else episode.executed_calls()

    def kind_of(self, task: BfclTask) -> TaskKind:
        return next(kind for kind in self.kinds.values() if kind.owns(task))

    # --- episodes --------------------------------------------------------------------------

    async def acreate(
        self,
        task_id: str,
        settings: EpisodeSettings,
        episode_id: str | None = None,
        profile: dict | None = None,
    ) -> tuple[str, EpisodeMachine]:
        """A new episode; `profile` replaces the service's failure profile for this episode
        (the release protocol reads one from a client-named state file)."""
        pool = await self.start_pool()
        episode_id, episode, new = self._create(task_id, settings, episode_id, profile)
        if new:
            # Held while the prompt is completed, so a retried create or a step waits.
            async with episode.lock:
                try:
                    await self.kind_of(episode.task).open(episode_id, episode, pool)
                except BaseException:
                    self.discard(episode_id, episode)
                    raise
        elif episode.system is None:  # a retried create while the first completes it
            async with episode.lock:
                pass
            if episode.system is None:
                raise ConflictError(f"episode {episode_id!r} failed to start; create it again")
        return episode_id, episode

    async def astep(
        self,
        episode_id: str,
        content: str,
        seq: int | None = None,
        close_at_end: bool = False,
        calls: list[ToolCall | CallParseError] | None = None,
    ) -> StepOutcome:
        """Run one assistant message of an episode made by `acreate`, its calls in the
        pool. With `seq`, a repeat of the last step returns its answer; `close_at_end`
        closes the episode on the step that ends it (the native API: its answer carries
        the evaluation); `calls` are the message's calls as the client parsed them (None:
        parse `content` as Qwen2.5 text, the release protocol)."""
        while True:
            repeated, episode = self._step_target(episode_id, content, seq, check=False)
            if repeated is not None:
                return repeated
            async with episode.lock:
                # A step of this episode may have run (or ended it) while this one waited.
                repeated, current = self._step_target(episode_id, content, seq)
                if repeated is not None:
                    return repeated
                if current is not episode:
                    continue  # closed, and the id reused: start over with the new one
                if calls is None:
                    parsed, more = await self._parse(episode, content)
                    plan = episode.begin_step(content, parsed, more, by_client=False)
                else:
                    plan = episode.begin_step(content, calls)
                run = None
                if plan.to_run:
                    run = await self._run(episode_id, episode, plan.to_run)
                outcome = episode.finish_step(plan, run)
                if outcome.terminated:
                    outcome.evaluation = await self._evaluate(episode_id, episode)
                    outcome.reward = outcome.evaluation["reward"]
                return self._record(episode_id, episode, outcome, close_at_end)

    async def _parse(self, episode: EpisodeMachine, content: str) -> ParsedMessage:
        """A release protocol message's calls, read as far as the episode's cap on them needs,
        in its release text: on the event loop where that costs little, else in a worker process
        (env_service/release_texts.py)."""
        text, limit = RELEASE_TEXTS[episode.release_text], episode.caps.max_calls_per_step
        if text.parse_steps is None and len(content) <= INLINE_PARSE_CHARS:
            return text.parse(content, limit)
        pool = await self.start_pool()
        return await pool.parse(episode.release_text, content, limit)

    async def aevaluate(self, episode_id: str) -> dict:
        """The episode's evaluation (verified in the pool)."""
        episode = self.get(episode_id)
        async with episode.lock:
            return await self._evaluate(episode_id, episode)

    async def _run(
        self, episode_id: str, episode: EpisodeMachine, calls: list[ToolCall]
    ) -> RunResult:
        return await self.kind_of(episode.task).run(episode_id, episode, calls, self.pool)

    async def _evaluate(self, episode_id: str, episode: EpisodeMachine) -> dict:
        pool = await self.start_pool()
        return await self.kind_of(episode.task).evaluate(episode_id, episode, pool)

    # --- the registry: ids, caps, retries --------------------------------------------------

    def _create(self, task_id, settings, episode_id, profile):
        # Checked before anything else, so nothing is made from an id no reply can carry.
        check_id(task_id, "task_id")
        if episode_id:  # an empty one asks for a generated id, as None does
            check_id(episode_id, "episode_id")
        self.expire_idle()
        episode_id = episode_id or uuid.uuid4().hex
        existing = self.episodes.get(episode_id)
        if existing is not None:
            if (existing.task.task_id, existing.settings) == (task_id, settings) and (
                existing.counters.steps == 0
            ):
                existing.last_used = time.monotonic()
                return episode_id, existing, False  # a retried create: the reply was lost
            raise ConflictError(f"episode id {episode_id!r} is already in use")
        if episode_id in self.finished:
            raise ConflictError(f"episode id {episode_id!r} was used by an episode that ended")
        if len(self.episodes) >= self.config.max_live_episodes:
            self.totals["rejected_busy"] += 1
            idle = time.monotonic() - min(ep.last_used for ep in self.episodes.values())
            raise BusyError(
                f"busy: {len(self.episodes)} live episodes (limit "
                f"{self.config.max_live_episodes}); the longest idle has waited {idle:.0f} s "
                f"(episodes idle for {self.config.episode_ttl_s:.0f} s expire); close "
                "finished episodes or retry later"
            )
        try:
            task = load_task(task_id)
        except UnknownTaskError as e:
            raise NotFoundError(str(e)) from None
        kind = self.kind_of(task)
        kind.admit(task, self.episodes, self._expire)
        # Only episodes that show guidelines read the profile: validation never depends
        # on the capability-state file.
        if profile is None and settings.effective_interface.guidelines:
            profile = self.profiles.profile()
        episode = kind.episode(task, settings, profile)
        self.episodes[episode_id] = episode
        self.totals["created"] += 1
        return episode_id, episode, True

    def _step_target(
        self, episode_id: str, content: str, seq: int | None, check: bool = True
    ) -> tuple[StepOutcome | None, EpisodeMachine | None]:
        """(the answer to repeat, None) for a retried step, else (None, the episode to
        step); raises for a step that may not run. `check=False` leaves the checks that
        depend on a step in progress for later."""
        if len(content) > self.config.max_message_chars:
            raise TooLargeError(
                f"assistant message of {len(content)} characters exceeds the limit of "
                f"{self.config.max_message_chars}"
            )
        if episode_id not in self.episodes and episode_id in self.finished:
            last = self.finished[episode_id][1]
            if seq is not None and seq == last.seq:
                return last, None
            raise ConflictError(
                f"episode {episode_id!r} has ended (step {last.seq}) and was closed"
            )
        episode = self.get(episode_id)
        last = episode.last_outcome
        if seq is not None and last is not None and seq == last.seq:
            return last, None
        if not check:
            return None, episode
        if seq is not None and seq != episode.counters.steps + 1:
            raise ConflictError(
                f"step seq {seq} for episode {episode_id!r}, expected "
                f"{episode.counters.steps + 1} (the last step was {episode.counters.steps})"
            )
        if episode.terminated:
            raise ConflictError(f"episode {episode_id!r} has ended; evaluate or close it")
        return None, episode

    def _record(
        self, episode_id: str, episode: EpisodeMachine, outcome: StepOutcome, close_at_end: bool
    ) -> StepOutcome:
        episode.last_outcome = outcome
        if outcome.terminated and close_at_end and self.episodes.get(episode_id) is episode:
            self.close(episode_id)
            self.finished[episode_id] = (time.monotonic(), outcome)
            while len(self.finished) > self.config.max_live_episodes:
                self.finished.popitem(last=False)
        return outcome

    def get(self, episode_id: str) -> EpisodeMachine:
        episode = self.episodes.get(episode_id)
        if episode is None:
            raise NotFoundError(
                f"no live episode {episode_id!r} (never created, closed or expired)"
            )
        episode.last_used = time.monotonic()
        return episode

    def close(self, episode_id: str) -> None:
        episode = self.episodes.pop(episode_id, None)
        if episode is None:
            raise NotFoundError(f"no live episode {episode_id!r}")
        self._closed(episode_id, episode)

    def discard(self, episode_id: str, episode: EpisodeMachine) -> None:
        """Close `episode` if it is still live under `episode_id`: a create whose reply
        could not be sent leaves nothing behind (its client never learnt of it)."""
        if self.episodes.get(episode_id) is episode:
            del self.episodes[episode_id]
            self._closed(episode_id, episode)

    def _closed(self, episode_id: str, episode: EpisodeMachine) -> None:
        if self.pool is not None:
            self.pool.close(episode_id)
        self.kind_of(episode.task).closed(episode_id)
        self.totals["closed"] += 1

    def expire_idle(self) -> int:
        """Drop episodes idle for longer than the TTL; returns how many."""
        cutoff = time.monotonic() - self.config.episode_ttl_s
        stale = [eid for eid, ep in self.episodes.items() if ep.last_used < cutoff]
        for eid in stale:
            self._expire(eid)
        while self.finished and next(iter(self.finished.values()))[0] < cutoff:
            self.finished.popitem(last=False)
        return len(stale)

    def _expire(self, episode_id: str) -> None:
        episode = self.episodes.pop(episode_id)
        if self.pool is not None:
            self.pool.close(episode_id)
        self.kind_of(episode.task).closed(episode_id)
        self.totals["expired"] += 1

    def stats(self) -> dict:
        workers = self.pool.stats() if self.pool else {"workers": 0, "workers_replaced": 0}
        kinds = {
            name: value for kind in self.kinds.values() for name, value in kind.stats().items()
        }
        # "released": the old name of "closed", kept for clients that read it (deprecated).
        totals = {**self.totals, "released": self.totals["closed"]}
        return {"live_episodes": len(self.episodes), **totals, **workers, **kinds}
