"""What the endpoint evaluator asks of an endpoint: the preflight before any episode, the
finish reasons it accepts, and the completions API with any tool format or bfcl-eval's
own leaderboard prompt."""

import json

import pytest
from conftest import free_port, gt_texts
from fake_chat_server import (
    LLAMA_TOKENIZER,
    MODEL,
    TASKS,
    evaluate,
    seal_eval_args,
    served_fake_chat_server,
    tokenizer_for,
)

from seal.bfcl.prompt import BASE_INSTRUCTIONS
from seal.eval import score_endpoint as cli
from seal.eval.chat_endpoint import PreflightError
from seal.eval.endpoint_episode import Prompting
from seal.eval.evaluator import episode_stats, partial_file
from seal.formats.registry import get_format
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER


@pytest.fixture
def fake_llm():
    """(server, base_url): the scripted endpoint (tests/fake_chat_server.py)."""
    with served_fake_chat_server() as served:
        yield served


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

    with pytest.raises(PreflightError) as raised:
        evaluate(base_url, env_url, tmp_path, **options)

    # In seconds: one request per route, none retried after a back-off (what a timer on a
    # loaded machine would have stood for).
    assert all(n == 1 for n in server.hits.values()), server.hits
    if case == "bad_url":
        assert "after 1 attempt(s)" in str(raised.value)
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

    args = seal_eval_args(base_url, env_url, tmp_path, tmp_path / "cli")
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

    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert "check --base-url" in err and "after 1 attempt(s)" in err, err  # not retried
    assert engine.stats()["created"] == 0 and not (tmp_path / "validation").exists()


def test_a_dead_base_url_is_refused_before_the_tokenizer_and_the_service(
    tmp_path, capsys, monkeypatch
):
    """Issue 42: the preflight comes first, so a wrong --base-url costs neither the
    tokenizer's load (transformers' import, seconds) nor --start-env's service."""

    def not_before_the_preflight(*args, **kwargs):
        raise AssertionError("reached before the endpoint was checked")

    monkeypatch.setattr(cli, "load_tokenizer", not_before_the_preflight)
    monkeypatch.setattr(cli, "own_service", not_before_the_preflight)
    args = ["--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", MODEL, "--quiet"]
    args += ["--tokenizer", str(SHIPPED_TOKENIZER)]
    args += ["--start-env", "--env-url", f"http://127.0.0.1:{free_port()}"]
    assert cli.main([*args, "--out-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "check --base-url" in err and "after 1 attempt(s)" in err, err


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
    assert "100.00 (4/4)" in capsys.readouterr().out
    first = server.requests_of("multi_turn_base_4")[0]["prompt"]
    assert first.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert "You are an expert in composing functions." in first
    assert BASE_INSTRUCTIONS not in first
    # Records of another prompting are not mixed into the run.
    assert cli.main([*args, "--tool-format", "bfcl_prompt"]) == 1
    assert "leaderboard:Team-ACE/ToolACE-2-8B (completions)" in capsys.readouterr().err
