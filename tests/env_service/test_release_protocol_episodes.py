"""The release protocol's episodes against the original SEAL release's client side
(tests/release_trainer.py): the release trainer's episode loop, /evaluate and the
completion message, /release and idle expiry, /get_info and /get_env_profile, and the
whole loop over a real socket. /create's params: test_release_protocol_params.py."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from conftest import gt_texts, gt_turns
from release_trainer import (
    ReleaseHTTPError,
    ReleaseTrainer,
    dense_grader_capped,
    release_clients,
    seal_params,
)

from env_service import __main__ as service_main
from env_service.engine import ServiceConfig
from env_service.release_protocol import compat
from seal.bfcl import tags as T
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import END_OF_TURN_TEXT, ground_truth_trajectory, tool_call_text
from seal.bfcl.tasks import CATEGORIES, load_task, task_ids
from seal.rollout.env_client import call_body


@pytest.fixture
def release(service):
    """A factory: `release(**config)` -> (release protocol client, the release's trainer) of
    a new service."""
    return lambda **config: release_clients(service(**config))


# --- the episode loop, /evaluate and the completion message -----------------------------------


def test_release_trainer_runs_a_ground_truth_episode(release):
    svc, trainer = release()
    task = load_task("multi_turn_miss_func_0")  # has a turn without ground-truth calls
    init, states, last, result = trainer.run_episode(
        task.task_id, gt_turns(task.task_id), seal_params("sample"), "gt"
    )
    assert last["is_terminated"] is True and last["reward"] == 1.0
    assert states[-1] == {"role": "user", "content": compat.COMPLETED}
    assert all(s["role"] == "user" for s in states)

    irrelevant = sum(not gt for gt in task.ground_truth)
    assert irrelevant == 1
    assert isinstance(result["accuracy"], float) and result["accuracy"] == 1.0
    assert result["completed"] is True
    assert result["bfcl_progress"] == result["bfcl_progress_with_irrelevance"] == 1.0
    info = result["bfcl_progress_info"]
    assert (
        info["failure_tags"] == result["failure_tags"]
        and len(info["failure_tags"]) == task.num_turns
    )
    assert (info["passed_turns"], info["scorable_turns"]) == (
        task.num_turns - 1,
        task.num_turns - 1,
    )
    assert (info["passed_irrelevance_turns"], info["irrelevance_turns"]) == (1, 1)
    assert info["terminated_early"] is False
    # Our own fields are still there.
    for key in ("reward", "progress", "tag_notes", "invalid_calls", "tool_errors", "steps"):
        assert key in result
    assert dense_grader_capped(result, cap=0.0) == (1.0, info["failure_tags"])
    assert svc.engine.stats()["live_episodes"] == 0


def turn_scripts(task_id, good_turns: int) -> list[list[str]]:
    """The ground truth for the first turns, then only text (no tool call)."""
    turns = gt_turns(task_id)
    return turns[:good_turns] + [[END_OF_TURN_TEXT]] * (len(turns) - good_turns)


@pytest.mark.parametrize("task_id", ["multi_turn_miss_func_0", "multi_turn_base_0"])
def test_failed_episode_carries_the_release_progress(release, task_id):
    _, trainer = release()
    task = load_task(task_id)
    good = 2
    _, states, last, result = trainer.run_episode(
        task_id, turn_scripts(task_id, good), seal_params(), "f"
    )
    assert last["is_terminated"] and states[-1]["content"] == compat.COMPLETED
    has_calls = [bool(gt) for gt in task.ground_truth]
    # By construction: ground truth on the first turns, no call afterwards.
    expected_tags = [
        (T.PASS if i < good else T.EMPTY_TURN_MODEL_RESPONSE) if calls else T.CORRECT_ABSTENTION
        for i, calls in enumerate(has_calls)
    ]
    assert result["failure_tags"] == expected_tags
    scorable = sum(has_calls)
    passed = sum(calls for calls in has_calls[:good])
    irrelevance = len(has_calls) - scorable
    info = result["bfcl_progress_info"]
    assert (info["passed_turns"], info["scorable_turns"]) == (passed, scorable)
    assert (info["passed_irrelevance_turns"], info["irrelevance_turns"]) == (
        irrelevance,
        irrelevance,
    )
    assert info["per_turn_valid"] == [(i < good) if c else None for i, c in enumerate(has_calls)]
    assert result["accuracy"] == 0.0 and result["completed"] is True
    assert result["bfcl_progress"] == pytest.approx(passed / scorable)
    assert result["bfcl_progress_with_irrelevance"] == pytest.approx(
        (passed + irrelevance) / len(has_calls)
    )
    # The grader's capped partial credit sees the progress; the binary reward does not.
    score, tags = dense_grader_capped(result, cap=0.5)
    assert score == pytest.approx(min(0.5, passed / scorable)) and score > 0
    assert tags == expected_tags
    assert dense_grader_capped(result, cap=0.0)[0] == 0.0


def native_play(svc, task_id: str, turns, settings: dict) -> dict:
    """The native API (/v1) played with the calls of `turns` (ToolCall lists per step,
    per turn); a step without calls ends its turn. Returns the evaluation."""
    created = svc.http.post("/v1/episodes", json={"task_id": task_id, "settings": settings})
    assert created.status_code == 201, created.text
    episode = created.json()["episode_id"]
    for seq, calls in enumerate((step for turn in turns for step in [*turn, []]), start=1):
        body = {"content": "", "tool_calls": [call_body(c) for c in calls], "seq": seq}
        reply = svc.http.post(f"/v1/episodes/{episode}/steps", json=body).json()
        if reply["terminated"]:
            return reply["evaluation"]
    raise AssertionError("the episode did not end")


def test_progress_and_partial_credit_are_the_release_graders_on_both_protocols(release):
    """A correct abstention is neither a passed turn nor a scorable one (the release's
    multi_turn_progress): with the ground truth on the first two turns of a task whose
    third turn has no ground truth, and no call afterwards, progress is 2/4, not 3/5."""
    svc, trainer = release()
    task = load_task("multi_turn_miss_func_0")
    assert [bool(gt) for gt in task.ground_truth] == [True, True, False, True, True]
    script = turn_scripts(task.task_id, 2)
    params = seal_params(partial_credit_cap=1.0)
    _, _, _, result = trainer.run_episode(task.task_id, script, params, "pc")
    assert result["failure_tags"] == [
        T.PASS,
        T.PASS,
        T.CORRECT_ABSTENTION,
        T.EMPTY_TURN_MODEL_RESPONSE,
        T.EMPTY_TURN_MODEL_RESPONSE,
    ]
    assert result["progress"] == result["bfcl_progress"] == 0.5
    # Our capped reward is the release grader's capped score of the same episode.
    assert result["reward"] == dense_grader_capped(result, cap=1.0)[0] == 0.5

    trajectory = ground_truth_trajectory(task)[:2] + [[]] * (task.num_turns - 2)
    native = native_play(svc, task.task_id, trajectory, {"reward": {"partial_credit_cap": 1.0}})
    assert native["failure_tags"] == result["failure_tags"]
    assert (native["progress"], native["reward"]) == (0.5, 0.5)


def test_a_tool_call_on_a_turn_without_ground_truth_fails_only_that_irrelevance_turn(release):
    _, trainer = release()
    task = load_task("multi_turn_miss_func_0")
    turns = gt_turns(task.task_id)
    [empty] = [i for i, gt in enumerate(task.ground_truth) if not gt]
    turns[empty] = [tool_call_text([ToolCall("pwd", {})]), END_OF_TURN_TEXT]  # read-only call
    _, _, _, result = trainer.run_episode(task.task_id, turns, seal_params(), "s")
    info = result["bfcl_progress_info"]
    assert info["failure_tags"][empty] == T.SPURIOUS_TOOL_CALL
    assert info["irrelevance_per_turn"][empty] == 0.0
    assert (info["passed_irrelevance_turns"], info["irrelevance_turns"]) == (0, 1)
    assert result["bfcl_progress"] == 1.0  # scorable turns all pass
    n = task.num_turns
    assert result["bfcl_progress_with_irrelevance"] == pytest.approx((n - 1) / n)


def test_an_episode_stopped_early_is_not_completed(release):
    svc, trainer = release()
    task_id = "multi_turn_base_0"
    turns = gt_turns(task_id)[:1]  # the client stops after the first turn (context limit)
    _, states, last, result = trainer.run_episode(task_id, turns, seal_params(), "e")
    assert last["is_terminated"] is False
    assert compat.COMPLETED not in [s["content"] for s in states]
    assert result["completed"] is False
    assert result["bfcl_progress_info"]["terminated_early"] is True
    # Cut by the service's step cap: terminated, but not completed either.
    svc.create(task_id, instance_id="cut", max_steps=1)
    cut = trainer.step("cut", tool_call_text([ToolCall("pwd", {})]))
    assert cut["is_terminated"] is True and len(cut["state"]) == 1
    assert cut["state"][0]["content"] != compat.COMPLETED
    assert trainer.evaluate("cut")["completed"] is False


def test_every_step_answers_one_message_of_the_release_shape(release):
    _, trainer = release()
    task = load_task("multi_turn_miss_func_0")
    trainer.create_instance(task.task_id, "shape", seal_params())
    for _ in range(task.num_turns):
        for text in (tool_call_text([ToolCall("ls", {})]), "No."):
            out = trainer.step("shape", text)
            [message] = out["state"]
            assert set(message) == {"role", "content", "tool_calls"}
            assert message["role"] == "user" and message["tool_calls"] == []
    assert out["is_terminated"] is True
    assert out["state"] == [{"role": "user", "content": compat.COMPLETED, "tool_calls": []}]


# --- /release and idle expiry ----------------------------------------------------------------


def test_release_of_a_gone_episode_is_success_false(release):
    svc, trainer = release()
    assert trainer.release_instance("never-created") is False
    trainer.create_instance("multi_turn_base_1", "once", seal_params())
    assert trainer.release_instance("once") is True
    assert trainer.release_instance("once") is False
    with pytest.raises(ReleaseHTTPError, match="^404"):
        trainer.step("once", "hello")


def test_idle_expiry_default_is_the_release_hour(monkeypatch):
    assert ServiceConfig().episode_ttl_s == 3600.0
    started = {}
    monkeypatch.setattr(service_main.uvicorn, "run", lambda app, **kw: started.update(app=app))
    service_main.main([])
    assert started["app"].state.engine.config.episode_ttl_s == 3600.0


# --- the smaller points ------------------------------------------------------------------------


def test_evaluate_without_params_is_the_full_report(release):
    _, trainer = release()
    trainer.create_instance("multi_turn_base_1", "r", seal_params())
    for text in gt_texts("multi_turn_base_1"):
        trainer.step("r", text)
    report = trainer.evaluate("r")  # the release's default: sparse=False
    assert isinstance(report, dict) and report["accuracy"] == 1.0
    assert isinstance(report["accuracy"], float)
    assert "bfcl_progress_info" in report
    sparse = trainer.evaluate("r", params={"sparse": True})
    assert isinstance(sparse, float) and sparse == 1.0


def test_get_info_is_the_release_tool_list_text(release):
    _, trainer = release()
    task = load_task("multi_turn_miss_func_0")
    [(reveal, held)] = task.held_out.items()
    trainer.create_instance(task.task_id, "i", seal_params())
    text = trainer.get_tools_info("i")
    assert text == "Available tools:\n" + "\n".join(f"- {d['name']}" for d in task.tools)
    for texts in gt_turns(task.task_id)[:reveal]:
        for t in texts:
            trainer.step("i", t)
    revealed = trainer.get_tools_info("i")
    assert revealed.endswith("".join(f"\n- {d['name']}" for d in held))


def test_get_env_profile_serves_the_paper_split(release):
    _, trainer = release()
    split = json.loads(compat.SPLIT_FILE.read_text())
    assert trainer.get_env_profile() == split["train"]  # the release's default split
    for name in ("val", "test", "eval"):
        assert trainer.get_env_profile(name) == split["eval"]
    assert len(split["train"]) == len(split["eval"]) == 400
    # Both paths: the trainer client's "//get_env_profile" and the other client's.
    base = str(trainer.http.base_url).rstrip("/")
    for path in ("//get_env_profile", "/get_env_profile"):
        answer = trainer.http.post(base + path, json={"env_type": "bfcl", "params": {}})
        assert answer.request.url.path == path
        assert answer.status_code == 200 and answer.json()["data"] == split["train"]
    with pytest.raises(ReleaseHTTPError, match="^404") as unknown:
        trainer.get_env_profile("dev")
    assert "train" in str(unknown.value)
    wrong = trainer.http.post("/get_env_profile", json={"env_type": "webshop"})
    assert wrong.status_code == 400 and wrong.json()["success"] is False


def test_numeric_task_ids_are_the_release_data_rows(release):
    _, trainer = release()
    # The release's data file: the four categories in sorted name order, bfcl-eval order.
    rows = [tid for c in sorted(CATEGORIES) for tid in task_ids(c)]
    assert len(rows) == 800
    for row in (0, 199, 200, 400, 600, 799):
        data = trainer.create_instance(str(row), f"row{row}", seal_params())
        assert data["info"]["task_id"] == str(row)
        assert data["info"]["test_id"] == rows[row]
        task = load_task(rows[row])
        assert data["state"][1]["content"] == task.questions[0][0]["content"]
        assert data["info"]["questions_count"] == task.num_turns
        assert data["info"]["tools_count"] == len(task.tools)
    assert rows[200].startswith("multi_turn_long_context_")
    with pytest.raises(ReleaseHTTPError, match="^404") as missing:
        trainer.create_instance("800", "row800", seal_params())
    assert "0-799" in str(missing.value)


# --- the whole loop over a real socket ---------------------------------------------------------


def test_release_trainer_over_http(live_service):
    base_url, engine = live_service
    task_ids_ = ["multi_turn_miss_param_0", "3"]
    results = {}

    def worker(task_id):
        with httpx.Client(base_url=base_url, timeout=60) as http:
            trainer = ReleaseTrainer(http)
            # Over a real socket, at the path the trainer client really requests.
            assert len(trainer.get_env_profile("train")) == 400
            resolved = compat.resolve_task_id(task_id)
            results[task_id] = trainer.run_episode(
                task_id, gt_turns(resolved), seal_params(), f"live-{task_id}"
            )[3]

    threads = [threading.Thread(target=worker, args=(t,)) for t in task_ids_]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(results) == sorted(task_ids_)
    for result in results.values():
        assert result["accuracy"] == 1.0 and result["completed"] is True
        assert dense_grader_capped(result, cap=0.0)[0] == 1.0
    assert engine.stats()["live_episodes"] == 0
