"""A message channel to a process over a socket: length-framed pickles, driven by the
event loop's reader/writer callbacks (the worker pool's and the outside calls')."""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import Callable


class Channel:
    """Length-framed pickles over a non-blocking socket, driven by the event loop's
    reader/writer callbacks (asyncio streams under uvloop, which uvicorn runs, cost a
    step more, in its median and its tail: docs/benchmarks.md)."""

    def __init__(self, sock: socket.socket, on_message: Callable, on_eof: Callable):
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.on_message, self.on_eof = on_message, on_eof
        self.inbox, self.outbox = bytearray(), bytearray()
        self.closed = False
        self.flushing = False  # a write is scheduled, or waiting for the socket
        self.waiting = False  # waiting for the socket to drain
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._readable)

    def send(self, message: tuple) -> None:
        """Queue `message`; everything queued in one turn of the event loop goes out in
        one write (each write wakes the worker: under load, one per turn, not one per
        message, whose sends were a large share of the service's time)."""
        if self.closed:
            return
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.outbox += len(data).to_bytes(8, "big")
        self.outbox += data
        if not self.flushing:
            self.flushing = True
            self.loop.call_soon(self._writable)

    def _writable(self) -> None:
        if self.closed:
            return
        try:
            sent = self.sock.send(self.outbox)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return self._eof()
        del self.outbox[:sent]
        if self.outbox and not self.waiting:
            self.waiting = True  # the socket is full: write the rest when it drains
            self.loop.add_writer(self.sock.fileno(), self._writable)
        elif not self.outbox:
            self.flushing = False
            if self.waiting:
                self.waiting = False
                self.loop.remove_writer(self.sock.fileno())

    def _readable(self) -> None:
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            return self._eof()
        self.inbox += data
        while len(self.inbox) >= 8:
            size = int.from_bytes(self.inbox[:8], "big")
            if len(self.inbox) < 8 + size:
                break
            message = pickle.loads(bytes(self.inbox[8 : 8 + size]))
            del self.inbox[: 8 + size]
            self.on_message(message)

    def _eof(self) -> None:
        if not self.closed:
            self.close()
            self.on_eof()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.sock.fileno())
        if self.waiting:
            self.loop.remove_writer(self.sock.fileno())
        self.sock.close()
