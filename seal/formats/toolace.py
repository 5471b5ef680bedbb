"""The `toolace_official_prompt` format: the paper's ToolACE-2-Llama-3.1-8B prompt, as the
original release shows it (its ToolACE mode).

The messages are the release's text (seal/bfcl/toolace_prompt.py, with the service's
`paper` texts; tool results as `ipython` messages); calls are Python-style lists read by the
release's ToolACE rules (seal/bfcl/toolace_calls.py); a malformed message ends the episode,
as the release's `terminate_on_parse_error` did (`end_on_malformed_call`). The conversation is laid out as
Llama 3's chat template lays it out (bfcl-eval's LlamaHandler, the `bfcl_prompt` layout);
why not the model's own template: docs/paper_prompt.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from seal.bfcl import toolace_calls, toolace_prompt
from seal.bfcl.calls import ToolCall, call_list_text
from seal.formats.base import Conversation, ParsedCalls, ToolFormat
from seal.formats.bfcl_handlers import build_handler, registry_entry

LAYOUT_HANDLER = "Team-ACE/ToolACE-2-8B"
"""The bfcl-eval handler whose prompt layout renders the conversation (LlamaHandler)."""


@functools.cache
def _handler():
    return build_handler(registry_entry(LAYOUT_HANDLER))


class ToolAceFormat(ToolFormat):
    name = "toolace_official_prompt"
    end_of_turn = "<|eot_id|>"
    prompt = "paper"
    clip = "release"
    end_on_malformed_call = True

    def start(self, created: dict) -> Conversation:
        sections = created["system"]
        own = sections[:1] if created.get("system_from_task") else []  # BFCL V4 agentic
        content = toolace_prompt.system_message(created["tools"], sections[len(own) :], own)
        system = {"role": "system", "content": content}
        return Conversation([system, *toolace_prompt.chat_messages(created["messages"])])

    def observation(self, messages: list[dict]) -> list[dict]:
        return toolace_prompt.chat_messages(messages)

    def render(self, conversation: Conversation) -> str:
        return _handler()._format_prompt(conversation.messages, conversation.functions)

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        return toolace_calls.parse(text)

    def call_text(self, calls: list[ToolCall]) -> str:
        return call_list_text(calls)
