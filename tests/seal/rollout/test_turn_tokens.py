"""Incremental rendering (seal.rollout.turn_tokens) against full renders of each tool
format, and the observation clip."""

from __future__ import annotations

import pytest
from conftest import full_render

from seal.formats.base import Conversation
from seal.formats.hermes import HermesFormat
from seal.formats.qwen35 import Qwen35Template
from seal.formats.registry import FORMATS, PAPER_QWEN, get_format
from seal.rollout.turn_tokens import TurnTokenizer, turn_tokenizer

FIRST = [
    {"role": "system", "content": "You call tools.\n<tools>\n{}\n</tools>"},
    {"role": "user", "content": "List the files."},
]


def qwen_chat(tokenizer) -> TurnTokenizer:
    return TurnTokenizer(tokenizer, get_format(PAPER_QWEN))


def full_ids(tokenizer, messages, add_generation_prompt=True) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def test_qwen_prompt_is_the_template_render_without_tools(tokenizer):
    chat = qwen_chat(tokenizer)
    ids, text = chat.prompt(Conversation(FIRST))
    assert ids == full_ids(tokenizer, FIRST)
    assert text == chat.decode(ids)
    assert text.endswith("List the files.<|im_end|>\n<|im_start|>assistant\n")
    assert "# Tools" not in text  # the template's own tools block is not used
    ids.append(0)  # the caller grows its list; the cached prompt must not change
    assert chat.prompt(Conversation(FIRST))[0] == full_ids(tokenizer, FIRST)


@pytest.mark.parametrize(
    "new",
    [
        [{"role": "user", "content": "<tool_response>\n[1, 2]\n</tool_response>"}],
        [{"role": "user", "content": "Now move it."}, {"role": "user", "content": " And then?"}],
        [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}],  # merged blocks
        [{"role": "user", "content": "\n\nleading newlines and trailing spaces  "}],
        [],
    ],
    ids=["tool-response", "two-user", "two-tool", "whitespace", "none"],
)
def test_qwen_observation_equals_the_full_rerender_after_a_generated_turn(tokenizer, new):
    chat = qwen_chat(tokenizer)
    assistant = {"role": "assistant", "content": '<tool_call>\n{"name": "ls"}\n</tool_call>'}
    generated = tokenizer.encode(assistant["content"]) + [tokenizer.eos_token_id]
    incremental = chat.prompt(Conversation(FIRST))[0] + generated + chat.observation(new, 4096).ids
    assert incremental == full_ids(tokenizer, [*FIRST, assistant, *new])


OBSERVATIONS = [
    [
        {"role": "tool", "name": "ls", "content": '{"a": 1}'},
        {"role": "tool", "content": "Error: x"},
    ],
    [{"role": "user", "content": "  Next question, with spaces around.  "}],
    [
        {
            "role": "user",
            "content": "",
            "tools": [{"name": "f", "description": "d", "parameters": {}}],
        }
    ],
]
"""Tool results, a question, a holdout turn (an observation is never empty before a
generation: the episode has ended then)."""


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_s_observation_equals_its_full_rerender(request, name):
    """For each format, prompt + generated ids + observation ids equal the ids of the
    format's own full render of the conversation, whatever it does to contents
    (Llama's layout strips them; Qwen3.5's drops an earlier turn's think block, which the
    driver keeps: conftest.full_render)."""
    fmt = get_format(name)
    qwen35 = isinstance(fmt, Qwen35Template)
    # Qwen's and Llama's end-of-turn tokens; Qwen3.5's markers.
    chat = TurnTokenizer(
        request.getfixturevalue("qwen35_tokenizer" if qwen35 else "llama_tokenizer"), fmt
    )
    created = {
        "task_id": "multi_turn_base_0",
        "system": ["Be brief."],
        "tools": [
            {"name": "ls", "description": "List.", "parameters": {"type": "dict", "properties": {}}}
        ],
        "messages": [{"role": "user", "content": "List the files."}],
    }
    text = "Checked.\n</think>\n\nDone." if qwen35 else "Done."
    for observation in OBSERVATIONS:
        conversation = fmt.start(created)
        generated = chat.encode(text) + [chat.end_of_turn_id]
        new = fmt.observation(observation)
        incremental = chat.prompt(conversation)[0] + generated + chat.observation(new, 4096).ids
        conversation.messages += [fmt.assistant_message(text), *new]
        assert incremental == chat.encode(full_render(fmt, conversation)), observation


def test_observation_after_eos_for_qwen_is_newline_user_block_generation_prompt():
    text = HermesFormat().observation_text([{"role": "user", "content": "Y"}])
    assert text == "\n<|im_start|>user\nY<|im_end|>\n<|im_start|>assistant\n"


def test_clip_keeps_a_prefix_and_says_so_within_the_limit(tokenizer):
    chat = qwen_chat(tokenizer)
    content = "".join(f"line {i}: value {i * i}\n" for i in range(400))
    clipped = chat.clip(content, 100)
    assert len(chat.encode(clipped)) <= 100
    kept, marker = clipped.split("\n... [truncated ")
    assert content.startswith(kept) and len(kept) > 150
    dropped = int(marker.removesuffix(" tokens]"))
    assert dropped == len(chat.encode(content)) - len(chat.encode(kept))


def test_clip_leaves_content_within_the_limit_untouched(tokenizer):
    chat = qwen_chat(tokenizer)
    content = "word" + " word" * 49  # 249 bytes, 50 tokens: tokenized, not cut
    assert chat.clip(content, 50) is content
    assert chat.clip(content, 49) != content
    observation = chat.observation([{"role": "user", "content": content}], 50)
    assert observation.clipped_messages == 0
    assert chat.observation([{"role": "user", "content": content}], 20).clipped_messages == 1


def test_clip_of_multibyte_text_stays_within_the_limit(tokenizer):
    chat = qwen_chat(tokenizer)
    content = "数据分析报告🙂" * 200
    for limit in (17, 31, 64):
        assert len(chat.encode(chat.clip(content, limit))) <= limit


def test_turn_tokenizer_is_built_once_per_tokenizer_and_format(tokenizer):
    qwen = get_format(PAPER_QWEN)
    assert turn_tokenizer(tokenizer, qwen) is turn_tokenizer(tokenizer, qwen)


def test_a_tokenizer_without_the_format_s_end_of_turn_token_is_refused(tokenizer):
    with pytest.raises(ValueError, match="<\\|eot_id\\|>.* not have as one token"):
        TurnTokenizer(tokenizer, get_format("llama3.1"))


class _NoEnd(HermesFormat):
    name = "broken"

    def render(self, conversation):  # drops the end-of-turn token after assistant turns
        return super().render(conversation).replace("<|im_end|>", "")


def test_a_format_whose_turns_do_not_end_with_its_end_token_is_refused(tokenizer):
    with pytest.raises(ValueError, match="does not render as its text followed by"):
        TurnTokenizer(tokenizer, _NoEnd())
