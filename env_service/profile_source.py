"""Where guided episodes' failure profile comes from: the trainer's last pushed profile
(PUT /v1/profile), else the operator's --capability-state file, this project's
(seal.tocf) or the original release's (env_service/release_capability_file.py), reread when it
changes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from env_service.release_capability_file import (
    check_release_state,
    is_release_state,
    release_profile,
)
from seal.atomic_file import StateFileError, read_json
from seal.tocf.state import CapabilityState

log = logging.getLogger("env_service")


@dataclass(frozen=True)
class StateFile:
    """What the operator's --capability-state file gives: a failure profile, and the
    release's raw state when the file is the original release's."""

    profile: dict
    release: dict | None = None


def read_state_file(path: Path) -> StateFile:
    """This project's capability state (seal.tocf) or the original release's
    (env_service/release_capability_file.py); raises OSError or ValueError (StateFileError) with
    the reason."""
    data = read_json(path, "capability state")
    if is_release_state(data):
        check_release_state(data)
        return StateFile(release_profile(data, None), data)
    if not isinstance(data, dict):
        raise StateFileError(f"{path}: a JSON {type(data).__name__}, not a capability state")
    try:
        return StateFile(CapabilityState.from_dict(data).failure_profile())
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise StateFileError(
            f"{path}: neither this project's capability state nor the original release's "
            f"({type(e).__name__}: {e})"
        ) from None


class ProfileSource:
    def __init__(self, path: Path | None):
        """`path`: the --capability-state file, or None. A file there now must be
        readable (OSError or ValueError saying why); one written later is read then."""
        self.path = path
        self.pushed: dict | None = None
        """The trainer's last pushed profile."""
        self.warning: str | None = None
        """Why the file is not being read (the last good profile is kept), or None."""
        self._file: tuple[float, StateFile] | None = None  # (mtime, last good)
        self._file_warned: float | None = None  # mtime of the bad file last warned about
        if path is not None and path.exists():
            self._file = (path.stat().st_mtime, read_state_file(path))

    def push(self, profile: dict) -> None:
        self.pushed = profile

    def profile(self) -> dict | None:
        """The trainer's last pushed profile, else the one in the capability-state file.

        A file that cannot be read (truncated, half-written by hand) keeps the last good
        profile in use and logs one warning naming it, until it changes: failing every
        guided episode would stop training over a file a trainer writes atomically
        (seal.atomic_file), so a bad one is an operator's slip to report, not to crash on.
        """
        if self.pushed is not None:
            return self.pushed
        state = self._state_file()
        return None if state is None else state.profile

    def release_state(self) -> dict | None:
        """The original release's capability state, when that is where the profile comes
        from (the operator's --capability-state file in the release's format, and no
        pushed profile): the release protocol's guideline thresholds select from it."""
        if self.pushed is not None:
            return None
        state = self._state_file()
        return None if state is None else state.release

    def source(self) -> str | None:
        """`pushed`, `file` or None (protocol: the native API's profile reply)."""
        if self.pushed is not None:
            return "pushed"
        return "file" if self._file is not None else None

    def _state_file(self) -> StateFile | None:
        path = self.path
        if path is None or not path.exists():
            return None
        mtime = path.stat().st_mtime
        if self._file is not None and self._file[0] == mtime:
            return self._file[1]
        if self._file_warned == mtime:
            return self._file[1] if self._file else None
        try:
            self._file = (mtime, read_state_file(path))
            self.warning = None
        except (OSError, ValueError) as e:
            self._file_warned = mtime
            kept = "the last good profile" if self._file else "no profile"
            self.warning = (
                f"--capability-state {path}: cannot read a failure profile from it "
                f"({type(e).__name__}: {e}); using {kept} until the file changes"
            )
            log.warning("env_service: %s", self.warning)
        return self._file[1] if self._file else None
