"""Async client of the environment service's native API, and the episode lifecycle.

    async with EnvClient(url) as env:
        async with env.episode(task_id, settings) as episode:   # create
            reply = await episode.step(text, calls)             # k steps
            evaluation = await episode.finish()

It speaks data (rendering is the caller's tool format's job); every request is safe to
repeat, so failures are retried, then raised: docs/design.md, "The episode contract".
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
from seal.service_contract import TOKEN_ENV, EpisodeSettings

log = logging.getLogger(__name__)


@dataclass
class EnvClientSettings:
    """How the trainers' client waits for and retries the environment service (the run
    config's `service.client`). A request is retried on a timeout or a connection error
    (`attempts`, within `deadline_s`), and while the service is busy (`busy_wait_s`);
    an episode whose request still fails is retried once, then left out and counted
    (`trainer.rollout.max_failed_share`)."""

    timeout_s: float = 60.0
    """Seconds one attempt may wait for its reply. Longer than the service's own time
    budget of a step, so that only a stalled or unreachable service times out."""
    attempts: int = 3
    """Tries per request on a timeout or a connection error, the first included."""
    deadline_s: float = 180.0
    """No retry after a timeout or a connection error starts later than this many
    seconds after the request was first sent."""
    busy_wait_s: float = 300.0
    """How long a request keeps retrying while the service answers 503 (busy: its
    `--max-live-episodes` are in use), backing off up to 5 s and honouring Retry-After;
    then the request fails, saying so."""
    stall_warning_s: float = 15.0
    """Warn when a request has had no reply for this many seconds, and again every this
    many seconds while requests wait: a stalled service shows while it stalls. 0: never."""

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            attempts=self.attempts,
            timeout_s=self.timeout_s,
            deadline_s=self.deadline_s,
            retry_statuses=frozenset(),  # another status is an answer: 4xx and 500 are final
            busy_statuses=frozenset({503}),
            busy_wait_s=self.busy_wait_s,
            stall_warning_s=self.stall_warning_s,
        )


class EnvServiceError(HttpError):
    """The service refused or failed a request, or did not answer; the attributes of
    `HttpError` say which request and how."""


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


def resolve_token(token: str | None) -> str | None:
    """`token`, else $SEAL_ENV_TOKEN, else None (no header is sent)."""
    return token if token is not None else os.environ.get(TOKEN_ENV) or None


def auth_headers(token: str | None) -> dict[str, str]:
    token = resolve_token(token)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _detail(reply: Reply) -> str:
    try:
        payload = reply.json()
    except HttpError:  # not JSON: a plain-text error page
        return reply.text()
    return str(payload.get("detail", payload)) if isinstance(payload, dict) else str(payload)


def service_error(error: HttpError) -> EnvServiceError:
    """`error` (no usable reply) as an EnvServiceError, with advice where there is one."""
    problem = error.problem
    if error.status == 503:
        problem += (
            "; the service's live-episode cap is reached: raise it (service.max_live_episodes, "
            "--max-live-episodes), run fewer episodes at once, or wait longer "
            "(service.client.busy_wait_s)"
        )
    return EnvServiceError(
        problem, method=error.method, url=error.url, what=error.what, status=error.status,
        attempts=error.attempts, elapsed_s=error.elapsed_s,
    )  # fmt: skip


def reply_error(reply: Reply) -> EnvServiceError:
    """The error for a reply with a status the caller did not expect."""
    hint = ""
    if reply.status == 401:
        hint = (
            f" (the service needs its token: set ${TOKEN_ENV} or service.token to the "
            "token it was started with)"
        )
    return reply.error(f"HTTP {reply.status}: {_detail(reply)}{hint}", EnvServiceError)


class EnvClient:
    """One client per event loop; use as `async with EnvClient(url) as env: ...`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8082",
        settings: EnvClientSettings | None = None,
        *,
        timeout_s: float | None = None,
        attempts: int | None = None,
        max_connections: int = 256,
        token: str | None = None,
    ):
        """`timeout_s` and `attempts`, when given, replace those of `settings`; `token`
        defaults to $SEAL_ENV_TOKEN."""
        self.base_url = base_url.rstrip("/")
        settings = settings or EnvClientSettings()
        if timeout_s is not None:
            settings = dataclasses.replace(settings, timeout_s=timeout_s)
        if attempts is not None:
            settings = dataclasses.replace(settings, attempts=attempts)
        self.settings = settings
        self.http = HttpClient(
            self.base_url, settings.policy(), max_connections, auth_headers(token)
        )

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(
        self,
        method: str,
        path: str,
        what: str,
        expect: tuple[int, ...],
        json=None,
        params=None,
        policy: RetryPolicy | None = None,
    ) -> Reply:
        try:
            reply = await self.http.request(
                method, path, what, json=json, params=params, policy=policy
            )
        except EnvServiceError:
            raise
        except HttpError as e:
            raise service_error(e) from None
        if reply.status not in expect:
            raise reply_error(reply)
        return reply

    def episode(self, task_id: str, settings: EpisodeSettings | None = None) -> RemoteEpisode:
        """An episode of `task_id`, created when its `async with` block starts."""
        return RemoteEpisode(self, task_id, settings or EpisodeSettings())

    async def push_profile(self, profile: dict) -> None:
        """Send the trainer's failure profile (seal.tocf) for the guideline layer."""
        await self.call("PUT", "/v1/profile", "the failure profile", (200,), json=profile)

    async def healthy(self) -> bool:
        try:
            await self.call("GET", "/healthz", "a health check", (200,))
        except EnvServiceError:
            return False
        return True


class RemoteEpisode:
    """One episode's lifecycle (see the module docstring)."""

    def __init__(self, env: EnvClient, task_id: str, settings: EpisodeSettings):
        self.env, self.task_id, self.settings = env, task_id, settings
        # Chosen here, not by the service: a create whose reply never arrived (timed out,
        # cancelled) can then be retried or closed.
        self.episode_id = uuid.uuid4().hex
        self.category = ""
        self.created: dict = {}
        """The creation reply (EpisodeCreated): `system` sections, `tools`, first `messages`."""
        self.tools: list[dict] = []
        """The tool docs shown so far: the creation's, then each reveal turn's (what a tool
        format that types call values by their docs parses with: ToolFormat.parse)."""
        self.steps = 0
        self.evaluation: dict | None = None
        self.closed = False

    @property
    def what(self) -> str:
        return f"task {self.task_id} (episode {self.episode_id})"

    @property
    def path(self) -> str:
        return f"/v1/episodes/{self.episode_id}"

    async def __aenter__(self) -> RemoteEpisode:
        body = {
            "task_id": self.task_id,
            "episode_id": self.episode_id,
            "settings": dataclasses.asdict(self.settings),
        }
        try:
            reply = await self.env.call("POST", "/v1/episodes", self.what, (201,), json=body)
            self.created = reply.json(EnvServiceError)
        except BaseException:
            await self._close_quietly()  # usually there is nothing to close
            raise
        self.category = self.created["category"]
        self.tools = list(self.created["tools"])
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if not self.closed:
            # An error or a cancellation: the live-episode slot goes back now rather than
            # when the service's idle timeout would drop it. Shielded, so a second
            # cancellation does not stop the release half-way.
            await asyncio.shield(self._close_quietly())

    async def step(self, content: str, calls: list[ToolCall | CallParseError]) -> StepReply:
        """Send one assistant message, its text and the calls parsed from it ([]: the
        message answers); returns the service's observation."""
        if self.closed:
            raise EnvServiceError(f"{self.what}: step after the episode ended")
        self.steps += 1
        body = {"content": content, "tool_calls": [call_body(c) for c in calls], "seq": self.steps}
        reply = await self.env.call("POST", f"{self.path}/steps", self.what, (200,), json=body)
        result = reply.json(EnvServiceError)
        if result["terminated"]:
            self.evaluation, self.closed = result["evaluation"], True
        for message in result["messages"]:
            self.tools += message.get("tools") or []
        return StepReply(result["messages"], result["terminated"], result["truncated"])

    async def finish(self) -> dict:
        """The episode's evaluation; evaluates and closes it if it has not ended."""
        if self.evaluation is None:
            # Two requests rather than DELETE ?evaluate=true: if the close's reply is
            # lost, its retry finds no episode (404), and the evaluation must not go
            # with it.
            reply = await self.env.call("GET", f"{self.path}/evaluation", self.what, (200,))
            self.evaluation = reply.json(EnvServiceError)
            reply = await self.env.call("DELETE", self.path, self.what, (204, 404))
            if reply.status == 404 and reply.attempts == 1:
                raise reply_error(reply)  # not our own earlier attempt: someone closed it
            self.closed = True
        return self.evaluation

    async def _close_quietly(self) -> None:
        # After another error, which is the one to report: one short attempt, since the
        # service expires what this misses, and a stalled service has cost enough time.
        policy = RetryPolicy(
            attempts=1, timeout_s=min(10.0, self.env.settings.timeout_s), retry_statuses=frozenset()
        )
        try:
            await self.env.call("DELETE", self.path, self.what, (204, 404), policy=policy)
        except EnvServiceError as e:
            log.warning("closing %s failed too: %s", self.what, e)
        self.closed = True


def push_profile(
    env_url: str,
    profile: dict,
    token: str | None = None,
    settings: EnvClientSettings | None = None,
) -> None:
    """Push a failure profile from synchronous code (a trainer step)."""
    policy = (settings or EnvClientSettings()).policy()
    try:
        reply = request_once(
            env_url, "PUT", "/v1/profile", "the failure profile", json=profile,
            policy=policy, headers=auth_headers(token),
        )  # fmt: skip
    except HttpError as e:
        raise service_error(e) from None
    if reply.status != 200:
        raise reply_error(reply)


def is_healthy(env_url: str, timeout_s: float = 2.0) -> bool:
    """Whether a service answers /healthz at `env_url` (one attempt, synchronous; the
    health check needs no token)."""
    try:
        reply = request_once(
            env_url,
            "GET",
            "/healthz",
            "a health check",
            policy=RetryPolicy(attempts=1, timeout_s=timeout_s, stall_warning_s=0),
        )
    except HttpError:
        return False
    return reply.status == 200
