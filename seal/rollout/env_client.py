"""Async client of the environment service's native API, and the episode lifecycle.

    async with EnvClient(url) as env:
        async with env.episode(task_id, settings) as episode:   # create
            reply = await episode.step(text, calls)             # k steps
            ...
            evaluation = await episode.finish()

The client speaks data, as the native API does: `episode.created` holds the system
prompt's sections, the tool docs and the first question; a step sends the model's text
with the calls the caller parsed from it (seal.formats) and gets back the observation
messages. Rendering them is the caller's model format's job.

`Episode` owns one episode from create to release: a step that ends it brings its
evaluation (the service releases it then), `finish()` evaluates and releases one the
client stops early, and leaving the `async with` block any other way (an error, a
cancellation) releases it. An episode played to its end costs k + 1 requests.

Every request is safe to repeat, so timeouts and connection errors are retried
(seal.http): the episode id is chosen here, so a retried create finds its episode, and
every step carries its sequence number, so a retried step is answered, not rerun. A
busy service (503) is retried with backoff. Every failure is an `EnvServiceError` that
names the request, the task or episode, and the cause; there is no fallback value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid
from dataclasses import dataclass

from seal.bfcl.calls import CallParseError, ToolCall
from seal.http import HttpClient, HttpError, Reply, RetryPolicy, request_once
from seal.rollout.protocol import EpisodeSettings

log = logging.getLogger(__name__)

TOKEN_ENV = "SEAL_ENV_TOKEN"
"""Environment variable holding the service's bearer token (the launcher sets it)."""


class EnvServiceError(RuntimeError):
    """The service refused or failed a request."""


@dataclass
class StepReply:
    messages: list[dict]
    """The observation (ObservationMessage dicts): one tool result per call, or the next
    question (empty once the episode ended)."""
    terminated: bool
    truncated: bool
    """The service ended the episode at its generation limit."""


def call_body(call: ToolCall | CallParseError) -> dict:
    """A parsed call as the native API's AssistantCall."""
    if isinstance(call, CallParseError):
        return {"error": call.reason}
    if call.args:
        raise ValueError(f"{call.to_call_string()}: positional arguments need names")
    return {"name": call.name, "arguments": call.kwargs}


def _auth_headers(token: str | None) -> dict[str, str]:
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _detail(reply: Reply) -> str:
    try:
        payload = reply.json()
    except ValueError:
        return reply.body[:300].decode(errors="replace")
    return str(payload.get("detail", payload)) if isinstance(payload, dict) else str(payload)


class EnvClient:
    """One client per event loop; use as `async with EnvClient(url) as env: ...`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8082",
        *,
        timeout_s: float = 60.0,
        attempts: int = 3,
        max_connections: int = 256,
        token: str | None = None,
    ):
        """`timeout_s` bounds one attempt; `token` defaults to $SEAL_ENV_TOKEN."""
        self.base_url = base_url.rstrip("/")
        policy = RetryPolicy(attempts=attempts, timeout_s=timeout_s)
        self.http = HttpClient(self.base_url, policy, max_connections, _auth_headers(token))

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(
        self, method: str, path: str, what: str, expect: tuple[int, ...], json=None, params=None
    ) -> Reply:
        try:
            reply = await self.http.request(method, path, what, json=json, params=params)
        except HttpError as e:
            raise EnvServiceError(str(e)) from e
        if reply.status not in expect:
            raise EnvServiceError(
                f"{method} {path} for {what} failed ({reply.status}): {_detail(reply)}"
            )
        return reply

    def episode(self, task_id: str, settings: EpisodeSettings | None = None) -> Episode:
        """An episode of `task_id`, created when its `async with` block starts."""
        return Episode(self, task_id, settings or EpisodeSettings())

    async def push_profile(self, profile: dict) -> None:
        """Send the trainer's failure profile (seal.tocf) for the guideline layer."""
        await self.call("PUT", "/v1/profile", "the failure profile", (200,), json=profile)

    async def healthy(self) -> bool:
        try:
            await self.call("GET", "/healthz", "a health check", (200,))
        except EnvServiceError:
            return False
        return True


class Episode:
    """One episode's lifecycle (see the module docstring)."""

    def __init__(self, env: EnvClient, task_id: str, settings: EpisodeSettings):
        self.env, self.task_id, self.settings = env, task_id, settings
        # Chosen here, not by the service: a create whose reply never arrived (timed out,
        # cancelled) can then be retried or released.
        self.episode_id = uuid.uuid4().hex
        self.category = ""
        self.created: dict = {}
        """The creation reply (EpisodeCreated): `system` sections, `tools`, first `messages`."""
        self.steps = 0
        self.evaluation: dict | None = None
        self.released = False

    @property
    def what(self) -> str:
        return f"task {self.task_id} (episode {self.episode_id})"

    @property
    def path(self) -> str:
        return f"/v1/episodes/{self.episode_id}"

    async def __aenter__(self) -> Episode:
        body = {
            "task_id": self.task_id,
            "episode_id": self.episode_id,
            "settings": dataclasses.asdict(self.settings),
        }
        try:
            reply = await self.env.call("POST", "/v1/episodes", self.what, (201,), json=body)
        except BaseException:
            await self._release_quietly()  # usually there is nothing to release
            raise
        self.created = reply.json()
        self.category = self.created["category"]
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if not self.released:
            # An error or a cancellation: the live-episode slot goes back now rather than
            # when the service's idle timeout would drop it. Shielded, so a second
            # cancellation does not stop the release half-way.
            await asyncio.shield(self._release_quietly())

    async def step(self, content: str, calls: list[ToolCall | CallParseError]) -> StepReply:
        """Send one assistant message, its text and the calls parsed from it ([]: the
        message answers); returns the service's observation."""
        if self.released:
            raise EnvServiceError(f"{self.what}: step after the episode ended")
        self.steps += 1
        body = {"content": content, "tool_calls": [call_body(c) for c in calls], "seq": self.steps}
        result = (
            await self.env.call("POST", f"{self.path}/steps", self.what, (200,), json=body)
        ).json()
        if result["terminated"]:
            self.evaluation, self.released = result["evaluation"], True
        return StepReply(result["messages"], result["terminated"], result["truncated"])

    async def finish(self) -> dict:
        """The episode's evaluation; evaluates and releases it if it has not ended."""
        if self.evaluation is None:
            reply = await self.env.call(
                "DELETE", self.path, self.what, (200,), params={"evaluate": "true"}
            )
            self.evaluation, self.released = reply.json(), True
        return self.evaluation

    async def _release_quietly(self) -> None:
        # After another error, which is the one to report; the service expires what
        # this misses.
        try:
            await self.env.call("DELETE", self.path, self.what, (204, 404))
        except EnvServiceError as e:
            log.warning("releasing %s failed too: %s", self.what, e)
        self.released = True


def push_profile(env_url: str, profile: dict, token: str | None = None) -> None:
    """Push a failure profile from synchronous code (a trainer step)."""
    what = "the failure profile"
    try:
        reply = request_once(
            env_url, "PUT", "/v1/profile", what, json=profile, headers=_auth_headers(token)
        )
    except HttpError as e:
        raise EnvServiceError(str(e)) from e
    if reply.status != 200:
        raise EnvServiceError(
            f"pushing the failure profile failed ({reply.status}): {_detail(reply)}"
        )


def is_healthy(env_url: str, timeout_s: float = 2.0) -> bool:
    """Whether a service answers /healthz at `env_url` (one attempt, synchronous)."""
    try:
        reply = request_once(
            env_url,
            "GET",
            "/healthz",
            "a health check",
            policy=RetryPolicy(attempts=1, timeout_s=timeout_s),
            headers=_auth_headers(None),
        )
    except HttpError:
        return False
    return reply.status == 200
