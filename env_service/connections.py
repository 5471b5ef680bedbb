"""The service's connections: deadlines for each request's headers and body, and a cap on
connections that have not authenticated.

uvicorn bounds how long an idle keep-alive connection stays (`timeout_keep_alive`) but
not how long a request may take to arrive: any byte resets its idle timer, and nothing
times the headers. Before, connections that sent part of their headers were held
forever, before any token check: 1,124 of them (the open-files limit was 1,024) made
every other client fail with "connection reset" while they were held. uvicorn's
`limit_concurrency` would answer 503 to everyone past a count, the well-behaved clients
first; h11's `h11_max_incomplete_event_size` bounds the headers' size, not their time.
So a small guard, on uvicorn's own extension point (`--http`: the protocol class):

- a request's headers must be complete within `header_timeout_s` of its first byte (of
  the connection's start, for its first request), its body within `body_timeout_s` of
  the headers; past either, the connection is closed;
- a connection counts as unauthenticated until one of its requests passes the token
  check (http_guard.Guard calls back through the ASGI scope's extensions; without a
  token, once its first request's headers are complete); past
  `max_unauthenticated_connections` of them, the one that has waited longest is closed
  (a flood replaces its own connections, while a client that sends its request at once
  is through in milliseconds).

A subclass of uvicorn's httptools protocol (uvicorn[standard] installs httptools), so
parsing, keep-alive and pipelining stay uvicorn's; tests/test_env_hostile_clients.py and
scripts/bench_env_adversarial.py's slow-headers client measure it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

AUTHENTICATED = "seal.authenticated"
"""Key in the ASGI scope's `extensions`: a callable that marks the request's connection
authenticated (absent when the service runs without this protocol, e.g. in tests)."""


def guarded_protocol(
    header_timeout_s: float, body_timeout_s: float, max_unauthenticated: int
) -> type[HttpToolsProtocol]:
    """The protocol class for `uvicorn.run(..., http=...)`, with these limits and its own
    count of unauthenticated connections."""
    waiting: OrderedDict[GuardedHttp, None] = OrderedDict()  # oldest first

    class GuardedHttp(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._timer: asyncio.TimerHandle | None = None
            waiting[self] = None
            while len(waiting) > max_unauthenticated:
                oldest, _ = waiting.popitem(last=False)
                oldest._close("the service holds too many connections that did not authenticate")
            self._arm(header_timeout_s, "its request's headers")

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            waiting.pop(self, None)
            super().connection_lost(exc)

        # httptools' callbacks, in the order of a request.
        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._timer is None:  # the next request on a kept-alive connection
                self._arm(header_timeout_s, "its request's headers")

        def on_headers_complete(self) -> None:
            self._arm(body_timeout_s, "its request's body")
            # self.scope is the dict the request's ASGI app receives (made by uvicorn in
            # on_message_begin; its task starts in super().on_headers_complete()).
            self.scope.setdefault("extensions", {})[AUTHENTICATED] = self._authenticated
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def _authenticated(self) -> None:
            waiting.pop(self, None)

        def _arm(self, seconds: float, what: str) -> None:
            self._disarm()
            why = f"{what} did not arrive within {seconds} s"
            self._timer = self.loop.call_later(seconds, self._close, why)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _close(self, why: str) -> None:
            self._disarm()  # (when evicted: its deadline is of no use any more)
            waiting.pop(self, None)
            if not self.transport.is_closing():
                self.logger.debug("closing %s: %s", self.client, why)
                self.transport.close()

    GuardedHttp.waiting = waiting  # for tests and stats: the unauthenticated connections
    return GuardedHttp
