"""The paper's ToolACE prompt: what the original release shows ToolACE-2-Llama-3.1-8B
(its mode `toolace_official_prompt`, the paper's ToolACE-2 row).

The system message (the ToolACE instruction and the docs as one JSON list), the questions
as in the Qwen2.5 prompt, tool results as one `ipython` message, the release's errors; a
malformed message ends the episode, and seal/bfcl/toolace_calls.py reads the calls. Each
part, byte for byte: docs/paper_prompt.md, "The ToolACE prompt". tests/seal/bfcl/test_paper_prompt.py
holds this module to the release's own renderings of all 800 tasks.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Sequence

from seal.bfcl.paper_prompt import reveal_message
from seal.bfcl.prompt import group_observation

INSTRUCTION = (
    "You are an expert in composing functions. You are given a question and a set of "
    "possible functions. Based on the question, you will need to make one or more "
    "function/tool calls to achieve the purpose.\n"
    "If none of the functions can be used, point it out. If the given question lacks the "
    "parameters required by the function, also point it out.\n"
    "You should only return the function calls in your response.\n\n"
    "If you decide to invoke any of the function(s), you MUST put it in the format of "
    "[func_name1(params_name1=params_value1, params_name2=params_value2...), "
    "func_name2(params)].\n"
    "You SHOULD NOT include any other text in the response.\n\n"
    "Here is a list of functions in JSON format that you can invoke.\n"
)
RESULTS_ROLE = "ipython"
"""The role of a tool-results message (Llama 3.1's, as bfcl-eval's LlamaHandler sends it)."""


def function_docs(docs: Sequence[dict]) -> list[dict]:
    """BFCL's docs as the ToolACE prompt lists them: `parameters` renamed `arguments`
    (ToolACE's key), no `response`."""
    out = []
    for doc in docs:
        entry = {"name": doc.get("name", ""), "description": doc.get("description", "")}
        params = doc.get("parameters") or doc.get("arguments")
        if params is not None:
            entry["arguments"] = params
        out.append(entry)
    return out


def system_message(
    docs: Sequence[dict], sections: Sequence[str] = (), before: Sequence[str] = ()
) -> str:
    """The system message: `before` (a BFCL V4 agentic task's own system message, which
    bfcl-eval puts first; the paper has no such task), the instruction and docs, then
    each section, each after a blank line (the docs end with a newline of their own)."""
    tools = INSTRUCTION + json.dumps(function_docs(docs), ensure_ascii=False, indent=4) + "\n"
    return "\n\n".join([*before, tools, *sections])


def tool_results_message(results: Sequence[dict]) -> str:
    """One step's tool results as one message: each as `{"output": ...}` on its own line,
    then its recovery hint when it has one (the paper's D.3, `[ToolHint] ...`)."""
    out = []
    # A run of one message written once: a message's calls over the service's cap share
    # one answer, and a 262,144-character message can hold 37,000 of them.
    for _, same in itertools.groupby(results, key=id):
        run = list(same)
        m = run[0]
        line = json.dumps({"output": m["content"]}, ensure_ascii=False) + "\n"
        if m.get("hint"):
            line += f"[ToolHint] {m['hint']}\n"
        out.append(line * len(run))
    return "".join(out)


chat_messages = functools.partial(
    group_observation,
    results_message=tool_results_message,
    reveal_message=reveal_message,
    results_role=RESULTS_ROLE,
)
"""Observation messages as the ToolACE prompt's chat messages (seal.bfcl.prompt
.group_observation)."""
