"""An opened run directory: locked, checked and ready for a job to write into.

`open_run` does, once, what every run needs before its first write: it locks the
directory (lock.py), checks a training run against what it holds (run_dir_checks.py),
sets aside the files of a resumed run that never reached its first checkpoint, and runs a
caller's own check (the launcher's: seal/launch/resume.py) under the lock before that
write. The launcher opens the run, records the attempt (`Run.attempt`) and hands the
`Run` to its job; a trainer built without the launcher opens one the same way, with no
attempt record. A `Run` is path-like (`Path(run)` is its directory). Details:
docs/runs.md.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from seal.runs.data_order import record_data_order
from seal.runs.lock import LOCK_FILENAME, RunDirLock, lock_run_dir
from seal.runs.run_dir_checks import check_run_dir, set_aside_unfinished_attempt

if TYPE_CHECKING:  # the run config's `trainer` section; read, never built, here
    from seal.trainer_config import TrainerConfig


@dataclass
class Run:
    dir: Path
    lock: RunDirLock
    """This process's claim on the directory, held until `release()`."""
    attempt: Path | None = None
    """This attempt's record folder (`attempts/NNN`), once the launcher wrote it; the job
    adds what only it knows (the base model's identity)."""

    def record_data_order(self, cfg: TrainerConfig) -> None:
        """Write `data_order.json` (seal/runs/data_order.py): after the checks, with the
        run's other files."""
        record_data_order(self.dir, cfg)

    def release(self) -> None:
        self.lock.release()

    def discard(self, disposable: frozenset[str] = frozenset()) -> bool:
        """Remove the directory, still locked, if it holds nothing but its lock and the
        `disposable` files: a start refused before it wrote anything of its own leaves no
        run directory behind (its caller knows the directory is its own). Whether it did."""
        files = list(self.dir.iterdir())
        if any(f.name not in {LOCK_FILENAME, *disposable} or not f.is_file() for f in files):
            return False
        for file in files:
            file.unlink()
        self.dir.rmdir()
        return True

    def remove(self) -> None:
        """Remove the directory and everything in it, still locked: a start its preflight
        refused in a directory of its own, where every file is that start's (the lock, the
        service's log, the config the preflight checked, the attempt's record)."""
        shutil.rmtree(self.dir)

    def __fspath__(self) -> str:
        return str(self.dir)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def open_run(
    run_dir: str | Path,
    trainer: TrainerConfig | None = None,
    backend: str | None = None,
    who: str = "run",
    check: Callable[[], None] | None = None,
) -> Run:
    """Lock `run_dir` and, for a training run (`trainer` and its `backend`, `local` or
    `verl`, given), refuse what does not fit it, run `check` (raises to refuse) and set
    aside an unfinished attempt; prints what it let through or moved, prefixed with `who`."""
    run_dir = Path(run_dir)
    lock = lock_run_dir(run_dir)
    try:
        if trainer is not None:
            for change in check_run_dir(run_dir, trainer, backend):
                print(f"[{who}] resuming with a changed data order (allowed): {change}")
        if check is not None:
            check()
        if trainer is not None:
            # The first write, after every refusal: a resumed run that never reached its
            # first checkpoint restarts from step 0 in a cleared directory (its files kept).
            moved = set_aside_unfinished_attempt(run_dir, trainer, backend)
            if moved:
                print(f"[{who}] {moved}")
    except BaseException:
        lock.release()
        raise
    return Run(run_dir, lock)
