"""A client for one OpenAI-compatible endpoint, with retries.

``ChatEndpoint.complete(messages)`` posts the conversation to ``{base_url}/chat/completions``
and returns ``choices[0].message.content``, the model's raw text. No ``tools`` are sent: the
system prompt already carries the tool signatures in Qwen2.5's format and the model's
``<tool_call>`` blocks are parsed by the client's tool format, exactly as in training.
``ChatEndpoint.complete_text(prompt)`` posts a prompt a tool format rendered whole
(special tokens written out) to ``{base_url}/completions`` and returns ``choices[0].text``:
how any format is evaluated exactly as it is trained, and how bfcl-eval queries the open
models it ranks.

Transient failures (connection errors, timeouts, 408, 429 and 5xx answers) are retried with
exponential backoff, honouring a numeric ``Retry-After`` (seal.http, shared with the
environment client); anything else (400, 401, 404, a
reply without text) fails at once. A failure is always an `EndpointError` that names the
task and the cause, never an empty or made-up reply taken as the model's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from seal.http import HttpClient, HttpError, RetryPolicy

RETRY_STATUSES = frozenset({408, 429, *range(500, 600)})
"""Answers worth retrying: timeouts, rate limits and server errors."""


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


def _text(payload: object, what: str) -> str:
    try:
        text = payload["choices"][0]["text"]
    except (TypeError, KeyError, IndexError):
        raise EndpointError(f"{what}: reply has no choices[0].text: {payload!r:.300}") from None
    if not isinstance(text, str):
        raise EndpointError(f"{what}: the reply's text is not a string: {text!r:.300}")
    return text


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
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        policy = RetryPolicy(
            attempts=settings.attempts,
            timeout_s=settings.timeout_s,
            deadline_s=settings.attempts * (settings.timeout_s + settings.max_backoff_s),
            backoff_s=settings.backoff_s,
            max_backoff_s=settings.max_backoff_s,
            retry_statuses=RETRY_STATUSES,
        )
        self.http = HttpClient(settings.base_url, policy, max_connections, headers)

    @property
    def requests(self) -> int:
        """HTTP requests sent, retries included."""
        return self.http.requests

    async def __aenter__(self) -> ChatEndpoint:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()

    async def complete(self, messages: list[dict], what: str) -> str:
        """The model's text reply to `messages`; `what` (a task id) names it in errors."""
        body = {"messages": messages}
        return _content(await self._post("/chat/completions", body, what), what)

    async def complete_text(self, prompt: str, what: str) -> str:
        """The model's continuation of `prompt` (a rendered prompt, through its generation
        prompt); `what` (a task id) names it in errors."""
        return _text(await self._post("/completions", {"prompt": prompt}, what), what)

    async def _post(self, path: str, body: dict, what: str) -> object:
        body = {
            "model": self.settings.model,
            **body,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        try:
            reply = await self.http.request("POST", path, what, json=body)
        except HttpError as error:
            raise EndpointError(str(error)) from error
        text = reply.body.decode(errors="replace")
        if reply.status != 200:
            raise EndpointError(
                f"{what}: {self.http.base_url + path} refused the request "
                f"(HTTP {reply.status}: {text:.300})"
            )
        try:
            return reply.json()
        except ValueError:
            raise EndpointError(f"{what}: reply is not JSON: {text:.300}") from None
