"""The `bfcl_qwen_fc` format: the paper's Qwen2.5 prompt, as the original release shows it.

The system message, reveal turns and tool results are the release's text
(seal/bfcl/paper_prompt.py, with the service's `paper` texts); the conversation goes
through the shipped Qwen2.5 chat template (seal/assets/qwen2.5-tokenizer, Apache-2.0) as
plain messages, no `tools=`, as the release renders it. Calls are `<tool_call>` JSON
blocks, parsed as the release parses them (seal/bfcl/paper_calls.py). tests/seal/bfcl/test_paper_prompt.py holds the whole prompt to
the release's own renderings.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

from seal.bfcl import paper_calls, paper_prompt
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import tool_call_text
from seal.formats.base import Conversation, ParsedCalls, ToolFormat

TEMPLATE = (
    Path(__file__).resolve().parent.parent / "assets/qwen2.5-tokenizer/chat_template.qwen2.5.jinja"
)


@functools.cache
def _template() -> str:
    return TEMPLATE.read_text(encoding="utf-8")


class PaperQwenFormat(ToolFormat):
    name = "bfcl_qwen_fc"
    end_of_turn = "<|im_end|>"
    prompt = "paper"
    clip = "release"

    def start(self, created: dict) -> Conversation:
        sections = created["system"]
        own = sections[:1] if created.get("system_from_task") else []  # BFCL V4 agentic
        content = paper_prompt.system_message(created["tools"], sections[len(own) :], own)
        system = {"role": "system", "content": content}
        return Conversation([system, *paper_prompt.chat_messages(created["messages"])])

    def observation(self, messages: list[dict]) -> list[dict]:
        return paper_prompt.chat_messages(messages)

    def render(self, conversation: Conversation) -> str:
        rendered, _ = render_jinja_template(
            [conversation.messages], chat_template=_template(), add_generation_prompt=True
        )
        return rendered[0]

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        return paper_calls.parse(text)

    def call_text(self, calls: list[ToolCall]) -> str:
        return tool_call_text(calls)
