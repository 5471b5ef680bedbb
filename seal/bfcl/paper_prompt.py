"""The paper's prompt text: what the original release shows the model (mode `bfcl_qwen_fc`).

The paper's runs used the release's environment, which writes the system message itself
(a `# Tools` block of BFCL's bare docs, then the `<tool_call>` instruction and the training
layers' sections) and hands the chat template plain messages; this module writes the same
text: reveal turns, `<tool_response>` blocks and the release's errors too.
docs/paper_prompt.md quotes a whole prompt and lists every rule and difference;
tests/seal/bfcl/test_paper_prompt.py holds this module to the release's renderings of all 800 tasks.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from bfcl_eval.constants.default_prompts import (
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING as REVEAL_PROMPT,
)

from seal.bfcl.prompt import group_observation, language_hinted

TOOLS_HEAD = (
    "# Tools\n",
    "You may call one or more functions to assist with the user query.\n",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "<tools>",
)
TOOLS_TAIL = (
    "</tools>\n",
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:",
    "<tool_call>",
    '{"name": <function-name>, "arguments": <args-json-object>}',
    "</tool_call>",
)


def tools_block(docs: Sequence[dict]) -> str:
    """The system message's tool section: BFCL's docs as the release prints them (Python's
    `json.dumps` defaults: ASCII, `", "` and `": "`), one per line."""
    return "\n".join([*TOOLS_HEAD, *(json.dumps(d) for d in docs), *TOOLS_TAIL])


def system_message(
    docs: Sequence[dict], sections: Sequence[str] = (), before: Sequence[str] = ()
) -> str:
    """The system message: `before` (a BFCL V4 agentic task's own system message, which
    bfcl-eval puts first; the paper has no such task), the tool section, then each section,
    each after a blank line."""
    return "\n\n".join([*before, tools_block(docs), *sections])


def reveal_message(docs: Sequence[dict]) -> str:
    """The user message of a miss_func reveal turn: the docs (with BFCL's language hint) as
    one JSON list, then BFCL's request to continue."""
    return REVEAL_PROMPT.format(functions=json.dumps(language_hinted(docs), ensure_ascii=False))


def tool_results_message(results: Sequence[dict]) -> str:
    """One step's tool results (observation messages) as one user message: each result's
    block, then its recovery hint when it has one (the paper's D.3, `[ToolHint] ...`)."""
    return "".join(
        f"<tool_response>\n{m['content']}\n</tool_response>\n"
        + (f"[ToolHint] {m['hint']}\n" if m.get("hint") else "")
        for m in results
    )


chat_messages = functools.partial(
    group_observation, results_message=tool_results_message, reveal_message=reveal_message
)
"""Observation messages as the paper's chat messages (seal.bfcl.prompt.group_observation)."""
