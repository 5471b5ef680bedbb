"""The native API on bad input: malformed bodies and steps, unknown and closed episodes,
reused ids, steps after the end, oversized messages, unparseable calls, the busy cap and
idle expiry; each gets a clear status and leaves the episode as it was."""

import asyncio
import time

import pytest
from conftest import call_text, gt_turns, native_step, results

from env_service.engine import EnvEngine, ServiceConfig
from env_service.errors import NotFoundError
from seal.bfcl.ground_truth import ground_truth_trajectory
from seal.bfcl.tasks import load_task
from seal.service_contract import EpisodeSettings

# --- bad input ------------------------------------------------------------------------------


def test_malformed_bodies(service):
    svc = service()
    bad = {"content": b"{not json", "headers": {"content-type": "application/json"}}
    native = svc.http.post("/v1/episodes", **bad)
    assert native.status_code == 422 and "detail" in native.json()
    assert svc.http.post("/v1/episodes", json={"episode_id": "x"}).status_code == 422


@pytest.mark.parametrize(
    ("what", "body"),
    [
        ("not an object", b"[1, 2]"),
        ("no content", b'{"tool_calls": []}'),
        ("seq below 1", b'{"content": "", "tool_calls": [], "seq": 0}'),
        ("huge integer", b'{"content": "", "tool_calls": [], "seq": 1' + b"1" * 5000 + b"}"),
    ],
)
def test_malformed_steps_are_422_and_leave_the_episode_as_it_was(service, what, body):
    svc = service()
    episode_id, _ = svc.create("multi_turn_base_0")
    path = f"/v1/episodes/{episode_id}/steps"
    reply = svc.http.post(path, content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 422 and "detail" in reply.json(), what
    assert svc.http.get(f"/v1/episodes/{episode_id}").json()["steps"] == 0


def test_a_bug_in_a_step_is_a_500_naming_it(service, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    svc = service()
    monkeypatch.setattr(svc.engine, "astep", broken)
    # Starlette's test client re-raises a server's exception unless told not to.
    monkeypatch.setattr(svc.http._transport, "raise_server_exceptions", False)
    episode_id, _ = svc.create("multi_turn_base_0")
    reply = svc.http.post(
        f"/v1/episodes/{episode_id}/steps", json={"content": "", "tool_calls": []}
    )
    assert reply.status_code == 500
    assert reply.json() == {"detail": "internal error: RuntimeError: a bug"}


def test_unknown_task(service):
    svc = service()
    unknown = svc.http.post("/v1/episodes", json={"task_id": "multi_turn_base_999"})
    assert unknown.status_code == 404 and "multi_turn_base_999" in unknown.json()["detail"]
    assert svc.http.post("/v1/episodes", json={"task_id": "nope_1"}).status_code == 404
    assert svc.http.get("/v1/tasks/multi_turn_base_999").status_code == 404


def test_unknown_and_closed_episodes(service):
    svc = service()
    http = svc.http
    assert http.post("/v1/episodes/ghost/steps", json=native_step("x", None)).status_code == 404
    assert http.get("/v1/episodes/ghost/evaluation").status_code == 404
    assert http.get("/v1/episodes/ghost").status_code == 404
    assert http.delete("/v1/episodes/ghost").status_code == 404
    episode_id, _ = svc.create("multi_turn_base_1")
    svc.close(episode_id)
    assert episode_id in svc.step(episode_id, "hi", expect=404)["detail"]
    assert http.get(f"/v1/episodes/{episode_id}/evaluation").status_code == 404
    assert http.delete(f"/v1/episodes/{episode_id}").status_code == 404


def test_reused_episode_id_is_a_conflict(service):
    svc = service()
    svc.create("multi_turn_base_1", "mine")
    other = svc.http.post(
        "/v1/episodes", json={"task_id": "multi_turn_base_2", "episode_id": "mine"}
    )
    assert other.status_code == 409 and "already in use" in other.json()["detail"]
    assert svc.http.get("/v1/episodes/mine").json()["task_id"] == "multi_turn_base_1"
    # Same task and settings before any step is a retried create (answered, see
    # test_native_retries_are_answered_not_rerun); other settings are a conflict.
    native = svc.http.post(
        "/v1/episodes",
        json={
            "task_id": "multi_turn_base_1",
            "episode_id": "mine",
            "settings": {"mode": "validate"},
        },
    )
    assert native.status_code == 409
    svc.close("mine")
    svc.create("multi_turn_base_2", "mine")  # free again after close


def test_step_after_the_end_native(service):
    http = service().http
    http.post("/v1/episodes", json={"task_id": "multi_turn_base_167", "episode_id": "e"})
    for _ in range(load_task("multi_turn_base_167").num_turns):
        http.post("/v1/episodes/e/steps", json=native_step("no", None))
    response = http.post("/v1/episodes/e/steps", json=native_step("no", None))
    assert response.status_code == 409 and "has ended" in response.json()["detail"]


def test_oversized_message(service):
    svc = service(max_message_chars=200)
    episode_id, _ = svc.create("multi_turn_base_1")
    error = svc.step(episode_id, "x" * 201, expect=413)
    assert "201 characters exceeds the limit of 200" in error["detail"]
    # Refused messages were not counted; the episode goes on normally.
    svc.step(episode_id, call_text("pwd"))
    assert svc.evaluate(episode_id)["steps"] == 1


def test_unparseable_calls_are_observations_not_http_failures(service):
    svc = service()
    episode_id, _ = svc.create("multi_turn_base_1", mode="validate", prompt="rich")
    text = (
        '<tool_call>\n{"name": "ls", "arguments": {"a": true}\n</tool_call>\n'
        '<tool_call>\n{"name": "mv", "arguments": {"source": "x"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "cd", "arguments": {"dir": "x"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "pwd"'
    )
    answered = results(svc.step(episode_id, text))
    assert len(answered) == 4
    assert answered[0].startswith("Error: could not parse tool call: the block is not valid JSON")
    assert answered[1] == "Error: mv is missing required argument(s) ['destination']"
    assert answered[2] == "Error: cd got unexpected argument(s) ['dir']; allowed: ['folder']"
    assert "not closed with </tool_call>" in answered[3]
    report = svc.evaluate(episode_id)
    assert report["invalid_calls"] == 4
    assert report["invalid_by_kind"] == {
        "parse": 2,
        "missing_argument": 1,
        "unexpected_argument": 1,
    }
    assert report["tool_calls"] == 0


@pytest.mark.parametrize("prompt", ["paper", "rich"])
def test_end_on_malformed_call_ends_the_episode_at_a_malformed_call(service, prompt):
    """With the setting (the release's terminate_on_parse_error), a tool not available is
    still answered and the episode plays on; a message with a malformed call ends it, runs
    none of its calls, and the evaluation says so. Without it, the same message is
    answered."""
    svc = service()
    task_id = "multi_turn_base_1"
    bad = '<tool_call>\n{"name": "ls", "arguments": {"a": tru}}\n</tool_call>'
    malformed = call_text("pwd") + "\n" + bad
    settings = {"mode": "validate", "prompt": prompt, "end_on_malformed_call": True}
    episode_id, _ = svc.create(task_id, **settings)
    first = gt_turns(task_id)[0]
    svc.play(episode_id, [first])  # the first turn, answered
    unknown = svc.step(episode_id, call_text("format_disk"))
    assert not unknown["terminated"] and unknown["messages"]
    ended = svc.step(episode_id, malformed)
    assert ended["terminated"] and not ended["truncated"] and ended["messages"] == []
    report = ended["evaluation"]
    assert report["ended_on_malformed_call"] and report["accuracy"] == 0
    ran = sum(len(calls) for calls in ground_truth_trajectory(load_task(task_id))[0])
    assert report["turns_reached"] == 2 and report["tool_calls"] == ran  # turn 0's only
    assert report["invalid_by_kind"] == {"unknown_tool": 1, "parse": 1}
    svc.step(episode_id, "Done.", expect=409)

    plays_on, _ = svc.create(task_id, mode="validate", prompt=prompt)
    answered = svc.step(plays_on, malformed)
    assert not answered["terminated"] and answered["messages"]
    assert svc.evaluate(plays_on)["ended_on_malformed_call"] is False


def test_busy_cap_loses_nothing(service):
    svc = service(max_live_episodes=2)
    first, _ = svc.create("multi_turn_base_1")
    second, _ = svc.create("multi_turn_base_1")
    busy = svc.http.post("/v1/episodes", json={"task_id": "multi_turn_base_1"})
    assert busy.status_code == 503 and "busy" in busy.json()["detail"]
    assert busy.headers["retry-after"] == "1"
    for episode_id in (first, second):
        assert "workspace" in results(svc.step(episode_id, call_text("ls")))[0]
    assert svc.engine.stats()["rejected_busy"] == 1
    svc.close(first)
    svc.create("multi_turn_base_1")


def test_idle_episodes_expire_in_the_engine():
    engine = EnvEngine(ServiceConfig(episode_ttl_s=60, workers=0))

    async def scenario():
        idle, ep_idle = await engine.acreate("multi_turn_base_1", EpisodeSettings())
        busy, ep_busy = await engine.acreate("multi_turn_base_1", EpisodeSettings())
        ep_idle.last_used -= 120
        ep_busy.last_used -= 120
        engine.get(busy)  # any use refreshes it
        assert engine.expire_idle() == 1
        assert list(engine.episodes) == [busy]
        assert list(engine.pool.episodes) == [busy]  # its backends went with it
        with pytest.raises(NotFoundError):
            await engine.astep(idle, "hello")
        # A later create also sweeps.
        ep_busy.last_used -= 120
        await engine.acreate("multi_turn_base_1", EpisodeSettings())
        assert busy not in engine.episodes
        assert engine.stats()["expired"] == 2

    asyncio.run(scenario())


def test_idle_episodes_expire_behind_http(service):
    svc = service(episode_ttl_s=0.2)
    episode_id, _ = svc.create("multi_turn_base_1")
    deadline = time.monotonic() + 10
    while episode_id in svc.engine.episodes and time.monotonic() < deadline:
        time.sleep(0.05)  # the service's own background sweep drops it
    assert episode_id in svc.step(episode_id, call_text("pwd"), expect=404)["detail"]
    assert svc.engine.stats()["expired"] == 1
