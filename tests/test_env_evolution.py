"""Observation evolution: each layer alone in sample mode, and validation that stays the
plain benchmark byte for byte whatever is requested."""

import json
import os

import pytest
from conftest import gt_turns

from env_service import evolution
from seal.bfcl import prompt
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import tool_call_text
from seal.bfcl.tasks import load_task
from seal.tocf import tags as T
from seal.tocf.state import TrajectoryOutcome, open_capability_state

ONE_PER_CATEGORY = [
    "multi_turn_base_0",
    "multi_turn_miss_func_0",
    "multi_turn_miss_param_0",
    "multi_turn_long_context_0",
]
ALL_LAYERS = {
    "observation_lite": True,
    "type_hints": True,
    "recovery_feedback": True,
    "diagnostic_guidelines": True,
}
PROFILE = {
    "step": 3,
    "epoch": 0,
    "num_turns": 100,
    "tags": [
        {"tag": T.STATE_MISMATCH, "share": 0.4, "count": 40, "mean_reward": 0.1},
        {"tag": T.SPURIOUS_TOOL_CALL, "share": 0.2, "count": 20, "mean_reward": 0.2},
    ],
}


def call_text(name, **arguments):
    return tool_call_text([ToolCall(name, arguments)])


def tools_in(text: str) -> dict[str, dict]:
    """The tool signatures listed in a system prompt or a holdout message, by name."""
    body = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    tools = [json.loads(line) for line in body.split("\n")]
    return {t["function"]["name"]: t["function"]["parameters"] for t in tools}


def system_prompt(svc, task_id, **params):
    _, data = svc.create(task_id, **params)
    return data["state"][0]["content"]


# --- schema cues --------------------------------------------------------------------------------


def test_schema_cues_mark_required_and_optional(service):
    svc = service()
    plain = system_prompt(svc, "multi_turn_base_0")
    cued = system_prompt(svc, "multi_turn_base_0", observation_lite=True)
    assert evolution.CONSTRAINT_NOTE not in plain and "[required]" not in plain
    assert cued.startswith(
        prompt.BASE_INSTRUCTIONS + "\n\n" + evolution.CONSTRAINT_NOTE + "\n\n# Tools"
    )
    tools = tools_in(cued)
    assert set(tools) == set(tools_in(plain))
    mv = tools["mv"]["properties"]
    assert mv["source"]["description"].startswith("[required] ")
    assert mv["destination"]["description"].startswith("[required] ")
    assert tools["ls"]["properties"]["a"]["description"].startswith("[optional] ")
    for params in tools.values():
        for name, prop in params["properties"].items():
            marker = "[required] " if name in params.get("required", []) else "[optional] "
            assert prop["description"].startswith(marker)
    assert "Expects " not in cued  # type hints only when asked for
    # `schema_cues` is the same switch as the wire name `observation_lite`.
    assert system_prompt(svc, "multi_turn_base_0", schema_cues=True) == cued


def test_schema_cues_surface_enum_values(service):
    svc = service()
    vehicle = tools_in(system_prompt(svc, "multi_turn_base_50", observation_lite=True))
    ignition = vehicle["startEngine"]["properties"]["ignitionMode"]
    assert ignition["enum"] == ["START", "STOP"]
    assert ignition["description"].endswith("Allowed values: START, STOP.")
    assert vehicle["adjustClimateControl"]["properties"]["mode"]["enum"] == [
        "auto",
        "cool",
        "heat",
        "defrost",
    ]
    plain_vehicle = tools_in(system_prompt(svc, "multi_turn_base_50"))
    assert "enum" not in plain_vehicle["startEngine"]["properties"]["ignitionMode"]

    travel = tools_in(system_prompt(svc, "multi_turn_base_150", observation_lite=True))
    travel_class = travel["get_flight_cost"]["properties"]["travel_class"]
    assert travel_class["enum"] == ["economy", "business", "first"]
    grant = travel["authenticate_travel"]["properties"]["grant_type"]
    assert grant["enum"] == ["read_write", "read", "write"]


def test_allowed_values_parsing():
    assert evolution.allowed_values('The mode. [Enum]: ["on", "off"]') == ["on", "off"]
    assert evolution.allowed_values("Options are: economy, business, first.") == [
        "economy",
        "business",
        "first",
    ]
    assert evolution.allowed_values("Here are the options: a, b") == ["a", "b"]
    assert evolution.allowed_values("The name of the file.") is None
    assert evolution.allowed_values('Broken [Enum]: ["on", "off"') is None


def test_type_hints_need_schema_cues(service):
    svc = service()
    plain = system_prompt(svc, "multi_turn_base_0")
    assert system_prompt(svc, "multi_turn_base_0", type_hints=True) == plain
    hinted = tools_in(
        system_prompt(svc, "multi_turn_base_0", observation_lite=True, type_hints=True)
    )
    assert hinted["mv"]["properties"]["source"]["description"].endswith("Expects a string.")
    assert hinted["ls"]["properties"]["a"]["description"].endswith("Expects true or false.")


def test_revealed_tools_get_cues_too(service):
    svc = service()
    instance_id, _ = svc.create("multi_turn_miss_func_0", observation_lite=True)
    turns = gt_turns("multi_turn_miss_func_0")
    replies = svc.play(instance_id, turns[:3])
    holdout = replies[-1]["state"][0]["content"]
    assert holdout.startswith(prompt.HOLDOUT_NOTICE)
    sort_params = tools_in(holdout)["sort"]["properties"]
    assert sort_params["file_name"]["description"].startswith("[required] ")


# --- recovery feedback --------------------------------------------------------------------------

BAD_CALLS = [
    ("<tool_call>\nnot json\n</tool_call>", "parse"),
    (call_text("rm_all"), "unknown_tool"),
    (call_text("sort", file_name="final_report.pdf"), "unavailable_tool"),
    (call_text("mv", source="final_report.pdf"), "missing_argument"),
    (call_text("cd", folder="document", recursive=True), "unexpected_argument"),
    (call_text("cd", folder=7), "tool_error"),
]


@pytest.mark.parametrize(("text", "kind"), BAD_CALLS)
def test_recovery_hints_only_with_the_layer(service, text, kind):
    svc = service()
    hinted_id, _ = svc.create("multi_turn_miss_func_0", recovery_feedback=True)
    plain_id, _ = svc.create("multi_turn_miss_func_0")
    hinted = svc.step(hinted_id, text)["state"][0]["content"]
    plain = svc.step(plain_id, text)["state"][0]["content"]
    hint = f"\nHint: {evolution.RECOVERY_HINTS[kind]}"
    assert hinted.endswith(hint + "\n</tool_response>")
    assert "Hint:" not in plain
    assert hinted == plain.replace("\n</tool_response>", hint + "\n</tool_response>")
    report = svc.evaluate(hinted_id)
    if kind == "tool_error":
        assert report["tool_errors"] == 1 and report["invalid_calls"] == 0
    else:
        assert report["invalid_by_kind"] == {kind: 1}


def test_recovery_feedback_leaves_prompt_and_good_results_alone(service):
    svc = service()
    instance_id, data = svc.create("multi_turn_base_1", recovery_feedback=True)
    assert data["state"][0]["content"] == system_prompt(svc, "multi_turn_base_1")
    assert "Hint:" not in svc.step(instance_id, call_text("ls", a=True))["state"][0]["content"]


# --- guidelines ---------------------------------------------------------------------------------


def test_pushed_profile_becomes_guidelines(service):
    svc = service()
    without = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    assert without == system_prompt(svc, "multi_turn_base_0")  # no profile yet
    assert svc.http.put("/v1/profile", json=PROFILE).status_code == 200
    assert svc.http.get("/v1/profile").json()["profile"]["tags"] == PROFILE["tags"]
    guided = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    section = (
        "Guidelines from recent attempts:\n"
        f"- {evolution.GUIDELINES[T.STATE_MISMATCH]}\n"
        f"- {evolution.GUIDELINES[T.SPURIOUS_TOOL_CALL]}"
    )
    assert guided == prompt.BASE_INSTRUCTIONS + "\n\n" + section + prompt.tools_block(
        [prompt.to_tool(d) for d in load_task("multi_turn_base_0").tools]
    )
    one = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True, max_guidelines=1)
    assert evolution.GUIDELINES[T.STATE_MISMATCH] in one
    assert evolution.GUIDELINES[T.SPURIOUS_TOOL_CALL] not in one
    # The layer off, or validation: no guidelines although a profile is there.
    assert "Guidelines" not in system_prompt(svc, "multi_turn_base_0")
    assert "Guidelines" not in system_prompt(
        svc, "multi_turn_base_0", diagnostic_guidelines=True, rollout_mode="validate"
    )


def test_profiles_without_known_failure_tags_add_nothing():
    assert evolution.guidelines_for(None, 3) == []
    assert evolution.guidelines_for({"tags": []}, 3) == []
    assert evolution.guidelines_for({"tags": [{"tag": T.PASS}, {"tag": "made_up"}]}, 3) == []
    assert evolution.guidelines_for(PROFILE, 0) == []
    assert evolution.guideline_section([]) is None


def test_the_create_reply_names_the_interface_it_shows(service):
    """The interface state (the paper's Appendix C.4): layers on, guidelines shown and
    their tags, as the episode's system prompt carries them."""
    svc = service()
    assert svc.http.put("/v1/profile", json=PROFILE).status_code == 200

    def interface(mode, **layers):
        body = {"task_id": "multi_turn_base_0", "settings": {"mode": mode, "evolution": layers}}
        reply = svc.http.post("/v1/episodes", json=body)
        assert reply.status_code == 201, reply.text
        data = reply.json()
        svc.http.delete(f"/v1/episodes/{data['episode_id']}")
        return data["interface"], data["system"]

    guided, system = interface("sample", schema_cues=True, guidelines=True, max_guidelines=3)
    assert guided == {
        "schema_cues": True,
        "type_hints": False,
        "recovery_feedback": False,
        "guidelines": True,
        "shown": [
            {"tag": T.STATE_MISMATCH, "text": evolution.GUIDELINES[T.STATE_MISMATCH]},
            {"tag": T.SPURIOUS_TOOL_CALL, "text": evolution.GUIDELINES[T.SPURIOUS_TOOL_CALL]},
        ],
    }
    assert all(entry["text"] in system[-1] for entry in guided["shown"])
    plain, _ = interface("validate", schema_cues=True, guidelines=True)
    assert plain == {
        "schema_cues": False,
        "type_hints": False,
        "recovery_feedback": False,
        "guidelines": False,
        "shown": [],
    }


def write_state(run_dir, dominant_tag, resume=False):
    state, path = open_capability_state(run_dir, resume=resume)
    state.start_epoch(state.epoch + 1 if resume else 0)
    for k in range(12):
        tags = [dominant_tag, T.PASS] if k % 4 else [T.PASS, T.PASS]
        state.observe(
            TrajectoryOutcome(
                "multi_turn_base", f"t{k}", 0.0, False, tags, step=k, epoch=state.epoch
            )
        )
    state.save(path)
    return path


def test_capability_state_file_becomes_guidelines(service, tmp_path):
    path = write_state(tmp_path, T.STATE_MISMATCH)
    assert path.name == "capability_state.json" and path.exists()
    svc = service(capability_state_path=path)
    guided = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    assert evolution.GUIDELINES[T.STATE_MISMATCH] in guided
    assert svc.http.get("/v1/profile").json()["profile"]["tags"][0]["tag"] == T.STATE_MISMATCH

    # The service re-reads the file when it changes.
    write_state(tmp_path, T.EMPTY_TURN_MODEL_RESPONSE, resume=True)
    later = os.stat(path).st_mtime + 5
    os.utime(path, (later, later))
    guided = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    assert evolution.GUIDELINES[T.EMPTY_TURN_MODEL_RESPONSE] in guided
    assert evolution.GUIDELINES[T.STATE_MISMATCH] not in guided

    # A profile the trainer pushes wins over the file.
    svc.http.put("/v1/profile", json={"tags": [{"tag": T.RESPONSE_MISMATCH}]})
    guided = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    assert evolution.GUIDELINES[T.RESPONSE_MISMATCH] in guided
    assert evolution.GUIDELINES[T.EMPTY_TURN_MODEL_RESPONSE] not in guided


def test_missing_state_file_means_no_guidelines(service, tmp_path):
    svc = service(capability_state_path=tmp_path / "capability_state.json")
    assert svc.http.get("/v1/profile").json()["profile"] is None
    assert "Guidelines" not in system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)


# --- train/validate separation ------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_validation_is_the_plain_benchmark_byte_for_byte(service, task_id):
    svc = service()
    svc.http.put("/v1/profile", json=PROFILE)  # guidelines would apply if allowed
    _, plain = svc.create(task_id, rollout_mode="sample")
    _, validate = svc.create(task_id, rollout_mode="validate", **ALL_LAYERS)
    _, evolved = svc.create(task_id, rollout_mode="sample", **ALL_LAYERS)
    assert json.dumps(validate["state"]) == json.dumps(plain["state"])
    assert validate["state"][0]["content"] == prompt.system_prompt(
        [prompt.to_tool(d) for d in load_task(task_id).tools]
    )
    assert evolved["state"][0]["content"] != plain["state"][0]["content"]
    assert evolved["state"][1:] == plain["state"][1:]  # the user's words are never evolved


def test_validation_holdout_message_and_errors_are_plain(service):
    svc = service()
    plain_id, _ = svc.create("multi_turn_miss_func_0")
    validate_id, _ = svc.create("multi_turn_miss_func_0", rollout_mode="validate", **ALL_LAYERS)
    turns = gt_turns("multi_turn_miss_func_0")
    for text, _kind in BAD_CALLS:
        plain = svc.step(plain_id, text)["state"]
        validate = svc.step(validate_id, text)["state"]
        assert validate == plain
        assert "Hint:" not in validate[0]["content"]
    plain_replies = svc.play(plain_id, turns[:3])
    validate_replies = svc.play(validate_id, turns[:3])
    assert [r["state"] for r in validate_replies] == [r["state"] for r in plain_replies]
    assert validate_replies[-1]["state"][0]["content"].startswith(prompt.HOLDOUT_NOTICE)


def test_native_api_validation_is_plain_too(service):
    http = service().http
    http.put("/v1/profile", json=PROFILE)
    layers = {
        "schema_cues": True,
        "type_hints": True,
        "recovery_feedback": True,
        "guidelines": True,
    }

    def messages(settings):
        body = {"task_id": "multi_turn_long_context_0", "settings": settings}
        response = http.post("/v1/episodes", json=body)
        assert response.status_code == 201, response.text
        created = response.json()
        return [created["system"], created["tools"], created["messages"]]

    plain = messages({})
    assert messages({"mode": "validate", "evolution": layers}) == plain
    assert messages({"mode": "sample", "evolution": layers}) != plain


def test_evolve_in_validation_is_an_explicit_choice(service):
    svc = service()
    plain = system_prompt(svc, "multi_turn_base_0", rollout_mode="validate")
    evolved = system_prompt(
        svc,
        "multi_turn_base_0",
        rollout_mode="validate",
        observation_lite=True,
        evolve_in_validation=True,
    )
    assert evolution.CONSTRAINT_NOTE in evolved and evolution.CONSTRAINT_NOTE not in plain
