"""The release protocol against the original SEAL release's client side (tests/release_trainer.py):
/create takes the release's params (exp/SEAL.yaml's, the observation gates, the tool
feedback), and diagnostic evolution reads the release's state file or the service's
profile. The episode loop and the smaller endpoints: test_release_protocol_episodes.py."""

from __future__ import annotations

import json
import os

import pytest
from release_protocol_client import SEAL_YAML_BFCL, TOOLACE_YAML_BFCL
from release_trainer import ReleaseHTTPError, plain_prompt, release_clients, seal_params

from env_service import interface_layers
from seal.bfcl import tags as T
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import tool_call_text


@pytest.fixture
def release(service):
    """A factory: `release(**config)` -> (release protocol client, the release's trainer) of
    a new service."""
    return lambda **config: release_clients(service(**config))


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
        for tag, text in interface_layers.PAPER_GUIDELINES.items()
        if text in prompt
    ]
    return [tag for _, tag in sorted(found)]


def expected_release_selection(
    tags: dict[str, tuple[int, float]], max_lines=3, prevalence=0.10, reward=0.6, min_count=8
):
    # The release's rule: prevalence among failure-tag counts, pressure order.
    failures = {t: v for t, v in tags.items() if t in interface_layers.GUIDELINES}
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
