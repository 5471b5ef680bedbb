"""The paper's rules for the calls in a message: the original release's parser and checks.

The release reads `<tool_call>{...}</tool_call>` blocks with one regular expression and
answers a message with any malformed block, or any call of a tool not available yet, with
one error message instead of running any of its calls (`parse` and `admission_error`
here; env_service/episode.py applies them under the paper's prompt). Calls whose argument
names do not fit the tool still run: the backend's own error is the answer, as in the
release, whose executor ran them (here as data, never as code: seal/bfcl/calls.py).
The texts are the release's, byte for byte (tests/seal/bfcl/test_paper_prompt.py).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator

from seal.bfcl.calls import (
    CallParseError,
    ToolCall,
    checked_call,
    first,
    json_failure,
    message_too_long,
)

ERROR_PREFIX = "[ERROR] Invalid tool call format: "
"""How the release's environment answers a message whose calls it would not run."""

# The release's pattern, `<tool_call>\s*\n?({.*?})\s*\n?\</tool_call>` (DOTALL), read in
# one pass: Python's regex engine runs its lazy `{.*?}` to the end of the text from every
# opening that no block closes, quadratic in them (docs/benchmarks.md, "Parsers").
# A block is an opening, whitespace, `{`, then text up to the first `}` after it that is
# followed by whitespace and the closing tag; `\s*\n?` is `\s*`.
_OPENING = re.compile(r"<tool_call>\s*\{")
_CLOSING = re.compile(r"\}\s*</tool_call>")
NO_VALID_BLOCK = "Found tool_call tag text, but no valid <tool_call>{...}</tool_call> block."


def parse(text: str) -> list[ToolCall | CallParseError]:
    """The calls of a message as the release's strict parser reads them: every complete
    block, in order, each a ToolCall or the release's error for it; a message that
    mentions the tag without a complete block is one error; [] is an answer. A call's
    name is kept as the release passes it on (`str` of it; "" when it has none), so that
    `admission_error` can answer it as the release does."""
    return parse_first(text, sys.maxsize)[0]


def parse_first(text: str, limit: int) -> tuple[list[ToolCall | CallParseError], int]:
    """`parse(text)`'s first `limit` items and how many follow them (found, not read: a
    service that runs at most `limit` calls of a message reads no more)."""
    if (error := message_too_long(text)) is not None:
        return first([error], limit)
    items: list[ToolCall | CallParseError] = []
    more = 0
    for start, end in _blocks(text):
        if len(items) < limit:
            items.append(_call(text[start:end].strip()))
        else:
            more += 1
    if not items and not more and _mentions_tag(text):
        return first([CallParseError(text, NO_VALID_BLOCK)], limit)
    return items, more


def _blocks(text: str) -> Iterator[tuple[int, int]]:
    """Where each block's `{...}` is, as the release's pattern's matches are, in order."""
    closings = _CLOSING.finditer(text)
    closing, pos = None, 0
    while opening := _OPENING.search(text, pos):
        brace = opening.end() - 1
        while closing is None or closing.start() <= brace:
            closing = next(closings, None)
            if closing is None:
                return  # no later opening has a closing either
        yield brace, closing.start() + 1
        pos = closing.end()


def _mentions_tag(text: str) -> bool:
    return "<tool_call" in text or "</tool_call>" in text


def _call(raw: str) -> ToolCall | CallParseError:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        return CallParseError(raw, f"Invalid tool call JSON: {e}")
    except (ValueError, RecursionError) as e:  # Python's limits (digits, depth): the release
        return CallParseError(raw, f"Invalid tool call JSON: {json_failure(e)}")  # crashed
    if "name" not in data or "arguments" not in data:
        return CallParseError(raw, "Tool call JSON must contain both 'name' and 'arguments'.")
    name, arguments = data["name"], data["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return CallParseError(raw, f"Tool '{name}' has non-JSON string arguments.")
    if not isinstance(arguments, dict):
        return CallParseError(raw, f"Tool '{name}' arguments must be a JSON object.")
    # Arguments nested past MAX_ARGUMENT_DEPTH are malformed here (not in the release):
    # no later step may hit Python's recursion limit, and no client sends a body too deep.
    return checked_call(str(name) if name else "", arguments, raw)


def parse_error_message(errors: list[CallParseError]) -> str:
    """The answer to a message with malformed blocks."""
    return ERROR_PREFIX + "; ".join(e.reason for e in errors)


def admission_error(calls: list[ToolCall], available: set[str]) -> str | None:
    """The answer to a well-formed message that calls a tool it may not (the first such
    call's error), or None when every call may run."""
    for call in calls:
        if not call.name:
            return ERROR_PREFIX + "Missing function name in tool call."
        if call.name not in available:
            return ERROR_PREFIX + f"Tool '{call.name}' is not available in the current tool list."
    return None
