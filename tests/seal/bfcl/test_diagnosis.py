"""Execution in private backends and the diagnosis rules, one hand-made case per tag."""

import copy
from dataclasses import replace

import pytest
from bfcl_official import bfcl_globals_left, official_accuracy
from engine_episodes import EngineEpisode

import seal.bfcl.diagnosis as diagnosis_module
from seal.bfcl import ground_truth as gt
from seal.bfcl import tags as T
from seal.bfcl.backends import ERROR_PREFIX, Backends, format_result
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import diagnose
from seal.bfcl.tasks import load_task
from seal.service_contract import EpisodeSettings, RewardSettings

# multi_turn_base_0 (GorillaFileSystem + TwitterAPI), ground truth per turn:
#   0: cd(document), mkdir(temp), mv(final_report.pdf -> temp)
#   1: cd(temp), grep(final_report.pdf, 'budget analysis')
#   2: sort('final_report.pdf')
#   3: cd(..), mv(previous_report.pdf -> temp), cd(temp), diff(...)
BASE = "multi_turn_base_0"
# multi_turn_miss_func_0: the same story; turn 2 has an empty ground truth (sort is held
# out until turn 3), so the model must not call a tool there.
MISS_FUNC = "multi_turn_miss_func_0"


def clean(task_id):
    return gt.ground_truth_trajectory(load_task(task_id))


def with_turn(trajectory, turn, calls):
    out = copy.deepcopy(trajectory)
    out[turn] = [calls] if calls else []
    return out


def agrees_with_official(task, trajectory, diagnosis):
    return diagnosis.accuracy == official_accuracy(task, gt.decoded_for_checker(trajectory))


# --- backends -----------------------------------------------------------------------------


def test_two_backends_of_one_task_share_no_state():
    task = load_task("multi_turn_base_1")
    first, second = Backends(task), Backends(task)
    assert first.call(ToolCall("mkdir", {"dir_name": "only_in_first"})) == "None"
    assert first.call(ToolCall("cd", {"folder": "workspace"})).startswith("{")
    listing_first = first.call(ToolCall("ls", {}))
    listing_second = second.call(ToolCall("ls", {}))
    assert "only_in_first" not in listing_second
    assert listing_first != listing_second
    assert "only_in_first" in first.call(ToolCall("cd", {"folder": ".."})) + first.call(
        ToolCall("ls", {})
    )
    # A third one starts from the task's pristine configuration.
    assert Backends(task).call(ToolCall("ls", {})) == listing_second
    assert bfcl_globals_left() == []


def test_backends_leave_the_shared_task_untouched():
    task = load_task("multi_turn_base_1")
    before = copy.deepcopy(task.initial_config)
    backends = Backends(task)
    for text in ["cd(folder='workspace')", "mv(source='log.txt', destination='archive')"]:
        backends.call(gt.parse_call_string(text))
    assert task.initial_config == before


def test_argument_objects_are_not_shared_with_backend_state():
    # post_tweet stores its `mentions` list in the tweet and mention() extends it: the
    # parsed call (replayed at verification) must keep its own list.
    task = load_task("multi_turn_base_147")
    post = ToolCall("post_tweet", {"content": "hi", "tags": ["#a"], "mentions": ["@b"]})
    backends = Backends(task)
    tweet_id = backends.call(post).split('"id": ')[1].split(",")[0]
    backends.call(ToolCall("mention", {"tweet_id": int(tweet_id), "mentioned_usernames": ["@c"]}))
    assert post.kwargs["mentions"] == ["@b"]
    tweets = backends.instances["TwitterAPI"].tweets
    assert tweets[int(tweet_id)]["mentions"] == ["@b", "@c"]


def test_mutable_default_arguments_do_not_leak_between_backends():
    task = load_task("multi_turn_base_147")
    first = Backends(task)
    first.call(ToolCall("post_tweet", {"content": "no mentions given"}))
    first.call(ToolCall("mention", {"tweet_id": 1, "mentioned_usernames": ["@leak"]}))
    assert first.instances["TwitterAPI"].tweets[1]["mentions"] == ["@leak"]
    second = Backends(task)
    assert '"mentions": []' in second.call(ToolCall("post_tweet", {"content": "fresh"}))


def test_results_are_formatted_like_bfcl():
    assert format_result("plain") == "plain"
    assert format_result({"a": [1, "x"]}) == '{"a": [1, "x"]}'
    assert format_result({"a": {1}}) == "{'a': {1}}"  # not JSON-serialisable: str()
    assert format_result(None) == "None"
    assert format_result([1, "a"]) == "[1, 'a']"  # lists are str()'d, not JSON
    assert format_result(2.5) == "2.5"

    class Text(str):
        pass

    assert format_result(Text("x")) == "x"
    backends = Backends(load_task("multi_turn_base_1"))
    assert backends.call(ToolCall("pwd", {})) == '{"current_working_directory": "/alex"}'
    assert backends.call(ToolCall("touch", {"file_name": "new.txt"})) == "None"


def test_backend_exceptions_become_bfcl_error_strings():
    backends = Backends(load_task("multi_turn_base_1"))
    result = backends.call(ToolCall("cd", {"folder": 123}))
    assert result.startswith(ERROR_PREFIX)
    assert "rstrip" in result
    result = backends.call(ToolCall("cd", {"no_such": 1}))
    assert result.startswith(ERROR_PREFIX) and "unexpected keyword argument" in result
    for name in ["_load_scenario", "__init__", "not_a_method"]:
        assert (
            backends.call(ToolCall(name, {})) == f"{ERROR_PREFIX}no backend method named {name!r}"
        )


# --- one case per tag -------------------------------------------------------------------------


def test_ground_truth_passes_every_turn():
    task = load_task(BASE)
    d = diagnose(task, clean(BASE))
    assert d.tags == [T.PASS] * 4
    assert (d.accuracy, d.progress) == (1, 1.0)
    assert d.notes == [""] * 4


def test_correct_abstention_on_an_empty_ground_truth_turn():
    task = load_task(MISS_FUNC)
    d = diagnose(task, clean(MISS_FUNC))
    assert d.tags == [T.PASS, T.PASS, T.CORRECT_ABSTENTION, T.PASS, T.PASS]
    assert (d.accuracy, d.progress) == (1, 1.0)


def test_spurious_read_only_call_costs_no_accuracy_like_the_official_checker():
    task = load_task(MISS_FUNC)
    trajectory = with_turn(clean(MISS_FUNC), 2, [ToolCall("ls", {})])
    d = diagnose(task, trajectory)
    assert d.tags == [T.PASS, T.PASS, T.SPURIOUS_TOOL_CALL, T.PASS, T.PASS]
    assert d.accuracy == 1
    # The release's progress: the four turns with calls all pass; the empty one is not
    # scorable, whatever the model did there.
    assert d.progress == 1.0
    assert agrees_with_official(task, trajectory, d)


def test_spurious_call_that_changes_state_fails_later_turns():
    task = load_task(MISS_FUNC)
    trajectory = with_turn(clean(MISS_FUNC), 2, [ToolCall("mkdir", {"dir_name": "extra"})])
    d = diagnose(task, trajectory)
    assert d.tags == [T.PASS, T.PASS, T.SPURIOUS_TOOL_CALL, T.STATE_MISMATCH, T.STATE_MISMATCH]
    assert d.accuracy == 0
    assert d.progress == pytest.approx(2 / 4)
    assert agrees_with_official(task, trajectory, d)


def test_empty_turn_model_response():
    task = load_task(BASE)
    trajectory = gt.skip_turn(clean(BASE), 0)
    d = diagnose(task, trajectory)
    assert d.tags[0] == T.EMPTY_TURN_MODEL_RESPONSE
    assert d.accuracy == 0
    assert agrees_with_official(task, trajectory, d)


def test_state_mismatch_on_a_wrong_argument():
    task = load_task(BASE)
    wrong = [
        ToolCall("cd", {"folder": "document"}),
        ToolCall("mkdir", {"dir_name": "tmp"}),  # the user asked for 'temp'
        ToolCall("mv", {"source": "final_report.pdf", "destination": "tmp"}),
    ]
    trajectory = with_turn(clean(BASE), 0, wrong)
    d = diagnose(task, trajectory)
    assert d.tags[0] == T.STATE_MISMATCH
    assert "GorillaFileSystem" in d.notes[0]
    assert d.accuracy == 0
    assert agrees_with_official(task, trajectory, d)


def test_response_mismatch_on_a_skipped_read_only_call():
    task = load_task(BASE)
    trajectory = with_turn(clean(BASE), 1, [ToolCall("cd", {"folder": "temp"})])  # no grep
    d = diagnose(task, trajectory)
    assert d.tags == [T.PASS, T.RESPONSE_MISMATCH, T.PASS, T.PASS]
    assert d.notes[1] == "1 expected result(s) missing"
    assert (d.accuracy, d.progress) == (0, 0.75)
    assert agrees_with_official(task, trajectory, d)


def test_an_earlier_result_counts_for_a_later_turn():
    # Results are compared against everything the model got so far: turn 1's cd and grep
    # done early in turn 0 still satisfy turn 1, where the model only checks where it is.
    task = load_task(BASE)
    trajectory = clean(BASE)
    turn0, turn1 = trajectory[0][0], trajectory[1][0]
    moved = with_turn(with_turn(trajectory, 0, turn0 + turn1), 1, [ToolCall("pwd", {})])
    d = diagnose(task, moved)
    assert d.tags == [T.PASS] * 4
    assert agrees_with_official(task, moved, d)
    d = diagnose(task, with_turn(trajectory, 1, [ToolCall("pwd", {})]))
    assert d.tags[1] == T.RESPONSE_MISMATCH  # the same turn without the earlier results


def test_early_stop_tags_the_remaining_turns():
    task = load_task(BASE)
    d = diagnose(task, clean(BASE)[:2])
    assert d.tags == [T.PASS, T.PASS, T.EMPTY_TURN_MODEL_RESPONSE, T.EMPTY_TURN_MODEL_RESPONSE]
    assert (d.accuracy, d.progress) == (0, 0.5)
    d = diagnose(load_task(MISS_FUNC), clean(MISS_FUNC)[:2])
    assert d.tags[2] == T.CORRECT_ABSTENTION
    # A correct abstention is neither passed nor scorable (the release's grader).
    assert d.progress == pytest.approx(2 / 4)


@pytest.mark.parametrize(
    ("broken", "note_part"),
    [
        ("cd(folder=os.getcwd())", "non-literal argument"),
        ("cd(nope='temp')", "ground truth raised: Error during execution:"),
    ],
)
def test_gt_error_fails_its_turn_as_in_the_release_grader(broken, note_part):
    task = load_task(BASE)
    bad_task = replace(task, ground_truth=[task.ground_truth[0], [broken], *task.ground_truth[2:]])
    d = diagnose(bad_task, clean(BASE))
    assert d.tags[:2] == [T.PASS, T.GT_ERROR]
    assert note_part in d.notes[1]
    assert d.accuracy == 0
    # The release's grader counts a turn whose ground truth raised as scorable and failed:
    # all four turns of this task have calls, so the denominator stays 4.
    assert d.progress == pytest.approx(d.tags.count(T.PASS) / 4)
    assert load_task(BASE).ground_truth[1] != [broken]  # the shared task is untouched


def test_checker_error_fails_its_turn_as_in_the_release_grader(monkeypatch):
    def broken_checker(model_instances, gt_instances):
        raise RuntimeError("checker exploded")

    monkeypatch.setattr(diagnosis_module, "state_checker", broken_checker)
    d = diagnose(load_task(MISS_FUNC), clean(MISS_FUNC))
    assert d.tags == [
        T.CHECKER_ERROR,
        T.CHECKER_ERROR,
        T.CORRECT_ABSTENTION,
        T.CHECKER_ERROR,
        T.CHECKER_ERROR,
    ]
    assert d.notes[0] == "RuntimeError: checker exploded"
    assert d.accuracy == 0
    assert d.progress == 0.0  # four scorable turns, none passed; the abstention is not scored


def test_instance_mismatch_comes_before_state_mismatch(monkeypatch):
    # Both namespaces of a real task always hold the same classes; to exercise the rule, a
    # namespace gains an extra backend whenever `pwd` is called (only the model calls it).
    class GrowingBackends(Backends):
        def call(self, call):
            if call.name == "pwd":
                self.instances["ExtraAPI"] = object()
            return super().call(call)

    monkeypatch.setattr(diagnosis_module, "Backends", GrowingBackends)
    task = load_task(BASE)
    wrong = [ToolCall("pwd", {}), ToolCall("mkdir", {"dir_name": "tmp"})]
    d = diagnose(task, with_turn(clean(BASE), 0, wrong))
    assert d.tags[0] == T.INSTANCE_MISMATCH
    assert d.notes[0] == "different backend classes"
    assert d.accuracy == 0


def test_only_turns_with_calls_decide_accuracy():
    # Accuracy is 1 exactly when every turn with a non-empty ground truth is `pass`.
    task = load_task(MISS_FUNC)
    for trajectory in [
        clean(MISS_FUNC),
        with_turn(clean(MISS_FUNC), 2, [ToolCall("pwd", {})]),
        gt.skip_turn(clean(MISS_FUNC), 4),
    ]:
        d = diagnose(task, trajectory)
        needs_call = [tag for tag, g in zip(d.tags, task.ground_truth, strict=True) if g]
        assert d.accuracy == int(all(tag == T.PASS for tag in needs_call))
        assert agrees_with_official(task, trajectory, d)


# --- reward from the diagnosis ----------------------------------------------------------------


def play(episode, turns):
    outcome = None
    for texts in turns:
        for text in texts:
            outcome = episode.step(text)
    return outcome


def test_binary_reward_and_capped_partial_credit():
    failing = gt.assistant_messages(with_turn(clean(BASE), 1, [ToolCall("cd", {"folder": "temp"})]))
    binary = EngineEpisode(BASE, EpisodeSettings())
    assert play(binary, failing).reward == 0.0
    assert binary.evaluation()["progress"] == 0.75
    capped = EngineEpisode(BASE, EpisodeSettings(reward=RewardSettings(partial_credit_cap=0.5)))
    assert play(capped, failing).reward == 0.5  # min(0.5, 1.0 * 0.75)
    weighted = EngineEpisode(
        BASE,
        EpisodeSettings(reward=RewardSettings(partial_credit_cap=0.5, partial_credit_weight=0.4)),
    )
    assert play(weighted, failing).reward == pytest.approx(0.3)
    solved = EngineEpisode(BASE, EpisodeSettings(reward=RewardSettings(partial_credit_cap=0.5)))
    assert play(solved, gt.assistant_messages(clean(BASE))).reward == 1.0


def test_episode_report_counts_and_replays_only_executed_calls():
    episode = EngineEpisode(BASE, EpisodeSettings(prompt="rich"))  # each call answered
    turns = gt.assistant_messages(clean(BASE))
    bad = (
        "<tool_call>\nnot json\n</tool_call>\n"
        '<tool_call>\n{"name": "rm_everything", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "cd", "arguments": {"folder": 7}}\n</tool_call>'
    )
    episode.step(bad)  # three problems, only the last one runs (and raises in the backend)
    play(episode, turns)
    report = episode.evaluation()
    assert report["invalid_calls"] == 2
    assert report["invalid_by_kind"] == {"parse": 1, "unknown_tool": 1}
    assert report["tool_errors"] == 1
    assert report["tool_calls"] == 1 + sum(len(s[0]) for s in clean(BASE) if s)
    assert report["steps"] == 1 + sum(len(t) for t in turns)
    # The failed cd changed nothing, so the episode still passes.
    assert report["failure_tags"] == [T.PASS] * 4
    assert report["accuracy"] == 1
    assert bfcl_globals_left() == []
