"""Incremental rendering (seal.rollout.turn_tokens) against full renders of the Qwen2.5
template, and the observation clip."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from seal.rollout.turn_tokens import TurnTokenizer, turn_tokenizer

TOKENIZER_DIR = Path(__file__).resolve().parent.parent / "seal/assets/qwen2.5-tokenizer"
FIRST = [
    {"role": "system", "content": "You call tools.\n<tools>\n{}\n</tools>"},
    {"role": "user", "content": "List the files."},
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TOKENIZER_DIR)


def full_ids(tokenizer, messages, add_generation_prompt=True) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def test_prompt_is_the_template_render_without_tools(tokenizer):
    chat = TurnTokenizer(tokenizer)
    ids, text = chat.prompt(FIRST)
    assert ids == full_ids(tokenizer, FIRST)
    assert text == chat.decode(ids)
    assert text.endswith("List the files.<|im_end|>\n<|im_start|>assistant\n")
    assert "# Tools" not in text  # the template's own tools block is not used
    ids.append(0)  # the caller grows its list; the cached prompt must not change
    assert chat.prompt(FIRST)[0] == full_ids(tokenizer, FIRST)


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
def test_observation_equals_the_full_rerender_after_a_generated_turn(tokenizer, new):
    chat = TurnTokenizer(tokenizer)
    assistant = {"role": "assistant", "content": '<tool_call>\n{"name": "ls"}\n</tool_call>'}
    generated = tokenizer.encode(assistant["content"]) + [tokenizer.eos_token_id]
    incremental = chat.prompt(FIRST)[0] + generated + chat.observation(new, 4096).ids
    assert incremental == full_ids(tokenizer, [*FIRST, assistant, *new])


def test_observation_after_eos_for_qwen_is_newline_user_block_generation_prompt(tokenizer):
    text = TurnTokenizer(tokenizer).observation_text([{"role": "user", "content": "Y"}])
    assert text == "\n<|im_start|>user\nY<|im_end|>\n<|im_start|>assistant\n"


def test_clip_keeps_a_prefix_and_says_so_within_the_limit(tokenizer):
    chat = TurnTokenizer(tokenizer)
    content = "".join(f"line {i}: value {i * i}\n" for i in range(400))
    clipped = chat.clip(content, 100)
    assert len(chat.encode(clipped)) <= 100
    kept, marker = clipped.split("\n... [truncated ")
    assert content.startswith(kept) and len(kept) > 150
    dropped = int(marker.removesuffix(" tokens]"))
    assert dropped == len(chat.encode(content)) - len(chat.encode(kept))


def test_clip_leaves_content_within_the_limit_untouched(tokenizer):
    chat = TurnTokenizer(tokenizer)
    content = "word" + " word" * 49  # 249 bytes, 50 tokens: tokenized, not cut
    assert chat.clip(content, 50) is content
    assert chat.clip(content, 49) != content
    observation = chat.observation([{"role": "user", "content": content}], 50)
    assert observation.clipped_messages == 0
    assert chat.observation([{"role": "user", "content": content}], 20).clipped_messages == 1


def test_clip_of_multibyte_text_stays_within_the_limit(tokenizer):
    chat = TurnTokenizer(tokenizer)
    content = "数据分析报告🙂" * 200
    for limit in (17, 31, 64):
        assert len(chat.encode(chat.clip(content, limit))) <= limit


def test_turn_tokenizer_is_built_once_per_tokenizer(tokenizer):
    assert turn_tokenizer(tokenizer) is turn_tokenizer(tokenizer)


def test_a_template_that_does_not_close_turns_with_eos_is_refused(tokenizer):
    other = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    other.chat_template = (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    with pytest.raises(ValueError, match="eos token"):
        TurnTokenizer(other)
