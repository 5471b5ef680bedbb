"""A client for one OpenAI-compatible chat-completions endpoint, with retries.

``ChatEndpoint.complete(messages)`` posts the conversation to ``{base_url}/chat/completions``
and returns ``choices[0].message.content``, the model's raw text. No ``tools`` are sent: the
BFCL system prompt already carries the tool signatures in Qwen's format and the model's
``<tool_call>`` blocks are parsed by the environment service, exactly as in training.

Transient failures (connection errors, timeouts, 408, 429 and 5xx answers) are retried with
exponential backoff, honouring a numeric ``Retry-After``; anything else (400, 401, 404, a
reply without text) fails at once. A failure is always an `EndpointError` that names the
task and the cause, never an empty or made-up reply taken as the model's output.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import aiohttp
import orjson

TRANSIENT_STATUSES = frozenset({408, 429})


class EndpointError(RuntimeError):
    """The endpoint gave no usable reply (after retries, or a permanent refusal)."""


@dataclass(frozen=True)
class EndpointSettings:
    base_url: str
    """Up to and including the API version, e.g. ``http://host:8000/v1``."""
    model: str
    """The ``model`` field of each request (the name the server serves)."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer``; None sends no header."""
    max_tokens: int = 4096
    """Per generation (the paper's response length)."""
    temperature: float = 0.0
    """0: greedy, as the paper's validation."""
    attempts: int = 5
    """Tries per request before a transient failure becomes an EndpointError."""
    backoff_s: float = 1.0
    """Wait before the first retry; doubled after each, up to `max_backoff_s`."""
    max_backoff_s: float = 60.0
    timeout_s: float = 600.0
    """Per request: a 4096-token generation on a busy server takes minutes."""


def _is_transient(status: int) -> bool:
    return status in TRANSIENT_STATUSES or status >= 500


def _retry_after_s(headers) -> float:
    try:
        return float(headers.get("Retry-After", 0))
    except ValueError:  # an HTTP date: rare enough to fall back to our own backoff
        return 0.0


def _content(payload: object, what: str) -> str:
    try:
        message = payload["choices"][0]["message"]
    except (TypeError, KeyError, IndexError):
        raise EndpointError(f"{what}: reply has no choices[0].message: {payload!r:.300}") from None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(message, dict) and message.get("tool_calls"):
        # The server parsed the calls itself; the service needs the raw text.
        raise EndpointError(
            f"{what}: the reply carries tool_calls instead of text: "
            "serve the model without a tool-call parser"
        )
    raise EndpointError(f"{what}: the reply has no text content: {message!r:.300}")


class ChatEndpoint:
    """One per event loop; use as ``async with ChatEndpoint(settings) as chat: ...``."""

    def __init__(self, settings: EndpointSettings, max_connections: int = 16):
        self.settings = settings
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        self.requests = 0  # HTTP requests sent, retries included
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        # Created lazily: an aiohttp session must be made inside the running event loop.
        if self._session is None:
            headers = {}
            if self.settings.api_key:
                headers["Authorization"] = f"Bearer {self.settings.api_key}"
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s),
                headers=headers,
            )
        return self._session

    async def __aenter__(self) -> ChatEndpoint:
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, messages: list[dict], what: str) -> str:
        """The model's text reply to `messages`; `what` (a task id) names it in errors."""
        body = orjson.dumps(
            {
                "model": self.settings.model,
                "messages": messages,
                "temperature": self.settings.temperature,
                "max_tokens": self.settings.max_tokens,
            }
        )
        delay = self.settings.backoff_s
        for attempt in range(1, self.settings.attempts + 1):
            wait = delay
            self.requests += 1
            try:
                async with self.session.post(
                    self.url, data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    status, text = response.status, await response.text()
                    wait = max(wait, _retry_after_s(response.headers))
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if status == 200:
                    try:
                        return _content(orjson.loads(text), what)
                    except orjson.JSONDecodeError:
                        raise EndpointError(f"{what}: reply is not JSON: {text:.300}") from None
                problem = f"HTTP {status}: {text:.300}"
                if not _is_transient(status):
                    raise EndpointError(f"{what}: {self.url} refused the request ({problem})")
            if attempt < self.settings.attempts:
                # Jitter, so that concurrent episodes do not retry in lockstep.
                await asyncio.sleep(min(wait, self.settings.max_backoff_s) * random.uniform(0.5, 1))
                delay *= 2
        raise EndpointError(
            f"{what}: {self.url} failed {self.settings.attempts} times; last: {problem}"
        )
