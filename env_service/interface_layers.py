"""The interface's layers: what a training episode shows beyond the plain benchmark.

Three independent layers, all off by default and forced off in validation (a validation
prompt is byte-identical to the unevolved one): schema cues ("observation_lite", the
paper's headline layer), recovery feedback and diagnostic guidelines from the trainer's
failure profile. Which layers an episode gets is `InterfaceSettings`; which texts they
write is `EpisodeSettings.prompt` (`TEXTS`: `paper`, the release's, or `rich`, ours).
docs/design.md, "The training interface".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from seal.bfcl import tags as T
from seal.bfcl.prompt import BASE_INSTRUCTIONS, json_type

# --- the paper's texts (the original release's environment, mode bfcl_qwen_fc) -------------

OBSERVATION_NOTE = (
    "Observation note: parameters marked [required] must be provided exactly when calling "
    "a tool; do not invent tools outside the current schema."
)
"""The paper's D.2 note, after the tools block."""


def add_paper_cues(doc: dict, type_hints: bool) -> dict:
    """A copy of a BFCL tool doc annotated as the paper's `observation_lite` does: each
    required parameter's description gets ` [required]` (after BFCL's own trailing space,
    when it has one), with type hints `[type: <BFCL type>]`, and `Allowed values: ...` only
    from an `enum` field (BFCL's multi-turn docs have none)."""
    params = doc.get("parameters") or {}
    required = set(params.get("required") or [])
    properties = {}
    for name, spec in (params.get("properties") or {}).items():
        if isinstance(spec, dict):
            desc = str(spec.get("description") or "")
            additions = []
            if name in required and "[required]" not in desc:
                additions.append("[required]")
            if type_hints and spec.get("type") and "[type:" not in desc:
                additions.append(f"[type: {spec['type']}]")
            if spec.get("enum") and "Allowed values:" not in desc:
                additions.append("Allowed values: " + ", ".join(str(v) for v in spec["enum"]))
            if additions:
                spec = {**spec, "description": f"{desc} {' '.join(additions)}".strip()}
        properties[name] = spec
    return {**doc, "parameters": {**params, "properties": properties}}


def paper_parse_hint(message: str, tool_names: list[str]) -> str:
    """The paper's D.3 feedback on a message with malformed calls: the error, then hint
    lines on the call syntax and the tools available from the first turn (at most 12)."""
    shown = tool_names[:12] + (
        [f"... (+{len(tool_names) - 12} more)"] if len(tool_names) > 12 else []
    )
    lines = [
        message,
        "[Hint] Each tool call MUST be a JSON object inside <tool_call>...</tool_call> tags with "
        'both "name" and "arguments" keys, e.g. <tool_call>{"name": "<tool>", "arguments": '
        '{"<arg>": <value>}}</tool_call>.',
    ]
    if shown:
        lines.append("[Hint] Available tools: " + ", ".join(shown) + ".")
    lines.append(
        "[Hint] If no available tool can serve the user's request, reply in plain text "
        "instead of producing a malformed tool_call."
    )
    return "\n".join(lines)


def paper_tool_hint(result: str, name: str, position: int, tools: list[dict]) -> str | None:
    """The paper's D.3 hint on a tool result that is a JSON object with an "error" text,
    or None. The release names the call by its id in the message, `<tool>_<position>`."""
    error = _json_error(result).strip()
    if not error:
        return None
    tool, low = f"{name}_{position}", error.lower()
    if m := re.search(
        r"missing\s+\d+\s+required\s+(?:positional|keyword)\s+argument(?:s)?:\s*(.+)", low
    ):
        return (
            f"Required argument(s) {m.group(1).strip().rstrip('.')} for `{tool}` were missing. "
            "Re-emit the tool_call with these keys present in `arguments`."
        )
    if m := re.search(r"unexpected\s+keyword\s+argument\s*['\"]?([\w_]+)", low):
        return (
            f"`{tool}` does not accept argument `{m.group(1)}`. "
            "Drop it and only use arguments listed in the tool schema."
        )
    if "no such directory" in low or "no such file" in low:
        return (
            f"The path you passed to `{tool}` does not exist in the current state. "
            "Inspect the latest state with a read/list-style tool first, then retry."
        )
    if "you cannot use path" in low or "use a single component" in low:
        return f"`{tool}` rejects multi-component paths. Issue one navigation step at a time."
    if "not authenticated" in low or ("login" in low and "required" in low):
        return (
            "An authentication step is required before this call can succeed. "
            "Authenticate first, then retry."
        )
    if "tool not found" in low or "no such tool" in low or "unknown function" in low:
        names = ", ".join(d["name"] for d in tools[:8])
        tail = f" Available tools start with: {names}." if names else ""
        return (
            f"`{tool}` is not in the available tool list.{tail} If no listed tool matches "
            "the user's request, reply in plain text."
        )
    if "expected" in low and "got" in low:
        return (
            f"`{tool}` rejected an argument type. "
            "Re-check argument types in the tool schema (string vs int vs list)."
        )
    if len(error) < 200:
        return (
            f"`{tool}` returned an error. "
            "Re-read the tool's parameter schema and retry with corrected arguments."
        )
    return None


def _json_error(result: str) -> str:
    """The "error" text of a result that is a JSON object holding one, else ""."""
    text = result.strip()
    if not (text.startswith("{") and '"error"' in text):
        return ""
    try:
        parsed = json.loads(text)
    except ValueError:
        return ""
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, str) else ""


PAPER_GUIDELINES = {
    T.SPURIOUS_TOOL_CALL: "[Cautious-call] If no available function clearly matches the user's request, respond in plain text rather than fabricating a tool call.",
    T.EMPTY_TURN_MODEL_RESPONSE: "[Active-respond] When the user's request CAN be served by an available function, you MUST emit a tool_call rather than only replying in plain text.",
    T.STATE_MISMATCH: "[State-aware] Before issuing a state-mutating call, re-read the most recent tool results to confirm the current state matches what the arguments assume.",
    T.INSTANCE_MISMATCH: "[Scope] Verify that the instance/target your call refers to actually appeared in earlier tool results before calling on it.",
    T.RESPONSE_MISMATCH: "[Format] Match your final reply to the format implied by the user's request: lists, units, exact strings, ordering.",
}
"""The paper's D.4 guidelines, by the failure tag each addresses."""

# --- this project's texts (the `rich` prompt) ----------------------------------------------

CONSTRAINT_NOTE = (
    "Constraint: call only the listed tools, pass every parameter marked [required], use only "
    "parameter names from the tool's signature, and pick values from the allowed list when one "
    "is given."
)

_ENUM_JSON = re.compile(r"\[Enum\]:\s*(\[.*?\])")
_ENUM_LIST = re.compile(r"\[Enum\]:\s*([^\[\s][^\[\n]*)")
_ENUM_PROSE = re.compile(r"(?:Options are|Here are the options):\s*([\w\-]+(?:\s*,\s*[\w\-]+)+)")
_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a JSON list",
    "object": "a JSON object",
}


def allowed_values(description: str) -> list[str] | None:
    """Allowed values BFCL states in a parameter description, if any."""
    if m := _ENUM_JSON.search(description):
        try:
            values = json.loads(m.group(1))
        except json.JSONDecodeError:
            return None
        return [str(v) for v in values] if isinstance(values, list) else None
    if m := _ENUM_LIST.search(description):
        values = [v.strip() for v in m.group(1).rstrip(". ").split(",") if v.strip()]
        return values or None
    if m := _ENUM_PROSE.search(description):
        return [v.strip() for v in m.group(1).split(",")]
    return None


def add_schema_cues(doc: dict, type_hints: bool) -> dict:
    """A copy of a BFCL tool doc with cues in its parameter descriptions. Types are read
    as JSON Schema names (BFCL's `dict` as `object`, ...), so cueing a doc and then
    converting it (seal.bfcl.prompt.to_tool) equals converting and then cueing."""
    params = doc["parameters"]
    required = set(params.get("required", []))
    properties = {}
    for name, prop in params.get("properties", {}).items():
        prop = dict(prop)
        desc = prop.get("description", "").strip()
        marker = "[required]" if name in required else "[optional]"
        values = allowed_values(desc)
        kind = json_type(prop.get("type"))
        if values and kind == "string" and "enum" not in prop:
            prop["enum"] = values
        elif values and kind == "array" and isinstance(prop.get("items"), dict):
            prop["items"] = {**prop["items"], "enum": values}
        if values:
            desc += f" Allowed values: {', '.join(values)}."
        if type_hints and kind in _TYPE_WORDS:
            desc += f" Expects {_TYPE_WORDS[kind]}."
        prop["description"] = f"{marker} {desc}"
        properties[name] = prop
    return {**doc, "parameters": {**params, "properties": properties}}


# --- recovery feedback -------------------------------------------------------------------

RECOVERY_HINTS = {
    "parse": 'Write each call as <tool_call>{"name": ..., "arguments": {...}}</tool_call> with valid JSON.',
    "parse_any_format": "Write each call exactly in the format the system prompt shows.",
    "unknown_tool": "Use only tool names listed in the system prompt, spelled exactly.",
    "unavailable_tool": "This tool is not available yet; solve the request with the tools you have or explain what is missing.",
    "missing_argument": "Add the missing required argument; if the user did not give its value, ask for it instead of guessing.",
    "unexpected_argument": "Remove arguments that are not in the tool's signature.",
    "tool_error": "Read the error, fix the arguments or the order of your calls (for example check the current state first), then retry.",
    # The service's caps (env_service/service_config.py): the calls were not run.
    "call_limit": "Make fewer tool calls in one message.",
    "episode_limit": "This episode has used up its tool calls; answer with what you have.",
    "reply_limit": "Ask for less output in one message: fewer calls, or narrower ones.",
}


def with_hint(message: str, kind: str) -> str:
    return f"{message}\nHint: {RECOVERY_HINTS[kind]}"


# --- diagnostic guidelines ---------------------------------------------------------------

GUIDELINES = {
    T.SPURIOUS_TOOL_CALL: "If the request cannot be done with the available tools or lacks a needed value, call no tool and say what is missing.",
    T.EMPTY_TURN_MODEL_RESPONSE: "When a request can be done with the tools, call them; do not answer in text alone.",
    T.STATE_MISMATCH: "Before a call that changes state, check its arguments against the user's exact words and the current state (location, ids, amounts).",
    T.RESPONSE_MISMATCH: "Call every tool whose result the request depends on, including look-ups, rather than assuming their result.",
    T.INSTANCE_MISMATCH: "Use the tools of the system the request is about; do not switch to another system's tools.",
}


# --- the texts of one prompt --------------------------------------------------------------


@dataclass(frozen=True)
class PromptTexts:
    """What the service writes into an episode's prompt (`EpisodeSettings.prompt`)."""

    instructions: tuple[str, ...]
    """System-prompt sections before the layers' (the paper's prompt has none)."""
    cue: Callable[[dict, bool], dict]
    """The schema cues on one tool doc (doc, type_hints) -> annotated copy."""
    cue_revealed: bool
    """Whether docs revealed in a later turn (miss_func) get the cues too."""
    note: str
    """The schema cues' system-prompt section."""
    guidelines: dict[str, str]
    """Tag -> guideline."""
    guideline_header: str

    def guidelines_for(self, profile: dict | None, max_guidelines: int) -> list[tuple[str, str]]:
        """(tag, guideline) for the tags of a failure profile (seal.tocf.state) that have
        one, in the profile's order, at most `max_guidelines`."""
        if not profile:
            return []
        tags = [e["tag"] for e in profile.get("tags", []) if e["tag"] in self.guidelines]
        return [(tag, self.guidelines[tag]) for tag in tags[:max_guidelines]]

    def guideline_section(self, guidelines: list[tuple[str, str]]) -> str | None:
        """The system-prompt section of `guidelines`, or None if there are none."""
        if not guidelines:
            return None
        return "\n".join([self.guideline_header, *(f"- {text}" for _, text in guidelines)])


TEXTS = {
    "paper": PromptTexts(
        instructions=(),
        cue=add_paper_cues,
        cue_revealed=False,
        note=OBSERVATION_NOTE,
        guidelines=PAPER_GUIDELINES,
        guideline_header="# Behavioral guidelines (env-evolved from recent failures):",
    ),
    "rich": PromptTexts(
        instructions=(BASE_INSTRUCTIONS,),
        cue=add_schema_cues,
        cue_revealed=True,
        note=CONSTRAINT_NOTE,
        guidelines=GUIDELINES,
        guideline_header="Guidelines from recent attempts:",
    ),
}
"""The texts of each prompt, by `EpisodeSettings.prompt`."""
