"""SIGTERM as an exception: `sigterm_raises()` makes SIGTERM raise `Terminated` in the main
thread, so every `finally` runs (a started server's stop, the run's lock), as Ctrl-C's
KeyboardInterrupt does. The launcher and `seal-eval` end on it with status 143."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

TERMINATED_STATUS = 143
"""128 + SIGTERM, the status a shell reports for a process SIGTERM ended."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread (a BaseException, as KeyboardInterrupt is, so
    that no `except Exception` takes it for an error to report and go on)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises `Terminated` inside the block (main thread only); its former
    handler is back after."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
