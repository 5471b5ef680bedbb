"""The wire protocol against the original SEAL release's client side.

`ReleaseTrainer` plays what the release's trainer does, as its code documents it
(agentevolver/client/env_client.py, module/env_manager/env_worker.py,
module/agent_flow/agent_flow.py, module/task_manager/rewards/bfcl_dense_env_grader.py,
exp/SEAL.yaml): the same request bodies, the same params, the fields it reads and the
assertions it makes (two messages from /create, exactly one per /step), and the grader's
capped partial-credit score. The tests are grouped by the part of the protocol they check.
"""

from __future__ import annotations

import json
import os
import threading

import httpx
import pytest
from conftest import gt_texts, gt_turns
from wire_client import SEAL_YAML_BFCL, TOOLACE_YAML_BFCL, WireClient

from env_service import __main__ as service_main
from env_service import evolution
from env_service.engine import ServiceConfig
from env_service.release import compat
from seal.bfcl import tags as T
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import END_OF_TURN_TEXT, ground_truth_trajectory, tool_call_text
from seal.bfcl.tasks import CATEGORIES, load_task, task_ids
from seal.rollout.env_client import call_body


def seal_params(mode: str = "sample", **bfcl) -> dict:
    return {"is_open_query": False, "rollout_mode": mode, **SEAL_YAML_BFCL, **bfcl}


class ReleaseHTTPError(RuntimeError):
    """What the release's client raises on a non-2xx answer (requests' raise_for_status)."""


class ReleaseTrainer:
    """The release trainer's side of the protocol over any httpx-style client."""

    def __init__(self, http):
        self.http = http

    def post(
        self,
        endpoint: str,
        env_type="default",
        task_id=None,
        instance_id=None,
        messages=None,
        params=None,
    ) -> dict:
        # The release's client always sends all five fields, {} for missing dicts, and
        # env_type "default" unless it names one.
        body = {
            "env_type": env_type,
            "task_id": task_id,
            "instance_id": instance_id,
            "messages": messages or {},
            "params": params or {},
        }
        # The release joins base URL, "/" and the endpoint name as it is given, so its
        # "/get_env_profile" becomes "//get_env_profile".
        response = self.http.post(f"{str(self.http.base_url).rstrip('/')}/{endpoint}", json=body)
        if response.status_code >= 400:
            raise ReleaseHTTPError(f"{response.status_code}: {response.text}")
        return response.json()

    def get_env_profile(self, split: str = "train") -> list:
        return self.post("/get_env_profile", env_type="bfcl", params={"split": split})["data"]

    def create_instance(self, task_id: str, instance_id: str, params: dict) -> dict:
        return self.post("create", "bfcl", task_id, instance_id, params=params)["data"]

    def step(self, instance_id: str, content: str) -> dict:
        action = {"content": content, "role": "assistant"}
        return self.post("step", instance_id=instance_id, messages=action)["data"]

    def evaluate(self, instance_id: str, params: dict | None = None):
        return self.post("evaluate", instance_id=instance_id, params=params)["data"]

    def get_tools_info(self, instance_id: str):
        return self.post("get_info", instance_id=instance_id)["data"]

    def release_instance(self, instance_id: str) -> bool:
        return self.post("release", instance_id=instance_id)["success"]

    def run_episode(self, task_id: str, turns: list[list[str]], params: dict, instance_id: str):
        """EnvWorker.execute + AgentFlow.execute: create, step until terminated (or the
        script runs out, like a context overflow), grade, release."""
        init = self.create_instance(task_id, instance_id, params)
        assert isinstance(init["state"], list) and len(init["state"]) == 2
        assert init["state"][-1]["role"] == "user"
        states = []
        for text in (t for texts in turns for t in texts):
            out = self.step(instance_id, text)
            assert len(out["state"]) == 1  # agent_flow's assertion
            state = out["state"][0]
            state.pop("tool_calls", None)  # agent_flow drops it before saving the message
            states.append(state)
            if out["is_terminated"]:
                break
        result = self.evaluate(instance_id, params={"sparse": False})
        assert self.release_instance(instance_id) is True
        return init, states, out, result


def dense_grader_capped(result: dict, cap: float, weight: float = 1.0) -> tuple[float, list]:
    """The release's bfcl-dense-env grader in its capped mode: the score, and the tags its
    env manager hands to A-Patch and the capability state."""
    accuracy = float(result.get("accuracy", 0.0) or 0.0)
    progress = max(0.0, min(1.0, float(result.get("bfcl_progress", 0.0) or 0.0)))
    score = 1.0 if accuracy >= 1.0 else min(cap, weight * progress)
    info = result.get("bfcl_progress_info", {}) or {}
    return score, list(info.get("failure_tags") or [])


@pytest.fixture
def release(service):
    """A factory: (the service on the wire protocol, the release's trainer client)."""

    def start(**config):
        svc = service(**config)
        return WireClient(svc.http, svc.engine), ReleaseTrainer(svc.http)

    return start


def plain_prompt(svc, task_id: str) -> str:
    _, data = svc.create(task_id, rollout_mode="validate")
    return data["state"][0]["content"]


# --- /create takes the release's params ------------------------------------------------------


def test_seal_yaml_params_are_accepted_and_mean_train_only_schema_cues(release):
    svc, trainer = release()
    task_id = "multi_turn_base_0"
    train = trainer.create_instance(task_id, "t", seal_params("sample"))
    assert train["info"]["observation_lite"] is True
    assert train["info"]["ignored_params"] == []  # every key understood
    # The same prompt as this service's own switch for the layer.
    _, flat = svc.create(task_id, schema_cues=True)
    assert train["state"][0]["content"] == flat["state"][0]["content"]
    assert "[required]" in train["state"][0]["content"]

    val = trainer.create_instance(task_id, "v", seal_params("validate"))
    assert val["info"]["observation_lite"] is False
    assert val["state"][0]["content"] == plain_prompt(svc, task_id)  # byte for byte


def test_observation_lite_gates_like_the_release(release):
    svc, trainer = release()
    cues = {**SEAL_YAML_BFCL["observation_lite"], "apply_to_validation": True}
    data = trainer.create_instance(
        "multi_turn_base_0", "a", seal_params("val", observation_lite=cues)
    )
    assert data["info"]["observation_lite"] is True
    for mode in ("validation", "val", "test"):  # the release's other names for validation
        data = trainer.create_instance("multi_turn_base_0", mode, seal_params(mode))
        assert data["info"]["observation_lite"] is False, mode

    only_miss_param = {**cues, "categories": ["multi_turn_miss_param"]}
    for task_id, expected in [("multi_turn_base_0", False), ("multi_turn_miss_param_0", True)]:
        data = trainer.create_instance(
            task_id, task_id, seal_params(observation_lite=only_miss_param)
        )
        assert data["info"]["observation_lite"] is expected, task_id

    typed = {**cues, "add_type_hint": True}
    data = trainer.create_instance(
        "multi_turn_base_0", "typed", seal_params(observation_lite=typed)
    )
    _, flat = svc.create("multi_turn_base_0", schema_cues=True, type_hints=True)
    assert data["state"][0]["content"] == flat["state"][0]["content"]

    off = {**cues, "enable": False, "hide_optional": True}  # knobs of a layer that is off
    data = trainer.create_instance("multi_turn_base_0", "off", seal_params(observation_lite=off))
    assert data["state"][0]["content"] == plain_prompt(svc, "multi_turn_base_0")


HONOURED_NOT = "cannot be honoured"
TOOLACE_MODE = {k: v for k, v in TOOLACE_YAML_BFCL.items() if k != "observation_lite"}
NOT_SUPPORTED = "is not supported"


@pytest.mark.parametrize(
    ("params", "named", "reason"),
    [
        (
            {"observation_lite": {"enable": True, "hide_optional": True}},
            "hide_optional",
            HONOURED_NOT,
        ),
        (
            {"observation_lite": {"enable": True, "add_required_hint": False}},
            "add_required_hint",
            HONOURED_NOT,
        ),
        (
            {"observation_lite": {"enable": True, "add_enum_hint": False}},
            "add_enum_hint",
            HONOURED_NOT,
        ),
        (
            {"observation_lite": {"enable": True, "instruction": "Be careful."}},
            "instruction",
            HONOURED_NOT,
        ),
        (
            {"observation_lite": {"enable": True, "add_hints": True}},
            "add_hints",
            "Extra inputs are not permitted",
        ),
        (
            {"observation_lite": {"enable": True, "categories": ["multi_turn_bas"]}},
            "multi_turn_bas",
            "unknown categories",
        ),
        (
            {"observation_lite": {"enable": True}, "schema_cues": True},
            "schema_cues",
            "set the same layer",
        ),
        ({"tool_prompt_mode": "llama31_official_fc"}, "tool_prompt_mode", NOT_SUPPORTED),
        ({"tool_call_parser": "toolace_official_prompt"}, "tool_call_parser", NOT_SUPPORTED),
        (  # the ToolACE mode only as the release's ToolACE runs set it
            {**TOOLACE_MODE, "reject_tool_call_with_content": False},
            "reject_tool_call_with_content",
            NOT_SUPPORTED,
        ),
        ({**TOOLACE_MODE, "prompt": "rich"}, "prompt", "is the paper's prompt"),
        ({"is_open_query": True}, "is_open_query", NOT_SUPPORTED),
        ({"enforce_available_tools": False}, "enforce_available_tools", NOT_SUPPORTED),
        ({"data_path": "/data/multi_turn_processed.jsonl"}, "data_path", NOT_SUPPORTED),
        (
            {"diagnostic_evolution": {"enable": True, "guidelines": {"pass": "x"}}},
            "guidelines",
            HONOURED_NOT,
        ),
        (
            {"diagnostic_evolution": {"enable": True, "min_tag_count": 2}},
            "min_tag_count",
            "applies to the original release's capability-state file only",
        ),
        (
            {"tool_feedback_evolution": {"enable": True, "max_tool_names": 4}},
            "max_tool_names",
            HONOURED_NOT,
        ),
    ],
)
def test_a_release_setting_that_cannot_be_honoured_is_refused(release, params, named, reason):
    svc, trainer = release()
    with pytest.raises(ReleaseHTTPError, match="^422") as refused:
        trainer.create_instance("multi_turn_base_0", "x", seal_params(**params))
    assert named in str(refused.value) and reason in str(refused.value)
    assert svc.engine.stats()["live_episodes"] == 0


def test_tool_feedback_evolution_is_recovery_feedback(release):
    _, trainer = release()
    feedback = {"enable": True, "apply_to_validation": False}
    bad_call = tool_call_text([ToolCall("cd", {"folder": "no_such_folder"})])
    replies = {}
    for mode in ("sample", "validate"):
        instance_id = f"fb-{mode}"
        trainer.create_instance(
            "multi_turn_base_1", instance_id, seal_params(mode, tool_feedback_evolution=feedback)
        )
        replies[mode] = trainer.step(instance_id, bad_call)["state"][0]["content"]
    hint = "[ToolHint] The path you passed to `cd_1` does not exist in the current state."
    assert hint in replies["sample"] and hint not in replies["validate"]


# --- diagnostic_evolution --------------------------------------------------------------------


def release_state(tags: dict[str, tuple[int, float]]) -> dict:
    """A capability_state.json as the release's trainer persists it: per tag, count and
    reward_sum (it never writes reward_mean)."""
    stats = {
        tag: {"count": n, "success": 0, "reward_sum": n * mean, "partial_count": 0}
        for tag, (n, mean) in tags.items()
    }
    return {"total_tags": stats, "window_tags": stats, "tasks": {}, "last_step": 3}


def guidelines_in(prompt: str) -> list[str]:
    """The failure tags whose guideline text appears in the prompt, in prompt order."""
    found = [
        (prompt.find(text), tag)
        for tag, text in evolution.PAPER_GUIDELINES.items()
        if text in prompt
    ]
    return [tag for _, tag in sorted(found)]


def expected_release_selection(
    tags: dict[str, tuple[int, float]], max_lines=3, prevalence=0.10, reward=0.6, min_count=8
):
    # The release's rule: prevalence among failure-tag counts, pressure order.
    failures = {t: v for t, v in tags.items() if t in evolution.GUIDELINES}
    total = sum(n for n, _ in failures.values())
    chosen = [
        (n / total * (1 - mean), t)
        for t, (n, mean) in failures.items()
        if n >= min_count and n / total >= prevalence and mean < reward
    ]
    return [t for _, t in sorted(chosen, reverse=True)][:max_lines]


STATE_TAGS = {
    T.PASS: (300, 0.9),
    T.STATE_MISMATCH: (40, 0.5),  # most prevalent, half solved
    T.SPURIOUS_TOOL_CALL: (30, 0.0),  # less prevalent, never solved: more pressure
    T.EMPTY_TURN_MODEL_RESPONSE: (20, 0.7),  # solved enough (mean >= 0.6)
    T.RESPONSE_MISMATCH: (5, 0.0),  # too rare (count < 8)
    T.INSTANCE_MISMATCH: (9, 0.1),
}


def test_diagnostic_evolution_reads_the_release_state_file_its_operator_names(release, tmp_path):
    """The release's capability-state file, given to the service with --capability-state
    (a request may not name a file: tests/env_service/test_hostile_clients.py), is selected from
    by the release's rule with each request's thresholds."""
    path = tmp_path / "capability_state.json"
    path.write_text(json.dumps(release_state(STATE_TAGS)))
    svc, trainer = release(capability_state_path=path)
    diag = {"enable": True}
    data = trainer.create_instance("multi_turn_base_0", "d", seal_params(diagnostic_evolution=diag))
    expected = expected_release_selection(STATE_TAGS)
    assert expected[:2] == [T.SPURIOUS_TOOL_CALL, T.STATE_MISMATCH]  # pressure, not share
    assert guidelines_in(data["state"][0]["content"]) == expected
    assert data["info"]["diagnostic_evolution"]["guideline_tags"] == expected
    assert "--capability-state" in data["info"]["diagnostic_evolution"]["source"]

    one = trainer.create_instance(
        "multi_turn_base_0", "d1", seal_params(diagnostic_evolution={**diag, "max_lines": 1})
    )
    assert guidelines_in(one["state"][0]["content"]) == expected[:1]
    strict = {**diag, "prevalence_threshold": 0.3, "min_tag_count": 10}
    data = trainer.create_instance(
        "multi_turn_base_0", "d2", seal_params(diagnostic_evolution=strict)
    )
    assert guidelines_in(data["state"][0]["content"]) == expected_release_selection(
        STATE_TAGS, prevalence=0.3, min_count=10
    )

    # Train-only by default; validation sees the plain benchmark.
    val = trainer.create_instance(
        "multi_turn_base_0", "dv", seal_params("validate", diagnostic_evolution=diag)
    )
    assert val["state"][0]["content"] == plain_prompt(svc, "multi_turn_base_0")
    both = {**diag, "apply_to_validation": True}
    val = trainer.create_instance(
        "multi_turn_base_0", "dv2", seal_params("validate", diagnostic_evolution=both)
    )
    assert guidelines_in(val["state"][0]["content"]) == expected

    # The file follows the trainer's rewrites.
    path.write_text(json.dumps(release_state({T.INSTANCE_MISMATCH: (50, 0.0)})))
    later = path.stat().st_mtime + 5
    os.utime(path, (later, later))
    data = trainer.create_instance(
        "multi_turn_base_0", "d3", seal_params(diagnostic_evolution=diag)
    )
    assert guidelines_in(data["state"][0]["content"]) == [T.INSTANCE_MISMATCH]

    # A profile the trainer pushes wins over the file, as for this service's own format.
    profile = {"tags": [{"tag": T.RESPONSE_MISMATCH, "share": 0.4, "count": 50}]}
    assert svc.http.put("/v1/profile", json=profile).status_code == 200
    data = trainer.create_instance(
        "multi_turn_base_0", "d4", seal_params(diagnostic_evolution=diag)
    )
    assert guidelines_in(data["state"][0]["content"]) == [T.RESPONSE_MISMATCH]


def test_a_release_state_file_not_written_yet_or_bad(release, service, tmp_path):
    missing = tmp_path / "not_written_yet.json"
    svc, trainer = release(capability_state_path=missing)
    data = trainer.create_instance(
        "multi_turn_base_0", "m", seal_params(diagnostic_evolution={"enable": True})
    )
    assert guidelines_in(data["state"][0]["content"]) == []

    bad_entry = tmp_path / "bad_entry.json"
    bad_entry.write_text(json.dumps({"window_tags": {T.STATE_MISMATCH: {"count": "many"}}}))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    for bad in (bad_entry, garbage):
        with pytest.raises(ValueError, match=str(bad)):
            service(capability_state_path=bad)


def test_diagnostic_evolution_without_state_path_uses_the_service_profile(release):
    svc, trainer = release()
    profile = {
        "tags": [{"tag": T.RESPONSE_MISMATCH, "share": 0.4, "count": 50, "mean_reward": 0.1}]
    }
    assert svc.http.put("/v1/profile", json=profile).status_code == 200
    diag = {"enable": True}
    data = trainer.create_instance("multi_turn_base_0", "p", seal_params(diagnostic_evolution=diag))
    assert guidelines_in(data["state"][0]["content"]) == [T.RESPONSE_MISMATCH]


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
