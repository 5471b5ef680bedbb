"""No client can steer the service, and its schema says what it answers.

- A bearer token guards every endpoint but `GET /healthz` (`/docs`, `/openapi.json` and
  the profile included); a non-loopback bind without one is refused; `GET /v1/whoami`
  answers 200 only with the right token. The pushed profile is schema-checked and
  size-limited. A truncated `--capability-state` file stops the service from starting,
  and, truncated later, breaks no `/create` (validation never reads it). A full episode
  cap answers 503 with Retry-After.
- The OpenAPI schema lists every status each route answers.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from test_interface_layers import system_text, write_state

from env_service import __main__ as service_main
from env_service import interface_layers
from env_service.app import create_app
from env_service.engine import ServiceConfig
from seal.bfcl import tags as T

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RELEASE_POSTS = ["/create", "/step", "/evaluate", "/release", "/get_info", "/get_env_profile"]


def routes_of(app) -> list:
    """Every route of the app, those of included routers too."""
    found = []
    for route in app.routes:
        included = getattr(route, "original_router", None)  # FastAPI >= 0.165
        found.extend(included.routes if included is not None else [route])
    return found


def every_route(app) -> list[tuple[str, str, str]]:
    """(method, path, route path) of every route the app serves, path parameters filled."""
    found = []
    for route in routes_of(app):
        for method in sorted(getattr(route, "methods", None) or []):
            if method == "HEAD":
                continue
            path = route.path.replace("{episode_id}", "e1").replace("{task_id}", "t1")
            found.append((method, path, route.path))
    return found


# --- the token ---------------------------------------------------------------------------------


def test_every_endpoint_but_healthz_needs_the_token(service):
    svc = service(token=TOKEN)
    http = svc.http
    routes = every_route(http.app)
    paths = {path for _, path, _ in routes}
    assert {"/docs", "/openapi.json", "/v1/profile", "/v1/whoami", "/create"} <= paths
    for method, path, _ in routes:
        if (method, path) == ("GET", "/healthz"):
            continue
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            # An absolute URL: httpx reads "//get_env_profile" alone as a host name.
            reply = http.request(method, f"http://testserver{path}", headers=headers, json={})
            assert reply.status_code == 401, (method, path, headers, reply.status_code)
            assert reply.headers["www-authenticate"] == "Bearer"
            body = reply.json()
            if path in RELEASE_POSTS or path == "//get_env_profile":
                assert body["success"] is False and "token" in body["error"]
            else:
                assert "token" in body["detail"]
        allowed = http.request(method, f"http://testserver{path}", headers=AUTH, json={})
        assert allowed.status_code != 401, (method, path)
    assert http.get("/healthz").status_code == 200
    assert http.get("/no/such/path").status_code == 401  # nothing is told without it
    # The token is also what the native clients send: a whole episode with it.
    created = http.post("/v1/episodes", json={"task_id": "multi_turn_base_0"}, headers=AUTH)
    assert created.status_code == 201


def test_whoami_answers_200_only_with_the_right_token(service):
    http = service(token=TOKEN).http
    me = http.get("/v1/whoami", headers=AUTH)
    assert me.status_code == 200 and me.json()["service"] == "seal-bfcl-env"
    assert me.json()["pid"] == os.getpid()  # in-process here; a launcher compares its child's
    # Its settings, which a run records and a resume compares; never its token.
    settings = me.json()["settings"]
    assert settings["max_calls_per_step"] == 128 and "token" not in settings
    assert TOKEN not in me.text
    assert http.get("/v1/whoami").status_code == 401
    assert http.get("/v1/whoami", headers={"Authorization": "Bearer x"}).status_code == 401
    # A service started without a token cannot prove it is anyone's: never 200.
    open_service = service().http
    refused = open_service.get("/v1/whoami", headers=AUTH)
    assert refused.status_code == 403 and "without a token" in refused.json()["detail"]


@pytest.fixture
def started(monkeypatch):
    """Run `python -m env_service ARGS` up to uvicorn.run; returns its arguments."""
    calls = []
    monkeypatch.setattr(service_main.uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    monkeypatch.delenv("SEAL_ENV_TOKEN", raising=False)

    def start(*argv: str):
        service_main.main(list(argv))
        app, kw = calls.pop()
        return app.state.engine.config, kw

    return start


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.org"])
def test_a_non_loopback_bind_needs_a_token(started, capsys, host):
    with pytest.raises(SystemExit) as stopped:
        started("--host", host)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert host in err and "--token" in err and "SEAL_ENV_TOKEN" in err
    config, kw = started("--host", host, "--token", TOKEN)
    assert config.token == TOKEN and kw["host"] == host


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_binds_need_no_token(started, host):
    config, kw = started("--host", host)
    assert config.token is None and kw["host"] == host


def test_the_token_can_come_from_the_environment(started, monkeypatch):
    monkeypatch.setenv("SEAL_ENV_TOKEN", TOKEN)
    config, _ = started("--host", "0.0.0.0")
    assert config.token == TOKEN
    config, _ = started("--token", "other")  # the flag wins
    assert config.token == "other"


# --- the failure profile -------------------------------------------------------------------------


def test_the_pushed_profile_is_checked(service):
    svc = service()
    http = svc.http
    good = {"tags": [{"tag": T.STATE_MISMATCH, "share": 0.4, "count": 10, "mean_reward": 0.1}]}
    assert http.put("/v1/profile", json=good).status_code == 200
    for bad in [
        {"tags": [{}]},  # before: accepted, then every guided /create answered 500
        {"tags": [{"tag": 5}]},
        {"tags": [{"tag": T.STATE_MISMATCH, "share": "most"}]},
        {"tags": [{"tag": T.STATE_MISMATCH, "share": 2.0}]},
        {"tags": "state_mismatch"},
        {"tags": [{"tag": T.STATE_MISMATCH}] * 65},
        [1, 2],
    ]:
        reply = http.put("/v1/profile", json=bad)
        assert reply.status_code == 422, (bad, reply.text)
    # Refused profiles changed nothing: guided episodes still get the good one.
    assert http.get("/v1/profile").json()["profile"]["tags"] == good["tags"]
    guided = system_text(svc, "multi_turn_base_0", guidelines=True)
    assert interface_layers.GUIDELINES[T.STATE_MISMATCH] in guided


def test_the_pushed_profile_is_size_limited(service):
    http = service().http
    huge = json.dumps({"tags": [{"tag": T.STATE_MISMATCH}] * 100_000})  # before: accepted
    reply = http.put("/v1/profile", content=huge, headers={"content-type": "application/json"})
    assert reply.status_code == 413 and "limit" in reply.json()["detail"]
    assert http.get("/v1/profile").json()["profile"] is None


def truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    later = os.stat(path).st_mtime + 5
    os.utime(path, (later, later))


def test_a_truncated_capability_state_stops_the_service_from_starting(tmp_path, started, capsys):
    path = write_state(tmp_path, T.STATE_MISMATCH)
    truncate(path)
    with pytest.raises(ValueError, match=str(path)):
        create_app(ServiceConfig(capability_state_path=path))
    with pytest.raises(SystemExit) as stopped:
        started("--capability-state", str(path))
    assert stopped.value.code == 2
    assert str(path) in capsys.readouterr().err


def test_a_capability_state_truncated_later_breaks_no_create(service, tmp_path, caplog):
    path = write_state(tmp_path, T.STATE_MISMATCH)
    svc = service(capability_state_path=path)
    guided = system_text(svc, "multi_turn_base_0", guidelines=True)
    assert interface_layers.GUIDELINES[T.STATE_MISMATCH] in guided
    truncate(path)
    with caplog.at_level(logging.WARNING, logger="env_service"):
        # Validation never reads the file; guided episodes keep the last good profile.
        svc.create("multi_turn_base_0", mode="validate")
        assert system_text(svc, "multi_turn_base_0", guidelines=True) == guided
        assert system_text(svc, "multi_turn_base_1", guidelines=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0]
    profile = svc.http.get("/v1/profile").json()
    assert profile["profile"]["tags"][0]["tag"] == T.STATE_MISMATCH
    assert str(path) in profile["warning"]
    http = svc.http
    created = http.post("/v1/episodes", json={"task_id": "multi_turn_base_0"})
    assert created.status_code == 201


def test_a_full_episode_cap_says_when_to_retry(service):
    svc = service(max_live_episodes=1)
    svc.create("multi_turn_base_1")
    release_reply = svc.http.post(
        "/create", json={"env_type": "bfcl", "task_id": "multi_turn_base_1"}
    )
    native = svc.http.post("/v1/episodes", json={"task_id": "multi_turn_base_1"})
    for reply in (release_reply, native):
        assert reply.status_code == 503
        assert int(reply.headers["retry-after"]) >= 1
    assert "1 live episodes (limit 1)" in release_reply.json()["error"]


# --- the schema ------------------------------------------------------------------------------------


def test_the_schema_lists_every_status_each_route_answers(service):
    svc = service(token=TOKEN, max_live_episodes=2, max_body_bytes=20_000)
    http = svc.http
    # The test client re-raises the service's errors unless told to show the answer.
    http._transport.raise_server_exceptions = False
    seen: set[tuple[str, str, int]] = set()

    def ask(method: str, route: str, path: str | None = None, auth: bool = True, **kw):
        kw["headers"] = {**(AUTH if auth else {}), **kw.get("headers", {})}
        reply = http.request(method, f"http://testserver{path or route}", **kw)
        seen.add((method.lower(), route, reply.status_code))
        return reply

    def step(content: str = "x", seq: int | None = None) -> dict:
        return {"content": content, "tool_calls": [], "seq": seq}

    for method, path, route in every_route(http.app):
        ask(method, route, path, auth=False)  # 401 (200 for /healthz)
    big = "y" * 30_000
    e = "/v1/episodes/{episode_id}"
    ask("POST", "/v1/episodes", json={"task_id": "multi_turn_base_0", "episode_id": "e1"})
    ask(
        "POST",
        "/v1/episodes",
        json={"task_id": "multi_turn_base_0", "episode_id": "e1", "settings": {"mode": "validate"}},
    )  # 409
    ask("POST", "/v1/episodes", json={"task_id": "multi_turn_base_999"})  # 404
    ask("POST", "/v1/episodes", json={"task_id": 5})  # 422
    ask("POST", "/v1/episodes", json={"task_id": big})  # 413
    ask("POST", "/v1/episodes", json={"task_id": "multi_turn_base_0", "episode_id": "e2"})
    ask("POST", "/v1/episodes", json={"task_id": "multi_turn_base_0"})  # 503
    ask("POST", "/create", json={"task_id": "multi_turn_base_0", "instance_id": "w1"})  # 503
    ask("POST", f"{e}/steps", "/v1/episodes/e1/steps", json=step(seq=1))
    ask("POST", f"{e}/steps", "/v1/episodes/e1/steps", json=step(seq=5))  # 409
    ask("POST", f"{e}/steps", "/v1/episodes/e1/steps", json=step(big))  # 413
    ask("POST", f"{e}/steps", "/v1/episodes/e1/steps", json={"content": 1})  # 422
    ask("POST", f"{e}/steps", "/v1/episodes/ghost/steps", json=step())  # 404
    for sub in ("/evaluation", ""):
        ask("GET", e + sub, "/v1/episodes/e1" + sub)
        ask("GET", e + sub, "/v1/episodes/ghost" + sub)
    ask("DELETE", e, "/v1/episodes/e1", params={"evaluate": "true"})
    ask("DELETE", e, "/v1/episodes/e2")
    ask("DELETE", e, "/v1/episodes/e2")  # 404
    ask("DELETE", e, "/v1/episodes/e2", params={"evaluate": "maybe"})  # 422
    ask("GET", "/v1/tasks/{task_id}", "/v1/tasks/multi_turn_base_0")
    ask("GET", "/v1/tasks/{task_id}", "/v1/tasks/multi_turn_base_999")
    ask("PUT", "/v1/profile", json={"tags": []})
    ask("PUT", "/v1/profile", json={"tags": [{}]})  # 422
    ask("PUT", "/v1/profile", json={"tags": [{"tag": big}]})  # 413
    for path in ("/v1/profile", "/v1/stats", "/v1/whoami", "/openapi.json", "/docs", "/healthz"):
        ask("GET", path)
    ask("GET", "/v1/whoami", headers={"Authorization": "Bearer no"}, auth=False)
    for path in ("/create", "/step", "/evaluate", "/release", "/get_info", "/get_env_profile"):
        ask("POST", path, json=[1])  # 422
        ask("POST", path, json={"instance_id": "w1", "messages": {"content": big}})  # 413
        ask(
            "POST",
            path,
            json={
                "env_type": "bfcl",
                "task_id": "multi_turn_base_999",
                "instance_id": "ghost",
                "params": {"split": "nope"},
                "messages": {"role": "assistant", "content": "x"},
            },
        )  # 404
    ask("POST", "/create", json={"env_type": "webshop", "task_id": "multi_turn_base_0"})  # 400
    ask("POST", "/create", json={"task_id": "multi_turn_base_0", "instance_id": "w1"})
    ask(
        "POST",
        "/create",
        json={
            "task_id": "multi_turn_base_0",
            "instance_id": "w1",
            "params": {"rollout_mode": "validate"},
        },
    )  # 409
    ask("POST", "/get_env_profile", json={"params": {"split": "train"}})
    for path in ("/step", "/evaluate", "/get_info", "/release"):
        ask("POST", path, json={"instance_id": "w1", "messages": {"content": "done"}})
    assert not [s for s in seen if s[2] >= 500 and s[2] != 503]
    schema = http.get("/openapi.json", headers=AUTH).json()["paths"]
    missing = sorted(
        (method, route, status)
        for method, route, status in seen
        if str(status) not in schema.get(route, {}).get(method, {}).get("responses", {})
        and route in schema
    )
    assert missing == []
    assert {r for _, r, _ in seen} >= set(schema)  # every route was asked
    for route, methods in schema.items():
        for method, operation in methods.items():
            statuses = set(operation["responses"])
            if route != "/healthz":
                assert "401" in statuses, (route, method)
