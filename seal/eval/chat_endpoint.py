"""A client for one OpenAI-compatible endpoint, with retries.

``ChatEndpoint.complete(messages, what, max_tokens)`` posts to ``/chat/completions`` (no
``tools``: the tool format parses the calls, as in training), ``complete_text(prompt, ...)``
a prompt a tool format rendered whole to ``/completions``; both return the raw text and its
``finish_reason``. Transient failures are retried (seal.http); any other is an
`EndpointError` naming the task, never an empty reply taken as the model's.
``preflight`` checks URL, model and key in seconds. Details: docs/evaluation.md.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from seal.http import HttpClient, HttpError, Reply, RetryPolicy

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 429, *range(500, 600)})
"""Answers worth retrying: timeouts, rate limits and server errors."""

FINISH_REASONS = ("stop", "length")
"""What a text reply may end with: its end-of-turn (or a stop string), or `max_tokens`."""

_CONTEXT_REFUSAL = re.compile(
    r"context[ _]length|context[ _]window|context[ _]size|maximum context", re.IGNORECASE
)
"""How servers word a refusal for length: OpenAI's `context_length_exceeded`, vLLM's and
llama-cpp-python's "maximum context length is N tokens", llama.cpp's "exceeds the
available context size", SGLang's "longer than the model's context length"."""

PREFLIGHT_TIMEOUT_S = 30.0
"""For `GET /models`: a server that does not list its models within this is not the
right URL (the request after it may take longer: some servers load the model then)."""


class EndpointError(RuntimeError):
    """The endpoint gave no usable reply (after retries, or a permanent refusal)."""


class ContextLengthError(EndpointError):
    """The server refused a request as longer than its context."""


class PreflightError(EndpointError):
    """The endpoint is unreachable, does not serve the model or refuses the key."""


@dataclass(frozen=True)
class EndpointSettings:
    base_url: str
    """Up to and including the API version, e.g. ``http://host:8000/v1``."""
    model: str
    """The ``model`` field of each request (the name the server serves)."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer``; None sends no header."""
    temperature: float = 0.0
    """0: greedy, as the paper's validation."""
    attempts: int = 5
    """Tries per request before a transient failure becomes an EndpointError."""
    backoff_s: float = 1.0
    """Wait before the first retry; doubled after each, up to `max_backoff_s`."""
    max_backoff_s: float = 60.0
    timeout_s: float = 600.0
    """Per request: a 4096-token generation on a busy server takes minutes."""


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str
    """"stop" or "length" (`FINISH_REASONS`)."""


def _choice(payload: object, key: str, what: str) -> dict:
    try:
        choice = payload["choices"][0]
        choice[key]
    except (TypeError, KeyError, IndexError):
        raise EndpointError(f"{what}: reply has no choices[0].{key}: {payload!r:.300}") from None
    return choice


def _finished(choice: dict, text: str, what: str) -> Completion:
    finish_reason = choice.get("finish_reason")
    if finish_reason not in FINISH_REASONS:
        raise EndpointError(
            f"{what}: the reply ended with finish_reason {finish_reason!r}, not one of "
            f"{FINISH_REASONS}: {text!r:.200}"
        )
    return Completion(text, finish_reason)


def _text(payload: object, what: str) -> Completion:
    choice = _choice(payload, "text", what)
    if not isinstance(choice["text"], str):
        raise EndpointError(f"{what}: the reply's text is not a string: {choice['text']!r:.300}")
    return _finished(choice, choice["text"], what)


def _content(payload: object, what: str) -> Completion:
    choice = _choice(payload, "message", what)
    message = choice["message"]
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return _finished(choice, content, what)
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
        self.headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        policy = RetryPolicy(
            attempts=settings.attempts,
            timeout_s=settings.timeout_s,
            deadline_s=settings.attempts * (settings.timeout_s + settings.max_backoff_s),
            backoff_s=settings.backoff_s,
            max_backoff_s=settings.max_backoff_s,
            retry_statuses=RETRY_STATUSES,
        )
        self.http = HttpClient(settings.base_url, policy, max_connections, self.headers)

    @property
    def requests(self) -> int:
        """HTTP requests sent, retries included."""
        return self.http.requests

    async def __aenter__(self) -> ChatEndpoint:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()

    async def complete(self, messages: list[dict], what: str, max_tokens: int) -> Completion:
        """The model's reply to `messages`, at most `max_tokens` tokens; `what` (a task id)
        names it in errors."""
        body = {"messages": messages}
        return _content(await self._post("/chat/completions", body, what, max_tokens), what)

    async def complete_text(self, prompt: str, what: str, max_tokens: int) -> Completion:
        """The model's continuation of `prompt` (a rendered prompt, through its generation
        prompt), at most `max_tokens` tokens; `what` (a task id) names it in errors."""
        body = {"prompt": prompt}
        return _text(await self._post("/completions", body, what, max_tokens), what)

    async def _send(self, path: str, body: dict, what: str, max_tokens: int) -> Reply:
        body = {
            "model": self.settings.model,
            **body,
            "temperature": self.settings.temperature,
            "max_tokens": max_tokens,
        }
        try:
            return await self.http.request("POST", path, what, json=body)
        except HttpError as error:
            raise EndpointError(str(error)) from error

    async def _post(self, path: str, body: dict, what: str, max_tokens: int) -> object:
        reply = await self._send(path, body, what, max_tokens)
        text = reply.body.decode(errors="replace")
        if reply.status != 200:
            error = ContextLengthError if _refused_for_length(reply) else EndpointError
            raise error(
                f"{what}: {self.http.base_url + path} refused the request "
                f"(HTTP {reply.status}: {text:.300})"
            )
        try:
            return reply.json()
        except ValueError:
            raise EndpointError(f"{what}: reply is not JSON: {text:.300}") from None

    async def preflight(self, completions: bool = False) -> dict | None:
        """Raise a `PreflightError` that says what is wrong unless the endpoint answers,
        serves the model and accepts the key on the chat API (or the completions API);
        returns the model's `/models` entry when the server lists its models (vLLM's
        carries `max_model_len`, its context)."""
        base, model = self.http.base_url, self.settings.model
        quick = RetryPolicy(attempts=1, timeout_s=PREFLIGHT_TIMEOUT_S)
        async with HttpClient(base, quick, 1, self.headers) as http:
            try:
                listing = await http.request("GET", "/models", "the preflight check")
            except HttpError as error:
                raise PreflightError(
                    f"no endpoint answers at {base} ({error}): check --base-url"
                ) from error
        _refuse_bad_key(listing, f"{base}/models")
        served = _served_models(listing)
        entry = next((m for m in served or [] if m.get("id") == model), None)
        # Not listed is no proof of a wrong name (`transformers serve` lists the models in
        # its cache, not one it was started with), so the 1-token request decides; the
        # listing goes into its error.
        unlisted = ""
        if served is not None and entry is None:
            names = [m.get("id") for m in served]
            unlisted = f"{base}/models does not list model {model!r} (it serves {names}); "
        if completions:
            path, body, parse = "/completions", {"prompt": "Hi"}, _text
        else:
            hi = [{"role": "user", "content": "Hi"}]
            path, body, parse = "/chat/completions", {"messages": hi}, _content
        try:
            reply = await self._send(path, body, "the preflight check", 1)
        except EndpointError as error:
            raise PreflightError(str(error)) from error
        _refuse_bad_key(reply, base + path)
        if reply.status != 200:
            raise PreflightError(
                f"{unlisted}{base + path} refused a 1-token request for model {model!r} (HTTP "
                f"{reply.status}: {reply.body[:300].decode(errors='replace')}): check --model "
                "and --base-url (the API root, e.g. http://host:8000/v1)"
            )
        try:
            parse(reply.json(), "the preflight check")
        except (EndpointError, ValueError) as error:
            raise PreflightError(
                f"{base + path} is not an OpenAI-compatible endpoint: {error}"
            ) from error
        if unlisted:
            log.warning("%sit answered a request for it all the same", unlisted)
        return entry


def _refused_for_length(reply: Reply) -> bool:
    return 400 <= reply.status < 500 and bool(
        _CONTEXT_REFUSAL.search(reply.body[:2000].decode(errors="replace"))
    )


def _refuse_bad_key(reply: Reply, url: str) -> None:
    if reply.status in (401, 403):
        raise PreflightError(
            f"{url} refused the API key (HTTP {reply.status}: "
            f"{reply.body[:300].decode(errors='replace')}): check --api-key-env"
        )


def _served_models(listing: Reply) -> list[dict] | None:
    """The entries of an OpenAI-style `/models` reply; None when the server gave none (no
    such route, an error, another format): not listing is no proof of a wrong URL."""
    try:
        entries = listing.json()["data"] if listing.status == 200 else None
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(entries, list):
        return None
    return [m for m in entries if isinstance(m, dict)]
