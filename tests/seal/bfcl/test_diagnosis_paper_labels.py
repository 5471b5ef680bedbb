"""The paper's trajectory labels (its Table 5): one constructed episode per label gets that
label from the service, and the paper's priority decides when several signals apply.

Episodes are played on multi_turn_base_0 through the service's episode (the native path:
calls as data), whose ground truth per turn is
    0: cd(document), mkdir(temp), mv(final_report.pdf -> temp)
    1: cd(temp), grep(final_report.pdf, 'budget analysis')
    2: sort('final_report.pdf')
    3: cd(..), mv(previous_report.pdf -> temp), cd(temp), diff(...)
"""

from __future__ import annotations

import pytest
from engine_episodes import EngineEpisode

from env_service.execution import STEP_TIME_BUDGET
from seal.bfcl import ground_truth as gt
from seal.bfcl import tags as T
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.diagnosis import TOOL_ERROR, paper_label
from seal.bfcl.tasks import load_task
from seal.service_contract import EpisodeSettings

BASE = "multi_turn_base_0"

UNKNOWN = ToolCall("teleport", {"to": "temp"})  # no such tool: invalid_tool_call
MALFORMED = CallParseError('<tool_call>{"name": "cd",', "not valid JSON")
BAD_ARGUMENT = ToolCall("cd", {"directory": "document"})  # cd takes `folder`
FAILING = ToolCall("cat", {"file_name": "nope.txt"})  # runs, answers {"error": ...}
WRONG_MKDIR = [  # the user asked for 'temp': a state mismatch
    ToolCall("cd", {"folder": "document"}),
    ToolCall("mkdir", {"dir_name": "tmp"}),
    ToolCall("mv", {"source": "final_report.pdf", "destination": "tmp"}),
]
NO_GREP = [ToolCall("cd", {"folder": "temp"})]  # turn 1 without its look-up


def play(turns: list[list[list]]) -> dict:
    """Each turn: its messages' calls in order, then a message without calls (ends the
    turn). Turns not given are answered without calls. Returns the service's report."""
    task = load_task(BASE)
    episode = EngineEpisode(task.task_id, EpisodeSettings())
    turns = turns + [[]] * (task.num_turns - len(turns))
    for messages in turns:
        for calls in messages:
            assert not episode.step("", calls).terminated
        outcome = episode.step("", [])
    assert outcome.terminated
    return outcome.evaluation


def ground_truth_turn(turn: int) -> list[list[ToolCall]]:
    return gt.ground_truth_trajectory(load_task(BASE))[turn]


def test_a_passed_episode_has_no_label():
    report = play([ground_truth_turn(t) for t in range(4)])
    assert report["accuracy"] == 1 and report["paper_label"] is None


@pytest.mark.parametrize(
    ("turns", "tags_start", "label"),
    [
        # An unknown tool and nothing that ran: the turn has no call, but the label is
        # the invalid call, the priority's first.
        ([[[UNKNOWN]]], [T.EMPTY_TURN_MODEL_RESPONSE], T.INVALID_TOOL_CALL),
        ([[[MALFORMED]]], [T.EMPTY_TURN_MODEL_RESPONSE], T.INVALID_TOOL_CALL),
        # A bad argument name runs for the backend's error (the paper's rules): the turn
        # has a call, which changed nothing.
        ([[[BAD_ARGUMENT]]], [T.STATE_MISMATCH], T.ARGUMENT_MISMATCH),
        ([[WRONG_MKDIR]], [T.STATE_MISMATCH], T.STATE_MISMATCH_LABEL),
        # Turn 1 with a failing look-up beside cd: the error came back, the turn still
        # misses grep's result.
        (
            [ground_truth_turn(0), [[*NO_GREP, FAILING]]],
            [T.PASS, T.RESPONSE_MISMATCH],
            T.RECOVERY_FAILURE,
        ),
        ([[]], [T.EMPTY_TURN_MODEL_RESPONSE], T.MISSING_TOOL_CALL),
        (
            [ground_truth_turn(0), [NO_GREP]],
            [T.PASS, T.RESPONSE_MISMATCH],
            T.RESPONSE_MISMATCH_LABEL,
        ),
    ],
    ids=[
        "unknown_tool",
        "unparseable",
        "argument",
        "state",
        "tool_error",
        "no_call",
        "response",
    ],
)
def test_one_constructed_episode_per_label(turns, tags_start, label):
    report = play(turns)
    assert report["accuracy"] == 0
    assert report["failure_tags"][: len(tags_start)] == tags_start
    assert report["paper_label"] == label


@pytest.mark.parametrize(
    ("turn0", "label"),
    [
        # invalid_tool_call (1) over argument_mismatch (2) and state_mismatch (3)
        ([[UNKNOWN], [BAD_ARGUMENT], WRONG_MKDIR], T.INVALID_TOOL_CALL),
        # argument_mismatch (2) over state_mismatch (3) and recovery_failure (4)
        ([[BAD_ARGUMENT], [*WRONG_MKDIR, FAILING]], T.ARGUMENT_MISMATCH),
        # state_mismatch (3) over recovery_failure (4)
        ([[*WRONG_MKDIR, FAILING]], T.STATE_MISMATCH_LABEL),
    ],
    ids=["invalid_over_argument_and_state", "argument_over_state", "state_over_recovery"],
)
def test_the_papers_priority_decides_between_signals_of_the_failing_turn(turn0, label):
    report = play([turn0])
    assert report["failure_tags"][0] == T.STATE_MISMATCH
    assert report["paper_label"] == label


def test_errors_of_a_turn_that_passed_do_not_label_a_later_failure():
    """The label is the failing turn's: an invalid call the model recovered from in turn 0
    (which passed) does not make turn 1's missing look-up an invalid_tool_call."""
    recovered = [[UNKNOWN], [BAD_ARGUMENT], [FAILING], *ground_truth_turn(0)]
    report = play([recovered, [NO_GREP]])
    assert report["failure_tags"][:2] == [T.PASS, T.RESPONSE_MISMATCH]
    assert report["invalid_calls"] == 2 and report["tool_errors"] == 1
    assert report["paper_label"] == T.RESPONSE_MISMATCH_LABEL


def test_the_label_rules_in_priority_order():
    """The mapping itself, signal by signal, on one failing turn (docs/diagnosis_labels.md)."""
    gt_calls = [["cd(folder='a')"]]

    def label(tag, **signals):
        return paper_label([tag], gt_calls, [signals])

    everything = {"unknown_tool": 1, "missing_argument": 1, TOOL_ERROR: 1}
    assert label(T.STATE_MISMATCH, **everything) == T.INVALID_TOOL_CALL
    assert label(T.RESPONSE_MISMATCH, unavailable_tool=1) == T.INVALID_TOOL_CALL
    assert label(T.RESPONSE_MISMATCH, parse=1) == T.INVALID_TOOL_CALL
    assert label(T.STATE_MISMATCH, unexpected_argument=1, **{TOOL_ERROR: 1}) == (
        T.ARGUMENT_MISMATCH
    )
    assert label(T.INSTANCE_MISMATCH, **{TOOL_ERROR: 1}) == T.STATE_MISMATCH_LABEL
    assert label(T.RESPONSE_MISMATCH, **{TOOL_ERROR: 1}) == T.RECOVERY_FAILURE
    assert label(T.EMPTY_TURN_MODEL_RESPONSE) == T.MISSING_TOOL_CALL
    assert label(T.RESPONSE_MISMATCH) == T.RESPONSE_MISMATCH_LABEL
    # The service's own caps are not the model's invalid calls.
    assert label(T.RESPONSE_MISMATCH, call_limit=3) == T.RESPONSE_MISMATCH_LABEL
    # Not the model's failure, or no failure: no label.
    assert label(T.GT_ERROR, unknown_tool=1) is None
    assert label(T.CHECKER_ERROR) is None
    assert label(T.PASS, unknown_tool=1) is None
    # Only the first failing turn with calls decides; an empty-ground-truth turn never does.
    tags = [T.SPURIOUS_TOOL_CALL, T.RESPONSE_MISMATCH, T.STATE_MISMATCH]
    signals = [{"unknown_tool": 1}, {}, {"missing_argument": 1}]
    assert paper_label(tags, [[], ["a()"], ["b()"]], signals) == T.RESPONSE_MISMATCH_LABEL


def test_an_episode_the_service_ended_has_no_label():
    """Its failure is the service's time budget, not a turn the model failed."""
    episode = EngineEpisode(BASE, EpisodeSettings())
    episode.step("", [UNKNOWN])
    episode.episode.aborted, episode.episode.terminated = STEP_TIME_BUDGET, True
    report = episode.evaluation()
    assert (report["accuracy"], report["aborted"], report["paper_label"]) == (
        0,
        STEP_TIME_BUDGET,
        None,
    )
