"""The service's door: the bearer token and the body limit, before any route runs.

An ASGI middleware, so both hold for every path, `/docs` and `/openapi.json` included, and
an unknown path without the token learns nothing (401, not 404). An oversized body is
refused with 413 before it is read whole (from its Content-Length, or as the count passes
the limit). Errors answer in each protocol's own shape (env_service/errors.py):
`on_release_protocol(path)` says which. The rules: docs/service.md, "The door and the error
replies".
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from env_service import errors
from env_service.connections import AUTHENTICATED

OPEN_PATHS = {("GET", "/healthz"), ("HEAD", "/healthz")}
PROFILE_PATH = "/v1/profile"
BODILESS_METHODS = {"GET", "HEAD", "OPTIONS"}


class BodyTooLarge(Exception):
    pass


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        max_body_bytes: int,
        max_profile_bytes: int,
        on_release_protocol: Callable[[str], bool],
    ):
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.max_profile_bytes = max_profile_bytes
        self.on_release_protocol = on_release_protocol

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method, path = scope["method"], scope["path"]
        headers = dict(scope["headers"])
        guarded = self.token is not None and (method, path) not in OPEN_PATHS
        if guarded and not self._authorized(headers.get(b"authorization", b"")):
            message = "a valid bearer token is required (Authorization: Bearer <token>)"
            # Closed after the answer: an unproven connection is not kept alive for more.
            challenge = {"www-authenticate": "Bearer", "connection": "close"}
            return await self._error(scope, receive, send, 401, message, challenge)
        if guarded or self.token is None:
            # The connection has proved itself: it leaves the capped count of connections
            # that have not (env_service/connections.py).
            authenticated = scope.get("extensions", {}).get(AUTHENTICATED)
            if authenticated is not None:
                authenticated()
        if method in BODILESS_METHODS:
            return await self.app(scope, receive, send)
        limit = self.max_profile_bytes if path == PROFILE_PATH else self.max_body_bytes
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            message = f"request body of {int(declared)} bytes exceeds the limit of {limit} bytes"
            return await self._error(scope, receive, send, 413, message, {"connection": "close"})
        try:
            body, after = await read_body(receive, limit)
        except BodyTooLarge:
            message = f"request body exceeds the limit of {limit} bytes"
            return await self._error(scope, receive, send, 413, message, {"connection": "close"})
        return await self.app(scope, replay_body(body, after, receive), send)

    def _authorized(self, header: bytes) -> bool:
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(given.strip(), self.token)

    async def _error(
        self, scope: Scope, receive: Receive, send: Send, status: int, message: str, extra: dict
    ) -> None:
        response = errors.reply(message, status, self.on_release_protocol(scope["path"]), extra)
        await response(scope, receive, send)


async def read_body(receive: Receive, limit: int | None = None) -> tuple[bytes, Message | None]:
    """The whole body, counted as it streams (BodyTooLarge past `limit`), and the message
    that ended it early (a disconnect), if one did."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None


def replay_body(body: bytes, after: Message | None, receive: Receive) -> Receive:
    """A receive that gives the body read already, then whatever comes next."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            if after is not None:
                return after
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
