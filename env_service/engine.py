"""The protocol-independent core of the service: live episodes, limits and the profile.

Both HTTP protocols (api_native.py, api_wire.py) are thin layers over `EnvEngine`. All
engine calls run on the server's event-loop thread and none of them awaits, so each
call sees and leaves a consistent registry without locks; episodes share no state.

Retries are safe: a create repeated with the same client-chosen id (and the same task
and settings, before any step) returns the episode it made; a step repeated with the
same `seq` returns its first answer instead of running again, also after the step that
ended (and released) the episode, whose final answer is kept for `episode_ttl_s`.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from pathlib import Path

from pydantic import BaseModel, Field

from env_service.episode import Episode, StepOutcome
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.tasks import UnknownTaskError, load_task
from seal.rollout.protocol import EpisodeSettings
from seal.tocf.state import load_failure_profile


class ServiceConfig(BaseModel):
    """Service-wide limits and sources. CLI flags of `python -m env_service` set these."""

    max_live_episodes: int = Field(1024, ge=1)
    """Creating one more answers 'busy' (HTTP 503) instead of growing without bound."""
    episode_ttl_s: float = Field(3600.0, gt=0)
    """An episode untouched for this long is dropped (clients that died leak nothing).
    The original release's value: a policy step can wait minutes on generation under load,
    and a live episode costs little here (max_live_episodes bounds them all)."""
    max_message_chars: int = Field(262_144, ge=1)
    """Larger assistant messages are refused (HTTP 413); the paper's 4096-token responses
    are far below this."""
    capability_state_path: Path | None = None
    """A persisted capability state (seal.tocf) to read the failure profile from when
    no trainer has pushed one; re-read whenever the file changes."""


class EngineError(Exception):
    """An error a client caused; `status` is the HTTP status both protocols answer with."""

    status = 400


class InvalidRequestError(EngineError):
    status = 422


class NotFoundError(EngineError):
    status = 404


class ConflictError(EngineError):
    status = 409


class TooLargeError(EngineError):
    status = 413


class BusyError(EngineError):
    status = 503


class EnvEngine:
    def __init__(self, config: ServiceConfig | None = None):
        self.config = config or ServiceConfig()
        self.episodes: dict[str, Episode] = {}
        # Final answers of episodes that ended and were released, for retried final steps:
        # id -> (time ended, answer); oldest first, bounded like the live episodes.
        self.finished: OrderedDict[str, tuple[float, StepOutcome]] = OrderedDict()
        self.pushed_profile: dict | None = None
        self._file_profile: tuple[float, dict | None] | None = None  # (mtime, profile)
        self.totals = {"created": 0, "released": 0, "expired": 0, "rejected_busy": 0}

    # --- episodes ----------------------------------------------------------------------

    def create(
        self,
        task_id: str,
        settings: EpisodeSettings,
        episode_id: str | None = None,
        profile: dict | None = None,
    ) -> tuple[str, Episode]:
        """A new episode; `profile` replaces the service's failure profile for this episode
        (the wire protocol reads one from a client-named state file)."""
        self.expire_idle()
        episode_id = episode_id or uuid.uuid4().hex
        existing = self.episodes.get(episode_id)
        if existing is not None:
            if (existing.task.task_id, existing.settings) == (task_id, settings) and (
                existing.counters.steps == 0
            ):
                existing.last_used = time.monotonic()
                return episode_id, existing  # a retried create: the reply was lost
            raise ConflictError(f"episode id {episode_id!r} is already in use")
        if episode_id in self.finished:
            raise ConflictError(f"episode id {episode_id!r} was used by an episode that ended")
        if len(self.episodes) >= self.config.max_live_episodes:
            self.totals["rejected_busy"] += 1
            raise BusyError(
                f"busy: {len(self.episodes)} live episodes (limit {self.config.max_live_episodes}); "
                "release finished episodes or retry later"
            )
        try:
            task = load_task(task_id)
        except UnknownTaskError as e:
            raise NotFoundError(str(e)) from None
        episode = Episode(task, settings, profile=self.profile() if profile is None else profile)
        self.episodes[episode_id] = episode
        self.totals["created"] += 1
        return episode_id, episode

    def get(self, episode_id: str) -> Episode:
        episode = self.episodes.get(episode_id)
        if episode is None:
            raise NotFoundError(
                f"no live episode {episode_id!r} (never created, released or expired)"
            )
        episode.last_used = time.monotonic()
        return episode

    def step(
        self,
        episode_id: str,
        content: str,
        seq: int | None = None,
        release_at_end: bool = False,
        calls: list[ToolCall | CallParseError] | None = None,
    ) -> StepOutcome:
        """Run one assistant message. With `seq`, a repeat of the last step returns its
        answer; `release_at_end` releases the episode on the step that ends it (the
        native API: its answer carries the evaluation); `calls` are the message's calls
        as the client parsed them (Episode.step)."""
        if len(content) > self.config.max_message_chars:
            raise TooLargeError(
                f"assistant message of {len(content)} characters exceeds the limit of "
                f"{self.config.max_message_chars}"
            )
        if episode_id not in self.episodes and episode_id in self.finished:
            last = self.finished[episode_id][1]
            if seq is not None and seq == last.seq:
                return last
            raise ConflictError(
                f"episode {episode_id!r} has ended (step {last.seq}) and was released"
            )
        episode = self.get(episode_id)
        last = episode.last_outcome
        if seq is not None and last is not None and seq == last.seq:
            return last
        if seq is not None and seq != episode.counters.steps + 1:
            raise ConflictError(
                f"step seq {seq} for episode {episode_id!r}, expected "
                f"{episode.counters.steps + 1} (the last step was {episode.counters.steps})"
            )
        if episode.terminated:
            raise ConflictError(f"episode {episode_id!r} has ended; evaluate or release it")
        outcome = episode.step(content, calls)
        episode.last_outcome = outcome
        if outcome.terminated and release_at_end:
            self.release(episode_id)
            self.finished[episode_id] = (time.monotonic(), outcome)
            while len(self.finished) > self.config.max_live_episodes:
                self.finished.popitem(last=False)
        return outcome

    def release(self, episode_id: str) -> None:
        if self.episodes.pop(episode_id, None) is None:
            raise NotFoundError(f"no live episode {episode_id!r}")
        self.totals["released"] += 1

    def expire_idle(self) -> int:
        """Drop episodes idle for longer than the TTL; returns how many."""
        cutoff = time.monotonic() - self.config.episode_ttl_s
        stale = [eid for eid, ep in self.episodes.items() if ep.last_used < cutoff]
        for eid in stale:
            del self.episodes[eid]
        self.totals["expired"] += len(stale)
        while self.finished and next(iter(self.finished.values()))[0] < cutoff:
            self.finished.popitem(last=False)
        return len(stale)

    # --- failure profile ---------------------------------------------------------------

    def set_profile(self, profile: dict) -> None:
        self.pushed_profile = profile

    def profile(self) -> dict | None:
        """The trainer's last pushed profile, else the one in the capability-state file."""
        if self.pushed_profile is not None:
            return self.pushed_profile
        path = self.config.capability_state_path
        if path is None or not path.exists():
            return None
        mtime = path.stat().st_mtime
        if self._file_profile is None or self._file_profile[0] != mtime:
            self._file_profile = (mtime, load_failure_profile(path))
        return self._file_profile[1]

    def stats(self) -> dict:
        return {"live_episodes": len(self.episodes), **self.totals}
