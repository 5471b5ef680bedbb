"""One HTTP client with bounded retries, shared by the environment client and the
endpoint evaluator.

`HttpClient.request` sends a request and retries it on connection errors, timeouts
and the statuses its `RetryPolicy` names (honouring a numeric `Retry-After`), with
jittered exponential backoff, until the attempts or the total deadline run out. It then
raises `HttpError`, whose message names the method, the URL, what the request was for
(a task or an episode), the attempts and the time spent, and the last problem. Every
retry is logged as a warning, so a stalled peer is visible while it stalls. Only
requests that are safe to repeat may be retried: the environment service makes its
creates and steps idempotent for that (seal.rollout.protocol).

Built on aiohttp rather than httpx: with 256 concurrent episodes httpx's async pool
spent about 2 ms of CPU per request and its throughput fell as connections grew
(scripts/bench_env.py: 15 episodes/s at 256 connections), so the client alone would
have taken a core from the trainer; aiohttp's connector holds up at that concurrency.
`request_once` offers the same for synchronous callers (launcher, trainer steps).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3
    """Tries per request, the first included."""
    timeout_s: float = 60.0
    """Per attempt, connecting to the last byte of the reply."""
    deadline_s: float = 180.0
    """No new attempt starts after this many seconds since the first."""
    backoff_s: float = 0.05
    """Wait before the first retry; doubled after each, up to `max_backoff_s`."""
    max_backoff_s: float = 2.0
    retry_statuses: frozenset[int] = field(default_factory=lambda: frozenset({503}))
    """Statuses that mean 'try again later' for this peer."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]
    attempts: int
    """How many attempts this reply took (a retried request may already have taken effect)."""

    def json(self) -> object:
        return orjson.loads(self.body) if self.body else None


class HttpError(RuntimeError):
    """No usable reply: the peer was unreachable, too slow or busy for every attempt."""


def _retry_after_s(headers: Mapping[str, str]) -> float:
    try:
        return float(headers.get("Retry-After", 0))
    except ValueError:  # an HTTP date: rare enough to fall back to our own backoff
        return 0.0


class HttpClient:
    """One per event loop (an aiohttp session belongs to the loop it was made in); use
    as `async with HttpClient(base_url) as http: ...`."""

    def __init__(
        self,
        base_url: str,
        policy: RetryPolicy | None = None,
        max_connections: int = 256,
        headers: Mapping[str, str] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.policy = policy or RetryPolicy()
        self.requests = 0
        """HTTP requests sent, retries included."""
        self._max_connections = max_connections
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        # Created lazily: an aiohttp session must be made inside the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                timeout=aiohttp.ClientTimeout(total=self.policy.timeout_s),
                headers=self._headers,
            )
        return self._session

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self, method: str, path: str, what: str, *, json: object = None, params=None
    ) -> Reply:
        """Send `method path` (JSON body `json`); `what` names the request in errors."""
        url = self.base_url + path
        body = None if json is None else orjson.dumps(json)
        headers = None if body is None else {"Content-Type": "application/json"}
        policy, start, delay = self.policy, time.monotonic(), self.policy.backoff_s
        for attempt in range(1, policy.attempts + 1):
            wait = delay
            self.requests += 1
            try:
                async with self.session.request(
                    method, url, data=body, headers=headers, params=params
                ) as response:
                    reply = Reply(response.status, await response.read(), response.headers, attempt)
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                problem = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
                if isinstance(error, asyncio.TimeoutError):
                    problem = f"no reply within {policy.timeout_s:g} s"
            else:
                if reply.status not in policy.retry_statuses:
                    return reply
                problem = f"HTTP {reply.status}: {reply.body[:300].decode(errors='replace')}"
                wait = max(wait, _retry_after_s(reply.headers))
            elapsed = time.monotonic() - start
            if attempt == policy.attempts or elapsed + wait > policy.deadline_s:
                break
            log.warning(
                "%s %s for %s: %s; retry %d/%d in %.1f s (%.1f s so far)",
                method, url, what, problem, attempt, policy.attempts - 1, wait, elapsed,
            )  # fmt: skip
            # Jitter, so that concurrent episodes do not retry in lockstep.
            await asyncio.sleep(min(wait, policy.max_backoff_s) * random.uniform(0.5, 1.0))
            delay *= 2
        raise HttpError(
            f"{method} {url} for {what}: no usable reply after {attempt} attempt(s) in "
            f"{time.monotonic() - start:.1f} s; last: {problem}"
        )


def request_once(
    base_url: str,
    method: str,
    path: str,
    what: str,
    *,
    json: object = None,
    policy: RetryPolicy | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """`HttpClient.request` from synchronous code, over a client of its own."""

    async def send() -> Reply:
        async with HttpClient(base_url, policy, max_connections=1, headers=headers) as http:
            return await http.request(method, path, what, json=json)

    return asyncio.run(send())
