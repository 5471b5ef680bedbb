"""What the benchmarks in scripts/ share: the service they measure, its memory and CPU,
a client that times its requests, and the ground-truth scripts they replay.

The service is started the way the launcher starts a run's own (seal.launch.service):
on a free port unless one is given, with a fresh token (so it is measured as training
uses it, every request authenticated), stopped on every exit path and when the bench
dies. Its output goes to a log file in the temporary folder, named when it starts.
Figures the benches print are kept, with their dates, in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil

from seal.bfcl.ground_truth import assistant_messages, ground_truth_trajectory
from seal.bfcl.tasks import load_task
from seal.launch.service import RunningService, new_token, start_service
from seal.rollout.env_client import EnvClient

HOST = "127.0.0.1"


@contextlib.contextmanager
def bench_service(
    port: int = 0, *flags: str, module: tuple[str, ...] = ("env_service",)
) -> Iterator[RunningService]:
    """`python -m env_service --port PORT FLAGS...` (port 0: a free one; `module`: the
    module that runs it, as seal.launch.service.start_service takes it), once healthy
    and answering to its token; stopped on leaving."""
    fd, log_path = tempfile.mkstemp(prefix="bench_env_service_", suffix=".log")
    os.close(fd)  # start_service appends to it; it outlives the bench, for its reader
    token = new_token()
    with start_service(
        HOST, port, Path(log_path), token, extra_args=flags, module=module
    ) as service:
        print(f"[bench] the service's log: {log_path}", flush=True)
        yield service


def ground_truth_scripts(ids: Iterable[str]) -> dict[str, list[list[str]]]:
    """Task id -> the ground truth's assistant messages, per turn."""
    return {tid: assistant_messages(ground_truth_trajectory(load_task(tid))) for tid in ids}


def request_kind(method: str, path: str) -> str:
    """`create`, `step` or `close` for the native API's episode requests."""
    if path.endswith("/steps"):
        return "step"
    return {"POST": "create", "DELETE": "close"}.get(method, path)


class TimedClient(EnvClient):
    """EnvClient that records (kind, seconds) of every request while `recording`."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.latencies: list[tuple[str, float]] = []
        self.recording = True

    async def call(self, method, path, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return await super().call(method, path, *args, **kwargs)
        finally:
            if self.recording:
                self.latencies.append((request_kind(method, path), time.perf_counter() - t0))


class PeakRss(threading.Thread):
    """Samples a process's resident memory every 20 ms and keeps the peak, of the process
    alone and with its children (the service's worker processes). The children are
    listed once a second: listing them walks every process on the machine, and doing it
    every 20 ms took a fifth of the benchmark's own CPU, away from its clients."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process, self.peak, self.peak_tree, self.running = psutil.Process(pid), 0, 0, True
        self.peak_child = 0
        """The largest RSS of any one child (a worker or an outside-call process)."""

    def reset(self) -> None:
        self.peak = self.peak_tree = self.peak_child = 0

    def run(self):
        children, listed = [], 0.0
        while self.running:
            if time.monotonic() - listed > 1.0:
                children, listed = self.process.children(recursive=True), time.monotonic()
            own = self.process.memory_info().rss
            tree = own
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    rss = child.memory_info().rss
                    tree += rss
                    self.peak_child = max(self.peak_child, rss)
            self.peak = max(self.peak, own)
            self.peak_tree = max(self.peak_tree, tree)
            time.sleep(0.02)

    def cpu_seconds(self) -> float:
        """User + system CPU of the process and its live children."""
        total = sum(self.process.cpu_times()[:2])
        for child in self.process.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += sum(child.cpu_times()[:2])
        return total
