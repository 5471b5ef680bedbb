"""Tool calls as data: strict parsing of model output and of BFCL ground-truth strings.

Model output uses the Qwen2.5 format, one JSON object per block, such as
`<tool_call>{"name": "cd", "arguments": {"folder": "document"}}</tool_call>`. Each block
becomes a `ToolCall` or a `CallParseError` (kept in order, so the episode can answer every
block); whatever the text, parsing answers (`json_failure`, `MAX_ARGUMENT_DEPTH`).
Ground-truth calls are BFCL call strings such as `mv(source='a.txt', destination='tmp')`,
parsed with `ast`, every argument a literal, so neither side is ever executed as code.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

MAX_MESSAGE_CHARS = 262_144
"""The longest model message a parser reads (the service's max_message_chars may not be
more): a longer one is one malformed call that says so, and nothing else of it is read,
so every parser's work is bounded (scripts/bench_parsers.py). The paper's 4,096-token
replies are far below it unless made of long whitespace tokens."""

MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of a call's arguments (BFCL's tools take at most lists of dicts:
depth 3). Deeper ones are malformed calls: at ~480 levels `copy.deepcopy` and the
checker's comparisons raised RecursionError (HTTP 500 on every later evaluation)."""


class ArgumentsTooDeep(ValueError):
    """Arguments nested deeper than allowed."""


def argument_size(value: object, max_depth: int = MAX_ARGUMENT_DEPTH) -> int:
    """A JSON value's size in characters, roughly (strings and keys by length, a number by
    its digits, containers and literals 1); raises ArgumentsTooDeep past `max_depth`
    levels. Iterative, so any depth is safe to measure."""
    size = 0
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is str:
            size += len(item)
        elif kind is dict or kind is list or kind is tuple:
            if depth >= max_depth:
                raise ArgumentsTooDeep(f"nested deeper than {max_depth} levels")
            size += 1
            depth += 1
            if kind is dict:
                for key, child in item.items():
                    size += len(key) if type(key) is str else 1
                    if type(child) is str:
                        size += len(child)
                    else:
                        push((child, depth))
            else:
                for child in item:
                    if type(child) is str:
                        size += len(child)
                    else:
                        push((child, depth))
        elif kind is int:
            size += item.bit_length() // 3 + 1  # about its decimal digits
        else:
            size += 1  # float, bool, None (and anything else a caller passes)
    return size


def json_failure(error: Exception) -> str:
    """What the JSON parser's refusal means, for the model (or the client) to read: JSON it
    refuses (integers over Python's 4,300 digits, nesting too deep for it) is a parse error,
    so no later step (copying, comparing, pickling) can hit Python's recursion limit."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at char {error.pos}"
    if isinstance(error, RecursionError):
        return "the JSON is nested too deeply"
    text = str(error)
    if "integer string conversion" in text:  # Python's int_max_str_digits guard
        return "an integer has more than 4300 digits"
    return text


@dataclass(frozen=True)
class ToolCall:
    """A call to a named tool with keyword arguments (positional ones only in ground truth)."""

    name: str
    kwargs: dict = field(default_factory=dict)
    args: tuple = ()

    def to_call_string(self) -> str:
        """BFCL's call-string form, for logs and for feeding the official checker in tests."""
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


def call_list_text(calls: list[ToolCall]) -> str:
    """Calls as a Python-style call list, `[f(a=1), g(b='x')]` (BFCL's prompt mode, ToolACE)."""
    return "[" + ", ".join(c.to_call_string() for c in calls) + "]"


@dataclass(frozen=True)
class CallParseError:
    """A `<tool_call>` block that is not a well-formed call; `reason` is shown to the model."""

    raw: str
    reason: str


def message_too_long(text: str) -> CallParseError | None:
    """The answer to a message over MAX_MESSAGE_CHARS (None for one within it)."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return None
    return CallParseError(
        text,
        f"the message has {len(text):,} characters, more than the {MAX_MESSAGE_CHARS:,} a "
        "message may have; it was not read",
    )


def first(items: list, limit: int) -> tuple[list, int]:
    """`items` cut at `limit`, and how many were cut."""
    return items[:limit], max(0, len(items) - limit)


def has_tool_call(text: str) -> bool:
    """True when the text attempts at least one tool call (well-formed or not)."""
    return TOOL_CALL_OPEN in text


def tool_call_blocks(text: str) -> Iterator[tuple[int, int, bool]]:
    """Each `<tool_call>` block's body as (start, end, closed), in order: up to the next
    `</tool_call>`, else to the end of the text (before a final newline), as the pattern
    `<tool_call>(.*?)(</tool_call>|$)` (DOTALL) reads them, with `str.find`: a lazy
    pattern steps through the text a character at a time."""
    pos = 0
    while (start := text.find(TOOL_CALL_OPEN, pos)) != -1:
        body = start + len(TOOL_CALL_OPEN)
        close = text.find(TOOL_CALL_CLOSE, body)
        if close == -1:
            yield body, max(body, len(text) - text.endswith("\n")), False
            return
        yield body, close, True
        pos = close + len(TOOL_CALL_CLOSE)


def parse_tool_calls(text: str) -> list[ToolCall | CallParseError]:
    """Every `<tool_call>` block of a model message, in order."""
    return parse_first_tool_calls(text, sys.maxsize)[0]


def parse_first_tool_calls(text: str, limit: int) -> tuple[list[ToolCall | CallParseError], int]:
    """The first `limit` blocks parsed, and how many blocks follow them (not parsed: a
    service that runs at most `limit` calls of a message need not read the rest)."""
    if (error := message_too_long(text)) is not None:
        return first([error], limit)
    parsed: list[ToolCall | CallParseError] = []
    more = 0
    for start, end, closed in tool_call_blocks(text):
        if len(parsed) < limit:
            parsed.append(_parse_block(text[start:end], closed))
        else:
            more += 1
    return parsed, more


def _parse_block(body: str, closed: bool) -> ToolCall | CallParseError:
    raw = body.strip()
    if not closed:
        return CallParseError(raw, "the <tool_call> block is not closed with </tool_call>")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        return CallParseError(raw, f"the block is not valid JSON ({json_failure(e)})")
    if not isinstance(obj, dict):
        return CallParseError(raw, "the block must be a JSON object with 'name' and 'arguments'")
    name, arguments = obj.get("name"), obj.get("arguments", {})
    extra = set(obj) - {"name", "arguments"}
    if extra:
        return CallParseError(
            raw, f"unexpected fields {sorted(extra)}; use only 'name' and 'arguments'"
        )
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        return CallParseError(raw, "'name' must be a tool name string")
    if not isinstance(arguments, dict):
        return CallParseError(raw, "'arguments' must be a JSON object")
    return checked_call(name, arguments, raw)


def checked_call(name: str, arguments: dict, raw: str = "") -> ToolCall | CallParseError:
    """A call with these arguments, or a parse error if they are nested too deeply."""
    try:
        argument_size(arguments)
    except ArgumentsTooDeep as e:
        return CallParseError(raw, f"'arguments' are {e}")
    return ToolCall(name=name, kwargs=arguments)


def parse_call_string(call: str) -> ToolCall:
    """A BFCL ground-truth call string as data; raises ValueError on anything but a literal call."""
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"not a call: {call!r}") from e
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {call!r}")
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    except ValueError as e:
        raise ValueError(f"non-literal argument in {call!r}") from e
    if None in kwargs:
        raise ValueError(f"**kwargs are not allowed: {call!r}")
    return ToolCall(name=node.func.id, kwargs=kwargs, args=args)


@dataclass(frozen=True)
class CallRejection:
    """Why a parsed call may not run: `kind` names the rule, `message` is shown to the model."""

    kind: str  # unknown_tool | unavailable_tool | missing_argument | unexpected_argument
    message: str


def check_call(
    call: ToolCall, available: dict[str, dict], held_back: frozenset[str] = frozenset()
) -> CallRejection | None:
    """None if `call` names an available tool with exactly allowed argument names.

    `available` maps tool name -> BFCL tool doc; `held_back` names tools that exist in the
    task but are not revealed yet. Only names and keys are checked here: values are
    passed to the backend as data, and a backend that rejects a value answers with its
    own error, as in BFCL.
    """
    doc = available.get(call.name)
    if doc is None:
        if call.name in held_back:
            return CallRejection("unavailable_tool", f"tool {call.name!r} is not available yet")
        return CallRejection("unknown_tool", f"unknown tool {call.name!r}")
    params = doc["parameters"]
    allowed = set(params.get("properties", {}))
    unexpected = sorted(set(call.kwargs) - allowed)
    if unexpected:
        return CallRejection(
            "unexpected_argument",
            f"{call.name} got unexpected argument(s) {unexpected}; allowed: {sorted(allowed)}",
        )
    missing = [p for p in params.get("required", []) if p not in call.kwargs]
    if missing:
        return CallRejection(
            "missing_argument", f"{call.name} is missing required argument(s) {missing}"
        )
    return None
