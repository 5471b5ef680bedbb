"""Tool calls as data: strict parsing of model output, ground-truth strings and call checks."""

import random

import pytest
from parser_oracles import random_texts
from parser_oracles import tool_call_blocks as oracle_blocks

from seal.bfcl.calls import (
    MAX_MESSAGE_CHARS,
    CallParseError,
    ToolCall,
    check_call,
    has_tool_call,
    parse_call_string,
    parse_first_tool_calls,
    parse_tool_calls,
    tool_call_blocks,
)
from seal.bfcl.ground_truth import (
    assistant_messages,
    decoded_for_checker,
    ground_truth_trajectory,
    tool_call_text,
    with_keywords,
)
from seal.bfcl.tasks import load_task


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


# --- model output -------------------------------------------------------------------------


def test_one_well_formed_block():
    [call] = parse_tool_calls(block('{"name": "cd", "arguments": {"folder": "document"}}'))
    assert call == ToolCall("cd", {"folder": "document"})


def test_several_blocks_with_text_around_them_keep_their_order():
    text = (
        "Let me look first.\n"
        + block('{"name": "ls", "arguments": {"a": true}}')
        + "\nand then\n"
        + block('{"name": "cd", "arguments": {"folder": "tmp"}}')
        + "\nThat is all."
    )
    calls = parse_tool_calls(text)
    assert calls == [ToolCall("ls", {"a": True}), ToolCall("cd", {"folder": "tmp"})]
    assert has_tool_call(text)


def test_missing_arguments_field_means_no_arguments():
    assert parse_tool_calls(block('{"name": "pwd"}')) == [ToolCall("pwd", {})]


def test_text_without_blocks_has_no_calls():
    text = "I cannot do that: the file does not exist. </tool_call>"
    assert parse_tool_calls(text) == []
    assert not has_tool_call(text)


def test_unclosed_block_is_an_error_and_earlier_blocks_still_parse():
    text = block('{"name": "pwd", "arguments": {}}') + '\n<tool_call>\n{"name": "ls"'
    good, bad = parse_tool_calls(text)
    assert good == ToolCall("pwd", {})
    assert isinstance(bad, CallParseError)
    assert "not closed" in bad.reason
    assert has_tool_call('<tool_call>{"name": "ls"}')


@pytest.mark.parametrize(
    ("body", "reason_part"),
    [
        ('{"name": "cd", "arguments": {"folder": "x"}', "not valid JSON"),
        ("cd(folder='x')", "not valid JSON"),
        ("", "not valid JSON"),
        ('["cd", {"folder": "x"}]', "JSON object"),
        ('"cd"', "JSON object"),
        ('{"arguments": {"folder": "x"}}', "'name'"),
        ('{"name": 3, "arguments": {}}', "'name'"),
        ('{"name": null, "arguments": {}}', "'name'"),
        ('{"name": ["cd"], "arguments": {}}', "'name'"),
        ('{"name": "cd; rm -rf /", "arguments": {}}', "'name'"),
        ('{"name": "cd", "arguments": ["x"]}', "'arguments'"),
        ('{"name": "cd", "arguments": "{\\"folder\\": \\"x\\"}"}', "'arguments'"),
        ('{"name": "cd", "arguments": null}', "'arguments'"),
        ('{"name": "cd", "arguments": {}, "id": "call_1"}', "unexpected fields ['id']"),
        ('{"name": "cd", "parameters": {"folder": "x"}}', "unexpected fields ['parameters']"),
    ],
)
def test_malformed_blocks_are_parse_errors_with_a_reason(body, reason_part):
    [item] = parse_tool_calls(block(body))
    assert isinstance(item, CallParseError)
    assert reason_part in item.reason
    assert item.raw == body.strip()


def test_a_bad_block_does_not_hide_the_good_ones():
    text = block('{"name": "ls"}') + block("not json") + block('{"name": "pwd", "arguments": {}}')
    kinds = [type(item) for item in parse_tool_calls(text)]
    assert kinds == [ToolCall, CallParseError, ToolCall]


# --- ground-truth strings -----------------------------------------------------------------


def test_keyword_call_string():
    call = parse_call_string("mv(source='final_report.pdf', destination='temp')")
    assert call == ToolCall("mv", {"source": "final_report.pdf", "destination": "temp"})


def test_positional_and_literal_container_arguments():
    call = parse_call_string(
        "f('a', 2, door=['driver', 'passenger'], x={'k': (1, 2.5)}, flag=False, n=-3, none=None)"
    )
    assert call.name == "f"
    assert call.args == ("a", 2)
    assert call.kwargs == {
        "door": ["driver", "passenger"],
        "x": {"k": (1, 2.5)},
        "flag": False,
        "n": -3,
        "none": None,
    }


def test_call_string_round_trip():
    for text in ["sort('final_report.pdf')", "lockDoors(unlock=False, door=['driver'])", "pwd()"]:
        call = parse_call_string(text)
        assert parse_call_string(call.to_call_string()) == call


@pytest.mark.parametrize(
    "text",
    [
        "cd(folder=os.getcwd())",
        "cd(folder=__import__('os').system('touch PWNED'))",
        "cd(folder=x)",
        "cd(folder='a' + 'b')",
        "cd(folder=f'{x}')",
        "cd(*['x'])",
        "cd(**{'folder': 'x'})",
        "os.system('ls')",
        "__import__('os').system('ls')",
        "cd",
        "cd(",
        "cd(folder='x'); rm(file_name='y')",
        "lambda: 0",
        "[cd(folder='x')]",
    ],
)
def test_non_literal_ground_truth_is_rejected(text):
    with pytest.raises(ValueError):
        parse_call_string(text)


def test_every_ground_truth_string_of_a_sample_parses():
    for task_id in ["multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_long_context_90"]:
        for turn in load_task(task_id).ground_truth:
            for text in turn:
                assert isinstance(parse_call_string(text), ToolCall)


# --- positional ground truth as a JSON tool call ------------------------------------------


def test_positional_ground_truth_gets_parameter_names():
    task = load_task("multi_turn_base_0")  # turn 2 is "sort('final_report.pdf')"
    assert task.ground_truth[2] == ["sort('final_report.pdf')"]
    docs = {d["name"]: d for d in task.tools}
    named = with_keywords(parse_call_string(task.ground_truth[2][0]), docs["sort"])
    assert named == ToolCall("sort", {"file_name": "final_report.pdf"})
    trajectory = ground_truth_trajectory(task)
    assert trajectory[2] == [[named]]
    assert decoded_for_checker(trajectory)[2] == [["sort(file_name='final_report.pdf')"]]


def test_scripted_texts_parse_back_to_the_trajectory():
    task = load_task("multi_turn_miss_func_0")
    trajectory = ground_truth_trajectory(task)
    texts = assistant_messages(trajectory)
    assert len(texts) == task.num_turns
    for steps, turn_texts in zip(trajectory, texts, strict=True):
        assert len(turn_texts) == len(steps) + 1
        assert not has_tool_call(turn_texts[-1])
        for step, text in zip(steps, turn_texts, strict=False):
            assert parse_tool_calls(text) == step
    assert tool_call_text([]) == ""


# --- checks against the tool docs -----------------------------------------------------------


@pytest.fixture(scope="module")
def fs_docs():
    return {d["name"]: d for d in load_task("multi_turn_base_1").tools}


def test_a_documented_call_passes(fs_docs):
    assert check_call(ToolCall("mv", {"source": "a", "destination": "b"}), fs_docs) is None
    assert check_call(ToolCall("ls", {}), fs_docs) is None  # `a` is optional


@pytest.mark.parametrize(
    ("call", "kind", "part"),
    [
        (ToolCall("rm_rf", {}), "unknown_tool", "unknown tool 'rm_rf'"),
        (ToolCall("_load_scenario", {"scenario": {}}), "unknown_tool", "_load_scenario"),
        (ToolCall("__init__", {}), "unknown_tool", "__init__"),
        (ToolCall("post_tweet", {"content": "x"}), "unknown_tool", "post_tweet"),
        (ToolCall("mv", {"source": "a"}), "missing_argument", "['destination']"),
        (ToolCall("cd", {"folder": "a", "force": True}), "unexpected_argument", "['force']"),
        (
            ToolCall("cd", {"folder=__import__('os').system('x')": 1, "folder": "a"}),
            "unexpected_argument",
            "allowed: ['folder']",
        ),
    ],
)
def test_rejections_name_the_rule(fs_docs, call, kind, part):
    rejection = check_call(call, fs_docs)
    assert rejection is not None
    assert rejection.kind == kind
    assert part in rejection.message


def test_held_back_tools_are_unavailable_not_unknown(fs_docs):
    available = {k: v for k, v in fs_docs.items() if k != "sort"}
    rejection = check_call(ToolCall("sort", {"file_name": "a"}), available, frozenset({"sort"}))
    assert rejection.kind == "unavailable_tool"
    assert "not available yet" in rejection.message


def test_parsing_the_first_calls_counts_the_rest_as_all_would():
    """parse_first_tool_calls == parse_tool_calls cut at the limit, plus the count of the
    rest, on every mix of open and close tags, text, JSON and newlines (random texts)."""
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "x", '{"name": "a"}', "\n", " "]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        every = parse_tool_calls(text)
        for limit in range(6):
            first, more = parse_first_tool_calls(text, limit)
            assert first == every[:limit] and more == len(every) - len(first), (text, limit)


def test_a_message_over_the_limit_is_one_error_read_no_further():
    """Also when the service reads only its first calls (tests/seal/formats/
    test_parse_bounds.py holds every format to the same limit)."""
    text = block('{"name": "pwd", "arguments": {}}') * (MAX_MESSAGE_CHARS // 40)
    assert len(text) > MAX_MESSAGE_CHARS
    [error] = parse_tool_calls(text)
    assert isinstance(error, CallParseError) and "262,144" in error.reason
    assert parse_first_tool_calls(text, 128) == ([error], 0)
    assert parse_first_tool_calls(text, 0) == ([], 1)
    at_limit = text[: MAX_MESSAGE_CHARS - 1] + "x"
    assert len(parse_tool_calls(at_limit)) == parse_first_tool_calls(at_limit, 0)[1] > 4500


def test_blocks_are_found_as_the_pattern_found_them():
    """tool_call_blocks (str.find) splits every text as `<tool_call>(.*?)(</tool_call>|$)`
    did (an unclosed block ends before a final newline, as `$` does)."""
    pieces = ["<tool_call>", "</tool_call>", "<tool_call", "x", "{}", "\n", " ", "\n\n"]
    for text in random_texts(0, 20_000, ["<tool_call>\n{}\n</tool_call>", "a\n"], pieces):
        found = [(text[start:end], closed) for start, end, closed in tool_call_blocks(text)]
        assert found == oracle_blocks(text), text
