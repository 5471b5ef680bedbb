"""env_service/hot_routes.py answers creates and steps exactly as FastAPI's routes do.

The same requests go to two fresh services: once as `application/json` (served by the hot
routes) and once as `application/merge-patch+json`, a JSON type FastAPI parses like any
other but the hot routes hand on, so FastAPI's own routes answer. Statuses, content
types and bodies must be equal, errors included; the hot routes' counter shows which of
them answered.
"""

from __future__ import annotations

import json

import pytest

from env_service.hot_routes import HotRoutes
from seal.bfcl.ground_truth import ground_truth_trajectory
from seal.bfcl.tasks import load_task

HOT = "application/json"
FASTAPI = "application/merge-patch+json"


def hot_routes_of(app) -> HotRoutes:
    layer = app.middleware_stack
    while not isinstance(layer, HotRoutes):
        layer = layer.app
    return layer


def ground_truth_steps(task_id: str) -> list[dict]:
    steps, seq = [], 1
    for turn in ground_truth_trajectory(load_task(task_id)):
        for calls in [*turn, []]:  # each message of the turn, then the closing answer
            arguments = [{"name": c.name, "arguments": c.kwargs} for c in calls]
            steps.append({"content": "", "tool_calls": arguments, "seq": seq})
            seq += 1
    return steps


def script(task_id: str) -> list[tuple[str, str, object]]:
    """(path, what, body) per request: an episode played to its end, then each error
    the two routes answer."""
    ep = "/v1/episodes/hot-1"
    requests = [("/v1/episodes", "create", {"task_id": task_id, "episode_id": "hot-1"})]
    requests += [
        (f"{ep}/steps", f"ground-truth step {s['seq']}", s) for s in ground_truth_steps(task_id)
    ]
    requests += [
        ("/v1/episodes", "unknown task", {"task_id": "multi_turn_base_99999"}),
        ("/v1/episodes", "a second episode", {"task_id": task_id, "episode_id": "hot-2"}),
        ("/v1/episodes", "id in use", {"task_id": "multi_turn_base_1", "episode_id": "hot-2"}),
        ("/v1/episodes", "a repeated create", {"task_id": task_id, "episode_id": "hot-2"}),
        ("/v1/episodes", "unknown key", {"task_id": task_id, "colour": "red"}),
        (
            "/v1/episodes/hot-2/steps",
            "seq out of order",
            {"content": "", "tool_calls": [], "seq": 5},
        ),
        ("/v1/episodes/hot-2/steps", "seq below 1", {"content": "", "tool_calls": [], "seq": 0}),
        ("/v1/episodes/hot-2/steps", "not an object", [1, 2]),
        ("/v1/episodes/hot-2/steps", "no content", {"tool_calls": []}),
        (
            "/v1/episodes/hot-2/steps",
            "huge integer",
            b'{"content": "", "tool_calls": [], "seq": 1' + b"1" * 5000 + b"}",
        ),
        ("/v1/episodes/hot-2/steps", "not JSON", b"{content"),
        ("/v1/episodes/gone/steps", "unknown episode", {"content": "", "tool_calls": []}),
        ("/v1/episodes/hot-1/steps", "step after the end", {"content": "", "tool_calls": []}),
        (
            "/v1/episodes/hot-2/steps",
            "a malformed call",
            {"content": "x", "tool_calls": [{"error": "bad JSON"}], "seq": 1},
        ),
        ("/v1/episodes/hot-2/steps", "repeated seq", {"content": "x", "tool_calls": [], "seq": 1}),
    ]
    return requests


def play(service, content_type: str, task_id: str):
    svc = service(workers=0, max_message_chars=1000)
    answers = []
    for path, what, body in script(task_id):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        reply = svc.http.post(path, content=data, headers={"content-type": content_type})
        answers.append((what, reply.status_code, reply.headers["content-type"], reply.json()))
    return answers, hot_routes_of(svc.http.app).served


@pytest.mark.parametrize("task_id", ["multi_turn_base_0", "multi_turn_long_context_3"])
def test_hot_routes_answer_as_fastapi_does(service, task_id):
    hot, served_hot = play(service, HOT, task_id)
    plain, served_plain = play(service, FASTAPI, task_id)
    assert [a[:2] for a in hot] == [a[:2] for a in plain]
    for h, p in zip(hot, plain, strict=True):
        assert h == p, h[0]
    statuses = {what: status for what, status, _, _ in hot}
    assert statuses["create"] == 201 and statuses["a second episode"] == 201
    assert statuses["a repeated create"] == 201
    assert statuses["unknown task"] == 404 and statuses["unknown episode"] == 404
    assert statuses["id in use"] == 409 and statuses["seq out of order"] == 409
    for malformed in ("unknown key", "seq below 1", "not an object", "huge integer", "not JSON"):
        assert statuses[malformed] == 422, malformed
    last_step = [a for a in hot if a[0].startswith("ground-truth step ")][-1]
    assert last_step[3]["terminated"] and last_step[3]["evaluation"]["accuracy"] == 1
    malformed = sum(statuses[w] == 422 for w in statuses)
    assert served_plain == 0
    assert served_hot == len(hot) - malformed  # every well-formed request, errors included


def test_a_bug_is_the_same_500_on_both_paths(service, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    svc = service(workers=0)
    monkeypatch.setattr(svc.engine, "astep", broken)
    # FastAPI's path re-raises a bug after answering it; the test client would raise it.
    monkeypatch.setattr(svc.http._transport, "raise_server_exceptions", False)
    created = svc.http.post("/v1/episodes", json={"task_id": "multi_turn_base_0"})
    path = f"/v1/episodes/{created.json()['episode_id']}/steps"
    body = json.dumps({"content": "", "tool_calls": []})
    answers = [
        svc.http.post(path, content=body, headers={"content-type": kind}) for kind in (HOT, FASTAPI)
    ]
    assert [a.status_code for a in answers] == [500, 500]
    assert (
        answers[0].json() == answers[1].json() == {"detail": "internal error: RuntimeError: a bug"}
    )
    assert hot_routes_of(svc.http.app).served == 2  # the create and the first step
