"""Each episode's share of its worker's CPU: past a burst, its calls wait for their turn.

Least-run-first keeps other episodes' calls from waiting behind a flood of costly ones,
but a worker busy with them still takes a core the event loop and the other workers
share. So an episode runs its calls at full speed for `burst_s` seconds of them, then at
`share` of a core on average (why, and figures: docs/service.md, "One worker's work").
By hand: a token bucket of call seconds kept as one due time per owner (the generic cell
rate algorithm); a rate-limiting library counts requests, not seconds of work.
"""

from __future__ import annotations

import time
from collections.abc import Callable

_PRUNE_FROM = 256
"""Owners kept before the first sweep of those whose bucket is full again."""


class CpuShares:
    """When each owner (an episode) may run its next call, from the call seconds charged
    to it: `share` of a core on average, at full speed for up to `burst_s` of them."""

    def __init__(
        self,
        share: float,
        burst_s: float,
        max_wait_s: float = float("inf"),
        clock: Callable[[], float] = time.monotonic,
    ):
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], not {share}")
        self.share, self.clock = share, clock
        self.max_wait_s = max_wait_s
        """The longest one request is held back in all: past it, its calls run whatever its
        owner's share (a client's timeout counts on a request's time budgets, not on this)."""
        self.ahead_s = burst_s / share
        """How far past the clock an owner's charged time may run before it waits."""
        self._due: dict[str, float] = {}
        """Each owner's charged seconds over `share`, laid end to end from when it began
        (or last fell idle): the time its bucket is full again."""
        self._prune_at = _PRUNE_FROM

    def charge(self, owner: str | None, seconds: float) -> None:
        """Count `seconds` of `owner`'s calls (None: work of nobody's, never waits)."""
        if owner is None or self.share >= 1:
            return
        now = self.clock()
        self._due[owner] = max(self._due.get(owner, now), now) + seconds / self.share
        if len(self._due) > self._prune_at:
            self._due = {o: due for o, due in self._due.items() if due > now}
            self._prune_at = max(_PRUNE_FROM, 2 * len(self._due))

    def wait_s(self, owner: str | None, held_s: float = 0.0, now: float | None = None) -> float:
        """Seconds until `owner` may run the next call of a request held back `held_s` so
        far (at `now`, by default the clock's); 0 if it may now."""
        if owner is None or (due := self._due.get(owner)) is None:
            return 0.0
        turn_s = due - self.ahead_s - (self.clock() if now is None else now)
        return max(0.0, min(turn_s, self.max_wait_s - held_s))

    def forget(self, owner: str) -> None:
        """An owner that is gone (its episode closed)."""
        self._due.pop(owner, None)

    def __len__(self) -> int:
        """Owners held (those charged lately; the rest are swept as more come)."""
        return len(self._due)
