"""The endpoint evaluator against the scripted endpoint (tests/fake_chat_server.py) and the
real environment service: scores and failure tags, retries, failed tasks, reruns and
resumes, the command line's exit status."""

import contextlib
import json
import socket
from collections import Counter
from pathlib import Path

import pytest
from conftest import free_port, gt_texts
from fake_chat_server import MODEL, TASKS, evaluate, seal_eval_args, served_fake_chat_server

from seal.eval import score_endpoint as cli
from seal.eval.evaluator import errors_file, partial_file
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.runs.records import read_val_dir
from seal.service_contract import EpisodeLimits


@pytest.fixture
def fake_llm():
    """(server, base_url): the scripted endpoint (tests/fake_chat_server.py)."""
    with served_fake_chat_server() as served:
        yield served


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
    args = seal_eval_args(base_url, live_service[0], tmp_path, tmp_path / "run")

    assert cli.main(args) == 1
    assert "FAILED, not scored: 1 tasks" in capsys.readouterr().err
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "3 already done" in out and "100.00 (4/4)" in out


def test_command_line_refuses_a_missing_api_key(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SEAL_TEST_NO_SUCH_KEY", raising=False)
    args = ["--base-url", "http://127.0.0.1:9/v1", "--model", MODEL]
    args += ["--tokenizer", str(SHIPPED_TOKENIZER)]  # a non-Qwen model names its tokenizer
    assert (
        cli.main([*args, "--api-key-env", "SEAL_TEST_NO_SUCH_KEY", "--out-dir", str(tmp_path)]) == 1
    )
    assert "SEAL_TEST_NO_SUCH_KEY" in capsys.readouterr().err


def test_unhealthy_environment_service_stops_the_run(tmp_path):
    with pytest.raises(RuntimeError, match="no healthy environment service") as refused:
        evaluate("http://127.0.0.1:9/v1", f"http://127.0.0.1:{free_port()}", tmp_path)
    assert "-m env_service" in str(refused.value) and "--start-env" in str(refused.value)
    assert not (Path(tmp_path) / "validation").exists()


@contextlib.contextmanager
def port_taken(port: int):
    """`port` busy for the block: held here, or already by another program."""
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.1", port))
            held.listen()
        except OSError:
            pass  # someone else holds it: busy all the same
        yield


def test_start_env_takes_a_free_port_and_says_it_is_seal_evals(fake_llm, tmp_path, capsys):
    """Not python -m env_service's default port (8082, busy here), so that two evaluations
    with --start-env run at once; its line is seal-eval's, not the launcher's."""
    server, base_url = fake_llm
    server.scripts = {task_id: gt_texts(task_id) for task_id in TASKS}
    args = seal_eval_args(base_url, "unused", tmp_path, tmp_path / "run")
    at = args.index("--env-url")
    del args[at : at + 2]
    with port_taken(8082):
        assert cli.main([*args, "--start-env", "--limit", "1"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    started = next(line for line in out.splitlines() if "environment service started" in line)
    assert started.startswith("[seal-eval] environment service started at http://127.0.0.1:")
    assert ":8082 " not in started


def test_start_env_on_a_busy_port_names_seal_evals_flag_before_any_model_server(
    tmp_path, capsys, monkeypatch
):
    def no_model_server(*args, **kwargs):
        raise AssertionError("the model server started before the service's port was checked")

    monkeypatch.setattr(cli, "serve_model", no_model_server)
    port = free_port()
    args = ["--model-dir", str(SHIPPED_TOKENIZER), "--out-dir", str(tmp_path), "--start-env",
            "--env-url", f"http://127.0.0.1:{port}"]  # fmt: skip
    with port_taken(port):
        assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert f"--env-url http://127.0.0.1:{port}: port {port} is in use" in err, err
    assert "leave --env-url out for a free port" in err and "service.port" not in err


def test_command_line_needs_a_tokenizer_for_other_models(tmp_path, capsys):
    args = ["--base-url", "http://127.0.0.1:9/v1", "--out-dir", str(tmp_path)]
    assert cli.main([*args, "--model", "meta-llama/Llama-3.1-8B-Instruct"]) == 1
    assert "--tokenizer is needed for model 'meta-llama/Llama-3.1-8B-Instruct'" in (
        capsys.readouterr().err
    )
    assert cli.load_tokenizer(None, "Qwen/Qwen2.5-7B-Instruct").name_or_path == str(
        SHIPPED_TOKENIZER
    )
