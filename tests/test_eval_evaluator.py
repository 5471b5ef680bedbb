"""Endpoint evaluator against a scripted OpenAI-compatible server and the real environment service.

The fake endpoint answers each request from a per-task script (the n-th assistant message of
a conversation gets the script's n-th text, "Done." past its end) and can be told to fail a
task's next requests with given HTTP statuses. Tasks are told apart by their first question.
"""

import asyncio
import json
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web
from scripts_loader import load_script

from seal.bfcl.ground_truth import END_OF_TURN_TEXT, ground_truth_texts
from seal.bfcl.prompt import BASE_INSTRUCTIONS
from seal.bfcl.tasks import load_task
from seal.eval.chat_endpoint import EndpointSettings
from seal.eval.evaluator import Prompting, errors_file, evaluate_endpoint, partial_file
from seal.eval.records import read_val_dir
from seal.formats.registry import HERMES, get_format

# One eval task per category, with distinct first questions.
TASKS = [
    "multi_turn_base_4",
    "multi_turn_miss_func_9",
    "multi_turn_miss_param_21",
    "multi_turn_long_context_29",
]
MODEL = "fake-model"
FAST_RETRIES = {"attempts": 3, "backoff_s": 0.001}


def first_question(task_id: str) -> str:
    return load_task(task_id).questions[0][0]["content"]


def gt_texts(task_id: str, tool_format=None) -> list[str]:
    call_text = (tool_format or get_format(HERMES)).call_text
    return ground_truth_texts(load_task(task_id), call_text)


class FakeChatServer:
    """The scripted endpoint; `requests` lists (task id, request body) in arrival order."""

    def __init__(self):
        self.task_of = {first_question(task_id): task_id for task_id in TASKS}
        assert len(self.task_of) == len(TASKS), "test tasks must differ in their first question"
        self.scripts: dict[str, list[str]] = {}
        self.failures: dict[str, list[tuple[int, dict]]] = {}
        self.requests: list[tuple[str, dict]] = []

    def fail_next(self, task_id: str, status: int, times: int = 1, body: dict | None = None):
        self.failures.setdefault(task_id, []).extend([(status, body or {"error": "boom"})] * times)

    def requests_of(self, task_id: str) -> list[dict]:
        return [body for task, body in self.requests if task == task_id]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        task_id = self.task_of[body["messages"][1]["content"]]
        self.requests.append((task_id, body))
        if self.failures.get(task_id):
            status, payload = self.failures[task_id].pop(0)
            return web.json_response(payload, status=status)
        script = self.scripts.get(task_id, [])
        turn = sum(message["role"] == "assistant" for message in body["messages"])
        text = script[turn] if turn < len(script) else END_OF_TURN_TEXT
        return web.json_response(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        )

    async def handle_completion(self, request: web.Request) -> web.Response:
        """The completions API: the prompt is a whole rendered conversation; the n-th
        request of a task gets its script's n-th text."""
        body = await request.json()
        task_id = next(t for question, t in self.task_of.items() if question in body["prompt"])
        self.requests.append((task_id, body))
        script = self.scripts.get(task_id, [])
        turn = len(self.requests_of(task_id)) - 1
        text = script[turn] if turn < len(script) else END_OF_TURN_TEXT
        return web.json_response({"choices": [{"index": 0, "text": text}]})


@pytest.fixture
def fake_llm():
    """(server, base_url): the fake endpoint served by aiohttp in its own thread and loop."""
    server = FakeChatServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    app.router.add_post("/v1/completions", server.handle_completion)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def evaluate(base_url, env_url, out_dir, task_ids=TASKS, model=MODEL, **options):
    settings = EndpointSettings(base_url=base_url, model=model, **FAST_RETRIES)
    return asyncio.run(
        evaluate_endpoint(
            settings, list(task_ids), out_dir, env_url=env_url, show_progress=False, **options
        )
    )


def test_ground_truth_replies_score_one_and_requests_follow_the_protocol(
    fake_llm, live_service, tmp_path
):
    server, base_url = fake_llm
    env_url, _ = live_service
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}

    outcome = evaluate(base_url, env_url, tmp_path, step=30)

    assert not outcome.failures and outcome.skipped == 0
    steps = read_val_dir(tmp_path / "validation")
    assert list(steps) == [30]
    records = {record.task_id: record for record in steps[30]}
    assert sorted(records) == sorted(TASKS)
    for task_id, record in records.items():
        assert (record.score, record.reward) == (1, 1.0), task_id
        assert set(record.failure_tags) <= {"pass", "correct_abstention"}
        assert record.extra["model"] == MODEL and record.extra["truncated"] is False
        # One request per assistant message: the scripted texts were all used, no retries.
        assert record.turns == len(gt_texts(task_id)) == len(server.requests_of(task_id))

    base = server.requests_of("multi_turn_base_4")
    assert {key: base[0][key] for key in ("model", "temperature", "max_tokens")} == {
        "model": MODEL,
        "temperature": 0.0,
        "max_tokens": 4096,
    }
    assert "tools" not in base[0]  # the system prompt carries the tool signatures
    # The conversation is sent as the service gave it, then grows by each exchange.
    assert base[0]["messages"] == json.loads(records["multi_turn_base_4"].input)
    transcript = json.loads(records["multi_turn_base_4"].output)
    assert base[-1]["messages"] == base[0]["messages"] + transcript[: len(base[-1]["messages"]) - 2]
    assert base[1]["messages"][2] == {
        "role": "assistant",
        "content": gt_texts("multi_turn_base_4")[0],
    }
    assert base[1]["messages"][3]["content"].startswith("<tool_response>")
    assert not partial_file(tmp_path, 30).exists() and not errors_file(tmp_path, 30).exists()


def test_wrong_replies_score_zero_with_failure_tags(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    server.scripts = {task_id: ["I cannot do that."] for task_id in TASKS}

    outcome = evaluate(base_url, live_service[0], tmp_path)

    assert not outcome.failures
    for record in outcome.records.values():
        assert record.score == 0
        assert "empty_turn_model_response" in record.failure_tags


def test_generation_limit_cuts_the_episode(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    task_id = "multi_turn_base_4"
    # A model that calls a tool forever never ends a turn on its own.
    server.scripts = {task_id: [gt_texts(task_id)[0]] * 50}

    outcome = evaluate(base_url, live_service[0], tmp_path, task_ids=[task_id], max_generations=3)

    record = outcome.records[task_id]
    assert len(server.requests_of(task_id)) == record.turns == 3
    assert record.extra["truncated"] is True and record.score == 0


@pytest.mark.parametrize("status", [503, 429, 500])
def test_transient_errors_are_retried(fake_llm, live_service, tmp_path, status):
    server, base_url = fake_llm
    task_id = "multi_turn_miss_param_21"
    server.scripts = {task_id: gt_texts(task_id)}
    server.fail_next(task_id, status, times=2)  # attempts is 3: the third try answers

    outcome = evaluate(base_url, live_service[0], tmp_path, task_ids=[task_id])

    assert not outcome.failures and outcome.records[task_id].score == 1
    assert len(server.requests_of(task_id)) == len(gt_texts(task_id)) + 2


@pytest.mark.parametrize(
    "status, times, reply, requests, error",
    [
        (500, 99, {"error": "boom"}, 3, "after 3 attempt(s) in"),
        (401, 1, {"error": "bad key"}, 1, "refused the request (HTTP 401"),
        (
            200,
            1,
            {"choices": [{"message": {"content": None, "tool_calls": [{"id": "x"}]}}]},
            1,
            "without a tool-call parser",
        ),
    ],
)
def test_failed_tasks_are_listed_not_scored(
    fake_llm, live_service, tmp_path, status, times, reply, requests, error
):
    server, base_url = fake_llm
    bad = "multi_turn_miss_func_9"
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    server.fail_next(bad, status, times=times, body=reply)

    outcome = evaluate(base_url, live_service[0], tmp_path)

    assert [failure.task_id for failure in outcome.failures] == [bad]
    assert error in outcome.failures[0].error and bad in outcome.failures[0].error
    assert len(server.requests_of(bad)) == requests
    assert bad not in outcome.records and len(outcome.records) == 3
    errors = [json.loads(line) for line in errors_file(tmp_path, 0).read_text().splitlines()]
    assert [(e["task_id"], e["step"]) for e in errors] == [(bad, 0)]
    # No step file while a task is missing; the finished ones wait in the partial file.
    assert outcome.step_file is None and not (tmp_path / "validation").exists()
    assert len(partial_file(tmp_path, 0).read_text().splitlines()) == 3


def test_allow_failures_writes_the_step_without_the_failed_task(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    server.fail_next("multi_turn_base_4", 404)

    outcome = evaluate(base_url, live_service[0], tmp_path, allow_failures=True)

    recorded = [record.task_id for record in read_val_dir(tmp_path / "validation")[0]]
    assert recorded == TASKS[1:]
    assert errors_file(tmp_path, 0).exists() and len(outcome.failures) == 1


def test_rerun_retries_only_what_failed(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    server.fail_next("multi_turn_long_context_29", 500, times=3)
    first = evaluate(base_url, live_service[0], tmp_path)
    assert [failure.task_id for failure in first.failures] == ["multi_turn_long_context_29"]
    server.requests.clear()

    second = evaluate(base_url, live_service[0], tmp_path)

    assert not second.failures and second.skipped == 3
    assert {task for task, _ in server.requests} == {"multi_turn_long_context_29"}
    assert sorted(r.task_id for r in read_val_dir(tmp_path / "validation")[0]) == sorted(TASKS)
    assert not partial_file(tmp_path, 0).exists() and not errors_file(tmp_path, 0).exists()


def test_resume_after_a_crash_keeps_finished_tasks(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    evaluate(base_url, live_service[0], tmp_path, task_ids=TASKS[:2])
    # What a crash leaves: the step's records as a partial file ending in a cut-off line.
    step_file = tmp_path / "validation" / "step_000000.jsonl"
    partial_file(tmp_path, 0).write_text(step_file.read_text() + '{"task_id": "multi_tu')
    step_file.unlink()
    server.requests.clear()

    outcome = evaluate(base_url, live_service[0], tmp_path)

    assert outcome.skipped == 2
    assert Counter(task for task, _ in server.requests).keys() == set(TASKS[2:])
    assert sorted(r.task_id for r in read_val_dir(tmp_path / "validation")[0]) == sorted(TASKS)


def test_records_of_another_model_are_not_mixed_in(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    evaluate(base_url, live_service[0], tmp_path, task_ids=TASKS[:1])
    with pytest.raises(ValueError, match="another --out-dir"):
        evaluate(base_url, live_service[0], tmp_path, model="other-model")


def test_command_line_exit_status_and_errors_file(fake_llm, live_service, tmp_path, capsys):
    server, base_url = fake_llm
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    server.fail_next("multi_turn_base_4", 401)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"eval": TASKS, "train": []}))
    cli = load_script("eval_endpoint")
    args = ["--base-url", base_url, "--model", MODEL, "--split-file", str(split)]
    args += ["--env-url", live_service[0], "--out-dir", str(tmp_path / "run"), "--quiet"]

    assert cli.main(args) == 1
    assert "FAILED, not scored: 1 tasks" in capsys.readouterr().err
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "3 already done" in out and "1.0000 (4/4)" in out


def test_command_line_refuses_a_missing_api_key(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SEAL_TEST_NO_SUCH_KEY", raising=False)
    cli = load_script("eval_endpoint")
    args = ["--base-url", "http://127.0.0.1:9/v1", "--model", MODEL]
    assert (
        cli.main([*args, "--api-key-env", "SEAL_TEST_NO_SUCH_KEY", "--out-dir", str(tmp_path)]) == 1
    )
    assert "SEAL_TEST_NO_SUCH_KEY" in capsys.readouterr().err


def test_unhealthy_environment_service_stops_the_run(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    free_port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(RuntimeError, match="no healthy environment service"):
        evaluate("http://127.0.0.1:9/v1", f"http://127.0.0.1:{free_port}", tmp_path)
    assert not (Path(tmp_path) / "validation").exists()


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3", "llama3.1", "bfcl_prompt"])
def test_any_tool_format_through_the_completions_api(fake_llm, live_service, tmp_path, name):
    """--tool-format: the prompt the format renders (as in training) goes to the
    completions API, the replies are parsed in the format; the ground truth scores 1."""
    server, base_url = fake_llm
    fmt = get_format(name)
    server.scripts = {task_id: gt_texts(task_id, fmt) for task_id in TASKS}

    outcome = evaluate(base_url, live_service[0], tmp_path, prompting=Prompting(fmt, True))

    assert not outcome.failures
    for task_id, record in outcome.records.items():
        assert record.score == 1, task_id
        assert record.extra["prompting"] == f"{name} (completions)"
        prompts = [body["prompt"] for body in server.requests_of(task_id)]
        assert len(prompts) == len(gt_texts(task_id, fmt)) == record.turns
        # Each prompt continues the last one by the reply and the observation.
        for before, after in zip(prompts, prompts[1:], strict=False):
            assert after.startswith(before)
    first = server.requests_of("multi_turn_base_4")[0]
    assert {key: first[key] for key in ("model", "temperature", "max_tokens")} == {
        "model": MODEL,
        "temperature": 0.0,
        "max_tokens": 4096,
    }


def test_leaderboard_format_is_bfcl_s_own_prompt(fake_llm, live_service, tmp_path, capsys):
    """--leaderboard-format: bfcl-eval's prompt for the model, without the service's
    instructions (ToolACE-2-8B: BFCL's prompt-mode system prompt, Llama 3 layout)."""
    server, base_url = fake_llm
    fmt = get_format("bfcl_prompt")
    server.scripts = {task_id: gt_texts(task_id, fmt) for task_id in TASKS}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"eval": TASKS, "train": []}))
    cli = load_script("eval_endpoint")
    args = ["--base-url", base_url, "--model", "Team-ACE/ToolACE-2-8B", "--quiet"]
    args += ["--split-file", str(split), "--env-url", live_service[0], "--out-dir", str(tmp_path)]

    assert cli.main([*args, "--leaderboard-format"]) == 0
    assert "1.0000 (4/4)" in capsys.readouterr().out
    first = server.requests_of("multi_turn_base_4")[0]["prompt"]
    assert first.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert "You are an expert in composing functions." in first
    assert BASE_INSTRUCTIONS not in first
    # Records of another prompting are not mixed into the run.
    assert cli.main([*args, "--tool-format", "bfcl_prompt"]) == 1
    assert "leaderboard:Team-ACE/ToolACE-2-8B (completions)" in capsys.readouterr().err
