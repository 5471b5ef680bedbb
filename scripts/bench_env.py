"""Benchmark the environment service over HTTP with the ground-truth policy.

    python scripts/bench_env.py [--concurrency 256] [--runs 3] [--pause-ms 150] [--split all]

Starts the service as the launcher does and replays every task's ground truth on the
native API with --concurrency live episodes, saturated (the most episodes/s; latency is
queueing) and paced (a random pause per message stands in for generation; latency is a
request's cost). Prints throughput, p50/p99 latency, RSS, CPU and retries per run, then
the medians. What each figure means and the measured ones: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

from seal.eval.replay import record_from_evaluation, split_task_ids
from seal.report.summary import render_markdown, summarize_step
from seal.rollout.env_client import auth_headers
from seal.rollout.scripted import run_scripted_episode
from seal.service_contract import EpisodeSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchfixtures: not installed
from benchfixtures.service import PeakRss, TimedClient, bench_service, ground_truth_scripts  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent


async def replay_all(
    service, ids: list[str], scripts: dict, concurrency: int, pause_s: float
) -> tuple[list, list, float, int]:
    gate = asyncio.Semaphore(concurrency)
    rng = random.Random(0)
    pause = (lambda: pause_s * rng.uniform(0.5, 1.5)) if pause_s else None
    client = TimedClient(service.url, max_connections=concurrency, token=service.token)
    async with client:

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
            evaluations = await asyncio.gather(*(one(tid) for tid in ids))
        finally:
            gc.enable()
        elapsed = time.perf_counter() - t0
        # Attempts sent beyond one per request: retries after a connection error, a
        # timeout or a busy answer (each is also logged as a warning).
        retries = client.http.requests - len(client.latencies)
        return evaluations, client.latencies, elapsed, retries


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
        "--port", type=int, default=0, help="port for the benchmarked service (default: a free one)"
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

    ids = split_task_ids(args.split, REPO_ROOT / "data/seal_split.json")
    scripts = ground_truth_scripts(ids)

    flags = ["--max-live-episodes", "2048"]
    if args.workers is not None:
        flags += ["--workers", str(args.workers)]
    if args.worker_niceness is not None:
        flags += ["--worker-niceness", str(args.worker_niceness)]
    results = {}
    with bench_service(args.port, *flags) as service:
        for mode, pause_ms in (("saturated", 0.0), ("paced", args.pause_ms)):
            results[mode], evaluations = measure(service, args, ids, scripts, mode, pause_ms / 1e3)

    summary = summarize_step(0, [record_from_evaluation(r, step=0) for r in evaluations])
    print("\naccuracy of the ground truth through the service (last run):")
    print(render_markdown([summary]))
    failed = sorted(r["task_id"] for r in evaluations if not r["accuracy"])
    print(f"ground truths that fail through the service: {failed or 'none'}")
    for mode, rows in results.items():
        print(
            f"\n{mode}: median of {args.runs} runs, {len(ids)} episodes, {args.concurrency} live at once"
        )
        for key in rows[0]:
            print(f"  {key:<20} {statistics.median(r[key] for r in rows):8.1f}")


def measure(
    service, args, ids, scripts, mode: str, pause_s: float
) -> tuple[list[dict], list[dict]]:
    rows = []
    for run in range(1, args.runs + 1):
        sampler = PeakRss(service.pid)
        sampler.start()
        closed = _connections_closed(service)
        server_cpu0, client_cpu0 = sampler.cpu_seconds(), time.process_time()
        evaluations, latencies, elapsed, retries = asyncio.run(
            replay_all(service, ids, scripts, args.concurrency, pause_s)
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
            "retries": retries,
            "connections closed": _connections_closed(service) - closed,
        }
        for kind in ("create", "step"):
            q = statistics.quantiles([lat for k, lat in latencies if k == kind], n=100)
            row[f"{kind} p99 ms"] = q[98] * 1e3
        rows.append(row)
        print(f"{mode} run {run}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    return rows, evaluations


def _connections_closed(service) -> int:
    """Connections the service's guard has closed (shed past its cap, or late): 0 for a
    well-behaved client."""
    headers = auth_headers(service.token)
    counts = httpx.get(f"{service.url}/v1/stats", headers=headers, timeout=30).json()
    return sum(v for k, v in counts.items() if k.startswith("connections_closed_"))


if __name__ == "__main__":
    main()
