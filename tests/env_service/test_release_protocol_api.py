"""The release protocol (the original release's; env_service/release_protocol/) as this
service serves it:
mounted by `ServiceConfig.release_protocol` (on by default), its envelope on every
answer, the release's text format (Qwen2.5's `<tool_call>` blocks) in and out.
tests/env_service/test_release_protocol_params.py and test_release_protocol_episodes.py play
the release's trainer
against it; the behaviour both protocols share is tested on the native API
(tests/env_service/test_api_native.py and its neighbours)."""

from __future__ import annotations

import json

import pytest
from agentic_scripts import notetaker
from bfcl_official import bfcl_globals_left
from conftest import call_text, gt_turns
from release_protocol_client import ReleaseProtocolClient, tool_responses
from test_api_native import ONE_PER_CATEGORY
from test_limits import EIGHTY_K_LINES, calls_text, most_calls_that_fit

from env_service.release_protocol import compat
from seal.bfcl.tasks import load_task

FS_TASK = "multi_turn_base_1"
RELEASE_PATHS = ["/create", "/step", "/evaluate", "/release", "/get_info", "/get_env_profile"]
TOKEN = "release-test-token"


# --- mounted by an option -----------------------------------------------------------------------


def test_the_release_protocol_is_served_by_default(service):
    http = service().http
    schema = http.get("/openapi.json").json()["paths"]
    assert set(RELEASE_PATHS) <= set(schema)
    reply = http.post("/get_env_profile", json={"params": {"split": "train"}})
    assert reply.status_code == 200 and reply.json()["success"] is True


def test_without_the_release_protocol_its_paths_are_unknown_paths(service):
    http = service(release_protocol=False).http
    unknown = http.post("/no-such-path", json={})
    assert unknown.status_code == 404
    for path in [*RELEASE_PATHS, "//get_env_profile"]:
        reply = http.post(path, json={"env_type": "bfcl", "task_id": "multi_turn_base_0"})
        assert (reply.status_code, reply.content) == (404, unknown.content), path
    assert http.get("/v1/stats").json()["live_episodes"] == 0
    schema = http.get("/openapi.json").json()["paths"]
    assert not set(RELEASE_PATHS) & set(schema)
    assert "/v1/episodes" in schema and "/healthz" in schema
    assert http.get("/healthz").json()["status"] == "healthy"


def test_without_the_release_protocol_errors_are_the_native_shape(service):
    # With the protocol, a refused token on its paths is answered in its envelope.
    on = service(token=TOKEN).http.post("/create", json={})
    assert on.status_code == 401 and on.json()["success"] is False
    off = service(token=TOKEN, release_protocol=False).http
    for path in ["/create", "/healthz", "/no-such-path"]:
        reply = off.post(path, json={})
        assert reply.status_code == 401, path
        assert set(reply.json()) == {"detail"}, path


# --- the envelope --------------------------------------------------------------------------------


def test_release_protocol_errors_are_always_the_json_envelope(service, monkeypatch):
    http = service(max_body_bytes=10_000).http
    instance_id, _ = ReleaseProtocolClient(http).create(FS_TASK)
    too_big = http.post(
        "/step", json={"instance_id": instance_id, "messages": {"content": "x" * 20_000}}
    )
    assert too_big.status_code == 413
    assert too_big.json()["success"] is False and "10000" in too_big.json()["error"]
    not_json = http.post(
        "/step", content=b"\xff\xfe{", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422 and not_json.json()["success"] is False
    nested = "[" * 100_000 + "]" * 100_000
    body = '{"instance_id": "x", "messages": ' + nested + "}"
    deep = http.post("/step", content=body, headers={"content-type": "application/json"})
    assert deep.status_code in (413, 422) and deep.json()["success"] is False

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(compat, "evaluation", broken)
    # The test client re-raises the service's errors unless told to show the answer.
    monkeypatch.setattr(http._transport, "raise_server_exceptions", False)
    crashed = http.post("/evaluate", json={"instance_id": instance_id})
    assert crashed.status_code == 500
    assert crashed.headers["content-type"] == "application/json"
    assert crashed.json() == {
        "success": False,
        "data": None,
        "error": "internal error: RuntimeError: a bug",
    }


def test_a_step_over_its_time_budget_says_so_in_info_and_completed(service):
    svc = service(max_step_seconds=0.2, max_calls_per_step=100_000, max_calls_per_episode=100_000)
    client = ReleaseProtocolClient(svc.http)
    flood, _ = client.create(FS_TASK, rollout_mode="validate")
    client.step(flood, calls_text("touch", {"file_name": "big.txt"}, 1))
    client.step(flood, calls_text("echo", {"content": EIGHTY_K_LINES, "file_name": "big.txt"}, 1))
    data = client.step(flood, most_calls_that_fit("grep", {"file_name": "big.txt", "pattern": "b"}))
    assert data["is_terminated"] is True and data["info"]["aborted"] == "step_time_budget"
    assert "time budget" in tool_responses(data)[-1]
    report = client.evaluate(flood)
    assert report["aborted"] == "step_time_budget" and report["completed"] is False
    assert client.step(flood, calls_text("pwd", {}, 1), expect=409)["success"] is False


# --- episodes in the release's shapes, Qwen2.5's text parsed by the service ---------------------


@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_the_ground_truth_scores_one_in_the_releases_shapes(release_service, task_id):
    svc = release_service()
    task = load_task(task_id)
    instance_id, data = svc.create(task_id, rollout_mode="validate")
    assert [m["role"] for m in data["state"]] == ["system", "user"]
    assert data["state"][0]["content"].startswith("# Tools\n")  # the paper's prompt
    assert data["state"][1]["content"] == task.questions[0][0]["content"]
    assert (data["reward"], data["is_terminated"]) == (0.0, False)
    assert data["info"]["num_turns"] == task.num_turns
    assert data["info"]["category"] == task.category

    replies = svc.play(instance_id, gt_turns(task_id))
    assert [r["is_terminated"] for r in replies] == [False] * (len(replies) - 1) + [True]
    assert [r["reward"] for r in replies] == [0.0] * (len(replies) - 1) + [1.0]
    assert replies[-1]["state"] == [
        {"role": "user", "content": "[CONVERSATION_COMPLETED]", "tool_calls": []}
    ]

    sparse = svc.evaluate(instance_id, sparse=True)
    assert isinstance(sparse, float) and sparse == 1.0
    report = svc.evaluate(instance_id)
    assert report["accuracy"] == 1
    assert report["progress"] == 1.0
    assert len(report["failure_tags"]) == task.num_turns
    assert set(report["failure_tags"]) <= {"pass", "correct_abstention"}
    assert report["invalid_calls"] == 0 and report["tool_errors"] == 0
    assert report["terminated"] and not report["truncated"]

    svc.post("/release", instance_id=instance_id)
    svc.post("/get_info", expect=404, instance_id=instance_id)
    assert svc.http.get("/healthz").json()["live_episodes"] == 0
    assert bfcl_globals_left() == []


def test_tool_calls_answer_with_one_user_message_of_results(release_service):
    svc = release_service()
    instance_id, _ = svc.create("multi_turn_base_1")
    text = call_text("pwd") + "\n" + call_text("ls", a=True)
    data = svc.step(instance_id, text)
    assert data["info"]["turn"] == 0
    assert data["state"] == [
        {
            "role": "user",
            "content": '<tool_response>\n{"current_working_directory": "/alex"}\n</tool_response>\n'
            '<tool_response>\n{"current_directory_content": ["workspace"]}\n</tool_response>\n',
            "tool_calls": [],
        }
    ]


def test_a_holdout_tool_is_listed_and_announced_in_text_once_revealed(release_service):
    svc = release_service()
    task = load_task("multi_turn_miss_func_0")
    assert list(task.held_out) == [3] and task.held_out[3][0]["name"] == "sort"
    instance_id, data = svc.create(task.task_id, rollout_mode="validate")
    assert '"name": "sort"' not in data["state"][0]["content"]
    assert "sort" not in svc.tools(instance_id)

    turns = gt_turns(task.task_id)
    svc.play(instance_id, turns[:2])
    # Turn 2 asks for sorting, but sort is not available yet: the release's refusal.
    refused = svc.step(instance_id, call_text("sort", file_name="final_report.pdf"))
    assert refused["state"][0]["content"] == (
        "[ERROR] Invalid tool call format: Tool 'sort' is not available in the current tool list."
    )
    reveal = svc.step(instance_id, "I cannot sort without a sort tool.")
    assert reveal["info"]["turn"] == 3
    [holdout] = reveal["state"]
    assert holdout["role"] == "user"
    revealed, ask = holdout["content"].split("\n")
    assert [d["name"] for d in json.loads(revealed)] == ["sort"]
    assert ask == "I have updated some more functions you can choose from. What about now?"
    assert "sort" in svc.tools(instance_id)

    replies = svc.play(instance_id, turns[3:])
    assert "sorted_content" in replies[0]["state"][0]["content"]
    assert replies[-1]["reward"] == 1.0
    report = svc.evaluate(instance_id)
    assert report["failure_tags"] == ["pass", "pass", "correct_abstention", "pass", "pass"]
    assert report["invalid_by_kind"] == {"unavailable_tool": 1}


def test_get_info_lists_the_tools_and_healthz_answers(release_service):
    svc = release_service()
    instance_id, _ = svc.create("multi_turn_base_1", rollout_mode="validate")
    assert svc.tools(instance_id) == [d["name"] for d in load_task("multi_turn_base_1").tools]
    health = svc.http.get("/healthz").json()
    assert health["status"] == "healthy"
    assert (health["live_episodes"], health["created"]) == (1, 1)


def test_the_rich_prompt_answers_each_tool_call_block(release_service):
    svc = release_service(prompt="rich")
    instance_id, _ = svc.create("multi_turn_base_1", rollout_mode="validate")
    text = (
        '<tool_call>\n{"name": "ls", "arguments": {"a": true}\n</tool_call>\n'
        '<tool_call>\n{"name": "mv", "arguments": {"source": "x"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "cd", "arguments": {"dir": "x"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "pwd"'
    )
    data = svc.step(instance_id, text)
    content = data["state"][0]["content"]
    assert content.count("<tool_response>") == 4
    assert "Error: could not parse tool call: the block is not valid JSON" in content
    assert "Error: mv is missing required argument(s) ['destination']" in content
    assert "Error: cd got unexpected argument(s) ['dir']; allowed: ['folder']" in content
    assert "not closed with </tool_call>" in content
    report = svc.evaluate(instance_id)
    assert report["invalid_calls"] == 4
    assert report["invalid_by_kind"] == {
        "parse": 2,
        "missing_argument": 1,
        "unexpected_argument": 1,
    }
    assert report["tool_calls"] == 0


def test_wrong_env_type(release_service):
    svc = release_service()
    error = svc.post("/create", expect=400, env_type="webshop", task_id="multi_turn_base_1")
    assert "env_type 'webshop'" in error["error"]


@pytest.mark.parametrize(
    "params",
    [
        {"rollout_mode": "foo"},
        {"max_steps": 0},
        {"partial_credit_cap": 1.5},
        {"max_guidelines": 99},
        {"observation_lite": "sometimes"},
    ],
)
def test_invalid_params(release_service, params):
    svc = release_service()
    error = svc.post("/create", expect=422, task_id="multi_turn_base_1", params=params)
    assert "invalid params" in error["error"]
    assert svc.engine.stats()["live_episodes"] == 0


def test_unknown_params_are_echoed(release_service):
    svc = release_service()
    params = {"temperature": 0.7, "observation_lite": True, "rollout_mode": "sample", "obs_lite": 1}
    _, data = svc.create("multi_turn_base_1", **params)
    assert data["info"]["ignored_params"] == ["obs_lite", "temperature"]


def test_malformed_bodies_are_answered_in_the_envelope(release_service):
    svc = release_service()
    bad = {"content": b"{not json", "headers": {"content-type": "application/json"}}
    for path in ["/create", "/step", "/evaluate", "/release", "/get_info"]:
        for request in [bad, {"json": [1, 2]}, {"json": {"params": "not a dict"}}]:
            response = svc.http.post(path, **request)
            assert response.status_code == 422, (path, request)
            payload = response.json()
            assert payload["success"] is False and payload["data"] is None, (path, payload)
            assert "malformed request body" in payload["error"]
    instance_id, _ = svc.create("multi_turn_base_1")
    for messages in [None, 5, "text", [], {"role": "assistant"}, {"content": 3}]:
        error = svc.post("/step", expect=422, instance_id=instance_id, messages=messages)
        assert "'messages' must be" in error["error"]
    assert "'instance_id' is required" in svc.post("/step", expect=422, messages={})["error"]
    assert "'task_id' is required" in svc.post("/create", expect=422)["error"]


def test_unknown_tasks_and_episodes_are_404_and_release_of_one_is_200(release_service):
    svc = release_service()
    error = svc.post("/create", expect=404, task_id="multi_turn_base_999")
    assert "multi_turn_base_999" in error["error"]
    for path in ["/step", "/evaluate", "/get_info"]:
        body = {"instance_id": "ghost", "messages": {"role": "assistant", "content": "x"}}
        assert "ghost" in svc.post(path, expect=404, **body)["error"]
    instance_id, _ = svc.create("multi_turn_base_1")
    svc.post("/release", instance_id=instance_id)
    assert svc.step(instance_id, "hi", expect=404)["success"] is False
    # /release of an id that is gone: 200 with success false, as the release answers.
    for ghost in ("ghost", instance_id):
        again = svc.http.post("/release", json={"instance_id": ghost})
        assert again.status_code == 200 and again.json()["success"] is False
        assert ghost in again.json()["error"]


def block(name, arguments):
    """A `<tool_call>` block naming anything, as a model might write it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("__import__('os').system('touch pwned_name_1')", "'name' must be a tool name string"),
        ("ls; import os; os.system('touch pwned_name_2')", "'name' must be a tool name string"),
        (
            "ls()\n__import__('os').system('touch pwned_name_3')",
            "'name' must be a tool name string",
        ),
        ("os.system", "'name' must be a tool name string"),
        ("_load_scenario", "unknown tool '_load_scenario'"),
        ("__init__", "unknown tool '__init__'"),
        ("__class__", "unknown tool '__class__'"),
        ("eval", "unknown tool 'eval'"),
        ("exec", "unknown tool 'exec'"),
    ],
)
@pytest.mark.parametrize("prompt_name", ["paper", "rich"])
def test_code_in_a_tool_name_in_the_text_is_refused(
    release_service, tmp_path, monkeypatch, name, reason, prompt_name
):
    """The service's parsers of Qwen2.5's text, the paper's and the rich prompt's
    (tests/env_service/test_security.py: the same names sent as calls on the native API)."""
    monkeypatch.chdir(tmp_path)  # where a relative marker would be written
    svc = release_service(prompt=prompt_name)
    instance_id, _ = svc.create(FS_TASK, rollout_mode="validate")
    svc.step(instance_id, block("mkdir", {"dir_name": "kept"}))
    arguments = {"scenario": {"root": {}}} if name == "_load_scenario" else {}
    content = svc.step(instance_id, block(name, arguments))["state"][0]["content"]
    if prompt_name == "paper":
        refusal = f"Tool '{name}' is not available in the current tool list."
        assert content == "[ERROR] Invalid tool call format: " + refusal
    else:
        assert content.startswith("<tool_response>\nError: ")
        assert reason in content
    # `_load_scenario` would have wiped the file system: it is untouched.
    assert "kept" in svc.step(instance_id, block("ls", {}))["state"][0]["content"]
    report = svc.evaluate(instance_id)
    assert report["invalid_calls"] == 1 and report["tool_calls"] == 2
    assert list(tmp_path.iterdir()) == []  # nothing was ever created


def test_sparse_must_be_a_boolean(release_service):
    svc = release_service()
    iid, _ = svc.create("multi_turn_base_0")
    payload = svc.post("/evaluate", expect=422, instance_id=iid, params={"sparse": "false"})
    assert "sparse" in payload["error"]


def test_the_release_protocol_refuses_agentic_tasks(release_service, tmp_path):
    svc = release_service(memory_snapshot_dir=tmp_path)
    body = {"env_type": "bfcl", "task_id": notetaker("memory_rec_sum")}
    payload = svc.post("/create", expect=404, **body)
    assert "native API" in json.dumps(payload)
