"""The endpoint evaluator on BFCL V4 memory questions, against a scripted OpenAI-compatible
server and the real environment service.

The fake model reads the conversation like a model would: in a scenario's conversation
it writes each new user message into memory (recursive-summary backend: `memory_append`)
and says "Noted." after the tool's answer; asked a question, it reads its memory, then
answers: the ground truth for the questions in `RIGHT`, "I do not know" otherwise. What
is checked is the evaluator: the conversations run first and in order, questions wait
for their chain, records carry bfcl-eval's verdict, a failing conversation fails its
questions unscored, a resumed run replays nothing it finished, and the Table 2 summary.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from agentic_scripts import agentic_service, answer_text, call
from aiohttp import web
from conftest import serving_aiohttp, shipped_tokenizer

from seal.bfcl.agentic.tasks import ANSWER_NOT_FOUND, PASS, agentic_task_ids
from seal.bfcl.tasks import load_task
from seal.eval import score_endpoint as cli
from seal.eval.chat_endpoint import EndpointSettings
from seal.eval.evaluator import errors_file, evaluate_endpoint, prerequisites_file
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.runs.records import read_step_file

MODEL = "fake-model"
TOKENIZER = shipped_tokenizer()
NOTETAKER = [t for t in agentic_task_ids("memory_rec_sum") if "-notetaker-" in t][:3]
RIGHT = set(NOTETAKER[:2])
ANSWER_FORMAT = "For your final answer to the user"


class FakeModel:
    def __init__(self):
        self.question_of = {load_task(t).questions[0][0]["content"]: t for t in NOTETAKER}
        self.log: list[str] = []
        """Per request: the task's first user message (its identity here)."""
        self.fail_first_messages: set[str] = set()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        if len(messages) < 2:  # the preflight
            return reply("OK", "length")
        first, last = messages[1]["content"], messages[-1]
        self.log.append(first)
        if first in self.fail_first_messages:
            return web.json_response({"error": "boom"}, status=500)
        fresh = last["role"] == "user" and not last["content"].startswith("<tool_response>")
        if ANSWER_FORMAT not in messages[0]["content"]:  # a conversation that fills memory
            return reply(call("memory_append", text=last["content"] + "\n") if fresh else "Noted.")
        task_id = self.question_of.get(first)  # None: a question it has no answer to
        if fresh:
            return reply(call("memory_retrieve"))
        answer = load_task(task_id).answers[0] if task_id in RIGHT else "I do not know"
        return reply(answer_text(answer))

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": MODEL, "object": "model"}]})


def reply(text: str, finish_reason: str = "stop") -> web.Response:
    message = {"role": "assistant", "content": text}
    return web.json_response(
        {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    )


@pytest.fixture
def fake_model():
    model = FakeModel()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", model.handle)
    app.router.add_get("/v1/models", model.models)
    with serving_aiohttp(app) as url:
        yield model, f"{url}/v1"


def evaluate(base_url: str, env_url: str, out_dir, task_ids=NOTETAKER, **options):
    settings = EndpointSettings(base_url=base_url, model=MODEL, attempts=1, backoff_s=0.001)
    return asyncio.run(
        evaluate_endpoint(
            settings, list(task_ids), out_dir, env_url=env_url, tokenizer=TOKENIZER,
            concurrency=4, show_progress=False, **options,
        )
    )  # fmt: skip


def test_memory_questions_run_after_their_conversations_and_are_scored_by_bfcl(
    fake_model, tmp_path
):
    model, base_url = fake_model
    chain = load_task(NOTETAKER[0]).chain
    with agentic_service(tmp_path / "snapshots") as (env_url, _):
        outcome = evaluate(base_url, env_url, tmp_path / "run")
        # Nothing left to do: a second run replays no conversation and asks nothing.
        asked = len(model.log)
        again = evaluate(base_url, env_url, tmp_path / "run")
    assert not outcome.failures and sorted(outcome.records) == sorted(NOTETAKER)
    for task_id, record in outcome.records.items():
        expected = (1, [PASS]) if task_id in RIGHT else (0, [ANSWER_NOT_FOUND])
        assert (record.score, record.failure_tags) == expected
        assert record.data_source == "memory_rec_sum" and record.extra["answer"]
    # Conversations first, in order, each once; every question after the last of them.
    firsts = [load_task(p).questions[0][0]["content"] for p in chain]
    order = [model.log.index(first) for first in firsts]
    assert order == sorted(order)
    last_conversation = max(i for i, first in enumerate(model.log[:asked]) if first in firsts)
    questions = [i for i, first in enumerate(model.log[:asked]) if first in model.question_of]
    assert min(questions) > last_conversation
    played = prerequisites_file(tmp_path / "run", 0).read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in played] == list(chain)
    assert all(json.loads(line)["scored"] is False for line in played)
    assert again.skipped == len(NOTETAKER) and len(model.log) == asked


def test_a_failed_conversation_fails_its_questions_unscored(fake_model, tmp_path):
    model, base_url = fake_model
    chain = load_task(NOTETAKER[0]).chain
    model.fail_first_messages = {load_task(chain[2]).questions[0][0]["content"]}
    with agentic_service(tmp_path / "snapshots") as (env_url, _):
        outcome = evaluate(base_url, env_url, tmp_path / "run")
    failed = {f.task_id: f.error for f in outcome.failures}
    assert set(failed) == {*chain[2:], *NOTETAKER} and not outcome.records
    assert all(f"not run: {chain[-1]} failed" in failed[q] for q in NOTETAKER)
    assert outcome.step_file is None
    listed = [json.loads(line)["task_id"] for line in errors_file(tmp_path / "run", 0).open()]
    assert sorted(listed) == sorted(failed)


def test_eval_endpoint_scores_a_split_of_memory_questions_and_prints_table2(
    fake_model, tmp_path, capsys
):
    _, base_url = fake_model
    out = tmp_path / "run"
    with agentic_service(tmp_path / "snapshots") as (env_url, _):
        args = ["--base-url", base_url, "--model", MODEL, "--split", "memory_rec_sum"]
        args += ["--limit", "3", "--env-url", env_url, "--out-dir", str(out), "--quiet"]
        assert cli.main([*args, "--tokenizer", str(SHIPPED_TOKENIZER)]) == 0
    printed = capsys.readouterr().out
    records = read_step_file(out / "validation" / "step_000000.jsonl")
    # bfcl-eval's first three memory questions are the student scenario's.
    assert [r.task_id for r in records] == agentic_task_ids("memory_rec_sum")[:3]
    assert {r.extra["max_generations"] for r in records} == {21}  # bfcl-eval's per turn
    assert f"| {MODEL} | – | – | – | – | – | – | – |" in printed  # rec_sum alone: no column
    assert "memory_rec_sum 0/3" in printed  # the fake knows no student answer
    assert "| Qwen2.5-7B-Instruct + SEAL |" in printed.replace("paper: ", "")


def test_eval_endpoint_gives_its_own_service_a_snapshot_folder_and_its_search_pace(tmp_path):
    base = ["--base-url", "http://127.0.0.1:9/v1", "--model", MODEL, "--start-env"]
    memory = cli.parse_args([*base, "--split", "memory"])
    assert cli.service_args(memory, tmp_path) == (
        "--memory-snapshot-dir",
        str(tmp_path / "memory_snapshots"),
    )
    web = [*base, "--split", "web_search_base"]
    assert cli.service_args(cli.parse_args(web), tmp_path) == ()  # its budget is its own
    paced = cli.parse_args([*web, "--web-search-interval", "3.6"])
    assert cli.service_args(paced, tmp_path) == ("--web-search-interval", "3.6")
    assert cli.service_args(cli.parse_args(base), tmp_path) == ()  # BFCL V3: nothing
    assert cli.parse_args(base).max_generations == 20
