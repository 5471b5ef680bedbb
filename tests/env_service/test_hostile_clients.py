"""No client reaches the service's filesystem or holds its capacity.

- A client names no file the service reads: the wire `/create`'s
  `diagnostic_evolution.state_path` is refused (422, naming `--capability-state`, the
  operator's option) before anything is opened, so a FIFO there stalls nothing and a
  file's existence cannot be probed.
- Every string and number a client sends is checked before anything is created: a lone
  surrogate in an id is a 422 and leaves no episode live, on both protocols; NaN and
  +-1e400 in numeric fields are a 422, not a 500.
- Connections that send part of their headers are closed within the header timeout,
  and those not yet authenticated are capped: a flood of them (more than the open-files
  limit) does not stop a client with the token.
- Ids have a length limit.
- `HEAD /healthz` answers 200.

Tests that could hang on a broken service run it in its own process (`service_process`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time

import httpx
import pytest
from conftest import wait_for
from fastapi.testclient import TestClient

from env_service.app import create_app
from env_service.config import ServiceConfig
from env_service.connections import SEND_GRACE_S

TASK = "multi_turn_base_0"
JSON = {"content-type": "application/json"}
MAX_ID_CHARS = 256
"""The longest id the service takes (episode, instance and task ids)."""


def stats(svc) -> dict:
    return svc.http.get("/v1/stats").json()


# --- no client-named files -----------------------------------------------------------------


def test_a_fifo_named_as_state_path_does_not_stall_the_service(service_process, tmp_path):
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)
    svc = service_process()
    params = {"diagnostic_evolution": {"enable": True, "state_path": str(fifo)}}
    body = {"env_type": "bfcl", "task_id": TASK, "instance_id": "fifo", "params": params}
    reply = httpx.post(f"{svc.url}/create", json=body, timeout=10)
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert "state_path" in error and "--capability-state" in error
    assert httpx.get(f"{svc.url}/healthz", timeout=5).status_code == 200
    assert httpx.get(f"{svc.url}/healthz", timeout=5).json()["live_episodes"] == 0


@pytest.mark.parametrize("where", ["missing", "readable", "unreadable"])
def test_state_path_answers_the_same_whatever_the_file(service, tmp_path, where):
    # The reply must not depend on the file: no existence probe, nothing read.
    paths = {
        "missing": tmp_path / "nothing_here.json",
        "readable": tmp_path / "state.json",
        "unreadable": tmp_path / "root_only.json",
    }
    paths["readable"].write_text('{"window_tags": {}}')
    paths["unreadable"].write_text("{}")
    paths["unreadable"].chmod(0)
    svc = service()
    params = {"diagnostic_evolution": {"enable": True, "state_path": str(paths[where])}}
    reply = svc.http.post(
        "/create", json={"env_type": "bfcl", "task_id": TASK, "instance_id": "p", "params": params}
    )
    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error == (
        "diagnostic_evolution.state_path is not accepted: the service reads only the files "
        "its operator names when starting it; start it with --capability-state PATH (this "
        "service's or the original release's capability-state file) for guidelines from it"
    )
    assert stats(svc)["live_episodes"] == 0


# --- strings and numbers are checked before anything is created ----------------------------

LONE_SURROGATE = rb"a\ud800b"


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/episodes", b'{"task_id": "%s", "episode_id": "%s"}' % (TASK.encode(), LONE_SURROGATE)),
        ("/create", b'{"env_type": "bfcl", "task_id": "%s", "instance_id": "%s"}'
         % (TASK.encode(), LONE_SURROGATE)),
        ("/create", b'{"env_type": "bfcl", "task_id": "%s", "instance_id": "x"}' % LONE_SURROGATE),
        ("/v1/episodes", b'{"task_id": "%s", "episode_id": "ok", "settings": {"mode": "%s"}}'
         % (TASK.encode(), LONE_SURROGATE)),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_refused_and_leaves_no_episode(service, path, body):
    svc = service()
    for _ in range(20):
        reply = svc.http.post(path, content=body, headers=JSON)
        assert reply.status_code == 422, reply.text
        assert "surrogate" in reply.text
    assert stats(svc)["live_episodes"] == 0


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"])
@pytest.mark.parametrize(
    "path, template",
    [
        ("/v1/episodes", b'{"task_id": "T", "settings": {"limits": {"max_generations": V}}}'),
        ("/v1/episodes", b'{"task_id": "T", "settings": {"reward": {"partial_credit_cap": V}}}'),
        ("/v1/episodes/e1/steps", b'{"content": "hi", "tool_calls": [], "seq": V}'),
        ("/create", b'{"env_type": "bfcl", "task_id": "T", "params": {"max_steps": V}}'),
        ("/create", b'{"env_type": "bfcl", "task_id": "T", "params": {"partial_credit_cap": V}}'),
        ("/step", b'{"instance_id": "e1", "messages": {"role": "assistant", "content": V}}'),
    ],
)
def test_non_finite_numbers_are_a_422_not_a_500(service, path, template, value):
    svc = service()
    svc.http.post("/v1/episodes", json={"task_id": TASK, "episode_id": "e1"})
    body = template.replace(b"T", TASK.encode()).replace(b"V", value)
    reply = svc.http.post(path, content=body, headers=JSON)
    assert reply.status_code == 422, reply.text
    assert "finite" in reply.text
    assert stats(svc)["live_episodes"] == 1  # only e1


@pytest.mark.parametrize("field", ["max_generations", "max_new_tokens"])
def test_numbers_out_of_range_are_a_422(service, field):
    svc = service()
    for value in (10**30, 2**63):
        settings = {"limits": {field: value}}
        reply = svc.http.post("/v1/episodes", json={"task_id": TASK, "settings": settings})
        assert reply.status_code == 422, reply.text
        reply = svc.http.post(
            "/create",
            json={"env_type": "bfcl", "task_id": TASK, "params": {"max_steps": value}},
        )
        assert reply.status_code == 422, reply.text
    assert stats(svc)["live_episodes"] == 0


@pytest.mark.parametrize(
    "bad_id, why",
    [
        ("x" * (MAX_ID_CHARS + 1), "characters"),
        ("x" * 3_900_000, "characters"),
        ("tab\there", "control character"),
        ("nul\x00", "control character"),
        ("a/b", "'/'"),
    ],
)
def test_ids_are_checked_before_anything_is_created(service, bad_id, why):
    svc = service()
    native = svc.http.post("/v1/episodes", json={"task_id": TASK, "episode_id": bad_id})
    assert native.status_code == 422, native.text[:300]
    assert why in native.json()["detail"]
    wire = svc.http.post(
        "/create", json={"env_type": "bfcl", "task_id": TASK, "instance_id": bad_id}
    )
    assert wire.status_code == 422, wire.text[:300]
    assert why in wire.json()["error"]
    task = svc.http.post("/v1/episodes", json={"task_id": bad_id})
    assert task.status_code == 422, task.text[:300]
    assert len(task.content) < 2000  # the reply does not echo a huge id back
    assert stats(svc)["live_episodes"] == 0


def test_a_reply_that_cannot_be_sent_releases_its_episode(monkeypatch):
    from env_service import api_native
    from env_service.release import api as release_api

    def broken(*args, **kwargs):
        raise RuntimeError("the reply could not be built")

    monkeypatch.setattr(api_native, "_created", broken)
    monkeypatch.setattr(release_api, "ok", broken)
    with TestClient(create_app(ServiceConfig()), raise_server_exceptions=False) as http:
        assert http.post("/v1/episodes", json={"task_id": TASK}).status_code == 500
        body = {"env_type": "bfcl", "task_id": TASK, "instance_id": "w"}
        assert http.post("/create", json=body).status_code == 500
        assert http.get("/v1/stats").json()["live_episodes"] == 0


# --- slow headers, and connections that never authenticate ------------------------------------

TOKEN = "hostile-test-token"
FD_LIMIT = 256
SLOW_HEAD = b"POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except (BlockingIOError, TimeoutError):
        return False


def test_slow_header_connections_are_closed_and_cannot_starve_clients(service_process):
    # The service's open-files limit is lowered so that the flood passes it, as 1,124
    # connections passed the usual 1,024.
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, {FD_LIMIT}))"
    # The default header timeout (10 s): a shorter one would free the flood's files by
    # itself, and the client below would be served without the guard's shedding.
    svc = service_process(patch=limit, env={"SEAL_ENV_TOKEN": TOKEN})
    host, port = svc.url.removeprefix("http://").split(":")
    flood: list[socket.socket] = []
    keep_sending = threading.Event()
    try:
        opened = time.monotonic()
        for _ in range(FD_LIMIT + 100):
            sock = socket.create_connection((host, int(port)), timeout=5)
            with contextlib.suppress(OSError):
                sock.sendall(SLOW_HEAD)
            flood.append(sock)

        def trickle():  # one more header byte a second: still never complete
            while not keep_sending.wait(1.0):
                for sock in flood:
                    with contextlib.suppress(OSError):
                        sock.send(b"X")

        threading.Thread(target=trickle, daemon=True).start()
        # A client with the token is served while the flood is held.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        reply = httpx.post(
            f"{svc.url}/v1/episodes", json={"task_id": TASK}, headers=auth, timeout=10
        )
        assert reply.status_code == 201, reply.text
        assert httpx.get(f"{svc.url}/healthz", timeout=10).status_code == 200
        # Every connection that never completed its headers is closed within 30 s (the
        # trickle's byte a second does not restart the header timeout).
        for sock in flood:
            sock.settimeout(max(0.1, opened + 30 - time.monotonic()))
        still_open = [s for s in flood if not _closed_by_peer(s)]
        assert not still_open, f"{len(still_open)} slow connections held for 30 s"
    finally:
        keep_sending.set()
        for sock in flood:
            sock.close()


def _request(sock: socket.socket, head: str) -> bytes:
    """Send a bodiless request on a kept-alive socket; its whole reply."""
    sock.sendall(head.encode() + b"\r\n")
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(65536)
    headers, _, body = reply.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in headers.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )  # fmt: skip
    while len(body) < length:
        body += sock.recv(65536)
    return headers + b"\r\n\r\n" + body


def test_a_body_that_stops_coming_is_closed_and_authenticated_connections_are_kept(
    service_process,
):
    svc = service_process(
        "--body-timeout", "2", "--max-unauthenticated-connections", "8",
        env={"SEAL_ENV_TOKEN": TOKEN},
    )  # fmt: skip
    host, port = svc.url.removeprefix("http://").split(":")
    get_stats = f"GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
    with contextlib.ExitStack() as stack:
        kept = stack.enter_context(socket.create_connection((host, int(port)), timeout=10))
        assert _request(kept, get_stats).startswith(b"HTTP/1.1 200")
        flood = [
            stack.enter_context(socket.create_connection((host, int(port)), timeout=10))
            for _ in range(40)
        ]
        for sock in flood:
            sock.sendall(SLOW_HEAD)
        # The authenticated connection outlives a flood past the cap; the flood does not:
        # past the cap, they are closed as they come (the 8 within it wait for the header
        # timeout, 10 s, which this looks at none of).
        assert _request(kept, get_stats).startswith(b"HTTP/1.1 200")
        for sock in flood:
            sock.setblocking(False)  # (a look, not a wait)
        deadline = time.monotonic() + 3  # (less than the silent ones' grace, 5 s)
        while (closed := sum(_closed_by_peer(sock) for sock in flood)) < 40 - 8:
            assert time.monotonic() < deadline, f"only {closed} of 40 connections closed in 3 s"
            time.sleep(0.05)
        assert closed == 40 - 8, f"{closed} of 40 closed: some within the cap were too"
        # A body announced but not sent is not waited for past the body timeout.
        slow = stack.enter_context(socket.create_connection((host, int(port)), timeout=10))
        slow.sendall(
            b"POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"task_id": '
        )
        started = time.monotonic()
        slow.settimeout(10)
        assert _closed_by_peer(slow) or slow.recv(65536) == b""
        assert time.monotonic() - started < 5


def test_silent_connections_past_the_cap_are_closed_after_their_grace(service_process):
    """Connections that send nothing may be a client's burst about to write (previous
    test): past the cap they are closed once they have had SEND_GRACE_S, not before."""
    svc = service_process("--max-unauthenticated-connections", "8", env={"SEAL_ENV_TOKEN": TOKEN})
    host, port = svc.url.removeprefix("http://").split(":")
    with contextlib.ExitStack() as stack:
        silent = [
            stack.enter_context(socket.create_connection((host, int(port)), timeout=10))
            for _ in range(60)
        ]
        time.sleep(0.5)
        for sock in silent:
            sock.setblocking(False)  # (a look, not a wait)
        early = sum(_closed_by_peer(sock) for sock in silent)
        time.sleep(SEND_GRACE_S + 1.0)
        late = sum(_closed_by_peer(sock) for sock in silent)
    assert early == 0, f"{early} silent connections were closed before their grace"
    assert late >= 60 - 8, f"only {late} of 60 silent connections closed after their grace"
    assert httpx.get(f"{svc.url}/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"},
                     timeout=10).json()["connections_closed_unauthenticated"] >= 52  # fmt: skip


# --- HEAD /healthz --------------------------------------------------------------------------


def test_head_healthz_answers_200(service):
    svc = service(token="t")
    reply = svc.http.head("/healthz")
    assert reply.status_code == 200 and reply.content == b""


# --- issue #31: a client's own burst, undelivered creates, ids clients normalise ----------------


def _burst(svc, n: int, head: bytes) -> list[bytes]:
    """Open `n` connections as a client's pool does in a burst (aiohttp connects them all,
    then writes each request: for a moment the service holds `n` connections that have
    sent nothing), then send a request on each; every reply's status line, or what
    ended the connection."""
    host, port = svc.url.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port)), timeout=60) for _ in range(n)]
    time.sleep(0.2)  # the service has taken them all in
    for sock in socks:
        with contextlib.suppress(OSError):  # closed already: its reply says so below
            sock.sendall(head)
    statuses = []
    for sock in socks:
        try:
            reply = sock.recv(64)
            statuses.append(reply.split(b"\r\n", 1)[0] or b"closed")
        except OSError as e:
            statuses.append(type(e).__name__.encode())
        finally:
            sock.close()
    return statuses


@pytest.mark.parametrize("pool", [256, 1024])
def test_a_clients_own_burst_is_never_cut(service_process, pool):
    """A paper step opens its client's whole pool at once (32 x 8 = 256 episodes; several
    agent-loop workers: 1,024): every connection sends its request at once and none may
    be closed as a connection that did not authenticate."""
    svc = service_process(env={"SEAL_ENV_TOKEN": TOKEN})
    head = f"GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    statuses = _burst(svc, pool, head.encode())
    cut = [s for s in statuses if s != b"HTTP/1.1 200 OK"]
    assert not cut, f"{len(cut)} of {pool} connections were not answered: {set(cut)}"


def test_a_create_whose_client_left_is_released(service_process):
    """A client that sends a create and closes its socket never learns the episode's id:
    the episode must not stay live until its TTL."""
    svc = service_process()
    host, port = svc.url.removeprefix("http://").split(":")
    bodies = [("/v1/episodes", {"task_id": TASK, "episode_id": f"left-{k}"}) for k in range(3)] + [
        ("/create", {"env_type": "bfcl", "task_id": TASK, "instance_id": f"wire-left-{k}"})
        for k in range(3)
    ]
    # The service is stopped while the clients send and close: each create is read with
    # its client's end-of-file behind it. (Running, a service could answer before a
    # descheduled client closed, which no service can tell from a client that read the
    # reply and then left: under load the test failed so.)
    os.kill(svc.proc.pid, signal.SIGSTOP)
    try:
        for path, body in bodies:
            data = json.dumps(body).encode()
            head = (
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode()
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(head + data)
    finally:
        os.kill(svc.proc.pid, signal.SIGCONT)
    # Released within seconds (a loaded machine may take a few), not at the 1 h TTL.
    wait_for(lambda: httpx.get(f"{svc.url}/v1/stats", timeout=10).json()["live_episodes"] == 0, 60)
    assert httpx.get(f"{svc.url}/v1/stats", timeout=10).json()["created"] == 6


@pytest.mark.parametrize("bad_id", [".", "..", "%2e", "%2E%2e", ".%2e", "%2e.", "%252e"])
def test_ids_a_client_would_normalise_are_refused(service, bad_id):
    """`.` and `..` (and their percent-encodings) vanish from a URL's path in every HTTP
    client (the project's own aiohttp client sends `/v1/episodes/..` as `/v1/`): an episode
    with such an id could never be stepped or released."""
    svc = service()
    native = svc.http.post("/v1/episodes", json={"task_id": TASK, "episode_id": bad_id})
    assert native.status_code == 422, native.text
    wire = svc.http.post(
        "/create", json={"env_type": "bfcl", "task_id": TASK, "instance_id": bad_id}
    )
    assert wire.status_code == 422, wire.text
    assert stats(svc)["live_episodes"] == 0
