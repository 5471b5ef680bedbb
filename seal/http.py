"""One HTTP client with bounded retries, shared by the environment client and the
endpoint evaluator.

`HttpClient.request` (and `request_once` for synchronous callers) retries what is safe to
repeat within attempts and a deadline, waits out a busy peer on a budget of its own, warns
while a request stalls, and fails with an `HttpError` that names the request, the status,
the attempts and the time. aiohttp rather than httpx, for its cost at 256 concurrent
episodes. The rules: docs/design.md, "The episode contract".
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
KEEPALIVE_S = 15.0
"""How long an idle connection is kept for reuse (aiohttp's default, stated): less than
the environment service keeps one (`keep_alive_s`, 30 s), so this client never reuses a
connection the service is closing."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3
    """Tries per request on a connection error, a timeout or a `retry_statuses` reply,
    the first included."""
    timeout_s: float = 60.0
    """Per attempt, connecting to the last byte of the reply."""
    deadline_s: float = 180.0
    """No new attempt after a failure starts this many seconds after the first."""
    backoff_s: float = 0.05
    """Wait before the first retry; doubled after each, up to `max_backoff_s`."""
    max_backoff_s: float = 2.0
    retry_statuses: frozenset[int] = field(default_factory=lambda: frozenset({503}))
    """Statuses that mean 'try again' for this peer; each counts as an attempt."""
    busy_statuses: frozenset[int] = frozenset()
    """Statuses that mean 'healthy but busy, come back later': retried without counting
    as attempts, for at most `busy_wait_s` (a status in both sets is busy)."""
    busy_wait_s: float = 0.0
    """How long a request may keep meeting busy answers before it fails."""
    max_busy_backoff_s: float = 5.0
    """Longest wait between busy answers unless the peer's Retry-After asks for longer."""
    stall_warning_s: float = 30.0
    """Warn when a request has had no reply for this long (0: never)."""


class HttpError(RuntimeError):
    """No usable reply. The attributes say which request failed and how: `status` is the
    HTTP status of the last reply (None: none came), `elapsed_s` the time since the
    request was first sent, `attempts` how often it was sent."""

    def __init__(
        self,
        problem: str,
        *,
        method: str = "",
        url: str = "",
        what: str = "",
        status: int | None = None,
        attempts: int = 0,
        elapsed_s: float | None = None,
    ):
        self.problem, self.method, self.url, self.what = problem, method, url, what
        self.status, self.attempts, self.elapsed_s = status, attempts, elapsed_s
        super().__init__(self.describe())

    def describe(self) -> str:
        if not self.method:  # an error raised by hand, without a request behind it
            return self.problem
        spent = "" if self.elapsed_s is None else f" in {self.elapsed_s:.1f} s"
        return (
            f"{self.method} {self.url} for {self.what}: {self.problem} "
            f"(after {self.attempts} attempt(s){spent})"
        )


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]
    attempts: int
    """How many attempts this reply took (a retried request may already have taken effect)."""
    method: str = ""
    url: str = ""
    what: str = ""
    elapsed_s: float | None = None
    """Seconds from the first attempt to this reply."""

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode(errors="replace")

    def error(self, problem: str, error_type: type[HttpError] = HttpError) -> HttpError:
        """An error about this reply: its request, status, attempts and time."""
        return error_type(
            problem, method=self.method, url=self.url, what=self.what, status=self.status,
            attempts=self.attempts, elapsed_s=self.elapsed_s,
        )  # fmt: skip

    def json(self, error_type: type[HttpError] = HttpError) -> object:
        """The body as JSON; a body that is not JSON is an `error_type` naming the status."""
        if not self.body:
            return None
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            raise self.error(
                f"HTTP {self.status}, reply is not JSON: {self.text()!r}", error_type
            ) from None


def _retry_after_s(headers: Mapping[str, str]) -> float:
    try:
        return max(0.0, float(headers.get("Retry-After", 0)))
    except ValueError:  # an HTTP date: rare enough to use our own backoff instead
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
        self._waiting: dict[object, tuple[float, str]] = {}
        """Attempts in flight -> (when sent, description), for the stall monitor."""
        self._monitor: asyncio.TimerHandle | None = None
        self._last_busy_warning = -1e9

    @property
    def session(self) -> aiohttp.ClientSession:
        # Created lazily: an aiohttp session must be made inside the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections, keepalive_timeout=KEEPALIVE_S
                ),
                timeout=aiohttp.ClientTimeout(total=self.policy.timeout_s),
                headers=self._headers,
            )
        return self._session

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            self._monitor = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json: object = None,
        params=None,
        policy: RetryPolicy | None = None,
    ) -> Reply:
        """Send `method path` (JSON body `json`); `what` names the request in errors;
        `policy` replaces the client's for this request."""
        url = self.base_url + path
        body = None if json is None else orjson.dumps(json)
        headers = None if body is None else {"Content-Type": "application/json"}
        policy, start = policy or self.policy, time.monotonic()
        delay, busy_delay = policy.backoff_s, policy.backoff_s
        failures, busy_since, attempt = 0, None, 0
        while True:
            attempt += 1
            self.requests += 1
            status = None
            try:
                reply = await self._attempt(
                    method, url, what, body, headers, params, attempt, policy
                )
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                problem = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
                if isinstance(error, asyncio.TimeoutError):
                    problem = f"no reply within {policy.timeout_s:g} s"
            else:
                status = reply.status
                busy = status in policy.busy_statuses
                if not busy and status not in policy.retry_statuses:
                    elapsed = time.monotonic() - start
                    return Reply(
                        status, reply.body, reply.headers, attempt, method, url, what, elapsed
                    )  # fmt: skip
                problem = f"HTTP {status}: {reply.body[:300].decode(errors='replace')}"
                if busy:
                    now = time.monotonic()
                    busy_since = now if busy_since is None else busy_since
                    retry_after = _retry_after_s(reply.headers)
                    left = policy.busy_wait_s - (now - busy_since)
                    if left <= 0 or retry_after > left:
                        asked = f"; it asks to retry after {retry_after:g} s (Retry-After)"
                        raise HttpError(
                            f"the peer stayed busy for {now - busy_since:.1f} s "
                            f"(limit {policy.busy_wait_s:g} s){asked if retry_after else ''}; "
                            f"last: {problem}",
                            method=method, url=url, what=what, status=status,
                            attempts=attempt, elapsed_s=now - start,
                        )  # fmt: skip
                    # The last wait is cut to the budget: one more try right at its end.
                    wait = min(max(min(busy_delay, policy.max_busy_backoff_s), retry_after), left)
                    self._warn_busy(
                        "%s %s for %s: busy (%s); retrying in %.1f s (busy for %.1f s, limit %g s)",
                        method, url, what, problem, wait, now - busy_since, policy.busy_wait_s,
                    )  # fmt: skip
                    # Jitter below the wait, never below Retry-After: the peer asked for it.
                    await asyncio.sleep(max(retry_after, wait * random.uniform(0.75, 1.0)))
                    busy_delay *= 2
                    continue
            failures += 1
            elapsed = time.monotonic() - start
            retry_after = 0.0 if status is None else _retry_after_s(reply.headers)
            wait = max(min(delay, policy.max_backoff_s), retry_after)
            if failures >= policy.attempts or elapsed + wait > policy.deadline_s:
                raise HttpError(
                    problem, method=method, url=url, what=what, status=status,
                    attempts=attempt, elapsed_s=elapsed,
                )  # fmt: skip
            log.warning(
                "%s %s for %s: %s; retry %d/%d in %.1f s (%.1f s so far)",
                method, url, what, problem, failures, policy.attempts - 1, wait, elapsed,
            )  # fmt: skip
            # Jitter, so that concurrent episodes do not retry in lockstep; never below
            # the peer's Retry-After.
            await asyncio.sleep(max(retry_after, wait * random.uniform(0.5, 1.0)))
            delay *= 2

    async def _attempt(self, method, url, what, body, headers, params, attempt, policy) -> Reply:
        """One attempt, registered as waiting for the stall monitor while it waits."""
        key = object()
        self._waiting[key] = (time.monotonic(), f"{method} {url} for {what} (attempt {attempt})")
        if self._monitor is None and self.policy.stall_warning_s > 0:
            self._arm_monitor(self.policy.stall_warning_s)
        timeout = aiohttp.ClientTimeout(total=policy.timeout_s)
        try:
            async with self.session.request(
                method, url, data=body, headers=headers, params=params, timeout=timeout
            ) as response:
                return Reply(response.status, await response.read(), response.headers, attempt)
        finally:
            del self._waiting[key]

    def _arm_monitor(self, delay: float) -> None:
        # One timer per client, not a task or timer per request: 3000 requests/s pass here.
        self._monitor = asyncio.get_running_loop().call_later(delay, self._check_stalls)

    def _check_stalls(self) -> None:
        self._monitor = None
        if not self._waiting:
            return  # re-armed by the next request
        interval, now = self.policy.stall_warning_s, time.monotonic()
        sent, oldest = min(self._waiting.values(), key=lambda entry: entry[0])
        age = now - sent
        if age >= interval * 0.99:
            log.warning(
                "%d request(s) waiting on %s; the oldest, %s, has had no reply for %.1f s "
                "(timeout %g s per attempt)",
                len(self._waiting), self.base_url, oldest, age, self.policy.timeout_s,
            )  # fmt: skip
            self._arm_monitor(interval)
        else:  # the oldest waiting request reaches the interval then
            self._arm_monitor(interval - age)

    def _warn_busy(self, message: str, *args) -> None:
        """At most one busy warning per 10 s per client: 256 episodes waiting for a slot
        are one problem, not 256 lines."""
        now = time.monotonic()
        if now - self._last_busy_warning >= 10.0:
            self._last_busy_warning = now
            log.warning(message, *args)


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
