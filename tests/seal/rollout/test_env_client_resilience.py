"""The trainers' client against a service that misbehaves:

- an error that is not JSON (a plain-text 500) is reported with its status, endpoint,
  task, episode and time spent, and one such episode does not fail the batch;
- a step, create or close whose reply is late is retried and takes effect once: one
  logical step is applied once, no user turn is skipped, a retried create or close does
  not turn into 409/404;
- a stopped (SIGSTOP) service process: the client warns while it waits and gives up in a
  bounded time with a message naming the endpoint, the episode and the time;
- a service at its live-episode cap (503) is waited for, with backoff and its Retry-After,
  for a bounded time, and the error names the cause.

The service is the real one, wrapped in small ASGI middlewares that lose, delay or break
its replies; the SIGSTOP test runs it as its own process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

import pytest
from conftest import gt_texts
from misbehaving import LateReply, PlainText500, steps_of_task

from env_service.app import create_app
from env_service.engine import ServiceConfig
from seal.formats.registry import PAPER_QWEN, get_format
from seal.http import HttpError
from seal.rollout.driver import play_batch, run_episode
from seal.rollout.env_client import EnvClient, EnvClientSettings, EnvServiceError
from seal.rollout.scripted import ScriptedGenerator, run_scripted_episode
from seal.service_contract import EpisodeSettings

TASK = "multi_turn_base_0"
FMT = get_format(PAPER_QWEN)


def quick(**overrides) -> EnvClientSettings:
    """Client settings for tests: short timeouts, so a stall costs seconds."""
    base = {"timeout_s": 2.0, "attempts": 3, "deadline_s": 10.0, "busy_wait_s": 5.0}
    return EnvClientSettings(**(base | overrides))


# --- errors that are not JSON ---------------------------------------------------------


def test_a_plain_text_500_names_status_endpoint_episode_and_time(serve_app):
    app = create_app()

    async def steps(scope, receive):
        return scope["path"].endswith("/steps")

    url = serve_app(PlainText500(app, steps))

    async def main():
        async with (
            EnvClient(url, settings=quick()) as env,
            env.episode(TASK, EpisodeSettings()) as episode,
        ):
            with pytest.raises(EnvServiceError) as info:
                await episode.step("hello", [])
            return episode, info.value

    episode, error = asyncio.run(main())
    message = str(error)
    assert error.status == 500
    assert "HTTP 500" in message and "Internal Server Error" in message
    assert f"POST {url}/v1/episodes/{episode.episode_id}/steps" in message
    assert f"task {TASK}" in message and f"episode {episode.episode_id}" in message
    # The time it took, as measured (a loaded machine's, whatever it is), within the deadline.
    assert error.elapsed_s is not None and 0 < error.elapsed_s < quick().deadline_s
    assert f" in {error.elapsed_s:.1f} s)" in message, message
    assert "JSON" not in message and "decode" not in message.lower()
    assert app.state.engine.stats()["live_episodes"] == 0, "the failed episode leaked"


def test_a_reply_that_is_not_json_is_an_error_with_its_status(serve_app):
    async def garbage(scope, receive, send):  # a proxy page where the service should be
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"<html>hello</html>"})

    url = serve_app(garbage)

    async def main():
        async with EnvClient(url, settings=quick()) as env, env.episode(TASK, EpisodeSettings()):
            pass

    with pytest.raises(EnvServiceError) as info:
        asyncio.run(main())
    message = str(info.value)
    assert info.value.status == 201 and "HTTP 201" in message
    assert f"POST {url}/v1/episodes" in message and f"task {TASK}" in message
    assert "not JSON" in message and "<html>hello</html>" in message
    assert isinstance(info.value, HttpError)


def test_one_episode_hit_by_a_500_does_not_fail_the_batch(serve_app, tokenizer):
    """One task's steps always 500 (as a 4,300-digit integer in a call once did): its episode
    is retried once, then left out and reported; the other episodes are trained on."""
    app = create_app()
    poisoned = "multi_turn_base_3"
    broken = PlainText500(app, steps_of_task(app, poisoned))
    url = serve_app(broken)
    tasks = [f"multi_turn_base_{i}" for i in range(10)]

    async def main():
        async with EnvClient(url, settings=quick()) as env:

            def play(task_id):
                return run_episode(
                    env, ScriptedGenerator.from_texts(tokenizer, gt_texts(task_id)), tokenizer,
                    task_id,
                    EpisodeSettings(), tool_format=FMT,
                )  # fmt: skip

            return await play_batch(play, tasks, max_failed_share=0.1, what="sample")

    samples, errors = asyncio.run(main())
    assert sorted(s.task_id for s in samples) == sorted(set(tasks) - {poisoned})
    assert all(s.accuracy == 1 for s in samples)
    (error,) = errors
    assert f"task {poisoned}" in error and "HTTP 500" in error and "Internal Server Error" in error
    assert broken.answered == 2, "the failed episode is retried exactly once"
    assert app.state.engine.stats()["live_episodes"] == 0


# --- retried requests take effect once ---------------------------------------------------


def test_a_step_whose_reply_is_late_is_retried_and_applied_once(serve_app):
    """Every step's first reply comes after the client's timeout: the client sends each
    step again, the service answers the copy without running it, and the ground truth
    still passes (a step applied twice would skip a user turn)."""
    app = create_app()
    texts = gt_texts(TASK)
    num_steps = len(texts)
    late = LateReply(app, "POST", "/steps", delay=1.5, times=num_steps)
    url = serve_app(late)
    seen_steps = []

    class Counting(EnvClient):
        async def call(self, method, path, *args, **kwargs):
            reply = await super().call(method, path, *args, **kwargs)
            if path.endswith("/steps"):
                seen_steps.append(reply.attempts)
            return reply

    async def main():
        async with Counting(url, settings=quick(timeout_s=0.5)) as env:
            return await run_scripted_episode(env, TASK, [texts], EpisodeSettings())

    result = asyncio.run(main())
    assert late.held == num_steps and seen_steps and all(a >= 2 for a in seen_steps)
    assert result["accuracy"] == 1, result["failure_tags"]
    assert result["steps"] == num_steps, "a retried step was applied again"
    assert app.state.engine.stats()["live_episodes"] == 0


@pytest.mark.parametrize("method, suffix", [("POST", "/v1/episodes"), ("DELETE", "")])
def test_a_create_or_release_whose_reply_is_late_does_not_fail(serve_app, method, suffix):
    """The create's reply, or the early release's (an episode stopped by its context),
    arrives after the timeout: the retry must not turn into a 409 or a 404."""
    app = create_app()
    late = LateReply(app, method, suffix, delay=1.5)
    url = serve_app(late)
    first_text = gt_texts(TASK)[0]

    async def main():
        async with (
            EnvClient(url, settings=quick(timeout_s=0.5)) as env,
            env.episode(TASK, EpisodeSettings()) as episode,
        ):
            await episode.step(first_text, FMT.parse(first_text))
            return await episode.finish()  # stopped early: evaluate and close

    evaluation = asyncio.run(main())
    assert late.held == 1
    assert evaluation["steps"] == 1 and evaluation["task_id"] == TASK
    stats = app.state.engine.stats()
    assert stats["created"] == 1 and stats["live_episodes"] == 0


# --- a stopped service -------------------------------------------------------------------


def test_a_stopped_service_is_visible_while_it_stalls_and_fails_in_bounded_time(
    service_process, caplog
):
    service = service_process()
    url, proc = service.url, service.proc
    first_text = gt_texts(TASK)[0]
    settings = quick(timeout_s=1.5, attempts=2, deadline_s=10.0, stall_warning_s=0.5)

    async def main():
        async with (
            EnvClient(url, settings=settings) as env,
            env.episode(TASK, EpisodeSettings()) as episode,
        ):
            os.kill(proc.pid, signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(EnvServiceError) as info:
                await episode.step(first_text, FMT.parse(first_text))
            return episode, info.value, time.monotonic() - start

    with caplog.at_level(logging.WARNING):
        episode, error, took = asyncio.run(main())
    message = str(error)
    assert took < settings.deadline_s, f"gave up after {took:.1f} s"  # (its attempts: 3 s)
    assert error.status is None and error.attempts == 2
    assert f"POST {url}/v1/episodes/{episode.episode_id}/steps" in message
    assert f"task {TASK} (episode {episode.episode_id})" in message
    assert "no reply within 1.5 s" in message and "2 attempt(s) in " in message
    stalls = [r for r in caplog.records if "waiting" in r.getMessage()]
    assert stalls, "nothing said the service was stalled while it was"
    first = stalls[0]
    # While the first attempt still waited (at 0.5 s of its 1.5 s), not once it had failed:
    # the attempt it names, not a time, so a loaded machine's late timers do not matter.
    assert "(attempt 1)" in first.getMessage(), first.getMessage()
    assert f"task {TASK}" in first.getMessage() and url in first.getMessage()


# --- a busy service ----------------------------------------------------------------------


def test_a_busy_service_is_waited_for_then_fails_naming_the_cause(serve_app):
    """The episode cap is held: a create is retried with backoff for `busy_wait_s` (not
    1.5 s), goes through once a slot frees, and otherwise fails saying it was busy."""
    app = create_app(ServiceConfig(max_live_episodes=1))
    url = serve_app(app)

    async def main():
        async with (
            EnvClient(url, settings=quick(busy_wait_s=2.5)) as env,
            env.episode(TASK, EpisodeSettings()) as held,
        ):
            start = time.monotonic()
            with pytest.raises(EnvServiceError) as info:
                async with env.episode(TASK, EpisodeSettings()):
                    pass
            gave_up = time.monotonic() - start

            async def close_soon():
                await asyncio.sleep(1.0)
                await held.finish()

            start = time.monotonic()
            closing = asyncio.create_task(close_soon())
            async with env.episode(TASK, EpisodeSettings()) as second:
                waited = time.monotonic() - start
                await second.finish()
            await closing
        return info.value, gave_up, waited

    error, gave_up, waited = asyncio.run(main())
    assert 2.0 < gave_up < 30, gave_up  # its busy wait (2.5 s), not the 1.5 s timeout
    assert error.status == 503
    message = str(error)
    assert "busy" in message and "HTTP 503" in message and f"task {TASK}" in message
    assert "service.client.busy_wait_s" in message
    assert waited > 0.9, waited  # once the slot was freed (at 1 s): it went through, not failed
    assert app.state.engine.stats()["live_episodes"] == 0


def test_retry_after_is_honoured_and_bounded(serve_app):
    answers = []

    async def busy_then_ok(scope, receive, send):
        if scope["type"] != "http":
            return
        answers.append(time.monotonic())
        if len(answers) == 1:
            status, headers, body = 503, [(b"retry-after", b"1")], b'{"detail": "busy"}'
        elif len(answers) == 2:
            status, headers, body = 200, [], b'{"ok": true}'
        else:
            status, headers, body = 503, [(b"retry-after", b"60")], b'{"detail": "busy"}'
        headers.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    url = serve_app(busy_then_ok)

    async def main():
        async with EnvClient(url, settings=quick(busy_wait_s=10)) as env:
            await env.push_profile({"tags": []})
            start = time.monotonic()
            with pytest.raises(EnvServiceError) as info:
                await env.push_profile({"tags": []})
            return info.value, time.monotonic() - start

    error, took = asyncio.run(main())
    assert answers[1] - answers[0] >= 0.95, "Retry-After: 1 was not waited for"
    # At once, not after the 10 s budget nor the 60 s asked for (room for a loaded machine).
    assert took < 5, "a Retry-After beyond the busy budget must fail at once"
    assert "Retry-After" in str(error) and "60" in str(error)
