"""The native API end to end: the ground-truth policy scores 1, turns advance, held-out
tools come in their turn, retries are answered not rerun, and 256 concurrent episodes
stay apart. Bad input: test_api_native_bad_input.py. The release protocol (the original
release's) has its own tests (tests/env_service/test_release_*.py)."""

import asyncio
import json
import time

import httpx
import pytest
from bfcl_official import bfcl_globals_left
from conftest import call_text, gt_texts, gt_turns, native_step, results

from env_service.app import create_app
from seal.bfcl.tasks import load_task
from seal.rollout.env_client import EnvClient, EnvServiceError
from seal.rollout.scripted import run_scripted_episode
from seal.service_contract import EpisodeSettings

ONE_PER_CATEGORY = [
    "multi_turn_base_0",
    "multi_turn_miss_func_0",
    "multi_turn_miss_param_0",
    "multi_turn_long_context_0",
]


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
    # paper's; the rich prompt's: test_interface_layers's BAD_CALLS).
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
    # The step that ends the episode carries the evaluation and closes the episode.
    report = final["evaluation"]
    assert report["accuracy"] == 1 and report["progress"] == 1.0
    assert len(report["failure_tags"]) == task.num_turns
    assert set(report["failure_tags"]) <= {"pass", "correct_abstention"}
    assert report["invalid_calls"] == 0 and report["tool_errors"] == 0
    assert report["terminated"] and not report["truncated"]
    assert http.get("/v1/episodes/ep-1").status_code == 404
    assert http.get("/v1/stats").json() | {"live_episodes": 0, "closed": 1} == (
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
    # The final answer survives the close for a retried final step.
    repeat = http.post("/v1/episodes/ep-r/steps", json=native_step(texts[-1], seq))
    assert repeat.json() == last.json()
    late = http.post("/v1/episodes/ep-r/steps", json=native_step("x", seq + 1))
    assert late.status_code == 409
    assert http.post("/v1/episodes", json=body).status_code == 409  # the id stays taken
    stats = http.get("/v1/stats").json()
    assert stats["closed"] == 1
    assert stats["released"] == 1  # the deprecated old name of "closed", kept for its readers


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
    assert engine.stats()["live_episodes"] == 0  # the runner closed it
    assert engine.profiles.profile()["tags"][0]["tag"] == "state_mismatch"


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
