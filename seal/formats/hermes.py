"""The Qwen2.5 (Hermes) format: `<tool_call>` JSON blocks, the project's original format.

Prompts are byte-identical to what the service sent before the native API carried
structured episodes: the system message is the sections followed by the tool
signatures as Qwen2.5's template writes them for `tools=`, tool results are one user
message of `<tool_response>` blocks (seal/bfcl/prompt.py, shared with the wire
protocol), and the conversation is rendered with the shipped Qwen2.5 chat template
(seal/assets/qwen2.5-tokenizer, Apache-2.0). Calls are parsed by seal/bfcl/calls.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

from seal.bfcl import prompt
from seal.bfcl.calls import ToolCall, parse_tool_calls
from seal.bfcl.ground_truth import tool_call_text
from seal.formats.base import Conversation, ParsedCalls, ToolFormat

TEMPLATE = (
    Path(__file__).resolve().parent.parent / "assets/qwen2.5-tokenizer/chat_template.qwen2.5.jinja"
)


@functools.cache
def _template() -> str:
    return TEMPLATE.read_text(encoding="utf-8")


class HermesFormat(ToolFormat):
    name = "qwen2.5"
    end_of_turn = "<|im_end|>"

    def start(self, created: dict) -> Conversation:
        tools = [prompt.to_tool(d) for d in created["tools"]]
        system = {"role": "system", "content": prompt.system_content(created["system"], tools)}
        return Conversation([system, *prompt.chat_messages(created["messages"])])

    def observation(self, messages: list[dict]) -> list[dict]:
        return prompt.chat_messages(messages)

    def render(self, conversation: Conversation) -> str:
        rendered, _ = render_jinja_template(
            [conversation.messages], chat_template=_template(), add_generation_prompt=True
        )
        return rendered[0]

    def parse(self, text: str) -> ParsedCalls:
        return parse_tool_calls(text)

    def call_text(self, calls: list[ToolCall]) -> str:
        return tool_call_text(calls)
