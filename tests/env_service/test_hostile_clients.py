"""No client reaches the service's filesystem or gets past its checks of what it sends.

- A client names no file the service reads: the release protocol `/create`'s
  `diagnostic_evolution.state_path` is refused (422, naming `--capability-state`, the
  operator's option) before anything is opened, so a FIFO there stalls nothing and a
  file's existence cannot be probed.
- Every string and number a client sends is checked before anything is created: a lone
  surrogate in an id is a 422 and leaves no episode live, on both protocols; NaN and
  +-1e400 in numeric fields are a 422, not a 500.
- Ids have a length limit, and ids an HTTP client would normalise away are refused.
- `HEAD /healthz` answers 200.

Connections that hold the service's capacity: test_connections.py.
"""

from __future__ import annotations

import os

import httpx
import pytest
from fastapi.testclient import TestClient

from env_service.app import create_app
from env_service.service_config import ServiceConfig

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
    release_reply = svc.http.post(
        "/create", json={"env_type": "bfcl", "task_id": TASK, "instance_id": bad_id}
    )
    assert release_reply.status_code == 422, release_reply.text[:300]
    assert why in release_reply.json()["error"]
    task = svc.http.post("/v1/episodes", json={"task_id": bad_id})
    assert task.status_code == 422, task.text[:300]
    assert len(task.content) < 2000  # the reply does not echo a huge id back
    assert stats(svc)["live_episodes"] == 0


def test_a_reply_that_cannot_be_sent_releases_its_episode(monkeypatch):
    from env_service import api_native
    from env_service.release_protocol import api as release_api

    def broken(*args, **kwargs):
        raise RuntimeError("the reply could not be built")

    monkeypatch.setattr(api_native, "_created", broken)
    monkeypatch.setattr(release_api, "ok", broken)
    with TestClient(create_app(ServiceConfig()), raise_server_exceptions=False) as http:
        assert http.post("/v1/episodes", json={"task_id": TASK}).status_code == 500
        body = {"env_type": "bfcl", "task_id": TASK, "instance_id": "w"}
        assert http.post("/create", json=body).status_code == 500
        assert http.get("/v1/stats").json()["live_episodes"] == 0


# --- HEAD /healthz --------------------------------------------------------------------------


def test_head_healthz_answers_200(service):
    svc = service(token="t")
    reply = svc.http.head("/healthz")
    assert reply.status_code == 200 and reply.content == b""


@pytest.mark.parametrize("bad_id", [".", "..", "%2e", "%2E%2e", ".%2e", "%2e.", "%252e"])
def test_ids_a_client_would_normalise_are_refused(service, bad_id):
    """`.` and `..` (and their percent-encodings) vanish from a URL's path in every HTTP
    client (the project's own aiohttp client sends `/v1/episodes/..` as `/v1/`): an episode
    with such an id could never be stepped or closed."""
    svc = service()
    native = svc.http.post("/v1/episodes", json={"task_id": TASK, "episode_id": bad_id})
    assert native.status_code == 422, native.text
    release_reply = svc.http.post(
        "/create", json={"env_type": "bfcl", "task_id": TASK, "instance_id": bad_id}
    )
    assert release_reply.status_code == 422, release_reply.text
    assert stats(svc)["live_episodes"] == 0
