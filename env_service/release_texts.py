"""The text the release protocol speaks: for each prompt its client may ask for, how the
system message and the observations are written and how the model's text is read.

The native API sends data and its client's tool format renders it; the release's clients
(env_service/release_protocol/api.py) send and read text, so the service writes it as the format of
the same name would: `bfcl_qwen_fc` (the paper's Qwen2.5 prompt, the release's default),
`toolace_official_prompt` (the release's ToolACE mode) or `qwen2.5` (this project's richer
prompt, `prompt: rich`). An episode speaks the one its settings' prompt implies (`DEFAULT`)
unless the release protocol's create asks for another (env_service/release_protocol/params.py).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from seal.bfcl import paper_calls, paper_prompt, prompt, toolace_calls, toolace_prompt
from seal.bfcl.calls import CallParseError, ToolCall, parse_first_tool_calls

ParsedMessage = tuple[list[ToolCall | CallParseError], int]
"""A message's first calls (at most the number it may run) and how many follow them."""


def _rich_system(docs: Sequence[dict], sections: Sequence[str]) -> str:
    tools = [prompt.to_tool(d) for d in prompt.language_hinted(docs)]
    return prompt.system_content(sections, tools)


@dataclass(frozen=True)
class ReleaseText:
    system: Callable[[Sequence[dict], Sequence[str]], str]
    """The system message from the first turn's docs and the system-prompt sections."""
    messages: Callable[[list[dict]], list[dict]]
    """Observation messages as chat messages."""
    parse: Callable[[str, int], ParsedMessage]
    """A message's first `limit` calls and how many follow them, read no further than
    counting them needs; linear in the message."""
    parse_steps: Callable[[str, int], Generator[None, None, ParsedMessage]] | None = None
    """`parse`'s work in steps, where even a short message costs more than the event loop
    may spend on one: every message is then read in a worker process (ToolACE's: Python's
    own parser over every call list). Without it, a message up to `INLINE_PARSE_CHARS` is
    read on the event loop, a longer one in a worker (`parse_job`)."""


INLINE_PARSE_CHARS = 16_384
"""The longest message a release text without `parse_steps` reads on the event loop. A
4,096-token reply is about this long and reads in well under a millisecond; a message of
the service's 262,144 characters costs a few milliseconds (docs/benchmarks.md, "Parsers"),
which every other client's request then waited for."""


RELEASE_TEXTS = {
    "bfcl_qwen_fc": ReleaseText(
        paper_prompt.system_message, paper_prompt.chat_messages, paper_calls.parse_first
    ),
    # The release's `tool_prompt_mode`, `tool_call_parser` and `tool_result_mode` of this name.
    "toolace_official_prompt": ReleaseText(
        toolace_prompt.system_message,
        toolace_prompt.chat_messages,
        toolace_calls.parse_first,
        toolace_calls.parse_steps,
    ),
    "qwen2.5": ReleaseText(_rich_system, prompt.chat_messages, parse_first_tool_calls),
}
DEFAULT = {"paper": "bfcl_qwen_fc", "rich": "qwen2.5"}
"""The release text of each prompt (EpisodeSettings.prompt) unless the create asks for another."""


def parse_job(release_text: str, content: str, limit: int) -> Generator[None, None, ParsedMessage]:
    """A worker's job reading `content` in the release text `release_text`: its `parse_steps`, or its
    `parse` as one step (a few milliseconds at most: as long as one costly call)."""
    text = RELEASE_TEXTS[release_text]
    if text.parse_steps is not None:
        return (yield from text.parse_steps(content, limit))
    yield
    return text.parse(content, limit)
