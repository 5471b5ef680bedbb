"""The calls in a ToolACE message, read by the original release's ToolACE rules.

The release's ToolACE runs (`tool_call_parser: toolace_official_prompt`, strict, with
`reject_tool_call_with_content`) read a message as a Python-style call list
`[f(a=1), g(b='x')]`: every outermost balanced `[...]` holding parentheses (quotes
respected) is parsed with `ast`; a call's name is a name or a dotted attribute, its
arguments are keywords, each a literal or else its source text as a string. A message
with no such list is a bare call `f(a=1)`, a JSON-style call (`{"name": ..., "arguments":
...}`, one or a list), an answer, or malformed. Text beside a call list, positional
arguments, `**kwargs` and `<tool_call>` tags are malformed. `parse` gives the calls and,
in the release's order and words, an error for each rule the message breaks. Nothing is
evaluated: `ast.literal_eval` reads literals only. docs/paper_prompt.md lists where this
departs from the release (values that are not JSON, inputs it crashed on).
"""

from __future__ import annotations

import ast
import json
import math
import re

from seal.bfcl.calls import CallParseError, ToolCall, checked_call

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
    release notes it (a message with any error runs none of its calls). [] answers."""
    stripped = text.strip()
    spans = _call_list_spans(text)
    if not spans:
        if "<tool_call" in stripped or "</tool_call>" in stripped:
            return [CallParseError(stripped, TAGS_ERROR)]
        if not (_BARE_CALL.match(stripped) and stripped.endswith(")")):
            if stripped.startswith(("{", "[", "```")):
                return _json_style(stripped)
            return [CallParseError(stripped, NOT_A_LIST)] if stripped.endswith("]") else []
        spans = [(0, len(text), stripped)]  # a bare call: the whole message
    out: ParsedCalls = []
    rest, named = text, 0
    for start, end, snippet in reversed(spans):
        read, calls, items = _call_list(snippet)
        out[:0] = items
        named += calls
        if read:  # the text of a span that is no call list stays in the message
            rest = rest[:start] + rest[end:]
    if named and rest.strip():
        out.append(CallParseError(stripped, TEXT_BESIDE))
    return out


def _call_list_spans(text: str) -> list[tuple[int, int, str]]:
    """Each outermost balanced `[...]` that holds `(` and `)`, as (start, end, text). A
    quote opens a string anywhere, outside brackets too, until the same quote closes it
    (a backslash escapes the next character): the release's scan."""
    spans, depth, start, quote, escaped = [], 0, 0, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
            snippet = text[start : i + 1]
            if depth == 0 and "(" in snippet and ")" in snippet:
                spans.append((start, i + 1, snippet))
    return spans


def _call_list(snippet: str) -> tuple[bool, int, ParsedCalls]:
    """Whether `snippet` reads as a list of calls (or one call), how many calls the
    release takes from it (named, keywords only), and its calls and errors in order."""
    try:
        body = ast.parse(snippet, mode="eval").body
    except SyntaxError as e:
        return False, 0, [CallParseError(snippet, f"Invalid ToolACE function-call syntax: {e.msg}")]
    except (ValueError, RecursionError, MemoryError) as e:  # the release crashed on these
        return False, 0, [CallParseError(snippet, f"Invalid ToolACE function-call syntax: {e}")]
    if isinstance(body, ast.Call):
        elements = [body]
    elif isinstance(body, ast.List | ast.Tuple):
        elements = body.elts
    else:
        error = CallParseError(snippet, "ToolACE output must be a list of function calls.")
        return False, 0, [error]
    items = [_call(node, snippet) for node in elements]
    return True, sum(taken for taken, _ in items), [c for _, calls in items for c in calls]


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


def _dotted_name(node: ast.expr) -> str | None:
    """`f` or `a.b.f`; an attribute of anything else is its own name (`x().f` is `f`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        prefix = _dotted_name(node.value)
        return f"{prefix}.{node.attr}" if prefix else node.attr
    return None


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
