"""The protocol-independent core of the service: live episodes, limits and the profile.

Both HTTP protocols (api_native.py, api_wire.py) are thin layers over `EnvEngine`. All
engine calls run on the server's event-loop thread and none of them awaits, so each
call sees and leaves a consistent registry without locks; episodes share no state.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from pydantic import BaseModel, Field

from env_service.episode import Episode, EpisodeSettings, StepOutcome
from seal.bfcl.tasks import UnknownTaskError, load_task
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
        if episode_id in self.episodes:
            raise ConflictError(f"episode id {episode_id!r} is already in use")
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

    def step(self, episode_id: str, content: str) -> StepOutcome:
        if len(content) > self.config.max_message_chars:
            raise TooLargeError(
                f"assistant message of {len(content)} characters exceeds the limit of "
                f"{self.config.max_message_chars}"
            )
        episode = self.get(episode_id)
        if episode.terminated:
            raise ConflictError(f"episode {episode_id!r} has ended; evaluate or release it")
        return episode.step(content)

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
