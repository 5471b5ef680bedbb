"""Prompt text of the `qwen2.5` format (this project's richer prompt), and what every
format's prompt shares (BFCL's language hint, observations grouped into chat messages).

The paper's prompt is seal/bfcl/paper_prompt.py. This one is beyond the paper (a named
option, `tool_format: qwen2.5`; docs/paper_prompt.md, "The rich prompt"): instructions
before the tools, the tool signatures as the Qwen2.5 chat template renders a `tools=`
argument, a reveal turn as a notice and a `<tools>` block, tool results as the template
renders consecutive `tool` messages. Its users: the release protocol's `rich` prompt and the
Qwen2.5 tool format (seal/formats/hermes.py).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence

from bfcl_eval.utils import _get_language_specific_hint

BASE_INSTRUCTIONS = (
    "You are an assistant that completes the user's requests by calling the provided tools. "
    "In each turn, keep calling tools until the request is fulfilled, then reply with a short "
    "message that contains no tool call to end the turn. If the request cannot be fulfilled "
    "with the available tools or is missing information, say so instead of calling tools."
)

HOLDOUT_NOTICE = "New tools are now available to you. Please continue with my earlier request."

LANGUAGE_HINT = _get_language_specific_hint("multi_turn_base")
"""BFCL's note on a tool's description (" Note that the provided function is in Python 3
syntax."): its loader adds it to every task's docs; the service sends docs without it and
each format adds it where its reference pipeline does."""


def language_hinted(docs: Sequence[dict]) -> list[dict]:
    """Copies of BFCL tool docs whose descriptions end with LANGUAGE_HINT."""
    out = []
    for doc in docs:
        doc = copy.copy(doc)
        doc["description"] = doc["description"] + LANGUAGE_HINT
        out.append(doc)
    return out


def group_observation(
    observation: Sequence[dict],
    results_message: Callable[[list[dict]], str],
    reveal_message: Callable[[list[dict]], str],
    results_role: str = "user",
) -> list[dict]:
    """Observation messages (seal.service_contract.ObservationMessage as dicts) as chat
    messages: consecutive tool results as one `results_role` message (`results_message`
    of their messages), a reveal turn's docs as `reveal_message`, the environment's own
    answer (`env`) and questions as user messages."""
    out: list[dict] = []
    results: list[dict] = []
    for message in observation:
        if message["role"] == "tool":
            results.append(message)
            continue
        if results:
            out.append({"role": results_role, "content": results_message(results)})
            results = []
        revealed = message.get("tools")
        content = reveal_message(revealed) if revealed else message["content"]
        out.append({"role": "user", "content": content})
    if results:
        out.append({"role": results_role, "content": results_message(results)})
    return out


# BFCL writes Python type names in its docs; JSON Schema (what the template shows) differs.
_JSON_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def json_type(bfcl_type):
    """The JSON Schema name of a BFCL type name (others, and None, unchanged)."""
    return _JSON_TYPES.get(bfcl_type, bfcl_type) if isinstance(bfcl_type, str) else bfcl_type


def to_json_schema(schema: dict) -> dict:
    """A BFCL parameter schema with JSON Schema type names, recursively (input not modified;
    only the dicts on the way are copied, which a deep copy of 20-30 KB of docs per
    episode made the client's largest cost)."""
    out = dict(schema)
    if isinstance(out.get("type"), str):
        out["type"] = json_type(out["type"])
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: to_json_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = to_json_schema(out["items"])
    return out


def to_tool(doc: dict) -> dict:
    """A BFCL tool doc as an OpenAI/Qwen function tool (the `response` schema is dropped)."""
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc["description"],
            "parameters": to_json_schema(doc["parameters"]),
        },
    }


def _tojson(obj: dict) -> str:
    # Same serialisation as the `tojson` filter of transformers' chat-template renderer.
    return json.dumps(obj, ensure_ascii=False)


def tools_block(tools: list[dict]) -> str:
    """The `# Tools` section the Qwen2.5 template appends to the system message."""
    lines = "".join("\n" + _tojson(t) for t in tools)
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
        f"{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def system_sections(extra: Sequence[str] = ()) -> list[str]:
    """The system prompt's sections: the instructions, then `extra` (the training layers'
    constraint note and guidelines)."""
    return [BASE_INSTRUCTIONS, *extra]


def system_content(sections: Sequence[str], tools: list[dict]) -> str:
    """The system message: the sections, then the tool signatures."""
    return "\n\n".join(sections) + tools_block(tools)


def system_prompt(tools: list[dict], sections: Sequence[str] = ()) -> str:
    """The system message: instructions, optional extra sections, then the tool signatures."""
    return system_content(system_sections(sections), tools)


def holdout_message(new_tools: list[dict]) -> str:
    """The user message of a miss_func holdout turn: the newly revealed signatures."""
    lines = "".join("\n" + _tojson(t) for t in new_tools)
    return f"{HOLDOUT_NOTICE}\n<tools>{lines}\n</tools>"


def tool_response_message(results: list[str]) -> str:
    """Tool results as one user message, as the template renders consecutive tool messages."""
    return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)


chat_messages = functools.partial(
    group_observation,
    results_message=lambda messages: tool_response_message([m["content"] for m in messages]),
    reveal_message=lambda docs: holdout_message([to_tool(d) for d in docs]),
)
"""Observation messages as this prompt's chat messages (`group_observation`)."""
