"""Formats whose rendering and decoding are bfcl-eval's own local-inference handlers.

A `HandlerFormat` builds every prompt the way BFCL's multi-turn inference does, through
the handler's own methods, and decodes calls with its `decode_execute` (literals only).
Two uses: training formats (`qwen3`, `llama3.1`, `bfcl_prompt`), where an undecodable
call attempt is answered as a malformed call; and `leaderboard(registry_name)`
(seal-eval --leaderboard-format), with no system message of ours and BFCL's own rule for
undecodable text, so a base model's score compares with the leaderboard's. The handler
methods used: docs/tool_formats.md, "The code".
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from types import SimpleNamespace

from bfcl_eval.constants.default_prompts import (
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING as HOLDOUT_PROMPT,
)

from seal.bfcl.calls import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    CallParseError,
    ToolCall,
    call_list_text,
    message_too_long,
    parse_call_string,
    tool_call_blocks,
)
from seal.bfcl.prompt import language_hinted
from seal.formats.base import Conversation, ParsedCalls, ToolFormat
from seal.formats.bfcl_handlers import RegistryEntry, build_handler, registry_entry


def _completion(text: str) -> SimpleNamespace:
    """`text` shaped as the completions reply a handler's `_parse_query_response_prompting`
    reads (token counts are only logged by BFCL)."""
    return SimpleNamespace(
        choices=[SimpleNamespace(text=text)],
        usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0),
    )


class HandlerFormat(ToolFormat):
    """A format rendered and decoded by one bfcl-eval handler (docs/tool_formats.md, "The code")."""

    def __init__(self, name: str, entry: RegistryEntry, end_of_turn: str, leaderboard: bool):
        self.name, self.entry, self.end_of_turn = name, entry, end_of_turn
        self.leaderboard = leaderboard
        """BFCL's prompt exactly: no system message of ours."""
        self.handler = build_handler(entry)

    # --- rendering -----------------------------------------------------------------------

    def start(self, created: dict) -> Conversation:
        first = self._user_messages(created["messages"])
        # The leaderboard's prompt has no system message of ours, but keeps a task's own
        # (BFCL V4 agentic: bfcl-eval puts it first in the question).
        if created["system"] and (not self.leaderboard or created.get("system_from_task")):
            first.insert(0, {"role": "system", "content": "\n\n".join(created["system"])})
        # BFCL's loader adds its language hint to the docs available from the start (the
        # service sends them bare); its inference shows revealed docs without it.
        docs = language_hinted(created["tools"])
        entry = {"id": created["task_id"], "function": docs, "question": [first]}
        data = self.handler._pre_query_processing_prompting(entry)
        data = self.handler.add_first_turn_message_prompting(data, entry["question"][0])
        return Conversation(data["message"], data["function"])

    def observation(self, messages: list[dict]) -> list[dict]:
        results = [m for m in messages if m["role"] == "tool"]
        data = {"message": []}
        if results:
            decoded = {"model_responses_decoded": [m.get("name") for m in results]}
            # A result's recovery hint (the paper's D.3) follows it in its content here.
            contents = [
                m["content"] + (f"\n[ToolHint] {m['hint']}" if m.get("hint") else "")
                for m in results
            ]
            self.handler._add_execution_results_prompting(data, contents, decoded)
        users = self._user_messages([m for m in messages if m["role"] != "tool"])
        if users:
            self.handler._add_next_turn_user_message_prompting(data, users)
        return data["message"]

    @staticmethod
    def _user_messages(messages: list[dict]) -> list[dict]:
        """Questions (and the environment's own answers) as user messages; a holdout turn
        as BFCL's prompt-mode message (the revealed functions as a Python list, then a
        request to continue)."""
        return [
            {"role": "user", "content": HOLDOUT_PROMPT.format(functions=m["tools"])}
            if m.get("tools")
            else {"role": "user", "content": m["content"]}
            for m in messages
        ]

    def render(self, conversation: Conversation) -> str:
        return self.handler._format_prompt(conversation.messages, conversation.functions)

    def assistant_message(self, text: str) -> dict:
        data = self.handler._parse_query_response_prompting(_completion(text))
        return self.handler._add_assistant_message_prompting({"message": []}, data)["message"][0]

    # --- decoding ------------------------------------------------------------------------

    def decode(self, text: str) -> ParsedCalls:
        """The handler's decoding of `text`; raises when it decodes nothing."""
        strings = self.handler.decode_execute(text, has_tool_call_tag=False)
        if not isinstance(strings, list) or not strings:
            raise ValueError("no tool call")
        return [_as_call(s) for s in strings]

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        if (error := message_too_long(text)) is not None:
            return [error]
        # BFCL's rule: what the decoder cannot read ends the turn.
        try:
            return self.decode(text)
        except Exception:  # a decoder fails in many ways (SyntaxError, KeyError, ...)
            return []

    def call_text(self, calls: list[ToolCall]) -> str:
        raise NotImplementedError(f"{self.name} is for evaluation only; it writes no calls")


def _as_call(call_string: str) -> ToolCall | CallParseError:
    try:
        return parse_call_string(call_string)
    except ValueError as e:
        return CallParseError(call_string, str(e))


class _TrainingFormat(HandlerFormat):
    """A training format: a text that attempts a call the decoder cannot read is a
    malformed call (answered with the error, counted), not an answer."""

    REGISTRY_NAME: str
    END_OF_TURN: str
    ATTEMPT: re.Pattern
    """Text that attempts a call."""
    EXPECTED: str
    """How a call is written, for the error message."""

    def __init__(self):
        super().__init__(
            self.name, registry_entry(self.REGISTRY_NAME), self.END_OF_TURN, leaderboard=False
        )

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        if (error := message_too_long(text)) is not None:
            return [error]
        if not self.ATTEMPT.search(text):
            return []
        try:
            return self.decode(text)
        except Exception as e:
            return [CallParseError(text.strip(), self.reason(e))]

    def reason(self, error: Exception) -> str:
        return f"the calls could not be decoded ({type(error).__name__}: {error}); {self.EXPECTED}"


class QwenFCFormat(_TrainingFormat):
    """Qwen3 instruct: `<tool_call>` JSON blocks in Qwen3's chat template, as bfcl-eval
    ranks Qwen3 models in function-calling mode (QwenFCHandler). Each block is decoded
    on its own, so a malformed block is answered with its error while the others run
    (QwenFCHandler's decoder drops it silently)."""

    name = "qwen3"
    REGISTRY_NAME = "Qwen/Qwen3-4B-Instruct-2507-FC"
    END_OF_TURN = "<|im_end|>"
    ATTEMPT = re.compile(r"<tool_call>")
    EXPECTED = 'write each call as <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>'

    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        if (error := message_too_long(text)) is not None:
            return [error]
        calls: ParsedCalls = []
        for start, end, closed in tool_call_blocks(text):
            block = text[start - len(TOOL_CALL_OPEN) : end + closed * len(TOOL_CALL_CLOSE)]
            try:
                calls += self.decode(block)
            except Exception as e:
                calls.append(CallParseError(block, self.reason(e)))
        return calls

    def call_text(self, calls: list[ToolCall]) -> str:
        # The handler's own rendering of an assistant turn with these tool calls.
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": c.name, "arguments": c.kwargs} for c in calls],
        }
        rendered = self.render(Conversation([message]))
        return rendered.split("<|im_start|>assistant\n", 1)[1].split(self.END_OF_TURN, 1)[0]


class LlamaJsonFormat(_TrainingFormat):
    """Llama 3.1 JSON tool calls: `{"name": ..., "parameters": {...}}` (several joined
    by `;`), tools in the first user message, results as `ipython` messages, as
    bfcl-eval ranks Llama 3.1 in function-calling mode (LlamaHandler_3_1).

    JSON's true/false/null are read: the handler evaluates the text as Python, which
    fails on them, so a text that is JSON is handed to it as the equal Python literal."""

    name = "llama3.1"
    REGISTRY_NAME = "meta-llama/Llama-3.1-8B-Instruct-FC"
    END_OF_TURN = "<|eot_id|>"
    ATTEMPT = re.compile(r"""\{\s*["']name["']\s*:""")
    EXPECTED = 'write the calls as {"name": ..., "parameters": {...}}, several separated by ;'

    def decode(self, text: str) -> ParsedCalls:
        body = text.replace("<|python_tag|>", "").strip()
        # Otherwise `;`-separated objects or Python literals: the handler's own cases.
        with contextlib.suppress(json.JSONDecodeError):
            body = repr(json.loads(body))
        return super().decode(body)

    def call_text(self, calls: list[ToolCall]) -> str:
        return "; ".join(
            json.dumps({"name": c.name, "parameters": c.kwargs}, ensure_ascii=False) for c in calls
        )


class PythonListFormat(_TrainingFormat):
    """BFCL's prompt mode: its system prompt with the functions as JSON, calls as a
    Python-style list `[f(a=1), g(b='x')]`, in Llama 3's chat layout, as bfcl-eval ranks
    ToolACE-2-8B (LlamaHandler). A call list after other text is malformed."""

    name = "bfcl_prompt"
    REGISTRY_NAME = "Team-ACE/ToolACE-2-8B"
    END_OF_TURN = "<|eot_id|>"
    ATTEMPT = re.compile(r"^\s*`*\s*[A-Za-z_][\w.]*\s*\(|\[\s*[A-Za-z_][\w.]*\s*\(")
    EXPECTED = "write only the calls, as [func_name(param=value, ...), ...]"

    def call_text(self, calls: list[ToolCall]) -> str:
        return call_list_text(calls)


def leaderboard(registry_name: str) -> HandlerFormat:
    """The prompt and decoder bfcl-eval's leaderboard uses for this model (a key of its
    model map, e.g. `Team-ACE/ToolACE-2-8B` or `Qwen/Qwen3-4B-Instruct-2507-FC`)."""
    entry = registry_entry(registry_name)
    return HandlerFormat(f"leaderboard:{registry_name}", entry, "", leaderboard=True)
