"""The paper's prompt text: what the original release shows the model (mode `bfcl_qwen_fc`).

The paper's runs (its Appendix D) used the release's environment, which writes the system
message itself and hands the chat template plain messages (no `tools=`):

- system: a `# Tools` block of BFCL's bare tool docs, one `json.dumps` line each (BFCL's own
  type names, the `response` schema kept, no language hint), then the `<tool_call>`
  instruction; the training layers' sections (the D.2 note, D.4's guidelines) follow it,
  each after a blank line;
- a miss_func reveal turn: the revealed docs as one JSON list (these with BFCL's language
  hint), a newline, then BFCL's own "I have updated some more functions ..." question;
- tool results: one user message, a `<tool_response>` block per result, each ending in `\\n`;
- a message none of whose calls may run (a malformed block, a tool not available yet): one
  user message, the release's error (seal/bfcl/paper_calls.py).

docs/paper_prompt.md quotes a whole prompt and lists how it differs from BFCL's pipeline
and from the `qwen2.5` format (seal/bfcl/prompt.py). tests/seal/bfcl/test_paper_prompt.py holds this
module to the release's own renderings of all 800 tasks.
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
