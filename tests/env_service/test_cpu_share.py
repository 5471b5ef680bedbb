"""Each episode's share of its worker's CPU (env_service/cpu_share.py): the bucket's
arithmetic on a clock the test moves, then a worker holding an episode of costly calls
to its share while another episode's steps go on."""

from __future__ import annotations

import asyncio
import time

import pytest

from env_service.cpu_share import CpuShares
from env_service.execution import StepBudget
from env_service.workers import WorkerPool
from seal.bfcl.calls import ToolCall


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_owner_runs_at_full_speed_for_its_burst_then_waits_for_its_share():
    clock = Clock()
    shares = CpuShares(0.25, 1.0, clock=clock)
    shares.charge("a", 0.6)
    shares.charge("a", 0.4)  # the whole burst, at once
    assert shares.wait_s("a") == 0
    shares.charge("a", 0.1)  # 0.1 s past it: 0.4 s at a quarter of a core
    assert shares.wait_s("a") == pytest.approx(0.4)
    assert shares.wait_s("b") == 0 and shares.wait_s(None) == 0  # others never wait for it
    clock.now += 0.4
    assert shares.wait_s("a") == 0


def test_a_greedy_owner_gets_its_burst_and_its_share_of_the_time_and_no_more():
    clock = Clock()
    shares = CpuShares(0.1, 0.5, clock=clock)
    ran, call_s, began = 0.0, 0.003, clock.now
    while clock.now - began < 60:
        if (wait_s := shares.wait_s("greedy")) > 0:
            clock.now += wait_s
            continue
        shares.charge("greedy", call_s)
        clock.now += call_s
        ran += call_s
    elapsed = clock.now - began
    assert ran <= 0.5 + 0.1 * elapsed + call_s
    assert ran >= 0.5 + 0.1 * elapsed - 2 * call_s  # and it is not held back below it


def test_an_idle_owner_gets_its_burst_back_and_is_forgotten():
    clock = Clock()
    shares = CpuShares(0.5, 1.0, clock=clock)
    shares.charge("a", 3.0)
    assert shares.wait_s("a") == pytest.approx(4.0)
    shares.forget("a")
    assert shares.wait_s("a") == 0
    for k in range(10_000):  # owners charged once each, a second apart: few are kept
        shares.charge(f"episode-{k}", 0.1)
        clock.now += 1
    assert len(shares) <= 600


def test_a_request_is_held_back_at_most_max_wait_s_in_all():
    """So a request's wall time stays within its own time budget plus this (the clients'
    timeout counts on it)."""
    shares = CpuShares(0.1, 0.0, max_wait_s=10.0, clock=Clock())
    shares.charge("a", 5.0)  # 50 s behind its share
    assert shares.wait_s("a", held_s=0.0) == pytest.approx(10.0)
    assert shares.wait_s("a", held_s=7.5) == pytest.approx(2.5)
    assert shares.wait_s("a", held_s=10.0) == 0


def test_a_share_of_one_core_lifts_it():
    shares = CpuShares(1, 0, clock=Clock())
    shares.charge("a", 100.0)
    assert shares.wait_s("a") == 0


@pytest.mark.parametrize("share", [0, -0.5, 1.5])
def test_a_share_outside_one_core_is_refused(share):
    with pytest.raises(ValueError, match="share"):
        CpuShares(share, 1.0)


SHARE, BURST_S = 0.1, 0.05
FS_TASK = "multi_turn_base_1"  # GorillaFileSystem
GREP = ToolCall("grep", {"file_name": "big.txt", "pattern": "b"})


def test_a_worker_holds_a_costly_episode_to_its_share_and_runs_the_others_meanwhile():
    """An episode of `grep`s on an 80k-line file, past its burst, takes at least its calls'
    own time over its share, its evaluation too (it replays them); another episode on the
    same worker steps meanwhile, waiting for one `grep` at most. Lower bounds on the
    costly episode's wall time, from its calls' own time as the worker measured it: a
    loaded machine only makes both longer. Without the share the step takes its calls'
    time, a tenth of the bound."""

    async def play() -> tuple[float, float, float, list[float]]:
        budget = StepBudget(max_result_chars=100_000, max_reply_chars=10**8, max_seconds=60.0)
        pool = WorkerPool(1, budget, 60.0, lambda _: [], 0, 30.0, CpuShares(SHARE, BURST_S))
        await pool.start()
        try:
            await pool.open("costly", FS_TASK)
            await pool.open("other", FS_TASK)
            setup = [[ToolCall("touch", {"file_name": "big.txt"})]]
            setup.append([ToolCall("echo", {"content": "a\n" * 80_000, "file_name": "big.txt"})])
            for calls in setup:
                await pool.run("costly", calls)
            began = time.perf_counter()
            step = asyncio.create_task(pool.run("costly", [GREP] * 64))
            waits = []
            while not step.done():
                sent = time.perf_counter()
                await pool.run("other", [ToolCall("pwd", {})])
                waits.append(time.perf_counter() - sent)
                await asyncio.sleep(0.01)
            result = await step
            step_wall = time.perf_counter() - began
            began = time.perf_counter()
            diagnosis = await pool.diagnose("costly", FS_TASK, [[*setup, [GREP] * 64]])
            assert not isinstance(diagnosis, str), diagnosis  # not over its budget
            return result.seconds, step_wall, time.perf_counter() - began, waits
        finally:
            await pool.stop()

    calls_s, step_wall, evaluation_wall, waits = asyncio.run(play())
    print(f"64 greps: {calls_s:.3f} s of calls, the step {step_wall:.2f} s, the evaluation "
          f"{evaluation_wall:.2f} s; the other episode's {len(waits)} steps, slowest "
          f"{max(waits):.3f} s")  # fmt: skip
    assert step_wall >= 0.5 * (calls_s - BURST_S) / SHARE
    assert evaluation_wall >= 0.5 * calls_s / SHARE
    assert len(waits) >= 5 and max(waits) < step_wall / 3
