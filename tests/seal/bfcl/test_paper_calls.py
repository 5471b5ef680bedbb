"""The paper's block parser (seal/bfcl/paper_calls.py) reads a message in one pass.

- It reads every message as the release's own regular expression does (random texts of
  blocks, tags, braces and whitespace), also when cut at a call limit.
- Unclosed openings cost what any text of their length costs (the release's pattern ran
  its lazy `{.*?}` to the end from each one: quadratic), and a flood of blocks is read
  only as far as the calls that may run.
- A message over MAX_MESSAGE_CHARS is one error that says so.
The service's side (its event loop while such a message is read):
tests/env_service/test_release_texts_parsing.py.
"""

from __future__ import annotations

import pytest
from parser_oracles import paper_parse, random_texts, relative_cost

from seal.bfcl import paper_calls
from seal.bfcl.calls import MAX_MESSAGE_CHARS, CallParseError, ToolCall

GREP = '<tool_call>{"name":"grep","arguments":{"file_name":"big.txt","pattern":"b"}}</tool_call>'
WELLFORMED = [
    '<tool_call>\n{"name": "cd", "arguments": {"folder": "document"}}\n</tool_call>',
    '<tool_call>{"name": "ls", "arguments": "{\\"a\\": true}"}</tool_call>',
    '<tool_call> {"name": "x", "arguments": {"s": "}</tool_call>"}} \n</tool_call>',
    "Let me look.\n",
    GREP,
]
PIECES = [
    "<tool_call>",
    "</tool_call>",
    "{",
    "}",
    "\n",
    " ",
    "\t",
    "\u2003",
    '"',
    "x",
    "<tool_call",
]


@pytest.mark.parametrize("seed", range(4))
def test_every_message_reads_as_the_releases_pattern_reads_it(seed):
    for text in random_texts(seed, 5000, WELLFORMED, PIECES):
        every = paper_parse(text)
        assert paper_calls.parse(text) == every, text
        for limit in (0, 1, 2):
            first, more = paper_calls.parse_first(text, limit)
            assert (first, more) == (every[:limit], len(every) - len(first)), (text, limit)


def test_the_ground_truth_blocks_parse_as_before():
    text = "".join(WELLFORMED)
    assert paper_calls.parse(text) == paper_parse(text)
    assert [type(c) for c in paper_calls.parse(text)] == [
        ToolCall,
        ToolCall,
        CallParseError,
        ToolCall,
    ]


def test_unclosed_openings_cost_what_any_text_of_their_length_costs():
    # 32,768 characters: the release's pattern took ~0.3 s on them, 1,000x the baseline.
    openings = "<tool_call>{" * (32_768 // 12)
    one_block = '<tool_call>{"name": "f", "arguments": {"s": "' + "x" * 32_700 + '"}}</tool_call>'
    assert paper_calls.parse(openings) == [CallParseError(openings, paper_calls.NO_VALID_BLOCK)]
    assert relative_cost(paper_calls.parse, openings, one_block) < 20


def test_a_flood_of_blocks_is_read_only_up_to_the_calls_that_may_run(monkeypatch):
    n = MAX_MESSAGE_CHARS // len(GREP)  # 2,978 blocks
    flood = GREP * n
    read = []
    real = paper_calls._call
    monkeypatch.setattr(paper_calls, "_call", lambda raw: read.append(raw) or real(raw))
    calls, more = paper_calls.parse_first(flood, 128)
    assert len(calls) == 128 and more == n - 128
    assert len(read) == 128
    assert calls[0] == ToolCall("grep", {"file_name": "big.txt", "pattern": "b"})


def test_a_message_over_the_limit_is_one_error_that_says_so():
    text = GREP * (MAX_MESSAGE_CHARS // len(GREP) + 1)
    assert len(text) > MAX_MESSAGE_CHARS
    [error] = paper_calls.parse(text)
    assert isinstance(error, CallParseError)
    assert f"{len(text):,} characters" in error.reason and "262,144" in error.reason
    assert paper_calls.parse_first(text, 128) == ([error], 0)
    assert paper_calls.parse_first(text, 0) == ([], 1)
    head, tail = '<tool_call>{"name": "f", "arguments": {"s": "', '"}}</tool_call>'
    at_limit = head + "x" * (MAX_MESSAGE_CHARS - len(head) - len(tail)) + tail
    assert len(at_limit) == MAX_MESSAGE_CHARS  # a message of the limit is read
    assert isinstance(paper_calls.parse(at_limit)[0], ToolCall)
