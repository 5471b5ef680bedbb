"""The service's connections: deadlines for each request's headers and body, and a cap on
connections that have not authenticated.

uvicorn times neither the headers nor the body (any byte resets its idle timer), so
half-sent requests could hold every open file; this subclass of uvicorn's httptools
protocol (its `--http` extension point) adds the deadlines and sheds the longest-waiting
unauthenticated connection past the cap. The rules and why: docs/service.md, "Connections".
"""

from __future__ import annotations

import asyncio
import resource
import socket
from collections import Counter, OrderedDict

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

AUTHENTICATED = "seal.authenticated"
"""Key in the ASGI scope's `extensions`: a callable that marks the request's connection
authenticated (absent when the service runs without this protocol, e.g. in tests)."""
CLIENT_GONE = "seal.client_gone"
"""Key in the ASGI scope's `extensions`: a callable, True once the request's client has
closed its side of the connection (its end-of-file may still wait in the kernel, unread
by the event loop), so a reply can no longer reach it."""
CLOSED: Counter[str] = Counter()
"""Connections this process's guard closed, by why: `unauthenticated` (shed past the cap)
and `late` (headers or body past their deadline); GET /v1/stats shows them."""
SEND_GRACE_S = 5.0
"""How long a connection over the cap may wait for its first request before it may be
closed: a client that opened its pool at once writes within milliseconds, but on a busy
machine its event loop can take seconds to reach every connection (1 s was too little
for a client of 1,024 episodes at a load average of 14 on 2 cores). Half the default
header timeout, which closes any silent connection anyway."""
HEAD_GRACE_S = 1.0
"""How long a connection over the cap that has begun a request may take to finish its
headers before it may be closed (silent ones past their grace go first): a client that
writes its request line and its headers apart finishes within milliseconds, a
slow-headers flood never does. Closing such connections at once, before silent ones
inside their grace, cut every request whose head came in two writes while a silent
flood was held (issue #41)."""


def guarded_protocol(
    header_timeout_s: float, body_timeout_s: float, max_unauthenticated: int
) -> type[HttpToolsProtocol]:
    """The protocol class for `uvicorn.run(..., http=...)`, with these limits and its own
    count of unauthenticated connections (call it after the open-files limit is set)."""
    # Connections not (yet) proven, by what they sent of their next request: nothing
    # (`silent`), or part of its headers (`started`); each -> since when, oldest first.
    silent: OrderedDict[GuardedHttp, float] = OrderedDict()
    started: OrderedDict[GuardedHttp, float] = OrderedDict()
    ceiling = max(max_unauthenticated, _open_files_limit() // 2)
    shedding: list[asyncio.TimerHandle | None] = [None]
    soon = [False]  # a pass of `shed` is due at this turn of the loop

    def shed(loop: asyncio.AbstractEventLoop) -> None:
        """Past the cap, close the longest-waiting connection that has had its grace: a
        silent one first (SEND_GRACE_S), then one whose headers are still coming
        (HEAD_GRACE_S); past the ceiling, the longest-waiting of either at once (a
        newly connected client may be about to write). Come back when the next one has
        had its grace."""
        shedding[0] = None
        while len(silent) + len(started) > max_unauthenticated:
            now, past_ceiling = loop.time(), len(silent) + len(started) > ceiling
            oldest = _due(silent, SEND_GRACE_S, now)
            if oldest is None:
                oldest = _due(started, HEAD_GRACE_S, now)
            if oldest is None and past_ceiling:  # the longest-waiting of either, at once
                waiting = [w for w in (silent, started) if w]
                oldest = next(iter(min(waiting, key=_since)))
            if oldest is None:
                due = min(
                    _since(waiting) + grace - now
                    for waiting, grace in ((silent, SEND_GRACE_S), (started, HEAD_GRACE_S))
                    if waiting
                )
                shedding[0] = loop.call_later(due, shed, loop)
                return
            oldest._close("the service holds too many connections that did not authenticate")
            CLOSED["unauthenticated"] += 1

    def shed_soon(loop: asyncio.AbstractEventLoop) -> None:
        soon[0] = False
        shed(loop)

    class GuardedHttp(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._timer: asyncio.TimerHandle | None = None
            self._proven = False
            self._arm(header_timeout_s, "its request's headers")
            self._wait()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._proved()
            super().connection_lost(exc)

        # httptools' callbacks, in the order of a request.
        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._timer is None:  # the next request on a kept-alive connection
                self._arm(header_timeout_s, "its request's headers")
            if silent.pop(self, None) is not None:  # its request's first bytes
                started[self] = self.loop.time()
                self._shed_soon()

        def on_headers_complete(self) -> None:
            self._proved()  # its request is in: the application judges it
            self._arm(body_timeout_s, "its request's body")
            # self.scope is the dict the request's ASGI app receives (made by uvicorn in
            # on_message_begin; its task starts in super().on_headers_complete()).
            extensions = self.scope.setdefault("extensions", {})
            extensions[AUTHENTICATED] = self._authenticated
            extensions[CLIENT_GONE] = self._client_gone
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self._proven and not self.transport.is_closing():
                self._wait()  # kept alive without having proved itself (an open path)

        def _authenticated(self) -> None:
            self._proven = True

        def _client_gone(self) -> bool:
            if self.transport.is_closing() or (self.cycle is not None and self.cycle.disconnected):
                return True
            sock = self.transport.get_extra_info("socket")
            if sock is None:
                return False
            # A peek at a duplicate of the socket: the transport's own object reads nothing.
            try:
                with socket.fromfd(sock.fileno(), sock.family, socket.SOCK_STREAM) as dup:
                    return dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                return False  # open, nothing more sent
            except OSError:
                return True  # reset

        def _wait(self) -> None:
            silent[self] = self.loop.time()
            self._shed()

        def _shed(self) -> None:
            waiting = len(silent) + len(started)
            if waiting <= max_unauthenticated or soon[0]:
                return
            if shedding[0] is not None:  # a pass is due when the next grace ends
                if waiting <= ceiling:
                    return
                shedding[0].cancel()  # past the ceiling: now
            shed(self.loop)

        def _shed_soon(self) -> None:
            # A pass once the loop has read what came with the request's first bytes (a
            # head complete by then is no longer `started`): it times the next pass by
            # this head's grace too, which may end before the next silent one's (waiting
            # for that held a slow head past the cap for up to SEND_GRACE_S longer).
            if soon[0] or len(silent) + len(started) <= max_unauthenticated:
                return
            if shedding[0] is not None:
                shedding[0].cancel()
                shedding[0] = None
            soon[0] = True
            self.loop.call_soon(shed_soon, self.loop)

        def _proved(self) -> None:
            silent.pop(self, None)
            started.pop(self, None)

        def _arm(self, seconds: float, what: str) -> None:
            self._disarm()
            why = f"{what} did not arrive within {seconds} s"
            self._timer = self.loop.call_later(seconds, self._late, why)

        def _late(self, why: str) -> None:
            CLOSED["late"] += 1
            self._close(why)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _close(self, why: str) -> None:
            self._disarm()  # (when evicted: its deadline is of no use any more)
            self._proved()
            if not self.transport.is_closing():
                self.logger.debug("closing %s: %s", self.client, why)
                self.transport.close()

    return GuardedHttp


def _since(waiting: OrderedDict) -> float:
    """When the longest-waiting of `waiting` (oldest first) began to wait."""
    return next(iter(waiting.values()))


def _due(waiting: OrderedDict, grace: float, now: float):
    """The longest-waiting of `waiting` if it has had its `grace`, else None."""
    return next(iter(waiting)) if waiting and _since(waiting) + grace <= now else None


def stats() -> dict:
    return {f"connections_closed_{why}": CLOSED[why] for why in ("unauthenticated", "late")}


def _open_files_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
