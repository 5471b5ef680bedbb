"""FairShare's order of grants, its accounts and a waiter that gives up (the outside-call
pool's fairness as the service sees it: tests/env_service/agentic/test_web_calls_fairness.py)."""

from __future__ import annotations

import asyncio

from env_service.agentic.fair_share import FairShare


async def _queue(share: FairShare, keys: list[str], granted: list[str]) -> list[asyncio.Task]:
    """One waiter per key, in this order (each records its grant, then holds it)."""

    async def wait(key: str) -> None:
        await share.acquire(key)
        granted.append(key)

    tasks = []
    for key in keys:
        tasks.append(asyncio.create_task(wait(key)))
        await asyncio.sleep(0)  # queued in this order
    return tasks


def test_a_freed_permit_goes_to_the_waiter_that_has_held_least_not_back_to_its_holder():
    async def scenario():
        share, granted = FairShare(1), []
        await share.acquire("slow")
        tasks = await _queue(share, ["fast"], granted)
        share.release("slow", 20.0)
        again = asyncio.create_task(share.acquire("slow"))  # at once, as a step does
        await asyncio.sleep(0)
        assert granted == ["fast"] and not again.done()
        share.release("fast", 0.01)
        await again
        await asyncio.gather(*tasks)
        return share

    share = asyncio.run(scenario())
    assert share.stats()["grants"] == 3 and share.stats()["busy"] == 1


def test_of_waiters_the_one_that_has_held_least_goes_first():
    async def scenario():
        share, granted = FairShare(1), []
        await share.acquire("heavy")
        share.release("heavy", 50.0)
        await share.acquire("light")
        share.release("light", 1.0)
        await share.acquire("holder")
        tasks = await _queue(share, ["heavy", "light"], granted)
        share.release("holder", 5.0)
        await asyncio.sleep(0)
        share.release(granted[-1], 1.0)
        await asyncio.sleep(0)
        # Both start at the last grant's tag (heavy's 50): then the one that held less.
        tasks += await _queue(share, ["light", "new"], granted)
        for _ in range(2):
            share.release(granted[-1], 1.0)
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        return granted

    assert asyncio.run(scenario()) == ["light", "heavy", "new", "light"]


def test_a_waiter_that_gives_up_leaves_no_trace_and_a_forgotten_episode_no_account():
    async def scenario():
        share, granted = FairShare(1), []
        await share.acquire("a")
        (gives_up,) = await _queue(share, ["b"], granted)
        tasks = await _queue(share, ["c"], granted)
        gives_up.cancel()
        await asyncio.sleep(0)
        assert share.stats()["waiting"] == 1
        share.release("a", 1.0)
        await asyncio.gather(*tasks)
        share.release("c", 1.0)
        for key in ("a", "b", "c"):
            share.forget(key)
        return share, granted

    share, granted = asyncio.run(scenario())
    assert granted == ["c"]
    assert share.stats()["busy"] == 0 and share.stats()["waiting"] == 0
    assert not share._held and not share._active
