"""The client's side of the service's bearer token: with a token, given or from
$SEAL_ENV_TOKEN, every request carries `Authorization: Bearer <token>`; without one, none
does; against a service started with a token, a client without it fails with a 401 that
says how to fix it."""

from __future__ import annotations

import asyncio
import os

import pytest
from conftest import gt_texts

from env_service.app import create_app
from seal.formats.registry import PAPER_QWEN, get_format
from seal.launch.service import new_token
from seal.rollout.env_client import (
    TOKEN_ENV,
    EnvClient,
    EnvServiceError,
    is_healthy,
    push_profile,
)
from seal.service_contract import EpisodeSettings

TASK = "multi_turn_base_0"
FMT = get_format(PAPER_QWEN)


class RecordingHeaders:
    """Passes every request to the service and keeps its method, path and auth header."""

    def __init__(self, app):
        self.app = app
        self.seen: list[tuple[str, str, str | None]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization")
            self.seen.append((scope["method"], scope["path"], auth and auth.decode()))
        await self.app(scope, receive, send)


async def one_episode_of_each_request(env: EnvClient) -> None:
    """create, step, (early) evaluation and close, profile: every request kind."""
    first = gt_texts(TASK, FMT)[0]
    async with env.episode(TASK, EpisodeSettings()) as episode:
        await episode.step(first, FMT.parse(first))
        await episode.finish()
    await env.push_profile({"tags": []})


@pytest.mark.parametrize("source", ["argument", "environment", "none"])
def test_every_request_carries_the_token_when_there_is_one(serve_app, monkeypatch, source):
    token = new_token()
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    if source == "environment":
        monkeypatch.setenv(TOKEN_ENV, token)
    recorder = RecordingHeaders(create_app())
    url = serve_app(recorder)

    async def main():
        async with EnvClient(url, token=token if source == "argument" else None) as env:
            await one_episode_of_each_request(env)

    asyncio.run(main())
    push_profile(url, {"tags": []}, token=token if source == "argument" else None)
    kinds = {f"{method} {path.split('/')[-1] if method != 'DELETE' else 'episode'}"
             for method, path, _ in recorder.seen}  # fmt: skip
    assert kinds == {
        "POST episodes",
        "POST steps",
        "GET evaluation",
        "DELETE episode",
        "PUT profile",
    }
    expected = None if source == "none" else f"Bearer {token}"
    assert {auth for _, _, auth in recorder.seen} == {expected}


def test_a_service_with_a_token_refuses_a_client_without_it(service_process, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    token = new_token()
    url = service_process(env={TOKEN_ENV: token}).url
    assert is_healthy(url), "/healthz needs no token"

    async def main(client_token):
        async with EnvClient(url, token=client_token) as env:
            await one_episode_of_each_request(env)

    with pytest.raises(EnvServiceError) as info:
        asyncio.run(main(None))
    assert info.value.status == 401 and "HTTP 401" in str(info.value)
    assert f"set ${TOKEN_ENV}" in str(info.value) and f"task {TASK}" in str(info.value)
    with pytest.raises(EnvServiceError, match="HTTP 401"):
        asyncio.run(main(new_token()))
    with pytest.raises(EnvServiceError, match="HTTP 401"):
        push_profile(url, {"tags": []})
    asyncio.run(main(token))
    push_profile(url, {"tags": []}, token=token)


@pytest.mark.parametrize("before", [None, "an-earlier-token"])
def test_a_run_s_token_is_taken_back_out_of_the_environment(monkeypatch, before):
    """The launcher and seal-eval set $SEAL_ENV_TOKEN for their job; a caller in the same
    process (a test, a notebook) must find what it had, even after the job raised, or the
    services it starts later would require a stopped run's token."""
    from seal.launch.service import token_in_environment

    if before is None:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
    else:
        monkeypatch.setenv(TOKEN_ENV, before)
    with pytest.raises(KeyError), token_in_environment("the-run-s-token"):
        assert os.environ[TOKEN_ENV] == "the-run-s-token"
        raise KeyError("the job failed")
    assert os.environ.get(TOKEN_ENV) == before
