"""ToolACE's call-list parser (seal/bfcl/toolace_calls.py) is linear and bounded.

- It reads every message as the release's character-by-character scan does (random
  texts of call lists, brackets, quotes, JSON-style calls and text), also when cut at a
  call limit, and in steps (how the service's worker runs it).
- A dotted name of any length is a name (its recursive reading failed at ~960 parts: a
  2 KB message was a 500 on the service).
- No call past the limit is built; a message over MAX_MESSAGE_CHARS is one error (a
  megabyte of call lists took 12.5 s); nested brackets cost what their length costs.
The golden readings of the release's own parser: tests/seal/bfcl/test_paper_prompt.py.
"""

from __future__ import annotations

import pytest
from parser_oracles import comparable, random_texts, relative_cost, toolace_parse

from seal.bfcl import toolace_calls, toolace_prompt
from seal.bfcl.calls import MAX_MESSAGE_CHARS, CallParseError, ToolCall

WELLFORMED = [
    "[cd(folder='document'), ls(a=True)]",
    '[mv(source="a \\" b", destination="tmp")]',
    "[x.y.f(a=[1, 2], b={'k': None})]",
    "ls(a=True)",
    '{"name": "cd", "arguments": {"folder": "d"}}',
    '[{"name": "cd", "parameters": {}}]',
    "I will list the files.",
    "[f(1)]",
    "[g(**k)]",
]
PIECES = ["[", "]", "(", ")", "'", '"', "\\", " ", "\n", ",", ";", "{", "}", "x", "f()", "```"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Python's, on escapes in the texts
def test_every_message_reads_as_the_releases_scan_reads_it(seed):
    for text in random_texts(seed, 3000, WELLFORMED, PIECES):
        every = comparable(toolace_parse(text))
        assert comparable(toolace_calls.parse(text)) == every, text
        for limit in (0, 1, 3):
            first, more = toolace_calls.parse_first(text, limit)
            assert comparable(first) == every[:limit], (text, limit)
            assert more == len(every) - len(first), (text, limit)


def test_the_steps_give_what_parse_first_gives():
    text = "[f(a=1)] " * 3000 + "[" * 5000 + "]" * 5000 + "'" + "x" * 10
    steps = toolace_calls.parse_steps(text, 128)
    taken = 0
    while True:
        try:
            next(steps)
            taken += 1
        except StopIteration as done:
            assert done.value == toolace_calls.parse_first(text, 128)
            break
    assert taken >= 3000  # a call list a step: a worker's other jobs run between them


@pytest.mark.parametrize("parts", [960, 2000])
def test_a_dotted_name_of_any_length_is_a_name(parts):
    name = "a." * parts + "f"
    assert toolace_calls.parse(f"[{name}(x=1)]") == [ToolCall(name, {"x": 1})]
    assert toolace_calls.parse(f"[g().{name}()]") == [ToolCall(name, {})]
    # Past ~4,000 parts Python's own parser refuses the text: a malformed call.
    [error] = toolace_calls.parse(f"[{'a.' * 10_000}f()]")
    assert "Invalid ToolACE function-call syntax: maximum recursion depth" in error.reason


def test_no_call_past_the_limit_is_built(monkeypatch):
    built = []
    real = toolace_calls._call
    monkeypatch.setattr(toolace_calls, "_call", lambda *a: built.append(a) or real(*a))
    text = "[" + ", ".join(["f(a=1)", "g(**k)", "h(1)"] * 1000) + "] and text"
    calls, more = toolace_calls.parse_first(text, 128)
    assert len(built) <= 128
    every = toolace_calls.parse(text)
    assert calls == every[:128] and more == len(every) - 128 == 4000 + 1 - 128


def test_a_megabyte_of_call_lists_is_one_error_that_says_so():
    text = "[f(a=1)] " * (2**20 // 9)
    [error] = toolace_calls.parse(text)
    assert isinstance(error, CallParseError)
    assert f"{len(text):,} characters" in error.reason and "262,144" in error.reason
    assert toolace_calls.parse_first(text, 128) == ([error], 0)
    at_limit = "[f(a=1)]".ljust(MAX_MESSAGE_CHARS)  # a message of the limit is read
    assert toolace_calls.parse(at_limit) == [ToolCall("f", {"a": 1})]


def test_nested_brackets_cost_what_their_length_costs():
    # The scan cut the text from the outermost `[` at every `]`: quadratic in the depth
    # (~1 s for 131,000 of each, against ~10 ms for a string of that length).
    n = 131_000
    nested = "[" * n + "f()" + "]" * n
    baseline = "[f(a='" + "x" * (2 * n) + "')]"
    [error] = toolace_calls.parse(nested)
    assert "Invalid ToolACE function-call syntax" in error.reason
    assert relative_cost(toolace_calls.parse, nested, baseline) < 10


def test_tool_results_are_written_one_line_each_however_they_repeat():
    """The results message writes a run of one answer once (a message's calls over the
    service's cap share one): the same text as writing each."""
    refused = {"role": "tool", "content": "Error: not run: over the cap"}
    other = {"role": "tool", "content": 'a "b"', "hint": "Check b."}
    results = [other, refused, refused, refused, other, refused]
    each = "".join(toolace_prompt.tool_results_message([m]) for m in results)
    assert toolace_prompt.tool_results_message(results) == each
    assert each.count('{"output": "Error: not run: over the cap"}\n') == 4
