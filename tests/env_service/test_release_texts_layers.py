"""The observation layers in the text of the release protocol (the rich prompt's;
the paper's prompt is test_paper_prompt.py's): schema cues and their two names, cues on
revealed tools, guidelines, and validation's plain benchmark text, byte for byte."""

from __future__ import annotations

import json

import pytest
from conftest import gt_turns
from release_protocol_client import tool_responses
from test_api_native import ONE_PER_CATEGORY
from test_interface_layers import BAD_CALLS, PROFILE

from env_service import interface_layers
from seal.bfcl import prompt
from seal.bfcl import tags as T
from seal.bfcl.tasks import load_task

# --- the observation layers in the rich prompt's text (the paper's: test_paper_prompt.py) -------

RELEASE_LAYERS = {
    "observation_lite": True,
    "type_hints": True,
    "recovery_feedback": True,
    "diagnostic_guidelines": True,
}
"""Every layer, under this service's flat release protocol keys."""


def tools_in(text: str) -> dict[str, dict]:
    """The tool signatures listed in a system prompt or a holdout message, by name."""
    body = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    tools = [json.loads(line) for line in body.split("\n")]
    return {t["function"]["name"]: t["function"]["parameters"] for t in tools}


def system_prompt(svc, task_id, **params):
    _, data = svc.create(task_id, **params)
    return data["state"][0]["content"]


def test_schema_cues_in_the_prompt_text_and_their_two_names(release_service):
    svc = release_service(prompt="rich")
    plain = system_prompt(svc, "multi_turn_base_0")
    cued = system_prompt(svc, "multi_turn_base_0", observation_lite=True)
    assert interface_layers.CONSTRAINT_NOTE not in plain and "[required]" not in plain
    assert cued.startswith(
        prompt.BASE_INSTRUCTIONS + "\n\n" + interface_layers.CONSTRAINT_NOTE + "\n\n# Tools"
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
    # `schema_cues` is the same switch as the release protocol name `observation_lite`.
    assert system_prompt(svc, "multi_turn_base_0", schema_cues=True) == cued


def test_revealed_tools_in_the_holdout_text_get_cues(release_service):
    svc = release_service(prompt="rich")
    instance_id, _ = svc.create("multi_turn_miss_func_0", observation_lite=True)
    turns = gt_turns("multi_turn_miss_func_0")
    replies = svc.play(instance_id, turns[:3])
    holdout = replies[-1]["state"][0]["content"]
    assert holdout.startswith(prompt.HOLDOUT_NOTICE)
    sort_params = tools_in(holdout)["sort"]["properties"]
    assert sort_params["file_name"]["description"].startswith("[required] ")


def test_guidelines_in_the_prompt_text(release_service):
    svc = release_service(prompt="rich")
    without = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    assert without == system_prompt(svc, "multi_turn_base_0")  # no profile yet
    assert svc.http.put("/v1/profile", json=PROFILE).status_code == 200
    assert svc.http.get("/v1/profile").json()["profile"]["tags"] == PROFILE["tags"]
    guided = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True)
    section = (
        "Guidelines from recent attempts:\n"
        f"- {interface_layers.GUIDELINES[T.STATE_MISMATCH]}\n"
        f"- {interface_layers.GUIDELINES[T.SPURIOUS_TOOL_CALL]}"
    )
    assert guided == prompt.BASE_INSTRUCTIONS + "\n\n" + section + prompt.tools_block(
        [prompt.to_tool(d) for d in prompt.language_hinted(load_task("multi_turn_base_0").tools)]
    )
    one = system_prompt(svc, "multi_turn_base_0", diagnostic_guidelines=True, max_guidelines=1)
    assert interface_layers.GUIDELINES[T.STATE_MISMATCH] in one
    assert interface_layers.GUIDELINES[T.SPURIOUS_TOOL_CALL] not in one
    # The layer off, or validation: no guidelines although a profile is there.
    assert "Guidelines" not in system_prompt(svc, "multi_turn_base_0")
    assert "Guidelines" not in system_prompt(
        svc, "multi_turn_base_0", diagnostic_guidelines=True, rollout_mode="validate"
    )


@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_validation_text_is_the_plain_benchmark_byte_for_byte(release_service, task_id):
    svc = release_service(prompt="rich")
    svc.http.put("/v1/profile", json=PROFILE)  # guidelines would apply if allowed
    _, plain = svc.create(task_id, rollout_mode="sample")
    _, validate = svc.create(task_id, rollout_mode="validate", **RELEASE_LAYERS)
    _, evolved = svc.create(task_id, rollout_mode="sample", **RELEASE_LAYERS)
    assert json.dumps(validate["state"]) == json.dumps(plain["state"])
    assert validate["state"][0]["content"] == prompt.system_prompt(
        [prompt.to_tool(d) for d in prompt.language_hinted(load_task(task_id).tools)]
    )
    assert evolved["state"][0]["content"] != plain["state"][0]["content"]
    assert evolved["state"][1:] == plain["state"][1:]  # the user's words are never evolved


def test_validation_holdout_text_and_errors_are_plain(release_service):
    svc = release_service(prompt="rich")
    plain_id, _ = svc.create("multi_turn_miss_func_0")
    validate_id, _ = svc.create("multi_turn_miss_func_0", rollout_mode="validate", **RELEASE_LAYERS)
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


def test_a_block_that_does_not_parse_gets_the_qwen_format_hint(release_service):
    svc = release_service(prompt="rich")
    hinted_id, _ = svc.create("multi_turn_base_1", recovery_feedback=True)
    plain_id, _ = svc.create("multi_turn_base_1")
    text = "<tool_call>\nnot json\n</tool_call>"
    [hinted] = tool_responses(svc.step(hinted_id, text))
    [plain] = tool_responses(svc.step(plain_id, text))
    assert hinted == plain + f"\nHint: {interface_layers.RECOVERY_HINTS['parse']}"
