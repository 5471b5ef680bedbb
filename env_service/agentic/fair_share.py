"""A fair share of a few permits (the outside-call processes) among episodes.

A permit that frees goes to the waiter whose episode has held permits for the least time
(start-time fair queueing: a waiter's tag is its episode's seconds held so far, raised to
the tag of the last grant, so an episode returning from a pause or new to the pool starts
level with the others, not ahead by its idle time); of equal tags, the episode that has
held permits least goes first, then the first to arrive. A permit is handed to that
waiter directly, so a caller that frees one and asks again at once waits its turn. Why:
docs/web_search.md, "Where the calls run".
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass(order=True)
class _Waiter:
    tag: float
    held: float
    order: int
    key: str = field(compare=False)
    granted: asyncio.Future = field(compare=False)


class FairShare:
    def __init__(self, size: int):
        self.size = size
        self.busy = 0
        self.grants = 0
        self.granted_after_wait = 0
        """Grants to a caller that had to wait (the others found a permit free)."""
        self.longest_wait_s = 0.0
        self._held: dict[str, float] = {}  # an episode's seconds held, while it is known
        self._active: Counter[str] = Counter()  # an episode's permits held or waited for
        self._forgotten: set[str] = set()
        self._waiting: list[_Waiter] = []
        self._virtual = 0.0  # the tag of the last grant
        self._order = itertools.count()

    async def acquire(self, key: str) -> float:
        """Wait for a permit for episode `key`; the seconds waited. Pair with `release`."""
        self._active[key] += 1
        if self.busy < self.size and not self._waiting:
            self.busy += 1
            self._granted(key, 0.0)
            return 0.0
        held = self._held.get(key, 0.0)
        granted = asyncio.get_running_loop().create_future()
        waiter = _Waiter(max(held, self._virtual), held, next(self._order), key, granted)
        heapq.heappush(self._waiting, waiter)
        started = time.perf_counter()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(key, 0.0)  # granted as it was cancelled: pass it on
            else:
                if waiter in self._waiting:  # (a release may have dropped it already)
                    self._waiting.remove(waiter)
                    heapq.heapify(self._waiting)
                self._idle(key)
            raise
        waited = time.perf_counter() - started
        self.granted_after_wait += 1
        self.longest_wait_s = max(self.longest_wait_s, waited)
        return waited

    def release(self, key: str, held_s: float) -> None:
        """Give back `key`'s permit, held for `held_s`: to the next waiter, if any."""
        self._held[key] = self._held.get(key, 0.0) + held_s
        self._idle(key)
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if waiter.granted.done():  # cancelled: its acquire accounts for it
                continue
            self._granted(waiter.key, waiter.tag)
            waiter.granted.set_result(None)
            return
        self.busy -= 1

    def forget(self, key: str) -> None:
        """Episode `key` has ended: its account goes once it holds and waits for nothing."""
        self._forgotten.add(key)
        self._idle(key, 0)

    def _granted(self, key: str, tag: float) -> None:
        self.grants += 1
        self._virtual = max(self._virtual, tag)

    def _idle(self, key: str, done: int = 1) -> None:
        self._active[key] -= done
        if self._active[key] <= 0:
            del self._active[key]
            if key in self._forgotten:
                self._forgotten.discard(key)
                self._held.pop(key, None)

    def stats(self) -> dict:
        return {
            "busy": self.busy,
            "waiting": len(self._waiting),
            "waiting_episodes": len({w.key for w in self._waiting}),
            "grants": self.grants,
            "grants_after_wait": self.granted_after_wait,
            "longest_wait_s": round(self.longest_wait_s, 3),
        }
