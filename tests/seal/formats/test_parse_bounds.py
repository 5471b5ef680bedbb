"""Every tool format's parser is bounded: linear in the message, and a message over
MAX_MESSAGE_CHARS is one malformed call that says so (what the service refuses anyway,
413), read no further.

- `qwen3.5`'s XML calls read as before (random texts of tags, parameters and
  whitespace), and whitespace inside a call costs what any text of its length costs
  (each parameter was searched for from every later position: 4.2 s for 64k spaces).
- `qwen3` hands bfcl-eval's decoder the blocks the pattern it used found.
- Every format, bfcl-eval's decoders included, answers an over-long message with the
  limit's error, and still reads a message of the limit's length.
The parsers themselves: tests/seal/bfcl/test_paper_calls.py, test_toolace_calls.py,
test_calls.py; the figures at 262,144 characters, 1 MB and 10 MB: scripts/bench_parsers.py.
"""

from __future__ import annotations

import pytest
from parser_oracles import qwen35_parse, random_texts, relative_cost
from parser_oracles import tool_call_blocks as oracle_blocks

from seal.bfcl.calls import MAX_MESSAGE_CHARS, CallParseError
from seal.formats.handler_format import leaderboard
from seal.formats.registry import FORMATS, get_format

XML = get_format("qwen3.5")
TOOL = {
    "name": "f",
    "description": "",
    "parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
}
WELLFORMED = [
    "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
    "<tool_call><function=f><parameter=b>x y</parameter>\n<parameter=a>[1]</parameter>"
    "</function></tool_call>",
    "<think>\nhm\n</think>\n\n",
    "I will call f.\n",
]
PIECES = [
    "<tool_call>", "</tool_call>", "<function=f>", "<function=", "</function>",
    "<parameter=a>", "<parameter=b>", "</parameter>", "<parameter=", "\n", " ", "\t",
    ">", "</think>", "True",
]  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_xml_calls_read_as_before(seed):
    for text in random_texts(seed, 4000, WELLFORMED, PIECES):
        for tools in ([TOOL], []):
            assert XML.parse(text, tools) == qwen35_parse(text, tools), text


def test_whitespace_inside_an_xml_call_costs_what_any_text_of_its_length_costs():
    # 32,768 spaces: ~1 s before, 10,000x the baseline's reading.
    n = 32_768
    spaces = "<tool_call><function=f>" + " " * n + "</function></tool_call>"
    value = "<tool_call><function=f><parameter=b>" + "x" * n + "</parameter></function></tool_call>"
    [call] = XML.parse(spaces, [TOOL])
    assert call.name == "f" and call.kwargs == {}
    assert relative_cost(lambda t: XML.parse(t, [TOOL]), spaces, value) < 20


@pytest.mark.parametrize(
    "fmt",
    [get_format(name) for name in FORMATS] + [leaderboard("Team-ACE/ToolACE-2-8B")],
    ids=lambda f: f.name,
)
def test_every_format_answers_a_message_over_the_limit_with_one_error(fmt):
    over = "<tool_call>{" + "[f(a=1)] " * (MAX_MESSAGE_CHARS // 9)
    assert len(over) > MAX_MESSAGE_CHARS
    [error] = fmt.parse(over, [TOOL])
    assert isinstance(error, CallParseError) and error.raw is over
    assert error.reason == (
        f"the message has {len(over):,} characters, more than the 262,144 a message may "
        "have; it was not read"
    )
    answer = "Done.".ljust(MAX_MESSAGE_CHARS)  # a message of the limit is read
    assert fmt.parse(answer, [TOOL]) == []


def test_qwen3_decodes_the_blocks_the_pattern_found(monkeypatch):
    """QwenFCFormat hands bfcl-eval's decoder each block as the pattern
    `<tool_call>.*?(?:</tool_call>|$)` found it (now found with str.find)."""
    fmt = get_format("qwen3")
    decoded = []
    monkeypatch.setattr(fmt, "decode", lambda block: decoded.append(block) or [])
    pieces = ["<tool_call>", "</tool_call>", "\n", " ", "{", "x"]
    block = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    for text in random_texts(1, 5000, [block, "Let me.\n"], pieces):
        decoded.clear()
        fmt.parse(text)
        expected = [
            "<tool_call>" + body + ("</tool_call>" if closed else "")
            for body, closed in oracle_blocks(text)
        ]
        assert decoded == expected, text
