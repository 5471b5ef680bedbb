"""The web-search tasks' outside calls (SerpAPI searches, page fetches), off the workers.

A slow page, a huge body or an unreachable SerpAPI must not hold a worker and its other
episodes, so each call (bfcl-eval's `WebSearchAPI` method with the transports of
seal/bfcl/agentic/web_search.py) runs in one of a few processes of its own, under a
deadline, never sent twice; searches are paced and retried on the event loop. A free
process goes to the waiting episode that has held them least (fair_share.py); a step is
charged its calls' own time. With `threads` (`workers` 0) the calls run in threads. Why,
and the pipe's messages: docs/web_search.md, "Where the calls run".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import socket
import time
from dataclasses import dataclass, field

from env_service import worker
from env_service.agentic.fair_share import FairShare
from env_service.channel import Channel
from env_service.execution import RunResult, StepBudget, StepTally
from env_service.workers import WorkerError
from seal.bfcl.agentic import web_search
from seal.bfcl.agentic.backends import AgenticBackends, preload_web_search
from seal.bfcl.backends import ERROR_PREFIX, format_result
from seal.bfcl.calls import ToolCall
from seal.bfcl.tasks import load_task

log = logging.getLogger("env_service")
_CONTEXT = multiprocessing.get_context("fork")
NICENESS = 10
"""How far below the event loop's and the workers' CPU priority outside-call processes
run: their calls wait on the network, and their bursts of work (decompressing, turning a
page into text) can wait for the other episodes' steps (docs/benchmarks.md)."""
TO_TEXT_S = 30.0
"""Time a call may take past its request's deadline: bfcl-eval turns a fetched page into
text (html2text, BeautifulSoup) in the call, ~2 s a MiB here, and pages are capped at
`max_page_bytes`."""


def perform(task_id: str, call: ToolCall) -> tuple:
    """Run one call of a web-search task here: ("ok", result) or ("retry", why, wait)."""
    try:
        return ("ok", AgenticBackends(load_task(task_id)).call(call))
    except web_search.RetrySearch as e:
        return ("retry", e.why, e.retry_after)


def serve(sock: socket.socket, parent_pid: int) -> None:
    """An outside-call process's loop; returns when the service closes its end."""
    worker.detach(parent_pid, [], sock.fileno())
    preload_web_search()
    while (message := worker.receive(sock)) is not None:
        request, task_id, call = message
        try:
            answer = perform(task_id, call)
        except Exception as e:  # noqa: BLE001 - a bug: the service answers it
            answer = ("error", worker.bug_text(e))
        worker.send(sock, (request, *answer))


class _Gone(Exception):
    """The process running a call was replaced before it answered."""


@dataclass
class _Slot:
    process: multiprocessing.Process
    channel: Channel | None = None
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    dead: bool = False
    """Its process exited (killed, out of memory): replaced before its next call."""


class WebCalls:
    def __init__(self, processes: int, limits: web_search.SearchLimits, threads: bool = False):
        """At most `processes` calls at once; `threads`: in threads of this process."""
        self.size = processes
        self.threads = threads
        self.limits = limits
        self.slots: list[_Slot] = []
        self.replaced = 0
        self.share = FairShare(processes)
        """Who gets the next free process (or thread): the episode that has held them least
        (env_service/agentic/fair_share.py)."""
        self._free: list[_Slot] = []
        self._next_search = 0.0
        self._requests = 0

    # --- processes ---------------------------------------------------------------------

    def _spawn(self) -> _Slot:
        mine, theirs = socket.socketpair()
        process = _CONTEXT.Process(
            target=serve, args=(theirs, os.getpid()), name="env_service-web-calls", daemon=True
        )
        process.start()
        worker.lower_priority(process.pid, NICENESS)
        theirs.close()
        slot = _Slot(process)
        slot.channel = Channel(mine, lambda m: self._answer(slot, m), lambda: self._died(slot))
        return slot

    def _start(self) -> None:
        for _ in range(self.size):
            slot = self._spawn()
            self.slots.append(slot)
            self._free.append(slot)

    def _answer(self, slot: _Slot, message: tuple) -> None:
        future = slot.pending.pop(message[0], None)
        if future is not None and not future.done():
            future.set_result(message[1:])

    def _died(self, slot: _Slot) -> None:
        slot.dead = True
        for future in slot.pending.values():
            if not future.done():
                future.set_exception(_Gone())
        slot.pending.clear()

    async def _replace(self, slot: _Slot) -> _Slot:
        slot.channel.close()
        with contextlib.suppress(OSError):
            slot.process.kill()
        await asyncio.get_running_loop().run_in_executor(None, slot.process.join, 5)
        fresh = self._spawn()
        self.slots[self.slots.index(slot)] = fresh
        self.replaced += 1
        return fresh

    async def stop(self) -> None:
        for slot in self.slots:
            slot.channel.close()
            slot.process.kill()
        for slot in self.slots:
            slot.process.join(timeout=5)
        self.slots, self._free = [], []

    def pids(self) -> list[int]:
        return [slot.process.pid for slot in self.slots]

    def forget(self, episode_id: str) -> None:
        """The episode has ended: the fair share forgets its account."""
        self.share.forget(episode_id)

    def stats(self) -> dict:
        """The pool's state for /v1/stats: processes (threads with `workers` 0), how many
        run a call, the calls and episodes waiting for one, grants so far (and those that
        had to wait), the longest wait, processes replaced."""
        share = self.share.stats()
        return {
            "outside_processes": self.size,
            **{f"outside_{name}": value for name, value in share.items()},
            "outside_replaced": self.replaced,
        }

    # --- calls -------------------------------------------------------------------------

    async def run(
        self, episode_id: str, task_id: str, calls: list[ToolCall], budget: StepBudget
    ) -> RunResult:
        """A step's calls in order, within the step's budgets (execution.StepTally). Time
        spent waiting for a process or for a search's turn (other episodes' calls) is not
        charged to the step: only the calls' own time, back-off included."""
        tally = StepTally(budget, len(calls))
        for call in calls:
            started = time.perf_counter()
            result, waited = await self.call(episode_id, task_id, call)
            if stopped := tally.add(result, time.perf_counter() - started - waited):
                return tally.result(stopped)
        return tally.result()

    async def call(self, episode_id: str, task_id: str, call: ToolCall) -> tuple[str, float]:
        """One call's result, and the seconds it waited for other episodes' calls; a
        search paced and retried (module docstring)."""
        if call.name != web_search.SEARCH:
            outcome, waited = await self._attempt(episode_id, task_id, call)
            return outcome[1], waited
        waited = 0.0
        for attempt in range(1, self.limits.attempts + 1):
            outcome, waits = await self._attempt(episode_id, task_id, call)
            waited += waits
            if outcome[0] == "ok":
                return outcome[1], waited
            why, retry_after = outcome[1:]
            if attempt < self.limits.attempts:
                await asyncio.sleep(self.limits.backoff(attempt, retry_after))
        message = web_search.unavailable(
            f"SerpAPI failed {self.limits.attempts} times (rate-limited, unreachable or "
            f"failing); the last: {why}"
        )
        return format_result(message), waited

    async def _pace(self, call: ToolCall) -> float:
        """Wait for this search's slot (`min_interval_s` after the last one's); the wait."""
        if call.name != web_search.SEARCH:
            return 0.0
        now = asyncio.get_running_loop().time()
        slot = max(now, self._next_search)
        self._next_search = slot + self.limits.min_interval_s
        if slot > now:
            await asyncio.sleep(slot - now)
        return slot - now

    async def _attempt(self, episode_id: str, task_id: str, call: ToolCall) -> tuple:
        """(("ok", result) or ("retry", why, retry_after), seconds waited for a process
        and a search's turn); a bug raises WorkerError."""
        seconds = self.limits.call_seconds(call.name) + TO_TEXT_S
        waited = await self.share.acquire(episode_id)
        granted = time.perf_counter()
        try:
            if self.threads:
                waited += await self._pace(call)
                outcome = await asyncio.to_thread(perform, task_id, call)
            else:
                outcome, paced = await self._in_process(task_id, call, seconds)
                waited += paced
        finally:
            self.share.release(episode_id, time.perf_counter() - granted)
        if outcome[0] == "error":
            raise WorkerError(outcome[1])
        return outcome, waited

    async def _in_process(self, task_id: str, call: ToolCall, seconds: float) -> tuple:
        """The call in a free process (its permit is held): (outcome, seconds paced)."""
        if not self.slots:
            self._start()
        slot, paced = self._free.pop(), 0.0
        try:
            if slot.dead or not slot.process.is_alive():  # (its end-of-file may be unread)
                slot = await self._replace(slot)
            paced = await self._pace(call)  # once it has a process: the request goes out now
            return await self._send(slot, task_id, call, seconds), paced
        except (TimeoutError, _Gone) as e:
            overran = isinstance(e, TimeoutError)
            log.warning(
                "env_service: a %s call of %s %s; replacing its process (%s)",
                call.name, task_id,
                f"ran past its {seconds:.0f} s" if overran else "lost its process",
                slot.process.pid,
            )  # fmt: skip
            slot = await self._replace(slot)
            why = (
                f"it did not finish within the service's {seconds:.0f} s"
                if overran
                else "the process running it stopped before it answered"
            )
            return ("ok", f"{ERROR_PREFIX}{why}; the call was stopped and not sent again"), paced
        finally:
            self._free.append(slot)

    async def _send(self, slot: _Slot, task_id: str, call: ToolCall, seconds: float) -> tuple:
        self._requests += 1
        request = self._requests
        future = asyncio.get_running_loop().create_future()
        slot.pending[request] = future
        slot.channel.send((request, task_id, call))
        try:
            return await asyncio.wait_for(future, seconds)
        finally:
            slot.pending.pop(request, None)
