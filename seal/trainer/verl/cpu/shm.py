"""Shared-memory segments a vLLM CPU run leaves in /dev/shm, and their removal.

vLLM's message queues (`psm_*`) and verl's weight buckets without CUDA IPC
(`verl_weights_*`) are unlinked only on a clean shutdown, which Ray's end of a run is
not, so every run would leave ~400 MB behind. The launcher's CPU vLLM job removes what its
run created (launch.py), and the smoke test does the same after a launch it had to kill.
Which segments and why: docs/verl_notes.md, "vLLM on the CPU".

No verl or vLLM imports: the test reads this from the main test venv.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import psutil

SHM = Path("/dev/shm")
PREFIXES = ("psm_", "verl_weights_")


def segments() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def mapped_segments() -> set[str]:
    """Names of /dev/shm files some live process maps."""
    mapped = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            mapped.update(
                Path(m.path).name
                for m in proc.memory_maps(grouped=True)
                if m.path.startswith(str(SHM))
            )
    return mapped


def remove_new_segments(before: set[str], wait_s: float = 0.0) -> list[str]:
    """Unlink the segments of PREFIXES created since `before` that no live process maps
    (waiting up to `wait_s` for their processes to end; another job's live segments are
    left alone); their names."""
    deadline = time.monotonic() + wait_s
    while True:
        new = sorted(n for n in segments() - before if n.startswith(PREFIXES))
        mapped = mapped_segments() if new else set()
        if not (set(new) & mapped) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    removed = [n for n in new if n not in mapped]
    for name in removed:
        with contextlib.suppress(FileNotFoundError):
            (SHM / name).unlink()
    return removed
