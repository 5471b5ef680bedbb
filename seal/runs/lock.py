"""An exclusive lock on a run directory: two runs of one name never write into it at once.

Two runs in one directory would interleave `metrics.jsonl`, overwrite each other's
capability state and delete each other's checkpoint temp directories. The lock is
`flock` on `RUN_DIR/.lock`: the kernel drops it when its holder dies, however it dies
(kill -9 included), so a crashed run leaves no stale lock to clean up by hand, and the
file (private to its owner) holds the holder's pid and command line, secrets masked, for
the refusal message. A second claim by the same process (the launcher, then the trainer it
runs) shares the first; the directory is released when every claim is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from pathlib import Path

from seal.runs.redact import redact_argv

LOCK_FILENAME = ".lock"


class RunDirInUse(RuntimeError):
    """Another process holds the run directory."""


class RunDirLock:
    """A claim on a run directory; `release()` (or the `with` block's end) gives it back."""

    _held: dict[Path, tuple[int, int]] = {}
    """This process's locks: directory -> (file descriptor, claims)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir).resolve()
        self.released = False
        fd, claims = self._held.get(self.run_dir, (None, 0))
        if fd is None:
            fd = self._acquire()
        self._held[self.run_dir] = (fd, claims + 1)

    def _acquire(self) -> int:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / LOCK_FILENAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        with contextlib.suppress(PermissionError):  # another user's: not ours to change
            os.fchmod(fd, 0o600)  # one made by an earlier version was readable by all
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirInUse(
                f"{self.run_dir} is in use by another run ({holder}; lock {path}): wait for "
                "it to end, or give this run another name"
            ) from None
        os.ftruncate(fd, 0)
        command = " ".join(redact_argv(sys.argv))[:300]
        os.pwrite(fd, f"pid {os.getpid()}: {command}\n".encode(), 0)
        return fd

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        fd, claims = self._held[self.run_dir]
        if claims > 1:
            self._held[self.run_dir] = (fd, claims - 1)
            return
        del self._held[self.run_dir]
        os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_run_dir(run_dir: str | Path) -> RunDirLock:
    """Claim `run_dir` for this process (creating it); `RunDirInUse` names the holder."""
    return RunDirLock(run_dir)
