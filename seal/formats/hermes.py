"""The `qwen2.5` format: this project's richer Qwen2.5 prompt (beyond the paper's).

Calls and the chat template are the paper format's (seal/formats/paper_qwen.py), parsing
is this project's stricter per-block parser (seal/bfcl/calls.py); the prompt is this
project's (`prompt: rich`): the service's instructions and layer texts,
then the tool signatures as Qwen2.5's template writes them for `tools=` (with BFCL's
language hint), tool results as the template renders `tool` messages (seal/bfcl/prompt.py,
shared with the release protocol's `rich` prompt). docs/paper_prompt.md compares the two.
"""

from __future__ import annotations

from collections.abc import Sequence

from seal.bfcl import prompt
from seal.bfcl.calls import parse_tool_calls
from seal.formats.base import Conversation, ParsedCalls
from seal.formats.paper_qwen import PaperQwenFormat


class HermesFormat(PaperQwenFormat):
    name = "qwen2.5"
    prompt = "rich"
    clip = "tokens"

    def start(self, created: dict) -> Conversation:
        tools = [prompt.to_tool(d) for d in prompt.language_hinted(created["tools"])]
        system = {"role": "system", "content": prompt.system_content(created["system"], tools)}
        return Conversation([system, *prompt.chat_messages(created["messages"])])

    def observation(self, messages: list[dict]) -> list[dict]:
        return prompt.chat_messages(messages)

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        return parse_tool_calls(text)
