"""The parsers as they read messages before they were made linear (issue #41), kept as
oracles: each reads a message as the release's rule says, in the most direct way (a
regular expression, a character-by-character scan), quadratic on some inputs. The fuzz
tests hold today's parsers to them on small random texts; `random_texts` makes those.
"""

from __future__ import annotations

import ast
import random
import re
import time

from seal.bfcl import paper_calls, toolace_calls
from seal.bfcl.calls import CallParseError
from seal.formats import qwen35

# --- the paper's Qwen2.5 blocks: the release's own pattern ------------------------------------

RELEASE_BLOCK = re.compile(r"<tool_call>\s*\n?({.*?})\s*\n?\</tool_call>", re.DOTALL)


def paper_parse(text: str) -> list:
    blocks = list(RELEASE_BLOCK.finditer(text))
    if not blocks:
        mentions = "<tool_call" in text or "</tool_call>" in text
        return [CallParseError(text, paper_calls.NO_VALID_BLOCK)] if mentions else []
    return [paper_calls._call(m.group(1).strip()) for m in blocks]


# --- Qwen2.5's and Qwen3's `<tool_call>` blocks: the pattern they were split with -----------

TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


def tool_call_blocks(text: str) -> list[tuple[str, bool]]:
    """Each block's body and whether it is closed; its whole text is `<tool_call>` +
    body + `</tool_call>` when closed."""
    return [(m.group(1), bool(m.group(2))) for m in TOOL_CALL_BLOCK.finditer(text)]


# --- ToolACE's call lists: the release's character-by-character scan ------------------------


def toolace_parse(text: str) -> list:
    stripped = text.strip()
    spans = _toolace_spans(text)
    if not spans:
        if "<tool_call" in stripped or "</tool_call>" in stripped:
            return [CallParseError(stripped, toolace_calls.TAGS_ERROR)]
        if not (toolace_calls._BARE_CALL.match(stripped) and stripped.endswith(")")):
            if stripped.startswith(("{", "[", "```")):
                return toolace_calls._json_style(stripped)
            if stripped.endswith("]"):
                return [CallParseError(stripped, toolace_calls.NOT_A_LIST)]
            return []
        spans = [(0, len(text), stripped)]
    out, rest, named = [], text, 0
    for start, end, snippet in reversed(spans):
        read, calls, items = _toolace_list(snippet)
        out[:0] = items
        named += calls
        if read:
            rest = rest[:start] + rest[end:]
    if named and rest.strip():
        out.append(CallParseError(stripped, toolace_calls.TEXT_BESIDE))
    return out


def _toolace_spans(text: str) -> list[tuple[int, int, str]]:
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


def _toolace_list(snippet: str) -> tuple[bool, int, list]:
    try:
        body = ast.parse(snippet, mode="eval").body
    except SyntaxError as e:
        reason = f"Invalid ToolACE function-call syntax: {e.msg}"
        return False, 0, [CallParseError(snippet, reason)]
    except (ValueError, RecursionError, MemoryError) as e:
        return False, 0, [CallParseError(snippet, f"Invalid ToolACE function-call syntax: {e}")]
    if isinstance(body, ast.Call):
        elements = [body]
    elif isinstance(body, ast.List | ast.Tuple):
        elements = body.elts
    else:
        reason = "ToolACE output must be a list of function calls."
        return False, 0, [CallParseError(snippet, reason)]
    items = [toolace_calls._call(node, snippet) for node in elements]
    return True, sum(taken for taken, _ in items), [c for _, calls in items for c in calls]


# --- Qwen3.5's XML calls: each parameter found by a search from where the last ended -------


def qwen35_parse(text: str, tools=()) -> list:
    answer = qwen35.content(text)
    blocks = tool_call_blocks(answer)
    if not blocks:
        if "<function=" in answer or "</tool_call>" in answer:
            return [qwen35._malformed(answer, "a call must be inside <tool_call></tool_call>")]
        return []
    params = {d["name"]: d["parameters"].get("properties", {}) for d in tools}
    return [_qwen35_call(body, closed, params) for body, closed in blocks]


def _qwen35_call(body: str, closed: bool, params: dict):
    if not closed:
        return qwen35._malformed(body, "the <tool_call> block is not closed with </tool_call>")
    function = qwen35._FUNCTION.fullmatch(body)
    if function is None:
        return qwen35._malformed(
            body, "a <tool_call> block must hold one <function=NAME>...</function>"
        )
    name, inner = function.group(1).strip(), function.group(2)
    if not qwen35._IDENTIFIER.fullmatch(name):
        return qwen35._malformed(body, f"{name!r} is not a tool name")
    if "<function=" in inner:
        return qwen35._malformed(body, "one <function=...> per <tool_call> block")
    schema, arguments, pos = params.get(name, {}), {}, 0
    for p in qwen35._PARAMETER.finditer(inner):
        if p.start() != pos:
            break
        arg = p.group(1).strip()
        if arg in arguments:
            return qwen35._malformed(body, f"parameter {arg!r} is given twice")
        arguments[arg] = qwen35.typed_value(p.group(2), schema.get(arg))
        pos = p.end()
    if inner[pos:].strip():
        return qwen35._malformed(
            body, "inside <function=...> only <parameter=NAME>...</parameter> blocks may follow"
        )
    return qwen35.checked_call(name, arguments, body.strip())


# --- random texts -----------------------------------------------------------------------------


def random_texts(seed: int, n: int, wellformed: list[str], pieces: list[str]):
    """`n` texts: well-formed messages joined and cut, with pieces (tags, brackets,
    quotes, whitespace) put in and taken out at random places."""
    rng = random.Random(seed)
    for _ in range(n):
        text = "".join(rng.choice(wellformed) for _ in range(rng.randint(0, 3)))
        for _ in range(rng.randint(0, 6)):
            at = rng.randint(0, len(text))
            if rng.random() < 0.7:
                text = text[:at] + rng.choice(pieces) + text[at:]
            else:
                text = text[:at] + text[at + rng.randint(1, 8) :]
        yield text


ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def comparable(items: list) -> list:
    """Parsed items with Python object addresses taken out of their reasons (a reason
    may quote an AST node's repr, whose address differs from one parse to the next)."""
    return [
        CallParseError(item.raw, ADDRESS.sub("", item.reason))
        if isinstance(item, CallParseError)
        else item
        for item in items
    ]


def relative_cost(parse, text: str, baseline: str, repeats: int = 5) -> float:
    """How many times longer `parse(text)` takes than `parse(baseline)`, a text of the
    same length whose reading is plainly linear (the fastest of `repeats` runs each,
    alternated, so the machine's load weighs on both alike)."""
    best = {text: float("inf"), baseline: float("inf")}
    for _ in range(repeats):
        for t in (baseline, text):
            started = time.perf_counter()
            parse(t)
            best[t] = min(best[t], time.perf_counter() - started)
    return best[text] / best[baseline]
