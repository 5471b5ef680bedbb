"""Does a web-search episode's fast fetch wait behind other episodes' slow pages? The
outside-call pool's fairness (issue #41).

    python scripts/bench_outside_fairness.py [--slow-episodes 4,24] [--fast-fetches 3]
        [--calls-per-step 8] [--fetch-timeout 5] [--processes 4] [--rounds 1]

For each count N, N web-search episodes fetch pages that trickle in from a local outside
web while another episode fetches a fast page once a step. Prints per N the fast fetches'
waits, the slow fetches that reached the web first, how the fast episode ended and the
pool's state (/v1/stats). The setup: docs/benchmarks.md, "The outside-call pool's fairness".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

from seal.bfcl.agentic.web_search import SERPAPI_KEY_ENV
from seal.rollout.env_client import auth_headers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchfixtures: not installed
from benchfixtures.service import bench_service  # noqa: E402
from benchfixtures.web import service_module, silent_server, web_server  # noqa: E402

TASK = "web_search_base_0"


def _fetches(url: str, n: int) -> dict:
    call = {"name": "fetch_url_content", "arguments": {"url": url}}
    return {"content": "", "tool_calls": [call] * n}


def _create(http: httpx.Client, episode_id: str) -> None:
    body = {"task_id": TASK, "episode_id": episode_id, "settings": {"mode": "validate"}}
    reply = http.post("/v1/episodes", json=body)
    assert reply.status_code == 201, reply.text


def _slow_client(url: str, token: str, k: int, step: dict, stop: threading.Event) -> None:
    """Web-search episodes, one after another, each step `step` (slow fetches)."""
    http = httpx.Client(base_url=url, timeout=3600, headers=auth_headers(token))
    n = 0
    with contextlib.suppress(httpx.HTTPError):  # the service stops under it at the end
        while not stop.is_set():
            n += 1
            episode = f"slow-{k}-{n}"
            _create(http, episode)
            while not stop.is_set():
                if http.post(f"/v1/episodes/{episode}/steps", json=step).json()["terminated"]:
                    break
            http.delete(f"/v1/episodes/{episode}")


def measure(args, slow_episodes: int) -> dict:
    """One service, `slow_episodes` slow clients, then the fast episode's fetches."""
    flags = ["--web-fetch-timeout", str(args.fetch_timeout)]
    flags += ["--web-search-processes", str(args.processes)]
    os.environ.setdefault(SERPAPI_KEY_ENV, "bench-key")  # (no search is made)
    stop = threading.Event()
    with (
        web_server() as web,
        silent_server() as silent,
        bench_service(0, *flags, module=service_module(web.port, silent)) as service,
    ):
        http = httpx.Client(base_url=service.url, timeout=3600, headers=auth_headers(service.token))
        _create(http, "warm")  # the outside-call processes start on first use
        http.post(
            "/v1/episodes/warm/steps", json=_fetches(f"http://outside.test:{web.port}/page/warm", 1)
        )
        http.delete("/v1/episodes/warm")
        step = _fetches(f"http://outside.test:{web.port}/slow", args.calls_per_step)
        clients = [
            threading.Thread(
                target=_slow_client, args=(service.url, service.token, k, step, stop), daemon=True
            )
            for k in range(slow_episodes)
        ]
        for client in clients:
            client.start()
        # Every slow episode has had a process once: a fast episode that came with them
        # would wait its turn among equals (each had held the processes for nothing).
        deadline = time.monotonic() + 600
        while web.order.count("/slow") < slow_episodes:
            assert time.monotonic() < deadline, "the slow fetches did not start in 600 s"
            time.sleep(0.05)
        _create(http, "fast")
        waits, slow_first, ended = [], [], None
        for j in range(args.fast_fetches):
            page = f"/page/fast-{j}"
            before, started = len(web.order), time.perf_counter()
            reply = http.post(
                "/v1/episodes/fast/steps",
                json=_fetches(f"http://outside.test:{web.port}{page}", 1),
            ).json()
            waits.append(time.perf_counter() - started)
            if page in web.order:
                slow_first.append(web.order[before : web.order.index(page)].count("/slow"))
            if reply["terminated"]:
                ended = (reply.get("evaluation") or {}).get("aborted") or "ended"
                break
        stats = http.get("/v1/stats").json()
        stop.set()
    pool = {k.removeprefix("outside_"): v for k, v in stats.items() if k.startswith("outside_")}
    return {"waits": waits, "slow_first": slow_first, "ended": ended, "pool": pool}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slow-episodes", default="4,24", help="counts N of slow-page episodes")
    p.add_argument("--fast-fetches", type=int, default=3)
    p.add_argument("--calls-per-step", type=int, default=8, help="slow fetches per step")
    p.add_argument("--fetch-timeout", type=float, default=5.0, help="a slow fetch's hold, s")
    p.add_argument("--processes", type=int, default=4, help="outside-call processes")
    p.add_argument("--rounds", type=int, default=1, help="runs per N (medians printed)")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.slow_episodes.split(",")]
    print(
        f"[bench] {args.processes} processes, slow steps of {args.calls_per_step} fetches "
        f"held {args.fetch_timeout:.0f} s each, {args.fast_fetches} fast fetches",
        flush=True,
    )
    results = {n: [] for n in counts}
    for round_ in range(1, args.rounds + 1):
        for n in counts:
            row = measure(args, n)
            results[n].append(row)
            waits = ", ".join(f"{w:.2f}" for w in row["waits"])
            print(
                f"[bench] round {round_}, {n} slow episodes: fast fetch waits {waits} s; slow "
                f"fetches before each {row['slow_first']}; fast episode "
                f"{row['ended'] or 'still running'}; pool {row['pool']}",
                flush=True,
            )
    print(f"\nmedians over {args.rounds} round(s):")
    for n in counts:
        waits = [w for row in results[n] for w in row["waits"]]
        firsts = [f for row in results[n] for f in row["slow_first"]]
        ended = sorted({row["ended"] or "still running" for row in results[n]})
        print(
            f"  {n:>3} slow-page episodes: fast fetch wait median {statistics.median(waits):.2f} "
            f"s, max {max(waits):.2f} s; slow fetches before it median "
            f"{statistics.median(firsts) if firsts else '-'}, max "
            f"{max(firsts) if firsts else '-'}; fast episode: {', '.join(ended)}"
        )


if __name__ == "__main__":
    main()
