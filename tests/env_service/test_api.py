"""The native API end to end: the ground-truth policy scores 1, turns advance, bad input
gets a clear status, limits hold, and 256 concurrent episodes stay apart. The original
release's wire protocol has its own tests (tests/env_service/test_wire_*.py)."""

import asyncio
import json
import time

import httpx
import pytest
from bfcl_official import bfcl_globals_left
from conftest import gt_texts, gt_turns, results

from env_service.app import create_app
from env_service.engine import EnvEngine, ServiceConfig
from env_service.errors import NotFoundError
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import ground_truth_trajectory, tool_call_text
from seal.bfcl.tasks import load_task
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.env_client import EnvClient, EnvServiceError, call_body
from seal.rollout.protocol import EpisodeSettings
from seal.rollout.scripted import run_scripted_episode

ONE_PER_CATEGORY = [
    "multi_turn_base_0",
    "multi_turn_miss_func_0",
    "multi_turn_miss_param_0",
    "multi_turn_long_context_0",
]


def call_text(name, **arguments):
    return tool_call_text([ToolCall(name, arguments)])


# --- episodes ---------------------------------------------------------------------------------


def test_a_message_without_tool_calls_advances_the_turn(service):
    svc = service()
    task = load_task("multi_turn_base_0")
    episode_id, _ = svc.create(task.task_id)
    for turn in range(1, task.num_turns):
        data = svc.step(episode_id, "I would rather not.")
        question = task.questions[turn][0]["content"]
        assert [(m["role"], m["content"]) for m in data["messages"]] == [("user", question)]
        assert data["turn"] == turn
        assert (data["terminated"], data["reward"]) == (False, 0.0)
        assert svc.http.get(f"/v1/episodes/{episode_id}").json()["turn"] == turn
    last = svc.step(episode_id, "Still no.")
    assert (last["terminated"], last["reward"], last["messages"]) == (True, 0.0, [])
    report = last["evaluation"]
    assert report["failure_tags"] == ["empty_turn_model_response"] * task.num_turns
    assert (report["accuracy"], report["progress"]) == (0, 0.0)
    # Stepping an ended episode is a conflict, not a new turn.
    assert "has ended" in svc.step(episode_id, "hello?", expect=409)["detail"]


def test_holdout_tool_is_refused_before_its_turn_and_works_after(service):
    svc = service()
    task = load_task("multi_turn_miss_func_0")
    assert list(task.held_out) == [3] and task.held_out[3][0]["name"] == "sort"
    episode_id, created = svc.create(task.task_id, mode="validate")
    assert "sort" not in [d["name"] for d in created["tools"]]

    turns = gt_turns(task.task_id)
    svc.play(episode_id, turns[:2])
    # Turn 2 asks for sorting, but sort is not available yet: a clear refusal (the
    # paper's; the rich prompt's: test_evolution's BAD_CALLS).
    refused = svc.step(episode_id, call_text("sort", file_name="final_report.pdf"))
    assert refused["messages"] == [
        {
            "role": "env",
            "content": "[ERROR] Invalid tool call format: "
            "Tool 'sort' is not available in the current tool list.",
            "name": None,
            "hint": None,
            "tools": None,
        }
    ]
    reveal = svc.step(episode_id, "I cannot sort without a sort tool.")
    assert reveal["turn"] == 3
    [holdout] = reveal["messages"]
    assert holdout["role"] == "user" and holdout["tools"] == task.held_out[3]

    replies = svc.play(episode_id, turns[3:])
    assert "sorted_content" in results(replies[0])[0]
    assert replies[-1]["reward"] == 1.0
    report = replies[-1]["evaluation"]
    assert report["failure_tags"] == ["pass", "pass", "correct_abstention", "pass", "pass"]
    assert report["invalid_by_kind"] == {"unavailable_tool": 1}


def test_two_episodes_of_one_task_share_no_state(service):
    svc = service()
    first, _ = svc.create("multi_turn_base_1")
    second, _ = svc.create("multi_turn_base_1")
    svc.step(first, call_text("mkdir", dir_name="made_in_first"))
    svc.step(first, call_text("cd", folder="workspace"))
    assert results(svc.step(first, call_text("rm", file_name="log.txt"))) == [
        '{"result": "\'log.txt\' removed"}'
    ]
    [listing] = results(svc.step(second, call_text("ls", a=True)))
    assert "made_in_first" not in listing
    svc.step(second, call_text("cd", folder="workspace"))
    assert "log.txt" in results(svc.step(second, call_text("ls", a=True)))[0]
    assert "log.txt" not in results(svc.step(first, call_text("ls", a=True)))[0]


def test_max_steps_truncates(service):
    svc = service()
    episode_id, _ = svc.create("multi_turn_base_1", limits={"max_generations": 2})
    assert svc.step(episode_id, call_text("pwd"))["terminated"] is False
    data = svc.step(episode_id, call_text("pwd"))
    assert (data["terminated"], data["truncated"]) == (True, True)
    assert data["evaluation"]["truncated"] is True


# --- native API -------------------------------------------------------------------------------


def native_step(text: str, seq: int | None) -> dict:
    """A step body: the text and the calls the Qwen2.5 format parses from it."""
    calls = [call_body(c) for c in get_format(PAPER_QWEN).parse(text)]
    return {"content": text, "tool_calls": calls, "seq": seq}


def test_native_steps_take_structured_calls(service):
    """The native API runs the calls it is given, whatever text came with them; a call
    the client could not parse is answered with its error and counted (here under the
    rich prompt's rules, which answer each call); a step without `tool_calls` or with a
    call that is neither is refused."""
    http = service().http
    rich = {"prompt": "rich"}
    body = {"task_id": "multi_turn_base_0", "episode_id": "s", "settings": rich}
    http.post("/v1/episodes", json=body)
    calls = [{"name": "pwd"}, {"error": "bad JSON at char 3"}, {"name": "cd", "arguments": {}}]
    body = {"content": "[pwd(), ...] in any format", "tool_calls": calls, "seq": 1}
    reply = http.post("/v1/episodes/s/steps", json=body).json()
    assert [(m["role"], m["name"]) for m in reply["messages"]] == [
        ("tool", "pwd"),
        ("tool", None),
        ("tool", "cd"),
    ]
    assert "current_working_directory" in reply["messages"][0]["content"]
    assert reply["messages"][1]["content"] == "Error: could not parse tool call: bad JSON at char 3"
    assert "missing required argument" in reply["messages"][2]["content"]
    report = http.delete("/v1/episodes/s", params={"evaluate": "true"}).json()
    assert report["invalid_by_kind"] == {"parse": 1, "missing_argument": 1}
    assert report["tool_calls"] == 1
    http.post("/v1/episodes", json={"task_id": "multi_turn_base_0", "episode_id": "t"})
    for bad in [{"content": "x", "seq": 1}, {"content": "x", "tool_calls": [{}], "seq": 1}]:
        assert http.post("/v1/episodes/t/steps", json=bad).status_code == 422
    both = [{"name": "pwd", "error": "x"}]
    assert (
        http.post("/v1/episodes/t/steps", json={"content": "", "tool_calls": both}).status_code
        == 422
    )


@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_native_ground_truth_scores_one(service, task_id):
    http = service().http
    task = load_task(task_id)
    response = http.post("/v1/episodes", json={"task_id": task_id, "episode_id": "ep-1"})
    assert response.status_code == 201
    created = response.json()
    assert created["episode_id"] == "ep-1"
    assert [m["role"] for m in created["messages"]] == ["user"]
    assert created["system"] == []  # the paper's prompt, no layer: no sections
    assert created["tools"] == task.tools  # BFCL's docs, as data
    assert created["num_turns"] == task.num_turns

    info = http.get(f"/v1/tasks/{task_id}").json()
    assert info["held_out"] == {
        str(t): [d["name"] for d in docs] for t, docs in task.held_out.items()
    }
    assert info["tools"] == [d["name"] for d in task.tools]

    seq, rewards = 0, []
    for texts in gt_turns(task_id):
        for text in texts:
            seq += 1
            result = http.post("/v1/episodes/ep-1/steps", json=native_step(text, seq))
            assert result.status_code == 200
            assert result.json()["seq"] == seq
            rewards.append(result.json()["reward"])
            if not result.json()["terminated"]:
                assert result.json()["evaluation"] is None
                assert http.get("/v1/episodes/ep-1").json()["mode"] == "sample"
    final = result.json()
    assert final["terminated"] is True and rewards == [0.0] * (seq - 1) + [1.0]
    # The step that ends the episode carries the evaluation and releases the episode.
    report = final["evaluation"]
    assert report["accuracy"] == 1 and report["progress"] == 1.0
    assert len(report["failure_tags"]) == task.num_turns
    assert set(report["failure_tags"]) <= {"pass", "correct_abstention"}
    assert report["invalid_calls"] == 0 and report["tool_errors"] == 0
    assert report["terminated"] and not report["truncated"]
    assert http.get("/v1/episodes/ep-1").status_code == 404
    assert http.get("/v1/stats").json() | {"live_episodes": 0, "released": 1} == (
        http.get("/v1/stats").json()
    )
    assert bfcl_globals_left() == []


def test_native_retries_are_answered_not_rerun(service):
    """A create or step whose reply was lost is sent again by the client: the service
    answers the repeat with the first answer instead of running it twice."""
    http = service().http
    body = {"task_id": "multi_turn_base_0", "episode_id": "ep-r"}
    first = http.post("/v1/episodes", json=body)
    assert http.post("/v1/episodes", json=body).json() == first.json()
    other_task = {**body, "task_id": "multi_turn_base_1"}
    assert http.post("/v1/episodes", json=other_task).status_code == 409

    texts = gt_texts("multi_turn_base_0")
    step1 = http.post("/v1/episodes/ep-r/steps", json=native_step(texts[0], 1)).json()
    again = http.post("/v1/episodes/ep-r/steps", json=native_step(texts[0], 1)).json()
    assert again == step1
    status = http.get("/v1/episodes/ep-r").json()
    assert status["steps"] == 1  # ran once
    assert http.post("/v1/episodes", json=body).status_code == 409  # stepped: not a retry
    gap = http.post("/v1/episodes/ep-r/steps", json=native_step(texts[1], 3))
    assert gap.status_code == 409 and "expected 2" in gap.json()["detail"]
    for seq, text in enumerate(texts[1:], start=2):
        last = http.post("/v1/episodes/ep-r/steps", json=native_step(text, seq))
    assert last.json()["terminated"] and last.json()["evaluation"]["accuracy"] == 1
    # The final answer survives the release for a retried final step.
    repeat = http.post("/v1/episodes/ep-r/steps", json=native_step(texts[-1], seq))
    assert repeat.json() == last.json()
    late = http.post("/v1/episodes/ep-r/steps", json=native_step("x", seq + 1))
    assert late.status_code == 409
    assert http.post("/v1/episodes", json=body).status_code == 409  # the id stays taken
    assert http.get("/v1/stats").json()["released"] == 1


def test_native_delete_can_evaluate(service):
    http = service().http
    http.post("/v1/episodes", json={"task_id": "multi_turn_base_0", "episode_id": "a"})
    http.post("/v1/episodes", json={"task_id": "multi_turn_base_0", "episode_id": "b"})
    first = gt_turns("multi_turn_base_0")[0][0]
    for eid in ("a", "b"):
        http.post(f"/v1/episodes/{eid}/steps", json=native_step(first, 1))
    evaluated = http.delete("/v1/episodes/a", params={"evaluate": "true"})
    assert evaluated.status_code == 200
    report = evaluated.json()
    assert report["steps"] == 1 and report["accuracy"] == 0 and not report["terminated"]
    assert report["failure_tags"][0] != "empty_turn_model_response"  # turn 1 had its calls
    assert http.delete("/v1/episodes/b").status_code == 204
    assert http.delete("/v1/episodes/a").status_code == 404
    assert http.get("/v1/stats").json()["live_episodes"] == 0


def test_env_client_and_scripted_runner_over_a_socket(live_service):
    base_url, engine = live_service
    task_id = "multi_turn_miss_param_0"
    turns = gt_turns(task_id)

    async def main():
        async with EnvClient(base_url) as client:
            assert await client.healthy()
            result = await run_scripted_episode(
                client, task_id, turns, EpisodeSettings(mode="validate")
            )
            with pytest.raises(EnvServiceError, match="multi_turn_base_999"):
                async with client.episode("multi_turn_base_999"):
                    pass
            await client.push_profile({"tags": [{"tag": "state_mismatch", "share": 0.5}]})
            return result

    result = asyncio.run(main())
    assert result["accuracy"] == 1 and result["reward"] == 1.0
    assert len(result["failure_tags"]) == load_task(task_id).num_turns
    assert [m["role"] for m in result["input"]] == ["system", "user"]
    assert result["output"][0]["role"] == "assistant"
    assert engine.stats()["live_episodes"] == 0  # the runner released it
    assert engine.profiles.profile()["tags"][0]["tag"] == "state_mismatch"


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


def test_unknown_and_released_episodes(service):
    svc = service()
    http = svc.http
    assert http.post("/v1/episodes/ghost/steps", json=native_step("x", None)).status_code == 404
    assert http.get("/v1/episodes/ghost/evaluation").status_code == 404
    assert http.get("/v1/episodes/ghost").status_code == 404
    assert http.delete("/v1/episodes/ghost").status_code == 404
    episode_id, _ = svc.create("multi_turn_base_1")
    svc.release(episode_id)
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
    svc.release("mine")
    svc.create("multi_turn_base_2", "mine")  # free again after release


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
    svc.release(first)
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


# --- concurrency ------------------------------------------------------------------------------


def test_256_concurrent_episodes_of_one_task_stay_apart(record_property):
    task_id = "multi_turn_base_1"  # GorillaFileSystem only: ls, mv, grep, tail
    app = create_app()
    n = 256
    gt_script = gt_texts(task_id)

    def own_script(i):  # make a directory only this episode knows, then look around
        return [call_text("mkdir", dir_name=f"only_{i}"), call_text("ls")]

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://env") as http:

            async def post(path, status, body):
                response = await http.post(path, json=body)
                assert response.status_code == status, response.text
                return response.json()

            start = time.perf_counter()
            body = {"task_id": task_id, "settings": {"mode": "validate"}}
            created = await asyncio.gather(*(post("/v1/episodes", 201, body) for _ in range(n)))
            create_s = time.perf_counter() - start
            ids = [c["episode_id"] for c in created]
            assert len(set(ids)) == n
            scripts = [gt_script if i % 2 == 0 else own_script(i) for i in range(n)]
            replies = [[] for _ in range(n)]
            for k in range(max(map(len, scripts))):  # round k: step k of every episode at once
                live = [i for i in range(n) if k < len(scripts[i])]
                results = await asyncio.gather(
                    *(
                        post(f"/v1/episodes/{ids[i]}/steps", 200, native_step(scripts[i][k], k + 1))
                        for i in live
                    )
                )
                for i, data in zip(live, results, strict=True):
                    replies[i].append(data)
            # The ground truth's episodes ended (their last step carries the evaluation);
            # the others are evaluated as they are.
            reports = await asyncio.gather(
                *(http.get(f"/v1/episodes/{ids[i]}/evaluation") for i in range(n) if i % 2 == 1)
            )
            return create_s, replies, [r.json() for r in reports]

    create_s, replies, reports = asyncio.run(main())
    record_property("create_256_episodes_s", round(create_s, 3))
    print(f"created {n} episodes in {create_s:.2f} s")
    for i in range(n):
        if i % 2 == 0:
            last = replies[i][-1]
            assert last["terminated"] and last["reward"] == 1.0, i
            assert last["evaluation"]["accuracy"] == 1
        else:
            listing = replies[i][1]["messages"][0]["content"]
            assert json.loads(listing) == {
                "current_directory_content": ["workspace", f"only_{i}"]
            }, i
            assert reports[i // 2]["tool_calls"] == 2
    assert app.state.engine.stats()["live_episodes"] == n // 2
    assert bfcl_globals_left() == []
