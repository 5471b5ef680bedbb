"""Qwen3.5's template and its two formats (seal/formats/qwen35.py), offline.

- The template: the generation prompt opens a think block unless `enable_thinking` is
  false; a conversation without a user question is refused (the release's trainer renders
  its system message alone first, so its current recipe stops there with this template);
  a full render drops the think blocks of turns before the last user question.
- `bfcl_qwen_fc_qwen3.5` shows the paper's messages (the `bfcl_qwen_fc` format's, held to
  the release's own by tests/seal/bfcl/test_paper_prompt.py) through that template.
- The driver's text is the template's full render up to the second user question, and the
  same render with every think block kept after it; an empty think block is the one place
  the ids cannot match.
- `qwen3.5`'s XML calls: values typed by the tool docs, malformed blocks answered as
  malformed calls, model text never evaluated. The 800 tasks' round trips and 799/800 are
  in tests/seal/formats/test_formats.py, the driver on a live service in tests/seal/rollout/test_driver*.py.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from conftest import full_render, gt_texts
from test_formats import play_in_process
from transformers.utils.chat_template_utils import render_jinja_template

from env_service.engine import EnvEngine, ServiceConfig
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.ground_truth import ground_truth_trajectory
from seal.bfcl.tasks import load_task, task_ids
from seal.formats import qwen35
from seal.formats.base import Conversation
from seal.formats.registry import get_format
from seal.rollout.turn_tokens import TurnTokenizer
from seal.service_contract import EpisodeSettings, InterfaceSettings

PAPER, PAPER35, XML = (get_format(n) for n in ("bfcl_qwen_fc", "bfcl_qwen_fc_qwen3.5", "qwen3.5"))
TEMPLATE_SHA256 = "d2cb9a5730cdd5f44bce3ada2dc1b0e00c6c59788b6d1c4d8d49c40a274dffb0"
"""The shipped template, as transcribed from Qwen's (docs/tool_formats.md, "Qwen3.5")."""
TRAIN = EpisodeSettings(mode="sample", interface=InterfaceSettings(schema_cues=True))


def template_render(messages: list[dict], **flags) -> str:
    rendered, _ = render_jinja_template([messages], chat_template=qwen35.template(), **flags)
    return rendered[0]


@pytest.fixture(scope="module")
def engine():
    return EnvEngine(ServiceConfig(workers=0))


# --- the template -------------------------------------------------------------------------


def test_the_shipped_template_is_the_transcribed_one():
    assert hashlib.sha256(qwen35.TEMPLATE.read_bytes()).hexdigest() == TEMPLATE_SHA256
    assert (qwen35.TEMPLATE.parent / "LICENSE.Apache-2.0").is_file()


def test_without_a_thinking_flag_the_generation_prompt_opens_a_think_block():
    chat = [{"role": "user", "content": "Q"}]
    prompt = template_render(chat, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    off = template_render(chat, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert PAPER35.render(Conversation(chat)) == prompt  # the release passes no flag


@pytest.mark.parametrize(
    "messages",
    [[{"role": "system", "content": "S"}], [{"role": "assistant", "content": "dummy text"}]],
)
def test_a_conversation_without_a_user_question_is_refused(messages):
    """The release's trainer tokenizes its first messages one prefix at a time, the system
    message alone first, and each environment message after a dummy assistant turn
    (cmt_linear.py, cmt_base.py): both renders are refused by Qwen3.5's template."""
    with pytest.raises(Exception, match="No user query found in messages"):
        template_render(messages)


def test_a_full_render_drops_the_think_blocks_before_the_last_question():
    turn = {"role": "assistant", "content": "<think>\nplan\n</think>\n\nanswer"}
    chat = [{"role": "user", "content": "Q1"}, turn]
    assert "<think>\nplan\n</think>\n\nanswer<|im_end|>" in template_render(chat)
    later = template_render([*chat, {"role": "user", "content": "Q2"}])
    assert "<|im_start|>assistant\nanswer<|im_end|>" in later and "plan" not in later
    results = {"role": "user", "content": "<tool_response>\nr\n</tool_response>\n"}
    assert "plan" in template_render([*chat, results])  # tool results are not a question


# --- the paper's prompt in Qwen3.5's template ----------------------------------------------


def test_the_paper_format_shows_the_paper_s_messages_through_qwen35_s_template(engine):
    for task_id in task_ids()[::20]:
        for settings in (EpisodeSettings(mode="validate"), TRAIN):
            created, observations, _ = asyncio.run(
                play_in_process(engine, task_id, gt_texts(task_id, PAPER35), PAPER35, settings)
            )
            ours, paper = PAPER35.start(created), PAPER.start(created)
            assert ours.messages == paper.messages, task_id
            assert PAPER35.render(ours) == template_render(
                ours.messages, add_generation_prompt=True
            )
            for observation in observations:
                assert PAPER35.observation(observation) == PAPER.observation(observation)


def test_the_paper_format_parses_the_content_after_the_think_block():
    call = '<tool_call>\n{"name": "ls", "arguments": {"a": true}}\n</tool_call>'
    assert PAPER35.parse(f"I list them.\n{call}\n</think>\n\nDone.") == []  # calls in reasoning
    assert PAPER35.parse(f"Let me list.\n</think>\n\n{call}") == [ToolCall("ls", {"a": True})]
    assert PAPER35.parse(call) == [ToolCall("ls", {"a": True})]  # no think block closed


# --- token in, token out -------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [PAPER35, XML], ids=lambda f: f.name)
def test_the_driver_s_text_is_the_template_s_render_until_the_second_question(engine, fmt):
    """Incremental prompts (the driver's: each generated text, end of turn, the probe's
    observation text) against full renders: equal to the template's own render while no
    assistant turn precedes the last question, and after that equal to it only with every
    think block kept, which is the render the driver's sequence is (full_render)."""
    compared = dropped = 0
    for task_id in ["multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_long_context_3"]:
        texts = [t.replace("\n</think>", "Next.\n</think>", 1) for t in gt_texts(task_id, fmt)]
        created, observations, evaluation = asyncio.run(
            play_in_process(engine, task_id, texts, fmt)
        )
        assert evaluation["accuracy"] == 1
        conversation = fmt.start(created)
        text = fmt.render(conversation)
        for generated, observation in zip(texts, observations[:-1], strict=False):
            new = fmt.observation(observation)
            text += generated + fmt.end_of_turn + fmt.observation_text(new)
            conversation.messages += [fmt.assistant_message(generated), *new]
            assert text == full_render(fmt, conversation)
            asked = [k for k, m in enumerate(conversation.messages) if is_question(m)]
            stripped = any(m["role"] == "assistant" for m in conversation.messages[: asked[-1]])
            assert (text == fmt.render(conversation)) != stripped
            compared, dropped = compared + 1, dropped + stripped
    assert 0 < dropped < compared


def is_question(message: dict) -> bool:
    content = message["content"].strip()
    return message["role"] == "user" and not (
        content.startswith("<tool_response>") and content.endswith("</tool_response>")
    )


def test_an_empty_think_block_is_the_one_place_the_ids_differ(qwen35_tokenizer):
    """After the generation prompt's `<think>\\n` a model that does not reason writes
    `\\n</think>` (its own ids); the full render tokenizes `<think>\\n\\n</think>`, whose
    two newlines are one token. The texts are equal; the driver keeps the model's ids."""
    chat = TurnTokenizer(qwen35_tokenizer, PAPER35)
    conversation = Conversation([{"role": "user", "content": "Q"}])
    prompt, _ = chat.prompt(conversation)
    generated = chat.encode(PAPER35.answer_text("Done.")) + [chat.end_of_turn_id]
    conversation.messages.append(PAPER35.assistant_message(PAPER35.answer_text("Done.")))
    full = chat.encode(template_render(conversation.messages))
    assert chat.decode(prompt + generated) + "\n" == chat.decode(full)
    newline, two = (chat.encode(s) for s in ("\n", "\n\n"))
    assert len(newline) == len(two) == 1
    assert (
        prompt + generated == full[: len(prompt) - 1] + newline + newline + full[len(prompt) : -1]
    )


def test_the_stand_in_tokenizer_has_each_marker_as_one_token(qwen35_tokenizer):
    for marker in (*qwen35.ADDED_TOKENS, "<tool_call>", "</tool_call>", "<|im_end|>"):
        assert len(qwen35_tokenizer.encode(marker)) == 1, marker
    assert qwen35_tokenizer.chat_template == qwen35.template()


# --- Qwen3.5's XML calls -------------------------------------------------------------------

LS = {
    "name": "ls",
    "description": "List.",
    "parameters": {"type": "dict", "properties": {"a": {"type": "boolean"}}},
}
TYPED = {
    "name": "f",
    "description": "All types.",
    "parameters": {
        "type": "dict",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "x": {"type": "float"},
            "b": {"type": "boolean"},
            "l": {"type": "array"},
            "d": {"type": "dict"},
        },
    },
}


def xml_call(name: str, **values: str) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


@pytest.mark.parametrize(
    "written,value",
    [
        (("s", "10"), "10"),  # a string stays text, however it looks
        (("s", "a\n  b "), "a\n  b "),
        (("s", ""), ""),
        (("i", "10"), 10),
        (("i", "ticket_001"), "ticket_001"),  # not an integer: the text, for the backend
        (("i", "true"), "true"),  # a boolean is not an integer
        (("x", "1.5"), 1.5),
        (("x", "3"), 3),
        (("b", "True"), True),  # the template writes Python's str()
        (("b", "false"), False),
        (("b", "None"), None),
        (("l", '["a", 1]'), ["a", 1]),
        (("l", "('a', 1)"), ["a", 1]),
        (("d", '{"k": [1]}'), {"k": [1]}),
        (("d", "{k: 1}"), "{k: 1}"),
        (("extra", "7"), 7),  # undocumented: the literal if it is one
        (("extra", "seven"), "seven"),
    ],
)
def test_xml_values_are_typed_by_the_tool_s_doc(written, value):
    name, text = written
    [call] = XML.parse(xml_call("f", **{name: text}), [TYPED])
    assert call == ToolCall("f", {name: value})
    assert type(call.kwargs[name]) is type(value)


def test_xml_round_trips_need_the_docs():
    """The template writes a string "9" and a number 9 alike: without the docs, hundreds
    of the 800 tasks' ground-truth calls come back with other values."""
    changed = 0
    for task_id in task_ids()[::4]:
        for turn in ground_truth_trajectory(load_task(task_id)):
            for calls in turn:
                changed += XML.parse(XML.call_text(calls)) != calls
    assert changed > 50


MALFORMED_XML = {
    "<tool_call>\n<function=ls>\n</function>": "not closed with </tool_call>",
    "<tool_call>\n<function=ls\n</function>\n</tool_call>": "must hold one <function=NAME>",
    "<tool_call>\n<parameter=a>\ntrue\n</parameter>\n</tool_call>": "must hold one <function",
    "<tool_call>\n<function=ls>\n<parameter=a>\ntrue\n</function>\n</tool_call>": "only <parameter",
    "<tool_call>\n<function=ls>\n<parameter=a\ntrue\n</parameter>\n</function>\n</tool_call>": (
        "only <parameter"
    ),
    "<tool_call>\n<function=ls>\nsure: <parameter=a>\ntrue\n</parameter>\n</function>\n</tool_call>": (
        "only <parameter"
    ),
    xml_call("ls", a="true").replace("</function>", "</function>\n<function=pwd>\n</function>"): (
        "one <function=...> per <tool_call>"
    ),
    xml_call("ls", a="true").replace(
        "</function>", "<parameter=a>\nno\n</parameter>\n</function>"
    ): ("given twice"),
    "<tool_call>\n<function=ls; rm>\n</function>\n</tool_call>": "is not a tool name",
    "<tool_call>\n<function=>\n</function>\n</tool_call>": "is not a tool name",
    '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>': "must hold one <function",
    "<function=ls>\n</function>": "must be inside <tool_call>",
    "</tool_call>": "must be inside <tool_call>",
}


@pytest.mark.parametrize("text,reason", list(MALFORMED_XML.items()))
def test_malformed_xml_calls_are_parse_errors_that_say_how_to_write_one(text, reason):
    [error] = XML.parse(text, [LS])
    assert isinstance(error, CallParseError)
    assert reason in error.reason and error.reason.endswith(qwen35.EXPECTED)


def test_a_malformed_block_is_answered_beside_well_formed_ones():
    text = "I list.\n" + xml_call("ls", a="true") + "\n<tool_call>\n<function=ls\n</tool_call>"
    good, bad = XML.parse(text, [LS])
    assert good == ToolCall("ls", {"a": True}) and isinstance(bad, CallParseError)


def test_xml_answers_and_reasoning_are_not_calls():
    assert XML.parse("The files are a and b.", [LS]) == []
    assert XML.parse(xml_call("ls", a="true") + "\n</think>\n\nDone.", [LS]) == []


def test_xml_values_are_never_run_as_code(tmp_path: Path):
    sentinel = tmp_path / "ran"
    code = f"__import__('pathlib').Path('{sentinel}').touch()"
    for name in ("b", "l", "d", "extra"):
        [call] = XML.parse(xml_call("f", **{name: code}), [TYPED])
        assert call == ToolCall("f", {name: code})
    assert not sentinel.exists()


def test_xml_format_renders_tools_and_results_as_the_template_does():
    created = {
        "task_id": "multi_turn_base_0",
        "system": ["Be brief."],
        "tools": [LS],
        "messages": [{"role": "user", "content": "List."}],
    }
    conversation = XML.start(created)
    assert conversation.functions[0]["function"]["name"] == "ls"
    rendered = XML.render(conversation)
    assert "<tools>\n" in rendered and "</IMPORTANT>\n\nBe brief.<|im_end|>" in rendered
    results = [
        {"role": "tool", "name": "ls", "content": "a"},
        {"role": "tool", "name": "ls", "content": "b", "hint": "retry"},
    ]
    text = XML.observation_text(XML.observation(results))
    assert text == (
        "\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n"
        "[ToolHint] retry\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_endpoint_scoring_does_not_count_qwen35_tokens_with_qwen25_s_tokenizer():
    """seal-eval's budget is counted with the model's tokenizer; the shipped one is
    Qwen2.5's, another vocabulary than Qwen3.5's: its name must be given."""
    from seal.eval.endpoint_episode import load_tokenizer

    with pytest.raises(ValueError, match="--tokenizer is needed for model 'Qwen/Qwen3.5-4B'"):
        load_tokenizer(None, "Qwen/Qwen3.5-4B")
    assert len(load_tokenizer(None, "Qwen/Qwen2.5-7B-Instruct")) == 151665
