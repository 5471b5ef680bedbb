"""The interface's layers: each layer alone in sample mode, and validation that stays the
plain benchmark byte for byte whatever is requested, on the native API (the layers as
the release protocol's prompt text shows them: tests/env_service/test_release_texts_layers.py).
The layers'
texts here are the `rich` prompt's (this project's); the paper's are held to the
original release's byte for byte by tests/seal/bfcl/test_paper_prompt.py, and their rules are
checked in the last section."""

import json
import os

import pytest
from conftest import call_text, gt_turns, results

from env_service import interface_layers
from seal import renamed_keys
from seal.bfcl import prompt
from seal.bfcl import tags as T
from seal.bfcl.tasks import load_task
from seal.tocf.state import TrajectoryOutcome, open_capability_state

ONE_PER_CATEGORY = [
    "multi_turn_base_0",
    "multi_turn_miss_func_0",
    "multi_turn_miss_param_0",
    "multi_turn_long_context_0",
]
ALL_LAYERS = {
    "schema_cues": True,
    "type_hints": True,
    "recovery_feedback": True,
    "guidelines": True,
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


def created(
    svc, task_id, mode="sample", evolve_in_validation=False, prompt="rich", **layers
) -> dict:
    """The create reply of an episode with these interface layers (InterfaceSettings), in
    the `rich` prompt's texts unless `prompt` says otherwise."""
    settings = {
        "mode": mode,
        "prompt": prompt,
        "evolve_in_validation": evolve_in_validation,
        "interface": layers,
    }
    return svc.create(task_id, **settings)[1]


def tools_of(docs: list[dict]) -> dict[str, dict]:
    """Tool docs' parameters, by tool name."""
    return {d["name"]: d["parameters"] for d in docs}


def system_text(svc, task_id, **layers) -> str:
    """The system prompt's sections of a new episode, one text."""
    return "\n\n".join(created(svc, task_id, **layers)["system"])


# --- schema cues --------------------------------------------------------------------------------


def test_schema_cues_mark_required_and_optional(service):
    svc = service()
    plain = created(svc, "multi_turn_base_0")
    cued = created(svc, "multi_turn_base_0", schema_cues=True)
    assert plain["system"] == [prompt.BASE_INSTRUCTIONS]
    assert "[required]" not in json.dumps(plain["tools"])
    assert cued["system"] == [prompt.BASE_INSTRUCTIONS, interface_layers.CONSTRAINT_NOTE]
    tools = tools_of(cued["tools"])
    assert set(tools) == set(tools_of(plain["tools"]))
    mv = tools["mv"]["properties"]
    assert mv["source"]["description"].startswith("[required] ")
    assert mv["destination"]["description"].startswith("[required] ")
    assert tools["ls"]["properties"]["a"]["description"].startswith("[optional] ")
    for params in tools.values():
        for name, prop in params["properties"].items():
            marker = "[required] " if name in params.get("required", []) else "[optional] "
            assert prop["description"].startswith(marker)
    assert "Expects " not in json.dumps(cued["tools"])  # type hints only when asked for


def test_schema_cues_surface_enum_values(service):
    svc = service()
    vehicle = tools_of(created(svc, "multi_turn_base_50", schema_cues=True)["tools"])
    ignition = vehicle["startEngine"]["properties"]["ignitionMode"]
    assert ignition["enum"] == ["START", "STOP"]
    assert ignition["description"].endswith("Allowed values: START, STOP.")
    assert vehicle["adjustClimateControl"]["properties"]["mode"]["enum"] == [
        "auto",
        "cool",
        "heat",
        "defrost",
    ]
    plain_vehicle = tools_of(created(svc, "multi_turn_base_50")["tools"])
    assert "enum" not in plain_vehicle["startEngine"]["properties"]["ignitionMode"]

    travel = tools_of(created(svc, "multi_turn_base_150", schema_cues=True)["tools"])
    travel_class = travel["get_flight_cost"]["properties"]["travel_class"]
    assert travel_class["enum"] == ["economy", "business", "first"]
    grant = travel["authenticate_travel"]["properties"]["grant_type"]
    assert grant["enum"] == ["read_write", "read", "write"]


def test_allowed_values_parsing():
    assert interface_layers.allowed_values('The mode. [Enum]: ["on", "off"]') == ["on", "off"]
    assert interface_layers.allowed_values("Options are: economy, business, first.") == [
        "economy",
        "business",
        "first",
    ]
    assert interface_layers.allowed_values("Here are the options: a, b") == ["a", "b"]
    assert interface_layers.allowed_values("The name of the file.") is None
    assert interface_layers.allowed_values('Broken [Enum]: ["on", "off"') is None


def test_type_hints_need_schema_cues(service):
    svc = service()
    shown = ("system", "tools")
    plain = created(svc, "multi_turn_base_0")
    hints_alone = created(svc, "multi_turn_base_0", type_hints=True)
    assert [hints_alone[k] for k in shown] == [plain[k] for k in shown]
    hinted = tools_of(created(svc, "multi_turn_base_0", schema_cues=True, type_hints=True)["tools"])
    assert hinted["mv"]["properties"]["source"]["description"].endswith("Expects a string.")
    assert hinted["ls"]["properties"]["a"]["description"].endswith("Expects true or false.")


@pytest.mark.parametrize("prompt_name", ["rich", "paper"])
def test_revealed_tools_get_cues_in_the_rich_prompt_only(service, prompt_name):
    svc = service()
    episode_id, _ = svc.create(
        "multi_turn_miss_func_0", prompt=prompt_name, interface={"schema_cues": True}
    )
    turns = gt_turns("multi_turn_miss_func_0")
    replies = svc.play(episode_id, turns[:3])
    [holdout] = replies[-1]["messages"]
    sort_params = tools_of(holdout["tools"])["sort"]["properties"]
    revealed = sort_params["file_name"]["description"]
    bare = tools_of(load_task("multi_turn_miss_func_0").held_out[3])["sort"]["properties"]
    if prompt_name == "rich":
        assert revealed.startswith("[required] ")
    else:  # the paper's cues mark the first turn's docs only
        assert revealed == bare["file_name"]["description"]


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
    hinted_id, _ = svc.create(
        "multi_turn_miss_func_0", prompt="rich", interface={"recovery_feedback": True}
    )
    plain_id, _ = svc.create("multi_turn_miss_func_0", prompt="rich")
    [hinted] = results(svc.step(hinted_id, text))
    [plain] = results(svc.step(plain_id, text))
    assert "Hint:" not in plain
    # A call the client could not parse: the hint names no model's format.
    hint = "parse_any_format" if kind == "parse" else kind
    assert hinted == plain + f"\nHint: {interface_layers.RECOVERY_HINTS[hint]}"
    report = svc.evaluate(hinted_id)
    if kind == "tool_error":
        assert report["tool_errors"] == 1 and report["invalid_calls"] == 0
    else:
        assert report["invalid_by_kind"] == {kind: 1}


def test_recovery_feedback_leaves_prompt_and_good_results_alone(service):
    svc = service()
    episode_id, data = svc.create(
        "multi_turn_base_1", prompt="rich", interface={"recovery_feedback": True}
    )
    plain = created(svc, "multi_turn_base_1")
    assert (data["system"], data["tools"]) == (plain["system"], plain["tools"])
    assert "Hint:" not in results(svc.step(episode_id, call_text("ls", a=True)))[0]


# --- guidelines ---------------------------------------------------------------------------------


def test_pushed_profile_becomes_guidelines(service):
    svc = service()
    without = created(svc, "multi_turn_base_0", guidelines=True)
    assert without["system"] == [prompt.BASE_INSTRUCTIONS]  # no profile yet
    assert svc.http.put("/v1/profile", json=PROFILE).status_code == 200
    assert svc.http.get("/v1/profile").json()["profile"]["tags"] == PROFILE["tags"]
    guided = created(svc, "multi_turn_base_0", guidelines=True)
    section = (
        "Guidelines from recent attempts:\n"
        f"- {interface_layers.GUIDELINES[T.STATE_MISMATCH]}\n"
        f"- {interface_layers.GUIDELINES[T.SPURIOUS_TOOL_CALL]}"
    )
    assert guided["system"] == [prompt.BASE_INSTRUCTIONS, section]
    assert guided["tools"] == load_task("multi_turn_base_0").tools
    one = system_text(svc, "multi_turn_base_0", guidelines=True, max_guidelines=1)
    assert interface_layers.GUIDELINES[T.STATE_MISMATCH] in one
    assert interface_layers.GUIDELINES[T.SPURIOUS_TOOL_CALL] not in one
    # The layer off, or validation: no guidelines although a profile is there.
    assert "Guidelines" not in system_text(svc, "multi_turn_base_0")
    assert "Guidelines" not in system_text(
        svc, "multi_turn_base_0", mode="validate", guidelines=True
    )


@pytest.mark.parametrize("texts", interface_layers.TEXTS.values(), ids=list(interface_layers.TEXTS))
def test_profiles_without_known_failure_tags_add_nothing(texts):
    assert texts.guidelines_for(None, 3) == []
    assert texts.guidelines_for({"tags": []}, 3) == []
    assert texts.guidelines_for({"tags": [{"tag": T.PASS}, {"tag": "made_up"}]}, 3) == []
    assert texts.guidelines_for(PROFILE, 0) == []
    assert texts.guideline_section([]) is None


def test_a_create_in_the_old_evolution_spelling_is_read_as_interface(service, monkeypatch):
    """`settings.evolution`, the interface's name before issue 43, still works (deprecated):
    the same episode as `settings.interface`, with a FutureWarning; both at once: a 422."""
    monkeypatch.setattr(renamed_keys, "_warned", set())
    svc = service()
    layers = {"schema_cues": True, "recovery_feedback": True}

    def create(key: str, episode_id: str) -> tuple:
        body = {"task_id": "multi_turn_base_0", "episode_id": episode_id, "settings": {key: layers}}
        reply = svc.http.post("/v1/episodes", json=body)
        assert reply.status_code == 201, reply.text
        data = reply.json()
        return data["interface"], data["system"], data["tools"]

    new = create("interface", "new")
    old_name = "episode setting 'evolution' is deprecated, read as 'interface'"
    with pytest.warns(FutureWarning, match=old_name):
        old = create("evolution", "old")
    assert old == new and old[0]["schema_cues"] and old[0]["recovery_feedback"]
    both = {"task_id": "multi_turn_base_0", "settings": {"interface": layers, "evolution": layers}}
    assert svc.http.post("/v1/episodes", json=both).status_code == 422


def test_the_create_reply_names_the_interface_it_shows(service):
    """The interface state (the paper's Appendix C.4): layers on, guidelines shown and
    their tags, as the episode's system prompt carries them."""
    svc = service()
    assert svc.http.put("/v1/profile", json=PROFILE).status_code == 200

    def interface(mode, **layers):
        body = {"task_id": "multi_turn_base_0", "settings": {"mode": mode, "interface": layers}}
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
        "shown": [  # the paper's texts (the default prompt)
            {"tag": T.STATE_MISMATCH, "text": interface_layers.PAPER_GUIDELINES[T.STATE_MISMATCH]},
            {
                "tag": T.SPURIOUS_TOOL_CALL,
                "text": interface_layers.PAPER_GUIDELINES[T.SPURIOUS_TOOL_CALL],
            },
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
    guided = system_text(svc, "multi_turn_base_0", guidelines=True)
    assert interface_layers.GUIDELINES[T.STATE_MISMATCH] in guided
    assert svc.http.get("/v1/profile").json()["profile"]["tags"][0]["tag"] == T.STATE_MISMATCH

    # The service re-reads the file when it changes.
    write_state(tmp_path, T.EMPTY_TURN_MODEL_RESPONSE, resume=True)
    later = os.stat(path).st_mtime + 5
    os.utime(path, (later, later))
    guided = system_text(svc, "multi_turn_base_0", guidelines=True)
    assert interface_layers.GUIDELINES[T.EMPTY_TURN_MODEL_RESPONSE] in guided
    assert interface_layers.GUIDELINES[T.STATE_MISMATCH] not in guided

    # A profile the trainer pushes wins over the file.
    svc.http.put("/v1/profile", json={"tags": [{"tag": T.RESPONSE_MISMATCH}]})
    guided = system_text(svc, "multi_turn_base_0", guidelines=True)
    assert interface_layers.GUIDELINES[T.RESPONSE_MISMATCH] in guided
    assert interface_layers.GUIDELINES[T.EMPTY_TURN_MODEL_RESPONSE] not in guided


def test_missing_state_file_means_no_guidelines(service, tmp_path):
    svc = service(capability_state_path=tmp_path / "capability_state.json")
    assert svc.http.get("/v1/profile").json()["profile"] is None
    assert "Guidelines" not in system_text(svc, "multi_turn_base_0", guidelines=True)


# --- train/validate separation ------------------------------------------------------------------


@pytest.mark.parametrize("prompt_name", list(interface_layers.TEXTS))
@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_validation_is_the_plain_benchmark_byte_for_byte(service, task_id, prompt_name):
    svc = service()
    svc.http.put("/v1/profile", json=PROFILE)  # guidelines would apply if allowed

    def shown(data):
        return json.dumps([data["system"], data["tools"], data["messages"]])

    plain = created(svc, task_id, prompt=prompt_name)
    validate = created(svc, task_id, mode="validate", prompt=prompt_name, **ALL_LAYERS)
    evolved = created(svc, task_id, prompt=prompt_name, **ALL_LAYERS)
    assert shown(validate) == shown(plain)
    assert plain["system"] == list(interface_layers.TEXTS[prompt_name].instructions)
    assert plain["tools"] == load_task(task_id).tools
    assert shown(evolved) != shown(plain)
    assert evolved["messages"] == plain["messages"]  # the user's words are never evolved


def test_validation_holdout_message_and_errors_are_plain(service):
    svc = service()
    plain_id, _ = svc.create("multi_turn_miss_func_0")
    validate_id, _ = svc.create("multi_turn_miss_func_0", mode="validate", interface=ALL_LAYERS)
    turns = gt_turns("multi_turn_miss_func_0")
    for text, _kind in BAD_CALLS:
        plain = svc.step(plain_id, text)["messages"]
        validate = svc.step(validate_id, text)["messages"]
        assert validate == plain
        assert "Hint:" not in validate[0]["content"]
    plain_replies = svc.play(plain_id, turns[:3])
    validate_replies = svc.play(validate_id, turns[:3])
    assert [r["messages"] for r in validate_replies] == [r["messages"] for r in plain_replies]
    assert validate_replies[-1]["messages"][0]["tools"]  # the holdout, plain


def test_evolve_in_validation_is_an_explicit_choice(service):
    svc = service()
    plain = system_text(svc, "multi_turn_base_0", mode="validate")
    evolved = system_text(
        svc, "multi_turn_base_0", mode="validate", schema_cues=True, evolve_in_validation=True
    )
    assert (
        interface_layers.CONSTRAINT_NOTE in evolved
        and interface_layers.CONSTRAINT_NOTE not in plain
    )


# --- the paper's rules -------------------------------------------------------------------------


def test_paper_cues_append_required_as_the_release_does():
    doc = {
        "name": "f",
        "description": "A tool.",
        "parameters": {
            "type": "dict",
            "properties": {
                "path": {"type": "string", "description": "Where. "},  # BFCL's trailing space
                "mode": {"type": "string", "description": "How.", "enum": ["a", "b"]},
                "note": {"type": "string", "description": "Options are: x, y."},
                "done": {"type": "boolean", "description": "Already [required]."},
            },
            "required": ["path", "done"],
        },
    }
    props = interface_layers.add_paper_cues(doc, type_hints=False)["parameters"]["properties"]
    assert props["path"]["description"] == "Where.  [required]"
    assert props["mode"]["description"] == "How. Allowed values: a, b"  # from `enum` only
    assert props["note"]["description"] == "Options are: x, y."  # prose is not read
    assert props["done"]["description"] == "Already [required]."
    hinted = interface_layers.add_paper_cues(doc, type_hints=True)["parameters"]["properties"]
    assert hinted["note"]["description"] == "Options are: x, y. [type: string]"
    assert doc["parameters"]["properties"]["path"]["description"] == "Where. "  # a copy


def test_paper_rules_run_no_call_of_a_message_with_a_malformed_block(service):
    svc = service()
    episode_id, _ = svc.create("multi_turn_base_0")
    good = call_text("cd", folder="document")
    bad = '<tool_call>\n{"name": "ls", "arguments": }\n</tool_call>'
    [answer] = svc.step(episode_id, good + "\n" + bad)["messages"]
    assert answer["role"] == "env"
    assert answer["content"].startswith("[ERROR] Invalid tool call format: Invalid tool call JSON")
    # The good call did not run: the working directory is unchanged.
    [pwd] = results(svc.step(episode_id, call_text("pwd")))
    assert json.loads(pwd) == {"current_working_directory": "/workspace"}
    report = svc.evaluate(episode_id)
    assert report["invalid_by_kind"] == {"parse": 1} and report["tool_calls"] == 1


def test_paper_rules_run_calls_with_wrong_argument_names_for_the_backends_error(service):
    svc = service()
    episode_id, _ = svc.create(
        "multi_turn_base_0", interface={"recovery_feedback": True}, mode="sample"
    )
    [answer] = svc.step(episode_id, call_text("mv", source="final_report.pdf"))["messages"]
    assert answer["content"] == (
        "Error during execution: GorillaFileSystem.mv() missing 1 required positional "
        "argument: 'destination'"
    )
    assert answer["hint"] is None  # the paper's hints read JSON errors only
    [missing_dir] = svc.step(episode_id, call_text("cd", folder="nowhere"))["messages"]
    assert missing_dir["hint"].startswith("The path you passed to `cd_1` does not exist")
    report = svc.evaluate(episode_id)
    assert report["invalid_by_kind"] == {"missing_argument": 1}
    assert report["tool_errors"] == 1  # the cd; the mv is counted once, as invalid
