"""Does one hostile client, or an operator's fault, slow the well-behaved clients down?

    python scripts/bench_env_adversarial.py [--clients 64] [--rounds 5] [--phase-s 20]
        [--cases flood,unclosed_calls,...] [--flood-kinds ...] [--episode-cpu-share S]

Starts the service, plays paced ground-truth episodes with --clients well-behaved clients,
and compares each case's phase with a quiet phase just before it (a shared machine's load
drifts). Prints p50/p99 latency, the attacker's count and the service's peak RSS per phase,
then each case's median p99 ratio. What each case sends: docs/benchmarks.md, "Under attack".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import random
import resource
import signal
import socket
import statistics
import sys
from pathlib import Path

import httpx
import psutil

from seal.bfcl.agentic.web_search import SERPAPI_KEY_ENV
from seal.bfcl.tasks import task_ids
from seal.launch.service import RunningService
from seal.rollout.env_client import auth_headers, is_healthy
from seal.rollout.scripted import run_scripted_episode
from seal.service_contract import EpisodeSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchfixtures: not installed
from benchfixtures.service import PeakRss, TimedClient, bench_service, ground_truth_scripts  # noqa: E402
from benchfixtures.web import service_module  # noqa: E402

MESSAGE_CHARS = 262_144  # the service's default max_message_chars


# --- the adversary (its own process) --------------------------------------------------------


def _compact(name: str, arguments: dict, n: int) -> str:
    one = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))
    return f"<tool_call>{one}</tool_call>" * n


def _most(name: str, arguments: dict) -> str:
    return _compact(name, arguments, MESSAGE_CHARS // len(_compact(name, arguments, 1)))


FLOOD_KINDS = ("grep", "cat", "huge_body", "send_message")
"""The flood's requests, taken in turn: a message of `grep`s on an 80k-line file, one of
`cat`s of a 190 KB file, a body announced as 300 MB, and 2,570 `send_message` calls."""


class Adversary:
    """Worst legal requests of finding 2 (and 1), one after another, over the release
    protocol (a client of the original release needs nothing but a socket), with the
    service's token: what a client allowed to use the service can do."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token
        self.http = httpx.Client(base_url=url, timeout=120, headers=auth_headers(token))
        self.n = 0
        self.requests = 0

    def post(self, path: str, **body) -> httpx.Response:
        self.requests += 1
        return self.http.post(path, json=body)

    def step(self, instance_id: str, text: str) -> httpx.Response:
        return self.post(
            "/step", instance_id=instance_id, messages={"role": "assistant", "content": text}
        )

    def episode(self, task_id: str) -> str:
        self.n += 1
        instance_id = f"adversary-{self.n}"
        params = {"rollout_mode": "validate", "max_steps": 1024}
        self.post(
            "/create", env_type="bfcl", task_id=task_id, instance_id=instance_id, params=params
        )
        return instance_id

    def grep_flood(self) -> None:
        iid = self.episode("multi_turn_base_1")
        self.step(iid, _compact("touch", {"file_name": "big.txt"}, 1))
        self.step(iid, _compact("echo", {"content": "a\n" * 80_000, "file_name": "big.txt"}, 1))
        flood = _most("grep", {"file_name": "big.txt", "pattern": "b"})
        for _ in range(9):  # 8 x 128 calls spend the episode's 1024; the 9th runs none
            self.step(iid, flood)
        self.post("/evaluate", instance_id=iid)
        self.post("/release", instance_id=iid)

    def big_reply(self) -> None:
        iid = self.episode("multi_turn_base_1")
        self.step(iid, _compact("touch", {"file_name": "f.txt"}, 1))
        self.step(iid, _compact("echo", {"content": "x" * 190_000, "file_name": "f.txt"}, 1))
        for _ in range(3):
            self.step(iid, _compact("cat", {"file_name": "f.txt"}, 210))
        self.post("/evaluate", instance_id=iid)
        self.post("/release", instance_id=iid)

    def huge_body(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        head = (
            "POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Length: {300 * 2**20}\r\n\r\n"
        )
        self.requests += 1
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head.encode())
            try:
                for _ in range(16):
                    sock.sendall(b" " * 2**20)
            except OSError:
                pass  # answered (413) and closed: as it should
            sock.recv(4096)

    def message_ids(self) -> None:
        iid = self.episode("multi_turn_base_14")
        self.step(iid, _compact("message_login", {"user_id": "USR001"}, 1))
        flood = _compact("send_message", {"receiver_id": "USR002", "message": "hi"}, 2570)
        for _ in range(9):
            self.step(iid, flood)
        self.post("/evaluate", instance_id=iid)
        self.post("/release", instance_id=iid)

    def run(self, stop, counter, kinds: tuple[str, ...] = FLOOD_KINDS) -> None:
        by_kind = {
            "grep": self.grep_flood,
            "cat": self.big_reply,
            "huge_body": self.huge_body,
            "send_message": self.message_ids,
        }
        attacks = [by_kind[kind] for kind in kinds]
        k = 0
        while not stop.is_set():
            attacks[k % len(attacks)]()
            k += 1
            counter.value = self.requests


def _adversary_main(url: str, token: str, stop, counter, kinds: tuple[str, ...]) -> None:
    Adversary(url, token).run(stop, counter, kinds)


UNCLOSED = "<tool_call>{" * (MESSAGE_CHARS // 12)
"""A message of unclosed call openings: the release's pattern read it in 185 s."""


def _unclosed_main(url: str, token: str, stop, counter) -> None:
    """262,144-character messages of unclosed `<tool_call>{` openings, back to back, on
    the release protocol's default (the paper's) text; a new episode when one ends."""
    adversary = Adversary(url, token)
    while not stop.is_set():
        instance_id = adversary.episode("multi_turn_base_1")
        while not stop.is_set():
            reply = adversary.step(instance_id, UNCLOSED)
            counter.value = adversary.requests
            if reply.status_code != 200 or reply.json()["data"]["is_terminated"]:
                break
        adversary.post("/release", instance_id=instance_id)


SLOW_HEAD = b"POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def _slow_headers_main(url: str, stop, counter, connections: int) -> None:
    """Hold `connections` connections that never finish their headers: one more header
    byte each per second, and a new connection for each one the service closes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this client's own fds
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, connections + 256), hard))
    host, port = url.removeprefix("http://").split(":")
    held: list[socket.socket] = []
    opened = 0
    while not stop.is_set():
        while len(held) < connections:
            try:
                sock = socket.create_connection((host, int(port)), timeout=2)
                sock.sendall(SLOW_HEAD)
            except OSError:
                break  # the service refuses for now: try again next second
            sock.setblocking(False)
            held.append(sock)
            opened += 1
        counter.value = opened
        if stop.wait(1.0):
            break
        alive = []
        for sock in held:
            try:
                sock.send(b"X")
                alive.append(sock)
            except BlockingIOError:
                alive.append(sock)
            except OSError:  # closed by the service: replaced above
                sock.close()
        held = alive
    for sock in held:
        sock.close()


async def _stop_workers(service_pid: int, every_s: float, stopped: list[int]) -> None:
    """SIGSTOP one of the service's worker processes every `every_s` seconds (the service
    must find and replace it); the pids go to `stopped`."""
    while True:
        workers = psutil.Process(service_pid).children()
        live = [w for w in workers if w.pid not in stopped and w.status() != "stopped"]
        if live:
            victim = live[0]
            os.kill(victim.pid, signal.SIGSTOP)
            stopped.append(victim.pid)
        await asyncio.sleep(every_s)


# --- the web-search attackers (their own process) and the outside web ----------------------

WEB_CASES = ("slow_page", "huge_body", "unreachable_search")
BOMB_MIB = 1024


def _outside_web_main(ports, stop) -> None:
    """The outside web the web-search cases reach: pages (slow, huge, a gzip bomb) and a
    SerpAPI that never answers; their ports go to `ports`."""
    from benchfixtures.web import gzip_bomb, silent_server, web_server

    # It stands for servers on other machines: its own CPU is not the service's doing.
    os.nice(19)
    gzip_bomb(BOMB_MIB)  # made now (seconds), not while a phase is measured
    with web_server() as web, silent_server() as silent:
        ports.put((web.port, silent))
        stop.wait()


def _web_attacker_main(url, token, case, web_port, stop, counter, clients, pause_s) -> None:
    """`clients` threads playing web-search episodes whose one call is the case's, each
    `pause_s` after the last (a model's generation before its next call)."""
    import threading

    page = f"http://outside.test:{web_port}"
    calls = {
        "slow_page": [("fetch_url_content", {"url": f"{page}/slow"})],
        "huge_body": [
            ("fetch_url_content", {"url": f"{page}/huge?mb=600"}),
            ("fetch_url_content", {"url": f"{page}/bomb?mb={BOMB_MIB}"}),
        ],
        "unreachable_search": [("search_engine_query", {"keywords": "most expensive tea"})],
    }[case]
    lock = threading.Lock()

    def play(k: int) -> None:
        http = httpx.Client(base_url=url, timeout=600, headers=auth_headers(token))
        n = 0
        while not stop.is_set():
            n += 1
            body = {"task_id": "web_search_base_0", "episode_id": f"web-{case}-{k}-{n}",
                    "settings": {"mode": "validate"}}  # fmt: skip
            created = http.post("/v1/episodes", json=body)
            if created.status_code != 201:
                stop.wait(1.0)
                continue
            episode = f"/v1/episodes/{body['episode_id']}"
            name, arguments = calls[n % len(calls)]
            step = {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}
            reply = http.post(f"{episode}/steps", json=step).json()
            if not reply.get("terminated"):
                http.post(f"{episode}/steps", json={"content": "done", "tool_calls": []})
            with lock:
                counter.value += 1
            stop.wait(pause_s)

    threads = [threading.Thread(target=play, args=(k,), daemon=True) for k in range(clients)]
    for thread in threads:
        thread.start()
    stop.wait()


def _warm_web(service: RunningService, args) -> None:
    """One web-search episode per outside-call process, each fetching a page (they start
    on first use: their start is not the cases' doing)."""
    http = httpx.Client(base_url=service.url, timeout=60, headers=auth_headers(service.token))
    page = f"http://outside.test:{args.web_port}/page/warm"
    for k in range(args.web_attackers):
        body = {"task_id": "web_search_base_0", "episode_id": f"warm-{k}",
                "settings": {"mode": "validate"}}  # fmt: skip
        assert http.post("/v1/episodes", json=body).status_code == 201
        call = {"name": "fetch_url_content", "arguments": {"url": page}}
        http.post(f"/v1/episodes/warm-{k}/steps", json={"content": "", "tool_calls": [call]})
        http.delete(f"/v1/episodes/warm-{k}")


# --- the well-behaved clients ---------------------------------------------------------------


async def play(
    service: RunningService, ids: list[str], scripts: dict, clients: int, pause_s: float, stop
):
    """`clients` loops of paced ground-truth episodes until `stop()`; returns the client,
    the loops and the list their failures are appended to."""
    rng = random.Random(0)
    client = TimedClient(service.url, max_connections=clients, token=service.token)
    client.recording = False
    errors: list[str] = []
    next_task = iter(range(10**9))

    async def loop():
        while not stop():
            task_id = ids[next(next_task) % len(ids)]
            try:
                await run_scripted_episode(
                    client,
                    task_id,
                    scripts[task_id],
                    EpisodeSettings(mode="validate"),
                    lambda: pause_s * rng.uniform(0.5, 1.5),
                )
            except Exception as e:  # noqa: BLE001 - counted and printed: the bench goes on
                errors.append(f"{task_id}: {type(e).__name__}: {e}")

    return client, [asyncio.create_task(loop()) for _ in range(clients)], errors


CASES = ("flood", "unclosed_calls", "slow_headers", "stopped_worker", *WEB_CASES)


async def measure(service: RunningService, args, ids, scripts) -> list[dict]:
    url = service.url
    sampler = PeakRss(service.pid)
    sampler.start()
    ctx = multiprocessing.get_context("spawn")
    rows = []
    state = {"stopping": False}
    client, loops, errors = await play(
        service, ids, scripts, args.clients, args.pause_ms / 1e3, lambda: state["stopping"]
    )
    gc.collect()
    gc.freeze()
    gc.disable()  # the client's own GC pauses would count as service latency
    try:
        if set(args.cases) & set(WEB_CASES):  # the outside-call processes start on first use
            await asyncio.get_running_loop().run_in_executor(None, _warm_web, service, args)
        await asyncio.sleep(3)  # warm up: every client in an episode
        for round_ in range(1, args.rounds + 1):
            # Each case right after a quiet phase of its own: the machine's other load
            # drifts (this 2-core machine is shared), so each attacked p99 is compared with
            # the quiet one next to it.
            for phase in [phase for case in args.cases for phase in ("quiet", case)]:
                stop, counter = ctx.Event(), ctx.Value("i", 0)
                attacker, stopper, stopped = None, None, []
                if phase == "flood":
                    attacker = ctx.Process(
                        target=_adversary_main,
                        args=(url, service.token, stop, counter, tuple(args.flood_kinds)),
                    )
                elif phase == "unclosed_calls":
                    attacker = ctx.Process(
                        target=_unclosed_main, args=(url, service.token, stop, counter)
                    )
                elif phase == "slow_headers":
                    attacker = ctx.Process(
                        target=_slow_headers_main,
                        args=(url, stop, counter, args.slow_connections),
                    )
                elif phase in WEB_CASES:
                    attacker = ctx.Process(
                        target=_web_attacker_main,
                        args=(url, service.token, phase, args.web_port, stop, counter,
                              args.web_attackers, args.web_pause_s),
                    )  # fmt: skip
                if attacker is not None:
                    attacker.start()
                    await asyncio.sleep(2)  # it has started attacking
                client.latencies = []
                errors.clear()
                client.recording = True
                sampler.reset()
                if phase == "stopped_worker":
                    stopper = asyncio.create_task(
                        _stop_workers(service.pid, args.stop_every_s, stopped)
                    )
                await asyncio.sleep(args.phase_s)
                client.recording = False
                if stopper is not None:
                    stopper.cancel()
                    counter.value = len(stopped)
                lat = sorted(seconds for _, seconds in client.latencies)
                q = statistics.quantiles(lat, n=100)
                row = {
                    "round": round_,
                    "phase": phase,
                    "requests": len(lat),
                    "p50 ms": q[49] * 1e3,
                    "p99 ms": q[98] * 1e3,
                    "max ms": lat[-1] * 1e3,
                    "peak RSS MB": sampler.peak / 2**20,
                    "+workers RSS MB": sampler.peak_tree / 2**20,
                    "largest child MB": sampler.peak_child / 2**20,
                    "attacker count": counter.value,
                    "client errors": len(errors),
                }
                for error in errors[:3]:
                    print(f"  client error: {error}")
                if attacker is not None:
                    stop.set()
                    # Off the event loop: the well-behaved clients' requests go on meanwhile.
                    await asyncio.get_running_loop().run_in_executor(None, attacker.join, 120)
                    if attacker.is_alive():
                        attacker.kill()
                    row["attacker count"] = counter.value
                for pid in stopped:  # replaced by the service by now; never left stopped
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                if phase == "stopped_worker":
                    row["workers replaced"] = httpx.get(f"{url}/healthz").json()["workers_replaced"]
                rows.append(row)
                print(
                    f"round {round_} {phase:<14}: "
                    + ", ".join(
                        f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in row.items()
                        if k not in ("round", "phase")
                    ),
                    flush=True,
                )
                await asyncio.sleep(2)  # let the service settle between phases
    finally:
        state["stopping"] = True
        gc.enable()
        sampler.running = False
        await asyncio.gather(*loops, return_exceptions=True)
        await client.aclose()
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--clients", type=int, default=64, help="well-behaved clients (default 64)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of all phases (default 5)")
    p.add_argument("--phase-s", type=float, default=20.0, help="seconds per phase (default 20)")
    p.add_argument(
        "--pause-ms", type=float, default=150.0, help="mean pause before a request (default 150)"
    )
    p.add_argument(
        "--cases",
        type=lambda text: tuple(text.split(",")),
        default=CASES,
        help=f"attacks, one phase each per round (default {','.join(CASES)})",
    )
    p.add_argument(
        "--flood-kinds",
        type=lambda text: text.split(","),
        default=list(FLOOD_KINDS),
        help=f"the flood's requests, taken in turn (default {','.join(FLOOD_KINDS)})",
    )
    p.add_argument(
        "--slow-connections",
        type=int,
        default=1200,
        help="connections the slow-headers client holds (default 1200)",
    )
    p.add_argument(
        "--stop-every-s",
        type=float,
        default=10.0,
        help="stopped_worker: stop a worker this often (default 10)",
    )
    p.add_argument(
        "--web-attackers",
        type=int,
        default=4,
        help="web-search cases: clients playing such episodes at once (default 4: as many as "
        "the service's outside-call processes)",
    )
    p.add_argument(
        "--web-pause-s",
        type=float,
        default=1.0,
        help="web-search cases: seconds each of those clients waits between its episodes, "
        "a model's generation (default 1; the flood case is the one without pauses)",
    )
    p.add_argument("--port", type=int, default=0, help="the service's port (default: a free one)")
    p.add_argument(
        "--worker-niceness",
        type=int,
        default=None,
        help="the workers' CPU priority below the event loop's (default: the service's)",
    )
    p.add_argument(
        "--episode-cpu-share",
        type=float,
        default=None,
        help="each episode's share of a worker's CPU past its burst; 1 lifts it (default: "
        "the service's)",
    )
    args = p.parse_args(argv)
    unknown = set(args.cases) - set(CASES)
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}; choose from {','.join(CASES)}")
    unknown = set(args.flood_kinds) - set(FLOOD_KINDS)
    if unknown:
        p.error(f"unknown flood kinds {sorted(unknown)}; choose from {','.join(FLOOD_KINDS)}")

    ids = task_ids()
    scripts = ground_truth_scripts(ids)
    flags = [] if args.worker_niceness is None else ["--worker-niceness", str(args.worker_niceness)]
    if args.episode_cpu_share is not None:
        flags += ["--episode-cpu-share", str(args.episode_cpu_share)]
    with contextlib.ExitStack() as stack:
        module = ("env_service",)
        if set(args.cases) & set(WEB_CASES):
            ctx = multiprocessing.get_context("spawn")
            ports, web_stop = ctx.Queue(), ctx.Event()
            web = ctx.Process(target=_outside_web_main, args=(ports, web_stop), daemon=True)
            web.start()
            stack.callback(web.join, 10)
            stack.callback(web_stop.set)
            args.web_port, silent_port = ports.get(timeout=120)
            module = service_module(args.web_port, silent_port)
            os.environ.setdefault(SERPAPI_KEY_ENV, "bench-key")  # the silent SerpAPI's
        service = stack.enter_context(bench_service(args.port, *flags, module=module))
        rows = asyncio.run(measure(service, args, ids, scripts))
        alive = is_healthy(service.url, timeout_s=5)

    phases = ("quiet", *args.cases)
    print(f"\nmedians over {args.rounds} rounds of {args.phase_s:.0f} s, {args.clients} clients:")
    keys = ["requests", "p50 ms", "p99 ms", "max ms", "peak RSS MB", "+workers RSS MB"]
    keys += ["largest child MB"]
    keys += ["attacker count", "client errors"]
    print(f"  {'':<20}" + "".join(f" {phase:>15}" for phase in phases))
    for key in keys:
        medians = [statistics.median(r[key] for r in rows if r["phase"] == p) for p in phases]
        print(f"  {key:<20}" + "".join(f" {m:>15.1f}" for m in medians))
    print()
    for case in args.cases:
        # Pairs: each attacked phase and the quiet phase just before it.
        pairs = [(rows[i - 1], row) for i, row in enumerate(rows) if row["phase"] == case]
        ratios = [row["p99 ms"] / quiet["p99 ms"] for quiet, row in pairs]
        quiet_p99 = statistics.median(quiet["p99 ms"] for quiet, _ in pairs)
        attacked_p99 = statistics.median(row["p99 ms"] for _, row in pairs)
        ratio = statistics.median(ratios)
        print(
            f"{case}: p99 {attacked_p99:.1f} ms, quiet before it {quiet_p99:.1f} ms; median of "
            f"the rounds' ratios {ratio:.2f}x ({'within' if ratio <= 2 else 'NOT within'} 2x; "
            f"each round: {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    print(f"service {'healthy' if alive else 'NOT healthy'} after the attacks")


if __name__ == "__main__":
    main()
