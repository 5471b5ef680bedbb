"""The outside-call pool is shared fairly between web-search episodes (issue #41): a free
process goes to the waiting episode that has held them least, so a fast fetch waits for
the next process that frees, not behind every slow page of other episodes; and a step is
charged its calls' own time, not its wait for a process.

The calls are stand-ins (`_perform`: a slow page or a fast one, run in the pool's own
processes or threads), and the order in which calls reach a process is read where the
pool sends them, so the checks count places in the queue, not seconds.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from env_service.agentic import web_calls as web_calls_module
from env_service.agentic.web_calls import WebCalls
from env_service.execution import STEP_TIME_BUDGET, StepBudget
from seal.bfcl.agentic import web_search
from seal.bfcl.calls import ToolCall

TASK = "web_search_base_0"
SLOW_S = 0.2
ROOMY = StepBudget(max_result_chars=1000, max_reply_chars=10_000, max_seconds=600)


def _perform(task_id: str, call: ToolCall) -> tuple:
    if call.kwargs["url"].startswith("slow"):
        time.sleep(call.kwargs.get("seconds", SLOW_S))
    return ("ok", f"the text of {call.kwargs['url']}")


def _fetch(url: str, **more) -> ToolCall:
    return ToolCall("fetch_url_content", {"url": url, **more})


async def _until(condition) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "the pool did not get there in 60 s"
        await asyncio.sleep(0.01)


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """The calls' URLs in the order they reached a process (or thread), with the test's
    own marks between them; the pool runs `_perform`."""
    order: list[str] = []
    send, to_thread = WebCalls._send, asyncio.to_thread

    async def recorded_send(self, slot, task_id, call, seconds):
        order.append(call.kwargs["url"])
        return await send(self, slot, task_id, call, seconds)

    async def recorded_to_thread(function, *args):
        if function is _perform:
            order.append(args[1].kwargs["url"])
        return await to_thread(function, *args)

    monkeypatch.setattr(web_calls_module, "perform", _perform)
    monkeypatch.setattr(WebCalls, "_send", recorded_send)
    monkeypatch.setattr(web_calls_module.asyncio, "to_thread", recorded_to_thread)
    return order


async def _beside_slow_episodes(
    order: list[str], processes: int, slow_episodes: int, rounds: int, threads: bool
) -> int:
    """`slow_episodes` episodes fetch slow pages, `rounds` each, on a pool of
    `processes`; once each has had one, another episode fetches a fast page. How many
    slow fetches reached a process after it asked and before it."""
    pool = WebCalls(processes, web_search.SearchLimits(), threads=threads)

    async def slow(k: int) -> None:
        for r in range(rounds):
            await pool.run(f"slow-{k}", TASK, [_fetch(f"slow-{k}-{r}")], ROOMY)

    try:
        readers = [asyncio.create_task(slow(k)) for k in range(slow_episodes)]
        await _until(lambda: len(order) >= slow_episodes)
        order.append("asked")
        fast = await pool.run("victim", TASK, [_fetch("fast")], ROOMY)
        await asyncio.gather(*readers)
    finally:
        await pool.stop()
    assert fast.results == ["the text of fast"] and fast.stopped is None
    between = order[order.index("asked") + 1 : order.index("fast")]
    assert len(order) == slow_episodes * rounds + 2
    return len(between)


@pytest.mark.parametrize("threads", [False, True], ids=["processes", "threads"])
@pytest.mark.parametrize(
    ("slow_episodes", "rounds"),
    [(2, 6), (8, 3)],
    ids=["as-many-slow-episodes-as-processes", "4x-as-many"],
)
def test_a_fast_fetch_gets_the_next_process_that_frees(sent, slow_episodes, rounds, threads):
    """Issue #41: 4 episodes fetching slow pages on the 4 processes made another client's
    fast fetch wait 157 s: a step that freed a process took it straight back, and the
    woken waiter went to the back. With 24, its episode ended on its step budget."""
    slow_first = asyncio.run(_beside_slow_episodes(sent, 2, slow_episodes, rounds, threads))
    assert slow_first == 0, f"{slow_first} slow fetches went to a process before the fast one"


def test_a_steps_wait_for_a_process_is_not_charged_to_its_budget(sent):
    """The step budget counts a step's calls' own time (env_service/execution.py); the
    wait for a process is other episodes' time, and it ended this episode."""
    slow_s = 2.0
    budget = StepBudget(max_result_chars=1000, max_reply_chars=10_000, max_seconds=slow_s / 2)

    async def scenario():
        pool = WebCalls(1, web_search.SearchLimits())
        try:
            reader = asyncio.create_task(
                pool.run("slow", TASK, [_fetch("slow", seconds=slow_s)], ROOMY)
            )
            await _until(lambda: sent)
            asked = time.perf_counter()
            fast = await pool.run("victim", TASK, [_fetch("fast")], budget)
            waited = time.perf_counter() - asked
            await reader
        finally:
            await pool.stop()
        return fast, waited

    fast, waited = asyncio.run(scenario())
    assert sent == ["slow", "fast"]
    assert fast.stopped != STEP_TIME_BUDGET, f"charged {fast.seconds:.2f} s of {waited:.2f} s"
    assert fast.results == ["the text of fast"] and fast.seconds < waited / 2


def test_the_pools_state_is_in_the_stats(sent):
    async def scenario():
        pool = WebCalls(1, web_search.SearchLimits(), threads=True)
        idle = pool.stats()
        reader = asyncio.create_task(pool.run("slow", TASK, [_fetch("slow")], ROOMY))
        await _until(lambda: sent)
        waiter = asyncio.create_task(pool.run("fast", TASK, [_fetch("fast")], ROOMY))
        await _until(lambda: pool.stats()["outside_waiting"])
        busy = pool.stats()
        await asyncio.gather(reader, waiter)
        return idle, busy, pool.stats()

    idle, busy, done = asyncio.run(scenario())
    assert idle["outside_processes"] == 1 and idle["outside_busy"] == 0
    assert (busy["outside_busy"], busy["outside_waiting"], busy["outside_waiting_episodes"]) == (
        1,
        1,
        1,
    )
    assert (done["outside_busy"], done["outside_waiting"], done["outside_grants"]) == (0, 0, 2)
    assert done["outside_grants_after_wait"] == 1 and done["outside_longest_wait_s"] > 0
