"""The endpoint evaluator's context budget: under the fill rule each request asks for the
room the context leaves (the release's rule: tests/seal/rollout/test_loop.py), observations
are clipped as the driver clips them, a full context ends the episode scored, and a server
with a smaller context is named before any episode."""

import asyncio
import json

import pytest
from conftest import gt_texts
from fake_chat_server import (
    FAST_RETRIES,
    LONG_TASK,
    MODEL,
    TASKS,
    TOKENIZER,
    TOKENS,
    FakeChatServer,
    evaluate,
    first_question,
    seal_eval_args,
    served_fake_chat_server,
    tokenizer_for,
)

from seal.eval import score_endpoint as cli
from seal.eval.chat_endpoint import (
    ChatEndpoint,
    ContextLengthError,
    EndpointError,
    EndpointSettings,
)
from seal.eval.endpoint_episode import ContextBudgetError, Prompting
from seal.eval.evaluator import episode_stats, errors_file
from seal.formats.base import Conversation
from seal.formats.registry import PAPER_QWEN, get_format
from seal.service_contract import EpisodeLimits


@pytest.fixture
def fake_llm():
    """(server, base_url): the scripted endpoint (tests/fake_chat_server.py)."""
    with served_fake_chat_server() as served:
        yield served


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
    limits = EpisodeLimits(max_context_tokens=prompt + generated + seen + 1, context_stop="fill")
    outcome = evaluate(base_url, env_url, tmp_path / "a", task_ids=[task_id], limits=limits)
    asked = [body["max_tokens"] for body in server.requests_of(task_id)]
    assert asked == [generated + seen + 1, 1]
    record = outcome.records[task_id]
    assert (record.extra["stop_reason"], record.turns, record.score) == ("context_limit", 2, 0)
    assert record.failure_tags and not outcome.failures  # evaluated and scored, not dropped

    # One token less: the first observation does not fit, the episode ends after one reply.
    server.requests.clear()
    limits = EpisodeLimits(max_context_tokens=prompt + generated + seen, context_stop="fill")
    outcome = evaluate(base_url, env_url, tmp_path / "b", task_ids=[task_id], limits=limits)
    assert [body["max_tokens"] for body in server.requests_of(task_id)] == [generated + seen]
    record = outcome.records[task_id]
    assert (record.extra["stop_reason"], record.turns, record.score) == ("context_limit", 1, 0)
    assert [m["role"] for m in json.loads(record.output)] == ["assistant"]
    assert len(record.failure_tags) == full.extra["num_turns"]
    assert episode_stats(outcome.records.values())["stop_reasons"]["context_limit"] == 1
    assert engine.stats()["live_episodes"] == 0  # finished (evaluated and closed)


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
        # Every request asked for a whole 4096 (the release's rule: no prompt reached the
        # reserve), which is also the room its prompt left, at most 4096 (the fill rule).
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
    # Neither scored nor left out of a written step: the run stops, its episodes closed.
    assert not (tmp_path / "validation").exists() and not errors_file(tmp_path, 0).exists()
    assert engine.stats()["live_episodes"] == 0

    server.fail_next("multi_turn_miss_param_21", 400, body=CONTEXT_REFUSAL)
    args = seal_eval_args(base_url, env_url, tmp_path, tmp_path / "cli")
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
    limits = EpisodeLimits(max_context_tokens=sizes[1] + 1, context_stop="fill")
    outcome = evaluate(
        base_url, env_url, tmp_path / "b", task_ids=[task_id], limits=limits, prompting=prompting
    )

    assert [body["max_tokens"] for body in server.requests_of(task_id)] == [
        sizes[1] + 1 - sizes[0],
        1,
    ]
    record = outcome.records[task_id]
    assert (record.extra["stop_reason"], record.turns, record.score) == ("context_limit", 2, 0)
