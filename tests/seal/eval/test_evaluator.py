"""Endpoint evaluator against a scripted OpenAI-compatible server and the real environment service.

The fake endpoint answers each request from a per-task script (the n-th assistant message of
a conversation gets the script's n-th text, "Done." past its end; an entry (text, "length")
is a reply cut at max_tokens) and can be told to fail a task's next requests with given HTTP
statuses. Tasks are told apart by their first question; a request of neither task is the
preflight's. It lists its model at /models and may require an API key.
"""

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web
from conftest import free_port, gt_texts, serving_aiohttp, shipped_tokenizer

from seal.bfcl.ground_truth import END_OF_TURN_TEXT
from seal.bfcl.prompt import BASE_INSTRUCTIONS
from seal.bfcl.tasks import load_task
from seal.eval import score_endpoint as cli
from seal.eval.chat_endpoint import (
    ChatEndpoint,
    ContextLengthError,
    EndpointError,
    EndpointSettings,
    PreflightError,
)
from seal.eval.endpoint_episode import ContextBudgetError, Prompting
from seal.eval.evaluator import episode_stats, errors_file, evaluate_endpoint, partial_file
from seal.formats.base import Conversation
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.protocol import EpisodeLimits
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER, turn_tokenizer
from seal.runs.records import read_val_dir

# One eval task per category, with distinct first questions.
TASKS = [
    "multi_turn_base_4",
    "multi_turn_miss_func_9",
    "multi_turn_miss_param_21",
    "multi_turn_long_context_29",
]
LONG_TASK = "multi_turn_long_context_0"  # its first tool result is several hundred tokens
MODEL = "fake-model"
FAST_RETRIES = {"attempts": 3, "backoff_s": 0.001}
TOKENIZER = shipped_tokenizer()
TOKENS = turn_tokenizer(TOKENIZER, get_format(PAPER_QWEN))
LLAMA_TOKENIZER = shipped_tokenizer(llama_tokens=True)  # for the Llama-layout formats


def tokenizer_for(prompting: Prompting | None):
    uses_llama = prompting is not None and prompting.tool_format.end_of_turn == "<|eot_id|>"
    return LLAMA_TOKENIZER if uses_llama else TOKENIZER


def first_question(task_id: str) -> str:
    return load_task(task_id).questions[0][0]["content"]


class FakeChatServer:
    """The scripted endpoint; `requests` lists (task id, request body) in arrival order."""

    def __init__(self):
        known = [*TASKS, LONG_TASK]
        self.task_of = {first_question(task_id): task_id for task_id in known}
        assert len(self.task_of) == len(known), "test tasks must differ in their first question"
        self.scripts: dict[str, list[str | tuple[str, str]]] = {}
        self.failures: dict[str, list[tuple[int, dict]]] = {}
        self.requests: list[tuple[str, dict]] = []
        self.preflights: list[dict] = []
        self.models: list[dict] | None = [{"id": MODEL, "object": "model"}]
        """The /models listing; None: the route answers 404."""
        self.api_key: str | None = None
        """When set, requests without it as a Bearer token get a 401."""

    def refuse_key(self, request: web.Request) -> web.Response | None:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": "invalid api key"}, status=401)
        return None

    async def list_models(self, request: web.Request) -> web.Response:
        if self.models is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return self.refuse_key(request) or web.json_response({"data": self.models})

    def fail_next(self, task_id: str, status: int, times: int = 1, body: dict | None = None):
        self.failures.setdefault(task_id, []).extend([(status, body or {"error": "boom"})] * times)

    def requests_of(self, task_id: str) -> list[dict]:
        return [body for task, body in self.requests if task == task_id]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        if refusal := self.refuse_key(request):
            return refusal
        if body["model"] != MODEL:
            return web.json_response({"error": f"model {body['model']} not found"}, status=404)
        messages = body["messages"]
        task_id = self.task_of.get(messages[1]["content"]) if len(messages) > 1 else None
        if task_id is None:
            self.preflights.append(body)
            return reply("OK", "length")
        self.requests.append((task_id, body))
        if self.failures.get(task_id):
            status, payload = self.failures[task_id].pop(0)
            return web.json_response(payload, status=status)
        script = self.scripts.get(task_id, [])
        turn = sum(message["role"] == "assistant" for message in messages)
        entry = script[turn] if turn < len(script) else END_OF_TURN_TEXT
        return reply(*((entry, "stop") if isinstance(entry, str) else entry))

    async def handle_completion(self, request: web.Request) -> web.Response:
        """The completions API: the prompt is a whole rendered conversation; the n-th
        request of a task gets its script's n-th text."""
        body = await request.json()
        if refusal := self.refuse_key(request):
            return refusal
        found = [t for question, t in self.task_of.items() if question in body["prompt"]]
        if not found:
            self.preflights.append(body)
            return reply("OK", "length", completion=True)
        task_id = found[0]
        self.requests.append((task_id, body))
        if self.failures.get(task_id):
            status, payload = self.failures[task_id].pop(0)
            return web.json_response(payload, status=status)
        script = self.scripts.get(task_id, [])
        turn = len(self.requests_of(task_id)) - 1
        entry = script[turn] if turn < len(script) else END_OF_TURN_TEXT
        text, finish_reason = (entry, "stop") if isinstance(entry, str) else entry
        return reply(text, finish_reason, completion=True)


def reply(text: str, finish_reason: str, completion: bool = False) -> web.Response:
    """A chat reply, or with `completion` a completions-API reply."""
    if completion:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason}
    else:
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    return web.json_response({"choices": [choice]})


@pytest.fixture
def fake_llm():
    """(server, base_url): the fake endpoint served by aiohttp in its own thread and loop."""
    server = FakeChatServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    app.router.add_get("/v1/models", server.list_models)
    app.router.add_post("/v1/completions", server.handle_completion)
    with serving_aiohttp(app) as url:
        yield server, f"{url}/v1"


def evaluate(
    base_url, env_url, out_dir, task_ids=TASKS, model=MODEL, api_key=None, limits=None, **options
):
    settings = EndpointSettings(base_url=base_url, model=model, api_key=api_key, **FAST_RETRIES)
    return asyncio.run(
        evaluate_endpoint(
            settings,
            list(task_ids),
            out_dir,
            env_url=env_url,
            tokenizer=tokenizer_for(options.get("prompting")),
            limits=limits,
            show_progress=False,
            **options,
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
        assert record.paper_label == "missing_tool_call"  # the paper's Table 5 label


def test_generation_limit_cuts_the_episode(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    task_id = "multi_turn_base_4"
    # A model that calls a tool forever never ends a turn on its own.
    server.scripts = {task_id: [gt_texts(task_id)[0]] * 50}

    limits = EpisodeLimits(max_generations=3)
    outcome = evaluate(base_url, live_service[0], tmp_path, task_ids=[task_id], limits=limits)

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
    args = ["--base-url", base_url, "--model", MODEL, "--split-file", str(split)]
    args += ["--env-url", live_service[0], "--out-dir", str(tmp_path / "run"), "--quiet"]
    args += ["--tokenizer", str(SHIPPED_TOKENIZER)]

    assert cli.main(args) == 1
    assert "FAILED, not scored: 1 tasks" in capsys.readouterr().err
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "3 already done" in out and "1.0000 (4/4)" in out


def test_command_line_refuses_a_missing_api_key(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SEAL_TEST_NO_SUCH_KEY", raising=False)
    args = ["--base-url", "http://127.0.0.1:9/v1", "--model", MODEL]
    args += ["--tokenizer", str(SHIPPED_TOKENIZER)]  # a non-Qwen model names its tokenizer
    assert (
        cli.main([*args, "--api-key-env", "SEAL_TEST_NO_SUCH_KEY", "--out-dir", str(tmp_path)]) == 1
    )
    assert "SEAL_TEST_NO_SUCH_KEY" in capsys.readouterr().err


def test_unhealthy_environment_service_stops_the_run(tmp_path):
    with pytest.raises(RuntimeError, match="no healthy environment service"):
        evaluate("http://127.0.0.1:9/v1", f"http://127.0.0.1:{free_port()}", tmp_path)
    assert not (Path(tmp_path) / "validation").exists()


def test_command_line_needs_a_tokenizer_for_other_models(tmp_path, capsys):
    args = ["--base-url", "http://127.0.0.1:9/v1", "--out-dir", str(tmp_path)]
    assert cli.main([*args, "--model", "meta-llama/Llama-3.1-8B-Instruct"]) == 1
    assert "--tokenizer is needed for model 'meta-llama/Llama-3.1-8B-Instruct'" in (
        capsys.readouterr().err
    )
    assert cli.load_tokenizer(None, "Qwen/Qwen2.5-7B-Instruct").name_or_path == str(
        SHIPPED_TOKENIZER
    )


# --- the context budget ------------------------------------------------------------------


def first_exchange(server: FakeChatServer, base_url, env_url, out_dir, task_id):
    """(prompt tokens, first reply tokens, first observation tokens) of a ground-truth run
    under the default limits, and its record: the sizes the budget tests cut at."""
    server.scripts = {task_id: gt_texts(task_id)}
    record = evaluate(base_url, env_url, out_dir, task_ids=[task_id]).records[task_id]
    first = server.requests_of(task_id)[0]["messages"]
    reply, *observation = json.loads(record.output)[: 1 + 1]
    prompt = len(TOKENS.prompt(Conversation(first))[0])
    generated = len(TOKENS.encode(reply["content"])) + 1  # with its end-of-turn token
    seen = len(TOKENS.observation(observation, 4096).ids)
    server.requests.clear()
    return prompt, generated, seen, record


def test_max_tokens_is_the_room_left_and_a_full_context_ends_the_episode_scored(
    fake_llm, live_service, tmp_path
):
    server, base_url = fake_llm
    env_url, engine = live_service
    task_id = "multi_turn_base_4"
    prompt, generated, seen, full = first_exchange(server, base_url, env_url, tmp_path, task_id)
    assert full.extra["stop_reason"] == "terminated" and full.turns > 2

    # Room for the first reply and its observation, and one token more: the second
    # request asks for that one token (the driver's rule).
    limits = EpisodeLimits(max_context_tokens=prompt + generated + seen + 1)
    outcome = evaluate(base_url, env_url, tmp_path / "a", task_ids=[task_id], limits=limits)
    asked = [body["max_tokens"] for body in server.requests_of(task_id)]
    assert asked == [generated + seen + 1, 1]
    record = outcome.records[task_id]
    assert (record.extra["stop_reason"], record.turns, record.score) == ("context_limit", 2, 0)
    assert record.failure_tags and not outcome.failures  # evaluated and scored, not dropped

    # One token less: the first observation does not fit, the episode ends after one reply.
    server.requests.clear()
    limits = EpisodeLimits(max_context_tokens=prompt + generated + seen)
    outcome = evaluate(base_url, env_url, tmp_path / "b", task_ids=[task_id], limits=limits)
    assert [body["max_tokens"] for body in server.requests_of(task_id)] == [generated + seen]
    record = outcome.records[task_id]
    assert (record.extra["stop_reason"], record.turns, record.score) == ("context_limit", 1, 0)
    assert [m["role"] for m in json.loads(record.output)] == ["assistant"]
    assert len(record.failure_tags) == full.extra["num_turns"]
    assert episode_stats(outcome.records.values())["stop_reasons"]["context_limit"] == 1
    assert engine.stats()["live_episodes"] == 0  # finished (evaluated and released)


def test_budget_counts_the_tokens_a_full_render_has(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    outcome = evaluate(base_url, live_service[0], tmp_path)
    for record in outcome.records.values():
        conversation = json.loads(record.input) + json.loads(record.output)
        rendered = TOKENIZER.apply_chat_template(conversation, tokenize=False)
        # The last prompt and its reply: the render less the reply's end-of-turn token
        # and the newline after it.
        assert rendered.endswith("<|im_end|>\n")
        assert record.extra["context_tokens"] == len(TOKENS.encode(rendered)) - 2, record.task_id
        # Every request asked for the room its prompt left, at most 4096.
        for body in server.requests_of(record.task_id):
            prompt = TOKENIZER.apply_chat_template(
                body["messages"], tokenize=False, add_generation_prompt=True
            )
            assert body["max_tokens"] == min(4096, 16384 - len(TOKENS.encode(prompt)))


def test_observations_are_clipped_with_the_drivers_marker(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    env_url = live_service[0]
    _, _, _, full = first_exchange(server, base_url, env_url, tmp_path, LONG_TASK)
    transcript = json.loads(full.output)
    assert max(len(TOKENS.encode(m["content"])) for m in transcript) > 100
    assert full.extra["clipped_observations"] == 0

    # The paper format's clip (the release's trainer's) keeps nothing under 100 tokens.
    limit = 300
    limits = EpisodeLimits(max_observation_tokens=limit)
    outcome = evaluate(base_url, env_url, tmp_path / "clip", task_ids=[LONG_TASK], limits=limits)

    # Every observation clipped as the driver clips it (turn_tokens, the format's rule),
    # and sent so.
    rule = get_format(PAPER_QWEN).clip
    clipped = [
        m
        if m["role"] == "assistant"
        else {**m, "content": TOKENS.clip_as(rule, m["content"], limit)}
        for m in transcript
    ]
    record = outcome.records[LONG_TASK]
    assert json.loads(record.output) == clipped
    assert server.requests_of(LONG_TASK)[-1]["messages"][2:] == clipped[:-1]
    cut = [m for m, original in zip(clipped, transcript, strict=True) if m != original]
    assert cut and all(m["content"].endswith("... truncate ...") for m in cut)
    assert all(len(TOKENS.encode(m["content"])) <= limit for m in cut)
    assert record.extra["clipped_observations"] == len(cut)


# What llama-cpp-python 0.3.36's server answered with --n_ctx 4096 (OpenAI's format).
CONTEXT_REFUSAL = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, you "
        "requested 9124 tokens (5028 in the messages, 4096 in the completion). Please reduce "
        "the length of the messages or completion.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


@pytest.mark.parametrize(
    "message, for_length",
    [
        (CONTEXT_REFUSAL["error"]["message"], True),  # OpenAI, vLLM, llama-cpp-python
        ("the request exceeds the available context size, try increasing it", True),  # llama.cpp
        ("The input (9000 tokens) is longer than the model's context length (8192 tokens).", True),
        ("temperature must be non-negative", False),
    ],
)
def test_refusals_for_length_are_told_apart(fake_llm, message, for_length):
    server, base_url = fake_llm
    task_id = TASKS[0]
    server.fail_next(task_id, 400, body={"error": {"message": message}})
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": first_question(task_id)},
    ]

    async def ask():
        settings = EndpointSettings(base_url=base_url, model=MODEL, **FAST_RETRIES)
        async with ChatEndpoint(settings) as chat:
            await chat.complete(messages, task_id, 16)

    with pytest.raises(EndpointError, match=f"{task_id}: .* refused the request") as raised:
        asyncio.run(ask())
    assert isinstance(raised.value, ContextLengthError) == for_length


def test_a_server_with_a_smaller_context_stops_the_run_with_advice(
    fake_llm, live_service, tmp_path, capsys
):
    server, base_url = fake_llm
    env_url, engine = live_service
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    server.fail_next("multi_turn_miss_param_21", 400, body=CONTEXT_REFUSAL)

    with pytest.raises(ContextBudgetError, match="set --max-context-tokens to the server") as e:
        evaluate(base_url, env_url, tmp_path, concurrency=1)
    assert "multi_turn_miss_param_21" in str(e.value) and "4096 tokens" in str(e.value)
    # Neither scored nor left out of a written step: the run stops, its episodes released.
    assert not (tmp_path / "validation").exists() and not errors_file(tmp_path, 0).exists()
    assert engine.stats()["live_episodes"] == 0

    server.fail_next("multi_turn_miss_param_21", 400, body=CONTEXT_REFUSAL)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"eval": TASKS, "train": []}))
    args = ["--base-url", base_url, "--model", MODEL, "--split-file", str(split), "--quiet"]
    args += ["--env-url", env_url, "--out-dir", str(tmp_path / "cli")]
    args += ["--tokenizer", str(SHIPPED_TOKENIZER)]
    assert cli.main(args) == 1
    assert "set --max-context-tokens to the server's context length" in capsys.readouterr().err


def test_a_served_context_below_the_budget_is_refused_before_any_episode(
    fake_llm, live_service, tmp_path
):
    server, base_url = fake_llm
    env_url, engine = live_service
    server.models = [{"id": MODEL, "object": "model", "max_model_len": 8192}]

    with pytest.raises(ContextBudgetError, match="set --max-context-tokens 8192"):
        evaluate(base_url, env_url, tmp_path)
    assert engine.stats()["created"] == 0 and not server.requests

    outcome = evaluate(base_url, env_url, tmp_path, limits=EpisodeLimits(max_context_tokens=8192))
    assert len(outcome.records) == len(TASKS)


# --- the preflight -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, error",
    [
        ("bad_url", "no endpoint answers at http://127.0.0.1:{port}/v1"),
        (
            "wrong_model_listed",
            "/models does not list model 'fake-modle' (it serves ['fake-model']); http://",
        ),
        ("wrong_model_unlisted", "refused a 1-token request for model 'fake-modle' (HTTP 404"),
        ("bad_key", "/models refused the API key (HTTP 401"),
        ("bad_key_unlisted", "/chat/completions refused the API key (HTTP 401"),
    ],
)
def test_preflight_fails_in_seconds_before_any_episode(
    fake_llm, live_service, tmp_path, case, error
):
    server, base_url = fake_llm
    env_url, engine = live_service
    options = {}
    port = free_port()
    if case == "bad_url":
        base_url = f"http://127.0.0.1:{port}/v1"
    if case.startswith("wrong_model"):
        options["model"] = "fake-modle"
    if case.startswith("bad_key"):
        server.api_key, options["api_key"] = "sk-right", "sk-wrong"
    if case.endswith("unlisted"):
        server.models = None
    hint = {"bad": "check --base-url", "wro": "check --model", "bad_key": "--api-key-env"}

    start = time.monotonic()
    with pytest.raises(PreflightError) as raised:
        evaluate(base_url, env_url, tmp_path, **options)

    assert time.monotonic() - start < 5
    assert error.format(port=port) in str(raised.value)
    assert hint["bad_key" if case.startswith("bad_key") else case[:3]] in str(raised.value)
    assert engine.stats()["created"] == 0 and not server.requests
    assert not (tmp_path / "validation").exists() and not partial_file(tmp_path, 0).exists()


@pytest.mark.parametrize("listing", ["none", "others"])
def test_preflight_passes_a_server_that_answers_for_a_model_it_does_not_list(
    fake_llm, live_service, tmp_path, caplog, listing
):
    server, base_url = fake_llm
    # As `transformers serve` started with a model: it lists the models of its cache.
    server.api_key = "sk-right"
    server.models = None if listing == "none" else [{"id": "org/cached-model"}]
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}

    outcome = evaluate(base_url, live_service[0], tmp_path, api_key="sk-right")

    assert not outcome.failures and len(outcome.records) == len(TASKS)
    assert [(body["max_tokens"], body["model"]) for body in server.preflights] == [(1, MODEL)]
    warned = "does not list model 'fake-model' (it serves ['org/cached-model'])"
    assert (warned in caplog.text) == (listing == "others")


# --- finish_reason -----------------------------------------------------------------------


def test_a_reply_cut_at_max_tokens_is_stepped_counted_and_recorded(
    fake_llm, live_service, tmp_path, capsys
):
    server, base_url = fake_llm
    env_url = live_service[0]
    task_id = "multi_turn_base_4"
    texts = gt_texts(task_id)
    # The first reply is cut (its tool call complete all the same), the rest finish.
    server.scripts = {t: gt_texts(t) for t in TASKS}
    server.scripts[task_id] = [(texts[0], "length"), *texts[1:]]

    outcome = evaluate(base_url, env_url, tmp_path)

    record = outcome.records[task_id]
    # Stepped as it is: its call ran, so the ground truth still passes.
    assert (record.score, record.extra["length_cut"]) == (1, 1)
    assert server.requests_of(task_id)[1]["messages"][2] == {
        "role": "assistant",
        "content": texts[0],
    }
    assert all(outcome.records[t].extra["length_cut"] == 0 for t in TASKS if t != task_id)
    counts = episode_stats(outcome.records.values())
    assert (counts["length_cut_replies"], counts["length_cut_tasks"]) == (1, 1)

    split = tmp_path / "split.json"
    split.write_text(json.dumps({"eval": TASKS, "train": []}))
    args = ["--base-url", base_url, "--model", MODEL, "--split-file", str(split), "--quiet"]
    args += ["--env-url", env_url, "--out-dir", str(tmp_path / "cli")]
    args += ["--tokenizer", str(SHIPPED_TOKENIZER)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "replies cut at max_tokens: 1 in 1 tasks" in out
    assert "episodes ended (4 tasks): terminated 4, max_generations 0, context_limit 0" in out
    assert "median time per task: " in out


def test_another_finish_reason_fails_the_task(fake_llm, live_service, tmp_path):
    server, base_url = fake_llm
    task_id = "multi_turn_base_4"
    server.scripts = {task_id: [("I will not.", "content_filter")]}

    outcome = evaluate(base_url, live_service[0], tmp_path, task_ids=[task_id])

    assert [f.task_id for f in outcome.failures] == [task_id]
    assert "finish_reason 'content_filter'" in outcome.failures[0].error
    assert task_id in outcome.failures[0].error


def test_command_line_stops_at_the_preflight(live_service, tmp_path, capsys):
    env_url, engine = live_service
    args = ["--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", MODEL, "--quiet"]
    args += [
        "--env-url",
        env_url,
        "--out-dir",
        str(tmp_path),
        "--tokenizer",
        str(SHIPPED_TOKENIZER),
    ]

    start = time.monotonic()
    assert cli.main(args) == 1
    assert time.monotonic() - start < 10
    assert "check --base-url" in capsys.readouterr().err
    assert engine.stats()["created"] == 0 and not (tmp_path / "validation").exists()


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
        # The budget counts exactly the prompt sent: each asks for the room it leaves.
        tokens = tokenizer_for(Prompting(fmt, True))
        for body in server.requests_of(task_id):
            sent = len(tokens.encode(body["prompt"], add_special_tokens=False))
            assert body["max_tokens"] == min(4096, 16384 - sent)
        assert record.extra["stop_reason"] == "terminated"
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
    LLAMA_TOKENIZER.save_pretrained(tmp_path / "tokenizer")
    args = ["--base-url", base_url, "--model", "Team-ACE/ToolACE-2-8B", "--quiet"]
    args += ["--split-file", str(split), "--env-url", live_service[0], "--out-dir", str(tmp_path)]
    args += ["--tokenizer", str(tmp_path / "tokenizer")]

    assert cli.main([*args, "--leaderboard-format"]) == 0
    assert "1.0000 (4/4)" in capsys.readouterr().out
    first = server.requests_of("multi_turn_base_4")[0]["prompt"]
    assert first.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert "You are an expert in composing functions." in first
    assert BASE_INSTRUCTIONS not in first
    # Records of another prompting are not mixed into the run.
    assert cli.main([*args, "--tool-format", "bfcl_prompt"]) == 1
    assert "leaderboard:Team-ACE/ToolACE-2-8B (completions)" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["qwen2.5", "bfcl_prompt"])
def test_the_budget_counts_the_prompt_sent_to_the_completions_api(
    fake_llm, live_service, tmp_path, name
):
    server, base_url = fake_llm
    env_url, task_id = live_service[0], "multi_turn_base_4"
    prompting = Prompting(get_format(name), completions=True)
    server.scripts = {task_id: gt_texts(task_id, prompting.tool_format)}
    evaluate(base_url, env_url, tmp_path, task_ids=[task_id], prompting=prompting)
    tokens = tokenizer_for(prompting)
    sizes = [
        len(tokens.encode(body["prompt"], add_special_tokens=False))
        for body in server.requests_of(task_id)
    ]
    assert len(sizes) > 2
    server.requests.clear()

    # Room for the second prompt and one token: the second request asks for that token,
    # and the third prompt does not fit.
    limits = EpisodeLimits(max_context_tokens=sizes[1] + 1)
    outcome = evaluate(
        base_url, env_url, tmp_path / "b", task_ids=[task_id], limits=limits, prompting=prompting
    )

    assert [body["max_tokens"] for body in server.requests_of(task_id)] == [
        sizes[1] + 1 - sizes[0],
        1,
    ]
    record = outcome.records[task_id]
    assert (record.extra["stop_reason"], record.turns, record.score) == ("context_limit", 2, 0)
