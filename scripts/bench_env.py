"""Benchmark the environment service over HTTP with the ground-truth policy.

    python scripts/bench_env.py [--concurrency 256] [--runs 3] [--pause-ms 150] [--split all]

Starts `python -m env_service` in its own process and replays the ground truth of every
task through the client's episode lifecycle on the native API (create, one step per turn
with all its calls, one closing step per turn; the last step's answer carries the
evaluation and releases the episode) with `--concurrency` live episodes at once, in two
modes:

- saturated: each episode sends its next request as soon as the last one is answered,
  which measures the most episodes/s the service gives. Request latency here is mostly
  queueing: with N requests always in flight, mean latency = N / throughput (Little's
  law), whatever the service does per request.
- paced: each episode waits a random 0.5x-1.5x `--pause-ms` (seeded) before it starts
  and before every assistant message, standing in for generation as in training (where
  it takes seconds), so latency shows what a request costs under load, not queueing.

The client freezes and disables its own garbage collector while it measures: it holds
every transcript, and its full collections (~250 ms) stalled all its in-flight
requests, which would be counted as service latency.

Prints per run: episodes/s, requests/s, p50/p99 request latency (client round trip),
the server's peak RSS and CPU (its own process, and with its worker processes: their
RSS summed, which counts the pages they share with it twice), the client's CPU; then the
accuracy per category and the medians over the runs. Targets on 2 cores: >= 150
episodes/s, p99 < 50 ms, < 2 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from seal.bfcl.ground_truth import assistant_messages, ground_truth_trajectory
from seal.bfcl.tasks import load_task, task_ids
from seal.eval.replay import record_from_report
from seal.eval.summary import render_markdown, summarize_step
from seal.rollout.env_client import EnvClient, is_healthy
from seal.rollout.protocol import EpisodeSettings
from seal.rollout.scripted import run_scripted_episode

REPO_ROOT = Path(__file__).resolve().parent.parent


class TimedClient(EnvClient):
    """EnvClient that records the latency of every request, by path."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.latencies: list[tuple[str, float]] = []

    async def call(self, method, path, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return await super().call(method, path, *args, **kwargs)
        finally:
            self.latencies.append((request_kind(method, path), time.perf_counter() - t0))


def request_kind(method: str, path: str) -> str:
    if path.endswith("/steps"):
        return "step"
    return {"POST": "create", "DELETE": "release"}.get(method, path)


class PeakRss(threading.Thread):
    """Samples a process's resident memory every 20 ms and keeps the peak, of the process
    alone and with its children (the service's worker processes). The children are
    listed once a second: listing them walks every process on the machine, and doing it
    every 20 ms took a fifth of the benchmark's own CPU, away from its clients."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process, self.peak, self.peak_tree, self.running = psutil.Process(pid), 0, 0, True

    def reset(self) -> None:
        self.peak = self.peak_tree = 0

    def run(self):
        children, listed = [], 0.0
        while self.running:
            if time.monotonic() - listed > 1.0:
                children, listed = self.process.children(recursive=True), time.monotonic()
            own = self.process.memory_info().rss
            tree = own
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    tree += child.memory_info().rss
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


def start_service(port: int, *flags: str) -> subprocess.Popen:
    """`python -m env_service --port PORT FLAGS...`, once it answers /healthz."""
    cmd = [sys.executable, "-m", "env_service", "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if is_healthy(f"http://127.0.0.1:{port}", timeout_s=1):
            return proc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("error: the environment service did not become healthy within 60 s")


async def replay_all(
    port: int, ids: list[str], scripts: dict, concurrency: int, pause_s: float
) -> tuple[list, list, float]:
    gate = asyncio.Semaphore(concurrency)
    rng = random.Random(0)
    pause = (lambda: pause_s * rng.uniform(0.5, 1.5)) if pause_s else None
    async with TimedClient(f"http://127.0.0.1:{port}", max_connections=concurrency) as client:

        async def one(task_id: str) -> dict:
            async with gate:
                return await run_scripted_episode(
                    client, task_id, scripts[task_id], EpisodeSettings(mode="validate"), pause
                )

        t0 = time.perf_counter()
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            reports = await asyncio.gather(*(one(tid) for tid in ids))
        finally:
            gc.enable()
        elapsed = time.perf_counter() - t0
        return reports, client.latencies, elapsed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--concurrency", type=int, default=256, help="live episodes at once (default 256)"
    )
    p.add_argument(
        "--runs", type=int, default=3, help="repetitions; medians are printed (default 3)"
    )
    p.add_argument(
        "--split",
        choices=["all", "train", "eval"],
        default="all",
        help="tasks to replay: all 800, or one split of data/seal_split.json",
    )
    p.add_argument(
        "--pause-ms",
        type=float,
        default=150.0,
        help="paced mode: mean wait before each assistant message (default 150)",
    )
    p.add_argument(
        "--port", type=int, default=8093, help="port for the benchmarked service (default 8093)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="the service's tool-call worker processes (default: its own default; 0 runs "
        "calls on its event loop, to measure what the workers cost)",
    )
    p.add_argument(
        "--worker-niceness",
        type=int,
        default=None,
        help="the workers' CPU priority below the event loop's (default: the service's)",
    )
    args = p.parse_args(argv)

    if args.split == "all":
        ids = task_ids()
    else:
        ids = json.loads((REPO_ROOT / "data/seal_split.json").read_text())[args.split]
    scripts = {tid: assistant_messages(ground_truth_trajectory(load_task(tid))) for tid in ids}

    flags = ["--max-live-episodes", "2048"]
    if args.workers is not None:
        flags += ["--workers", str(args.workers)]
    if args.worker_niceness is not None:
        flags += ["--worker-niceness", str(args.worker_niceness)]
    proc = start_service(args.port, *flags)
    results = {}
    try:
        for mode, pause_ms in (("saturated", 0.0), ("paced", args.pause_ms)):
            results[mode], reports = measure(proc, args, ids, scripts, mode, pause_ms / 1e3)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    summary = summarize_step(0, [record_from_report(r, step=0) for r in reports])
    print("\naccuracy of the ground truth through the service (last run):")
    print(render_markdown([summary]))
    failed = sorted(r["task_id"] for r in reports if not r["accuracy"])
    print(f"ground truths that fail through the service: {failed or 'none'}")
    for mode, rows in results.items():
        print(
            f"\n{mode}: median of {args.runs} runs, {len(ids)} episodes, {args.concurrency} live at once"
        )
        for key in rows[0]:
            print(f"  {key:<20} {statistics.median(r[key] for r in rows):8.1f}")


def measure(proc, args, ids, scripts, mode: str, pause_s: float) -> tuple[list[dict], list[dict]]:
    rows = []
    for run in range(1, args.runs + 1):
        sampler = PeakRss(proc.pid)
        sampler.start()
        server_cpu0, client_cpu0 = sampler.cpu_seconds(), time.process_time()
        reports, latencies, elapsed = asyncio.run(
            replay_all(args.port, ids, scripts, args.concurrency, pause_s)
        )
        sampler.running = False
        sampler.join()
        q = statistics.quantiles([lat for _, lat in latencies], n=100)
        row = {
            "episodes/s": len(ids) / elapsed,
            "requests/s": len(latencies) / elapsed,
            "requests/episode": len(latencies) / len(ids),
            "p50 ms": q[49] * 1e3,
            "p99 ms": q[98] * 1e3,
            "peak RSS MB": sampler.peak / 2**20,
            "+workers RSS MB": sampler.peak_tree / 2**20,
            "server CPU %": 100 * (sampler.cpu_seconds() - server_cpu0) / elapsed,
            "client CPU %": 100 * (time.process_time() - client_cpu0) / elapsed,
        }
        for kind in ("create", "step"):
            q = statistics.quantiles([lat for k, lat in latencies if k == kind], n=100)
            row[f"{kind} p99 ms"] = q[98] * 1e3
        rows.append(row)
        print(f"{mode} run {run}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    return rows, reports


if __name__ == "__main__":
    main()
