"""The episode driver when things fail: a generator that raises or returns nonsense, an
unknown task, a cancelled episode, many episodes on one client, and a batch's retry of
each failed episode, its tolerated share and its progress bar."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import gt_texts
from driver_episodes import GREP_TASK, play, settings

from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.driver import (
    EpisodeError,
    EpisodeSample,
    TooManyFailedEpisodes,
    play_batch,
    run_episode,
)
from seal.rollout.env_client import EnvClient
from seal.rollout.generation import Generation, GenerationError
from seal.rollout.scripted import ScriptedGenerator, text_generation


class FailingGenerator(ScriptedGenerator):
    """Fails on call number `fail_at` (1-based) with `error`."""

    def __init__(self, generations, fail_at, error):
        super().__init__(generations)
        self.fail_at, self.error = fail_at, error

    async def generate(self, prompt_ids, sampling):
        if self.calls + 1 == self.fail_at:
            raise self.error
        return await super().generate(prompt_ids, sampling)


@pytest.mark.parametrize(
    "make_generator, cause",
    [
        (
            lambda gens: FailingGenerator(gens, 2, GenerationError("CUDA out of memory")),
            "out of memory",
        ),
        (
            lambda gens: ScriptedGenerator([gens[0], Generation([], None, "stop")]),
            "empty generation",
        ),
        (
            lambda gens: ScriptedGenerator([gens[0], Generation(gens[1].token_ids, [0.0], "stop")]),
            "log-probabilities for",
        ),
    ],
    ids=["raises", "empty", "logprob-count"],
)
def test_generator_failure_names_the_task_and_releases_the_episode(
    live_service, tokenizer, make_generator, cause
):
    base_url, engine = live_service
    generator = make_generator([text_generation(tokenizer, t) for t in gt_texts(GREP_TASK)])
    with pytest.raises(
        EpisodeError, match=rf"task {GREP_TASK} .* after 1 generations: .*{cause}"
    ) as info:
        play(base_url, tokenizer, GREP_TASK, generator)
    assert isinstance(info.value.__cause__, GenerationError)
    assert engine.stats()["live_episodes"] == 0
    assert engine.stats()["closed"] == 1


def test_unknown_task_is_an_error_naming_it(live_service, tokenizer):
    with pytest.raises(EpisodeError, match="multi_turn_base_999"):
        play(live_service[0], tokenizer, "multi_turn_base_999", ScriptedGenerator([]))


class Stuck(ScriptedGenerator):
    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(3600)


class LostCreateReply(EnvClient):
    """The service creates the episode but its reply never arrives."""

    async def call(self, method, path, *args, **kwargs):
        reply = await super().call(method, path, *args, **kwargs)
        if (method, path) == ("POST", "/v1/episodes"):
            await asyncio.sleep(3600)
        return reply


@pytest.mark.parametrize(
    "env_cls, generator", [(EnvClient, Stuck([])), (LostCreateReply, ScriptedGenerator([]))]
)
def test_a_cancelled_episode_is_closed(live_service, tokenizer, env_cls, generator):
    base_url, engine = live_service

    async def main():
        async with env_cls(base_url) as env:
            episode = asyncio.ensure_future(
                run_episode(
                    env, generator, tokenizer, GREP_TASK, settings(),
                    tool_format=get_format(PAPER_QWEN),
                )
            )  # fmt: skip
            # Cancelled once the service has made its episode (not after a fixed 0.5 s, by
            # which a loaded machine may not have sent the create yet).
            deadline = time.monotonic() + 60
            while engine.stats()["created"] < 1:
                assert time.monotonic() < deadline and not episode.done(), "never created"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)  # stuck in its generation, or waiting for the lost reply
            episode.cancel()
            with pytest.raises(asyncio.CancelledError):
                await episode

    asyncio.run(main())
    assert engine.stats()["created"] == 1 and engine.stats()["live_episodes"] == 0


def test_concurrent_episodes_share_one_client(live_service, tokenizer):
    task_ids = [f"multi_turn_base_{i}" for i in range(8)]

    async def main():
        async with EnvClient(live_service[0]) as env:
            return await asyncio.gather(
                *(
                    run_episode(
                        env,
                        ScriptedGenerator.from_texts(tokenizer, gt_texts(tid)),
                        tokenizer,
                        tid,
                        settings(),
                        tool_format=get_format(PAPER_QWEN),
                    )
                    for tid in task_ids
                )
            )

    samples = asyncio.run(main())
    assert [s.task_id for s in samples] == task_ids
    assert [s.accuracy for s in samples] == [1] * 8


def fake_sample(task_id: str) -> EpisodeSample:
    return EpisodeSample(
        task_id, "multi_turn_base", [1], [2], [1], None, 1.0, 1, 1.0, ["pass"], None, {}, 1,
        "terminated", {}, "", "",
    )  # fmt: skip


def test_a_batch_retries_each_failed_episode_once_and_tolerates_a_small_share():
    calls: dict[str, int] = {}
    fail_times = {"flaky": 1, "broken": 2}  # how often each task fails before succeeding

    async def play(task_id):
        calls[task_id] = calls.get(task_id, 0) + 1
        if calls[task_id] <= fail_times.get(task_id, 0):
            raise EpisodeError(f"task {task_id}: service gone")
        return fake_sample(task_id)

    tasks = ["flaky", "broken"] + [f"ok{i}" for i in range(18)]
    samples, errors = asyncio.run(
        play_batch(play, tasks, max_failed_share=0.05, what="sample", progress=False)
    )
    assert sorted(s.task_id for s in samples) == sorted(set(tasks) - {"broken"})
    assert errors == ["task broken: service gone"]
    assert calls["flaky"] == 2 and calls["broken"] == 2 and calls["ok0"] == 1

    calls.clear()
    with pytest.raises(TooManyFailedEpisodes, match="1 of 10 episodes failed twice"):
        asyncio.run(
            play_batch(play, tasks[1:11], max_failed_share=0.05, what="sample", progress=False)
        )


def test_a_batch_s_progress_bar_in_a_log_ends_at_its_total(capsys):
    """Written to a file (a run's log), the bar's last line shows every episode done;
    it used to be cleared at the end, so a log stopped at whatever it showed last."""

    async def play(task_id):
        await asyncio.sleep(0.01 * int(task_id[-1]))
        return fake_sample(task_id)

    tasks = [f"ok{i % 10}" for i in range(16)]
    asyncio.run(play_batch(play, tasks, max_failed_share=0.05, what="sample"))
    err = capsys.readouterr().err  # not a terminal, as a log file
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("sample: 100%") and "16/16" in last, err
