"""The rich prompt's rendering (seal/bfcl/prompt.py): JSON-Schema tools, the system prompt, and byte-equality with Qwen2.5's
chat template (tools in the system message, tool results as one user message)."""

import copy
import json

import pytest

from env_service.episode import EpisodeMachine
from seal.bfcl import prompt
from seal.bfcl.ground_truth import ground_truth_trajectory, tool_call_text
from seal.bfcl.tasks import load_task
from seal.service_contract import EpisodeSettings

ONE_PER_CATEGORY = [
    "multi_turn_base_0",
    "multi_turn_miss_func_0",
    "multi_turn_miss_param_3",
    "multi_turn_long_context_2",
]


def test_json_schema_types_recursively_without_touching_the_input():
    schema = {
        "type": "dict",
        "properties": {
            "a": {"type": "float"},
            "b": {"type": "tuple", "items": {"type": "dict", "properties": {"c": {"type": "any"}}}},
            "d": {"type": "array", "items": {"type": "float"}},
            "e": {"type": "string"},
            "f": {"type": "integer"},
        },
        "required": ["a"],
    }
    before = copy.deepcopy(schema)
    out = prompt.to_json_schema(schema)
    assert schema == before
    assert out["type"] == "object"
    props = out["properties"]
    assert props["a"]["type"] == "number"
    assert props["b"]["type"] == "array"
    assert props["b"]["items"]["type"] == "object"
    assert props["b"]["items"]["properties"]["c"]["type"] == "string"
    assert props["d"]["items"]["type"] == "number"
    assert (props["e"]["type"], props["f"]["type"]) == ("string", "integer")
    assert out["required"] == ["a"]


def test_no_bfcl_type_names_survive_in_any_tool():
    bfcl_only = {"dict", "float", "tuple", "any"}
    for task_id in ONE_PER_CATEGORY:
        task = load_task(task_id)
        for doc in task.tools_until(task.num_turns):
            text = json.dumps(prompt.to_tool(doc))
            for name in bfcl_only:
                assert f'"type": "{name}"' not in text, (task_id, doc["name"])


def test_to_tool_is_an_openai_function_without_the_response_schema():
    doc = next(d for d in load_task("multi_turn_base_0").tools if d["name"] == "mv")
    assert "response" in doc
    tool = prompt.to_tool(doc)
    assert tool["type"] == "function"
    assert set(tool["function"]) == {"name", "description", "parameters"}
    assert tool["function"]["name"] == "mv"
    assert tool["function"]["description"] == doc["description"]


def test_system_prompt_layout():
    tools = [prompt.to_tool(d) for d in load_task("multi_turn_base_1").tools]
    plain = prompt.system_prompt(tools)
    assert plain == prompt.BASE_INSTRUCTIONS + prompt.tools_block(tools)
    extra = prompt.system_prompt(tools, ("Section A", "Section B"))
    sections = "\n\nSection A\n\nSection B"
    assert extra == prompt.BASE_INSTRUCTIONS + sections + prompt.tools_block(tools)
    for tool in tools:
        assert json.dumps(tool, ensure_ascii=False) in plain


def test_tool_response_and_holdout_messages():
    assert prompt.tool_response_message(["a", '{"b": 1}']) == (
        '<tool_response>\na\n</tool_response>\n<tool_response>\n{"b": 1}\n</tool_response>'
    )
    assert prompt.tool_response_message([]) == ""
    doc = load_task("multi_turn_miss_func_0").held_out[3][0]
    message = prompt.holdout_message([prompt.to_tool(doc)])
    assert message.startswith(prompt.HOLDOUT_NOTICE + "\n<tools>\n")
    assert message.endswith("\n</tools>")
    assert json.dumps(prompt.to_tool(doc), ensure_ascii=False) in message


# --- Qwen2.5's own chat template --------------------------------------------------------------


@pytest.mark.parametrize("task_id", ONE_PER_CATEGORY)
def test_system_prompt_renders_like_the_template_with_tools(tokenizer, task_id):
    task = load_task(task_id)
    episode = EpisodeMachine(task_id, EpisodeSettings(mode="validate", prompt="rich"))
    system, user = episode.initial_messages
    ours = tokenizer.apply_chat_template([system, user], tokenize=False)
    tools = [prompt.to_tool(d) for d in prompt.language_hinted(task.tools)]
    native = tokenizer.apply_chat_template(
        [{"role": "system", "content": prompt.BASE_INSTRUCTIONS}, user], tools=tools, tokenize=False
    )
    assert ours == native
    ids = tokenizer.apply_chat_template([system, user], tokenize=True)
    assert list(ids) == list(
        tokenizer.apply_chat_template(
            [{"role": "system", "content": prompt.BASE_INSTRUCTIONS}, user],
            tools=tools,
            tokenize=True,
        )
    )


def test_tool_results_render_like_consecutive_tool_messages(tokenizer):
    results = ['{"current_working_directory": "document"}', "None", "Error during execution: x"]
    head = [
        {"role": "user", "content": "Go to the document folder."},
        {"role": "assistant", "content": "<tool_call>...</tool_call>"},
    ]
    ours = tokenizer.apply_chat_template(
        [*head, {"role": "user", "content": prompt.tool_response_message(results)}], tokenize=False
    )
    native = tokenizer.apply_chat_template(
        [*head, *({"role": "tool", "content": r} for r in results)], tokenize=False
    )
    assert ours == native


def test_scripted_tool_calls_render_like_template_tool_calls(tokenizer):
    calls = ground_truth_trajectory(load_task("multi_turn_base_0"))[0][0]
    assert len(calls) == 3
    user = {"role": "user", "content": "Move the report."}
    ours = tokenizer.apply_chat_template(
        [user, {"role": "assistant", "content": tool_call_text(calls)}], tokenize=False
    )
    native_calls = [
        {"type": "function", "function": {"name": c.name, "arguments": c.kwargs}} for c in calls
    ]
    native = tokenizer.apply_chat_template(
        [user, {"role": "assistant", "content": "", "tool_calls": native_calls}], tokenize=False
    )
    assert ours == native
