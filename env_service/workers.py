"""Worker processes that hold the episodes' backends and run their tool calls and
verification off the event loop, and replace one whose call does not return.

Processes, not threads, because a thread cannot be stopped in a call that does not return
and shares the GIL with the event loop. A watchdog replaces a worker whose call overruns
the step budget, that the kernel shows stopped, or whose heartbeat falls silent; its
episodes are rebuilt on the new worker by replaying their calls. Why each rule:
docs/service.md, "Inside the service".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from env_service import worker
from env_service.channel import Channel
from env_service.cpu_share import CpuShares
from env_service.errors import BusyError
from env_service.execution import (
    EVALUATION_TIME_BUDGET,
    REBUILD_TIME_BUDGET,
    STEP_TIME_BUDGET,
    RunResult,
    StepBudget,
)
from env_service.release_texts import ParsedMessage
from env_service.worker import BuildBackends
from seal.bfcl.backends import Backends
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import Diagnosis, ModelTurn

log = logging.getLogger("env_service")

# fork: a worker starts in milliseconds and shares the loaded tasks and backends with the
# service (copy-on-write; the service freezes its GC first so they stay shared).
_CONTEXT = multiprocessing.get_context("fork")
WATCH_EVERY_S = 0.1


class WorkerError(RuntimeError):
    """A worker failed a request (a bug in the service, not the client's doing)."""


@dataclass
class _Pending:
    future: asyncio.Future
    message: tuple
    episode_id: str | None
    attempts: int = 1


@dataclass
class _Worker:
    process: multiprocessing.Process
    slot: object
    channel: Channel | None = None
    pending: dict[int, _Pending] = field(default_factory=dict)
    episodes: set[str] = field(default_factory=set)
    dead: bool = False
    stopped_ticks: int = 0
    """Watchdog rounds in a row that found it stopped by a signal."""


class WorkerPool:
    def __init__(
        self,
        size: int,
        budget: StepBudget,
        max_evaluation_seconds: float,
        executed_calls: Callable[[str], list[ToolCall] | None],
        niceness: int,
        stall_s: float,
        shares: CpuShares,
    ):
        """`executed_calls(episode_id)`: the calls an episode has run (None if it is gone),
        to rebuild it on a new worker; `stall_s`: how long a worker may miss its
        heartbeats while no call of its runs before it is replaced; `shares`: each episode's
        CPU share, which every worker starts from a copy of (the pool never charges it)."""
        self.size = size
        self.budget = budget
        self.max_evaluation_seconds = max_evaluation_seconds
        self.kill_after_s = budget.max_seconds
        self.executed_calls = executed_calls
        self.niceness = niceness
        self.stall_s = stall_s
        self.shares = shares
        # A worker whose beat is older than this gets no new episode (three beats missed).
        self.suspect_after_s = min(stall_s, 3 * worker.HEARTBEAT_S)
        self.workers: list[_Worker] = []
        self.placement: dict[str, _Worker] = {}
        self.tasks: dict[str, tuple[str, BuildBackends]] = {}
        """Each episode's task and what builds its backends: what opens it again on a new
        worker."""
        self.unrebuilt: set[str] = set()
        """Episodes whose rebuild ran over its budget: their backends are gone."""
        self.replaced = 0
        self._requests = 0
        self._respawning: set[asyncio.Task] = set()
        """Replacements in progress (one at a time: `_respawn_lock`); requests wait for them."""
        self._respawn_lock = asyncio.Lock()
        self._watchdog: asyncio.Task | None = None

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        for _ in range(self.size):
            self.workers.append(await self._spawn())
        self._watchdog = asyncio.create_task(self._watch())

    async def _spawn(self) -> _Worker:
        mine, theirs = socket.socketpair()
        slot = _CONTEXT.RawArray("d", worker.SLOT_SIZE)
        slot[0] = worker.IDLE
        slot[2] = time.monotonic()  # the fork and the start count as a beat
        others = [w.channel.sock.fileno() for w in self.workers if not w.dead] + [mine.fileno()]
        process = _CONTEXT.Process(
            target=worker.serve,
            args=(
                theirs,
                slot,
                self.budget,
                self.max_evaluation_seconds,
                os.getpid(),
                others,
                self.shares,
            ),
            name="env_service-worker",
            daemon=True,  # also stopped at interpreter exit when no lifespan stops it
        )
        process.start()
        worker.lower_priority(process.pid, self.niceness)  # ServiceConfig.worker_niceness: why
        theirs.close()
        w = _Worker(process, slot)
        w.channel = Channel(mine, lambda message: self._answer(w, message), lambda: self._died(w))
        return w

    async def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        for w in self.workers:
            w.dead = True
            w.channel.close()
            w.process.kill()
        for w in self.workers:
            w.process.join(timeout=5)
        self.workers = []

    def stats(self) -> dict:
        return {"workers": len(self.workers), "workers_replaced": self.replaced}

    # --- requests --------------------------------------------------------------------------

    async def open(self, episode_id: str, task_id: str, build: BuildBackends = Backends):
        """Place a new episode on the least loaded live worker and build its backends there
        (no answer to wait for: its first step queues behind it) with `build`, its kind's
        (worker.load_backends; a rebuild builds them the same way)."""
        await self._replaced()
        w = min(self._candidates(), key=lambda w: len(w.episodes))
        self.placement[episode_id] = w
        self.tasks[episode_id] = (task_id, build)
        w.episodes.add(episode_id)
        self._send(w, ("open", episode_id, task_id, build))

    def _candidates(self) -> list[_Worker]:
        """The workers to give new work: those whose beat is fresh, else every one not
        known dead."""
        alive = [w for w in self.workers if not w.dead]
        now = time.monotonic()
        fresh = [w for w in alive if now - w.slot[2] <= self.suspect_after_s]
        return fresh or alive

    def close(self, episode_id: str) -> None:
        w = self.placement.pop(episode_id, None)
        self.tasks.pop(episode_id, None)
        self.unrebuilt.discard(episode_id)
        if w is not None:
            w.episodes.discard(episode_id)
            if not w.dead:
                self._send(w, ("close", episode_id))

    async def run(self, episode_id: str, calls: list[ToolCall]) -> RunResult:
        """Run a step's calls on the episode's worker; `lost` if the worker had to be
        killed while they ran."""
        if episode_id in self.unrebuilt:
            return RunResult([], REBUILD_TIME_BUDGET, lost=True)
        value = await self._request(episode_id, lambda request: ("run", request, episode_id, calls))
        if value is _LOST:
            return RunResult([], STEP_TIME_BUDGET, lost=True)
        if value == REBUILD_TIME_BUDGET:
            return RunResult([], REBUILD_TIME_BUDGET, lost=True)
        return value

    async def ask(self, episode_id: str, question: Callable[[Backends], object]):
        """`question(backends)` on the episode's backends, on its worker: its answer (a
        module-level function, sent by name; a task kind's own requests)."""
        value = await self._request(
            episode_id, lambda request: ("ask", request, episode_id, question)
        )
        if value is _LOST:
            raise WorkerError(f"the worker holding episode {episode_id!r} was lost")
        return value

    async def diagnose(
        self, episode_id: str, task_id: str, model_turns: list[ModelTurn]
    ) -> Diagnosis | str:
        """Verify an episode's calls on the least busy worker (within its CPU share there):
        its Diagnosis, or EVALUATION_TIME_BUDGET when it ran too long or its worker died."""
        value = await self._request(
            None, lambda request: ("diagnose", request, episode_id, task_id, model_turns)
        )
        return EVALUATION_TIME_BUDGET if value is _LOST else value

    async def parse(self, text: str, content: str, limit: int) -> ParsedMessage:
        """A message's first `limit` calls in the release text `text`, and how many follow
        them, read on the least busy worker (a parse too costly for the event loop:
        env_service/release_texts.py)."""
        value = await self._request(None, lambda request: ("parse", request, text, content, limit))
        if value is _LOST:  # twice: its worker was killed or stopped each time
            raise BusyError("the worker reading this message was lost; send it again")
        return value

    async def _request(self, episode_id: str | None, make: Callable[[int], tuple]):
        while True:
            await self._replaced()  # a worker is being replaced: wait for it
            if episode_id is None:
                w = min(self._candidates(), key=lambda w: len(w.pending))
            else:
                w = self.placement[episode_id]
            if not w.dead:  # (a dead one's channel is closed: a request there would be lost)
                break
        self._requests += 1
        message = make(self._requests)
        future = asyncio.get_running_loop().create_future()
        w.pending[self._requests] = _Pending(future, message, episode_id)
        self._send(w, message)
        status, value = await future
        if status == "error":
            raise WorkerError(value)
        return value

    async def _replaced(self) -> None:
        """Return once no worker is being replaced."""
        while self._respawning:
            # asyncio.wait never cancels what it waits for, also when the caller is.
            await asyncio.wait(set(self._respawning))

    def _send(self, w: _Worker, message: tuple) -> None:
        w.channel.send(message)

    def _answer(self, w: _Worker, message: tuple) -> None:
        request, status, value = message
        pending = w.pending.pop(request, None)
        if pending is not None and not pending.future.done():
            pending.future.set_result((status, value))

    def _died(self, w: _Worker) -> None:
        if not w.dead:  # it died on its own (crashed, or killed by the OS)
            log.warning(
                "env_service: a worker process exited (%s); replacing it", w.process.exitcode
            )
            self._replace(w, culprit=None)

    # --- the watchdog ----------------------------------------------------------------------

    async def _watch(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            now = time.monotonic()
            for w in list(self.workers):
                if w.dead or self._respawning:
                    continue
                beat, request = w.slot[2], w.slot[0]
                w.stopped_ticks = w.stopped_ticks + 1 if _job_control_stopped(w) else 0
                if w.stopped_ticks >= 2:
                    log.warning(
                        "env_service: worker process %s is stopped (SIGSTOP); killing and "
                        "replacing it",
                        w.process.pid,
                    )
                    self._replace(w, culprit=None)
                elif now - beat > self.stall_s and last - beat > self.stall_s / 2:
                    log.warning(
                        "env_service: worker process %s gave no sign of life for %.1f s "
                        "(stopped?); killing and replacing it",
                        w.process.pid,
                        now - beat,
                    )
                    self._replace(w, culprit=None)
                elif (
                    request != worker.IDLE
                    and now - w.slot[1] > self.kill_after_s
                    and w.slot[0] == request  # the same call all along
                ):
                    log.warning(
                        "env_service: a call ran over the step time budget of %s s; "
                        "killing its worker process %s and replacing it",
                        self.kill_after_s,
                        w.process.pid,
                    )
                    self._replace(w, culprit=int(request))
            last = now

    def _replace(self, dead: _Worker, culprit: int | None) -> None:
        dead.dead = True
        with contextlib.suppress(OSError):
            dead.process.kill()
        dead.channel.close()
        self.replaced += 1
        task = asyncio.create_task(self._respawn(dead, culprit))
        self._respawning.add(task)
        task.add_done_callback(self._respawned)

    def _respawned(self, task: asyncio.Task) -> None:
        self._respawning.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A bug: log it loudly (its requests would otherwise wait for ever).
            log.error("env_service: replacing a worker failed", exc_info=task.exception())

    async def _respawn(self, dead: _Worker, culprit: int | None) -> None:
        async with self._respawn_lock:  # two at once would each see the other's half-done pool
            await self._respawn_one(dead, culprit)

    async def _respawn_one(self, dead: _Worker, culprit: int | None) -> None:
        fresh = await self._spawn()
        await asyncio.get_running_loop().run_in_executor(None, dead.process.join, 5)
        self.workers[self.workers.index(dead)] = fresh
        lost = {culprit} | {r for r, p in dead.pending.items() if p.attempts >= 2}
        culprit_episode = dead.pending[culprit].episode_id if culprit in dead.pending else None
        if culprit_episode is not None and dead.pending[culprit].message[0] == "rebuild":
            self.unrebuilt.add(culprit_episode)  # a replayed call did not return
        for episode_id in sorted(dead.episodes):
            calls = self.executed_calls(episode_id)
            if episode_id == culprit_episode or calls is None:
                self.placement.pop(episode_id, None)
                self.tasks.pop(episode_id, None)
                continue
            self.placement[episode_id] = fresh
            fresh.episodes.add(episode_id)
            task_id, build = self.tasks[episode_id]
            if calls:
                self._rebuild(fresh, episode_id, task_id, build, calls)
            else:
                self._send(fresh, ("open", episode_id, task_id, build))
        for request, pending in sorted(dead.pending.items()):
            if pending.message[0] == "rebuild":
                pending.future.set_result(("ok", None))  # superseded by the one above
            elif request in lost:
                pending.future.set_result(("ok", _LOST))
            elif pending.episode_id is not None and pending.episode_id not in fresh.episodes:
                pending.future.set_result(("ok", _LOST))  # its episode is gone
            else:
                pending.attempts += 1
                fresh.pending[request] = pending
                self._send(fresh, pending.message)

    def _rebuild(
        self, w: _Worker, episode_id: str, task_id: str, build: BuildBackends, calls: list
    ) -> None:
        """Replay an episode's calls on `w` (a job there among the others); an episode
        whose replay runs over its budget is remembered as gone."""
        self._requests += 1
        request = self._requests
        future = asyncio.get_running_loop().create_future()
        message = ("rebuild", request, episode_id, task_id, build, calls)
        w.pending[request] = _Pending(future, message, episode_id)
        self._send(w, message)

        def done(future: asyncio.Future) -> None:
            status, value = future.result()
            if status == "ok" and value == REBUILD_TIME_BUDGET and episode_id in self.tasks:
                log.warning(
                    "env_service: episode %r could not be rebuilt within %s s (%d calls); "
                    "it ends as a failure tagged %s",
                    episode_id,
                    self.max_evaluation_seconds,
                    len(calls),
                    REBUILD_TIME_BUDGET,
                )
                self.unrebuilt.add(episode_id)

        future.add_done_callback(done)


_LOST = object()
"""The answer to a request whose worker was killed while it ran."""


def _job_control_stopped(w: _Worker) -> bool:
    """Whether the kernel shows the worker stopped by a signal (SIGSTOP, SIGTSTP: state
    `T` in /proc; a debugger's stop, `t`, is left to the heartbeat). Read directly: a
    few microseconds a worker each round, where the heartbeat needs `stall_s` to tell.
    False where there is no /proc."""
    try:
        with open(f"/proc/{w.process.pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split(None, 1)[0] == b"T"
    except (OSError, IndexError):
        return False
