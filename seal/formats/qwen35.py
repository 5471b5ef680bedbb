"""Qwen3.5's chat template and the two tool formats that render through it.

`bfcl_qwen_fc_qwen3.5` (the paper's prompt in Qwen3.5's template, as the release trains
Qwen3.5-4B; `auto`'s choice) and `qwen3.5` (the model's native XML calls, a named option
beyond the paper). The release passes no `enable_thinking`, so generations continue an open
`<think>` block; both parsers read the content after the last `</think>`. What a full
render drops and the driver keeps: docs/tool_formats.md, "Qwen3.5". The template
(seal/assets/qwen3.5-template) is Qwen's, Apache-2.0.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Sequence
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

from seal.bfcl import paper_calls, paper_prompt
from seal.bfcl.calls import (
    CallParseError,
    ToolCall,
    checked_call,
    message_too_long,
    tool_call_blocks,
)
from seal.bfcl.ground_truth import tool_call_text
from seal.bfcl.prompt import language_hinted, to_tool
from seal.formats.base import Conversation, ParsedCalls, ToolFormat
from seal.formats.paper_qwen import PaperQwenFormat

TEMPLATE = (
    Path(__file__).resolve().parent.parent / "assets/qwen3.5-template/chat_template.qwen3.5.jinja"
)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINKING = "\n" + THINK_CLOSE + "\n\n"
"""What a reply with no reasoning writes after the generation prompt's `<think>\\n`: the
template's own rendering of an empty reasoning (`<think>\\n\\n</think>\\n\\n`)."""
ADDED_TOKENS = ("<tool_response>", "</tool_response>", THINK_OPEN, THINK_CLOSE)
"""Qwen3.5's tokens its template writes that Qwen2.5's vocabulary lacks (the CPU tests'
stand-in tokenizer adds them: seal/trainer/model.py)."""


@functools.cache
def template() -> str:
    return TEMPLATE.read_text(encoding="utf-8")


def render(conversation: Conversation) -> str:
    """The conversation through Qwen3.5's template, ending with the generation prompt (no
    `enable_thinking`: the release passes none, so the prompt opens a thinking block)."""
    rendered, _ = render_jinja_template(
        [conversation.messages],
        tools=conversation.functions or None,
        chat_template=template(),
        add_generation_prompt=True,
    )
    return rendered[0]


def content(text: str) -> str:
    """A reply's content as the template reads it: what follows its last `</think>`
    (without the newlines after it), or all of it when it closes no thinking block."""
    if THINK_CLOSE not in text:
        return text
    return text.rsplit(THINK_CLOSE, 1)[1].lstrip("\n")


class Qwen35Template(ToolFormat):
    """Qwen3.5's template, thinking and end of turn, shared by both formats."""

    end_of_turn = "<|im_end|>"

    def render(self, conversation: Conversation) -> str:
        return render(conversation)

    def assistant_message(self, text: str) -> dict:
        # The turn as the model wrote it: the generation prompt's `<think>\n`, then its text.
        return {"role": "assistant", "content": THINK_OPEN + "\n" + text}

    def answer_text(self, text: str) -> str:
        return EMPTY_THINKING + text


class PaperQwen35Format(Qwen35Template, PaperQwenFormat):
    """The paper's prompt and call parser (seal/formats/paper_qwen.py) in Qwen3.5's template."""

    name = "bfcl_qwen_fc_qwen3.5"

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        if (error := message_too_long(text)) is not None:  # the reply, reasoning included
            return [error]
        return paper_calls.parse(content(text))

    def call_text(self, calls: list[ToolCall]) -> str:
        return self.answer_text(tool_call_text(calls))


_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*?)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>\n?(.*?)\n?</parameter>", re.DOTALL)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
EXPECTED = (
    "write each call as <tool_call>\\n<function=NAME>\\n<parameter=ARG>\\nvalue\\n"
    "</parameter>\\n</function>\\n</tool_call>"
)
_TYPES = {
    "integer": (int,),
    "float": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "tuple": (list, tuple),
    "dict": (dict,),
    "object": (dict,),
}
_NO_LITERAL = object()


class Qwen35XmlFormat(Qwen35Template):
    """Qwen3.5's own tool calls (see the module docstring). A `<tool_call>` block that is
    not one well-formed function is a malformed call, answered with what is wrong (verl's
    and vLLM's parsers skip such blocks or read what they can)."""

    name = "qwen3.5"
    prompt = "paper"

    def start(self, created: dict) -> Conversation:
        tools = [to_tool(d) for d in language_hinted(created["tools"])]
        system = "\n\n".join(created["system"])
        first = [{"role": "system", "content": system}] if system else []
        return Conversation([*first, *self.observation(created["messages"])], tools)

    def observation(self, messages: list[dict]) -> list[dict]:
        out = []
        for m in messages:
            if m["role"] == "tool":  # the template groups consecutive results in one turn
                hint = f"\n[ToolHint] {m['hint']}" if m.get("hint") else ""
                out.append({"role": "tool", "content": m["content"] + hint})
            elif m.get("tools"):  # a reveal turn, as the paper's prompt shows it
                out.append({"role": "user", "content": paper_prompt.reveal_message(m["tools"])})
            else:
                out.append({"role": "user", "content": m["content"]})
        return out

    def call_text(self, calls: list[ToolCall]) -> str:
        # The template's own rendering of an assistant turn with these calls.
        tool_calls = [{"name": c.name, "arguments": c.kwargs} for c in calls]
        turn = {"role": "assistant", "content": "", "tool_calls": tool_calls}
        head = "<|im_start|>assistant\n" + THINK_OPEN + "\n"
        rendered = self.render(Conversation([{"role": "user", "content": "U"}, turn]))
        return rendered.split(head, 1)[1].split(self.end_of_turn, 1)[0]

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        if (error := message_too_long(text)) is not None:
            return [error]
        answer = content(text)
        blocks = list(tool_call_blocks(answer))
        if not blocks:
            if "<function=" in answer or "</tool_call>" in answer:
                return [_malformed(answer, "a call must be inside <tool_call></tool_call>")]
            return []
        params = {d["name"]: d["parameters"].get("properties", {}) for d in tools}
        return [_call(answer[start:end], closed, params) for start, end, closed in blocks]


def _malformed(raw: str, what: str) -> CallParseError:
    return CallParseError(raw.strip(), f"{what}; {EXPECTED}")


def _call(body: str, closed: bool, params: dict[str, dict]) -> ToolCall | CallParseError:
    """One `<tool_call>` block's body as a call; values typed by the tool's docs."""
    if not closed:
        return _malformed(body, "the <tool_call> block is not closed with </tool_call>")
    function = _FUNCTION.fullmatch(body)
    if function is None:
        return _malformed(body, "a <tool_call> block must hold one <function=NAME>...</function>")
    name, inner = function.group(1).strip(), function.group(2)
    if not _IDENTIFIER.fullmatch(name):
        return _malformed(body, f"{name!r} is not a tool name")
    if "<function=" in inner:
        return _malformed(body, "one <function=...> per <tool_call> block")
    schema, arguments, pos = params.get(name, {}), {}, 0
    # Each parameter where the last one ended (`match`, not `finditer`: a search from
    # every later position ran `\s*` over the rest of a whitespace run, quadratic in it).
    while p := _PARAMETER.match(inner, pos):
        arg = p.group(1).strip()
        if arg in arguments:
            return _malformed(body, f"parameter {arg!r} is given twice")
        arguments[arg] = typed_value(p.group(2), schema.get(arg))
        pos = p.end()
    if inner[pos:].strip():
        return _malformed(
            body, "inside <function=...> only <parameter=NAME>...</parameter> blocks may follow"
        )
    return checked_call(name, arguments, body.strip())


def typed_value(text: str, schema: dict | None):
    """A parameter's text as the value its doc declares: a `string` is the text itself;
    another type is the literal the text writes (JSON, or Python's True/False/None as the
    template renders them) when it is one of that type, else the text itself, which the
    backend answers as it answers a wrong type in any format. Without a doc, the literal
    if the text is one, else the text."""
    kind = (schema or {}).get("type")
    if kind == "string":
        return text
    value = _literal(text)
    if value is _NO_LITERAL:
        return text
    if kind not in _TYPES or value is None:
        return value
    expected = _TYPES[kind]
    if isinstance(value, bool) and bool not in expected:
        return text
    if isinstance(value, expected):
        return list(value) if isinstance(value, tuple) else value
    return text


def _literal(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        pass
    try:  # the template writes True, False and None with Python's str()
        return ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_LITERAL
