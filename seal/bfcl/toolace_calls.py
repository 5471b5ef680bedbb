"""The calls in a ToolACE message, read by the original release's ToolACE rules.

The release's ToolACE runs (`tool_call_parser: toolace_official_prompt`, strict, with
`reject_tool_call_with_content`) read a message as a Python-style call list
`[f(a=1), g(b='x')]`, else a bare call, a JSON-style call, an answer, or malformed (the
rules: `parse`). `parse` gives the calls and, in the release's order and words, an error
for each rule the message breaks. Nothing is evaluated: `ast.literal_eval` reads literals
only. docs/paper_prompt.md lists where this departs from the release (values that are not
JSON, inputs it crashed on).
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from collections.abc import Generator, Iterator

from seal.bfcl.calls import CallParseError, ToolCall, checked_call, first, message_too_long

ParsedCalls = list[ToolCall | CallParseError]

TAGS_ERROR = (
    "ToolACE BFCL prompt mode expects a Python function-call list, "
    'e.g. [search(query="value")], not <tool_call> tags.'
)
NOT_A_LIST = "Invalid ToolACE function-call list."
TEXT_BESIDE = "ToolACE output must not include text outside the function-call list."

_BARE_CALL = re.compile(r"^[A-Za-z_][\w.]*\s*\(")
_JOINED_OBJECTS = re.compile(r"}\s*[,;]\s*{")
_SEMICOLON_JOIN = re.compile(r"}\s*;\s*{")
_UNQUOTED_NAME = re.compile(r'((?:"name"|"function")\s*:\s*)([A-Za-z_][\w.]*)')


def parse(text: str) -> ParsedCalls:
    """The calls of one message, in order, each rule it breaks as an error where the
    release notes it (a message with any error runs none of its calls). [] answers.

    Every outermost balanced `[...]` holding parentheses (quotes respected) is parsed with
    `ast`; a call's name is a name or a dotted attribute, its arguments are keywords, each
    a literal or else its source text as a string. A message with no such list is a bare
    call `f(a=1)`, a JSON-style call (`{"name": ..., "arguments": ...}`, one or a list), an
    answer, or malformed. Text beside a call list, positional arguments, `**kwargs` and
    `<tool_call>` tags are malformed."""
    return parse_first(text, sys.maxsize)[0]


def parse_first(text: str, limit: int) -> tuple[ParsedCalls, int]:
    """`parse(text)`'s first `limit` items and how many follow them (each call list is
    still parsed, to count them, but no call past the limit is built)."""
    steps = parse_steps(text, limit)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def parse_steps(text: str, limit: int) -> Generator[None, None, tuple[ParsedCalls, int]]:
    """`parse_first`'s work in steps of a call list or a stretch of text each (the
    service runs it in a worker process, between other jobs: env_service/worker.py)."""
    if (error := message_too_long(text)) is not None:
        return first([error], limit)
    stripped = text.strip()
    out: ParsedCalls = []
    more, named, outside, last, lists = 0, 0, [], 0, 0
    for span in _call_list_spans(text):
        yield
        if span is None:
            continue
        lists += 1
        start, end, snippet = span
        read, calls, items, rest = _call_list(snippet, limit - len(out))
        out += items
        more += rest
        named += calls
        if read:  # the text of a span that is no call list stays in the message
            outside.append(text[last:start])
            last = end
    if not lists:
        if "<tool_call" in stripped or "</tool_call>" in stripped:
            return first([CallParseError(stripped, TAGS_ERROR)], limit)
        if not (_BARE_CALL.match(stripped) and stripped.endswith(")")):
            if stripped.startswith(("{", "[", "```")):
                return first(_json_style(stripped), limit)
            return first(
                [CallParseError(stripped, NOT_A_LIST)] if stripped.endswith("]") else [], limit
            )
        yield
        read, named, out, more = _call_list(stripped, limit)  # a bare call: the whole message
        last = len(text) if read else 0
    outside.append(text[last:])
    if named and any(piece.strip() for piece in outside):
        if len(out) < limit:
            out.append(CallParseError(stripped, TEXT_BESIDE))
        else:
            more += 1
    return out, more


# The characters the release's scan acts on: outside a string, brackets and quotes; inside
# one, its quote and the backslash. A bracket without brackets or quotes inside, or a run
# of brackets of one kind, is taken at once.
_SCANNED = re.compile(r"\[[^\[\]'\"]*\]|\[+|\]+|['\"]")
_STRING_END = {q: re.compile(rf"[\\{q}]") for q in "'\""}
_TICK = 1024
"""Scanned pieces between the steps `_call_list_spans` gives without a call list."""


def _call_list_spans(text: str) -> Iterator[tuple[int, int, str] | None]:
    """Each outermost balanced `[...]` that holds `(` and `)`, as (start, end, text), and
    None after every `_TICK` pieces scanned. A quote opens a string anywhere, outside
    brackets too, until the same quote closes it (a backslash escapes the next
    character): the release's scan, character by character there, here from one
    character it acts on to the next (linear in the text)."""
    depth, start, pos, scanned = 0, 0, 0, 0
    while found := _SCANNED.search(text, pos):
        i, pos = found.start(), found.end()
        scanned += 1
        if scanned % _TICK == 0:
            yield None
        kind = text[i]
        if kind == "[" and text[pos - 1] == "]":  # a list with no list or string inside
            if depth == 0 and "(" in found.group() and ")" in found.group():
                yield i, pos, found.group()
        elif kind == "[":
            if depth == 0:
                start = i
            depth += pos - i
        elif kind == "]":
            if depth and depth <= pos - i:  # the outermost list closes in this run
                end = i + depth
                snippet = text[start:end]
                if "(" in snippet and ")" in snippet:
                    yield start, end, snippet
            depth = max(0, depth - (pos - i))
        else:  # a string: up to its closing quote, or the end of the text
            string_end = _STRING_END[kind]
            while (found := string_end.search(text, pos)) and text[found.start()] == "\\":
                pos = found.start() + 2  # the escaped character is part of the string
            if found is None:
                return
            pos = found.end()


def _call_list(snippet: str, room: int) -> tuple[bool, int, ParsedCalls, int]:
    """Whether `snippet` reads as a list of calls (or one call), how many calls the
    release takes from it (named, keywords only), its first `room` calls and errors in
    order, and how many more it has."""
    try:
        body = ast.parse(snippet, mode="eval").body
    except SyntaxError as e:
        error = CallParseError(snippet, f"Invalid ToolACE function-call syntax: {e.msg}")
        return False, 0, *first([error], room)
    except (ValueError, RecursionError, MemoryError) as e:  # the release crashed on these
        error = CallParseError(snippet, f"Invalid ToolACE function-call syntax: {e}")
        return False, 0, *first([error], room)
    if isinstance(body, ast.Call):
        elements = [body]
    elif isinstance(body, ast.List | ast.Tuple):
        elements = body.elts
    else:
        error = CallParseError(snippet, "ToolACE output must be a list of function calls.")
        return False, 0, *first([error], room)
    named, items, more = 0, [], 0
    for node in elements:
        if len(items) < room:
            taken, calls = _call(node, snippet)
            items += calls
        else:  # past the limit: counted, not built
            taken, count = _call_shape(node)
            more += count
        named += taken
    items, cut = first(items, room)
    return True, named, items, more + cut


def _call(node: ast.expr, snippet: str) -> tuple[bool, ParsedCalls]:
    """One element of a call list: whether the release takes it as a call, and its call
    and errors (a call with an error beside it never runs: its message is malformed)."""
    if not isinstance(node, ast.Call):
        return False, [CallParseError(snippet, "ToolACE list contains a non-call item.")]
    name = _dotted_name(node.func)
    if not name:
        return False, [CallParseError(snippet, "ToolACE call has an invalid function name.")]
    if node.args:
        return False, [CallParseError(snippet, f"Tool '{name}' uses positional arguments.")]
    errors: ParsedCalls = []
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            errors.append(CallParseError(snippet, f"Tool '{name}' uses unsupported **kwargs."))
        else:  # a repeated keyword: the last one holds, as in the release's dict
            arguments[keyword.arg] = _value(keyword.value)
    return True, [*errors, _checked(name, arguments, snippet)]


def _call_shape(node: ast.expr) -> tuple[bool, int]:
    """What `_call(node, ...)` gives, without building it: whether the release takes it
    as a call, and how many calls and errors it is."""
    if not isinstance(node, ast.Call) or not _dotted_name(node.func) or node.args:
        return False, 1
    return True, 1 + sum(keyword.arg is None for keyword in node.keywords)


def _dotted_name(node: ast.expr) -> str | None:
    """`f` or `a.b.f`; attributes of anything else are the name (`x().f.g` is `f.g`).
    A loop: a name of ~960 parts is a 2 KB message, and recursion failed on it."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts)) or None


def _value(node: ast.expr):
    """A literal's value; anything else (a name, an expression) as its source text, or
    None when even that fails (the release's three tries, each catching everything)."""
    try:
        return ast.literal_eval(node)
    except Exception:
        try:
            return ast.unparse(node)
        except Exception:
            return None


def _checked(name: str, arguments: dict, raw: str) -> ToolCall | CallParseError:
    """The call, unless its arguments are no JSON values (sets, bytes, complex numbers,
    non-finite floats, non-string keys: the native API carries JSON) or nest too deeply."""
    call = checked_call(name, arguments, raw)
    if isinstance(call, ToolCall) and not _is_json(arguments):
        return CallParseError(raw, f"Tool '{name}' has arguments that are not JSON values.")
    return call


def _is_json(value) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


# --- JSON-style calls (the release's fallback) ---------------------------------------------


def _json_style(text: str) -> ParsedCalls:
    """`{"name": ..., "arguments"|"parameters": {...}}`, or a list of them (also in a code
    fence, `;`-joined, with Python literals or an unquoted name), as the release reads them."""
    try:
        payload = _json_payload(text)
    except Exception as e:  # whatever the two readers raise: the release's message
        return [CallParseError(text, f"Invalid ToolACE JSON-style function call: {e}")]
    out: ParsedCalls = []
    for entry in payload if isinstance(payload, list) else [payload]:
        if not isinstance(entry, dict):
            out.append(CallParseError(text, "ToolACE JSON-style call entry must be an object."))
            continue
        name = entry.get("name") or entry.get("function")
        if not isinstance(name, str) or not name.strip():
            out.append(
                CallParseError(text, "ToolACE JSON-style call must contain a string 'name'.")
            )
            continue
        # An entry whose arguments break a rule keeps the call with none (the message
        # is malformed, so it never runs), in the release's order of checks.
        arguments = entry.get("parameters", entry.get("arguments", {}))
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = _json_or_literal(arguments)
            except Exception:
                out.append(CallParseError(text, f"Tool '{name}' has non-JSON string parameters."))
                arguments = {}
        if not isinstance(arguments, dict):
            out.append(CallParseError(text, f"Tool '{name}' parameters must be an object."))
            arguments = {}
        out.append(_checked(name.strip(), arguments, text))
    return out


def _json_payload(text: str):
    body = _without_code_fence(text)
    candidates = [body]
    if body.startswith("{") and _JOINED_OBJECTS.search(body):
        candidates.insert(0, "[" + _SEMICOLON_JOIN.sub("}, {", body) + "]")
    error: Exception | None = None
    for candidate in candidates:
        quoted = _UNQUOTED_NAME.sub(lambda m: f'{m.group(1)}"{m.group(2)}"', candidate)
        try:
            return _json_or_literal(quoted)
        except Exception as e:
            error = e
        pythonic = re.sub(r"\bnull\b", "None", re.sub(r"\bfalse\b", "False", quoted))
        try:
            return ast.literal_eval(re.sub(r"\btrue\b", "True", pythonic))
        except Exception as e:
            error = e
    raise error


def _json_or_literal(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return ast.literal_eval(text)


def _without_code_fence(text: str) -> str:
    text = text.strip()
    if not text.startswith("```"):
        return text
    lines = text.splitlines()[1:]
    if lines and lines[-1].strip().startswith("```"):
        lines = lines[:-1]
    return "\n".join(lines).strip()
