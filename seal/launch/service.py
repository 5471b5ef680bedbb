"""Start, reuse and stop the environment service for a run.

The launcher owns the service process it starts: it waits for `/healthz`, and stops
exactly that process (by its handle, never by name) on exit, on error and on Ctrl-C.
If a healthy service already answers on the port, it is reused and left running.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from seal.rollout.env_client import is_healthy


@contextlib.contextmanager
def environment_service(
    host: str,
    port: int,
    log_path: Path,
    startup_timeout_s: float = 60.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Yields the service URL; starts the service unless one is already healthy there."""
    url = f"http://{host}:{port}"
    if is_healthy(url):
        print(f"[launcher] reusing the environment service already running at {url}")
        yield url
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "env_service", "--host", host, "--port", str(port), *extra_args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not is_healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the environment service exited with code {proc.returncode} during start-up; "
                    f"see {log_path}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the environment service was not healthy after {startup_timeout_s:.0f} s; see {log_path}"
                )
            time.sleep(0.2)
        print(f"[launcher] environment service started at {url} (pid {proc.pid}, log {log_path})")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
