"""The diagnosis agrees with bfcl-eval's official checker (a sample; all 800 tasks are
covered by tests/check_agreement.py), and neither leaves state behind."""

import importlib
import random

import pytest
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_official import bfcl_globals_left, official_accuracy
from engine_episodes import EngineEpisode

from seal.bfcl import ground_truth as gt
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import diagnose
from seal.bfcl.tags import PASS
from seal.bfcl.tasks import CATEGORIES, load_task, task_ids
from seal.service_contract import EpisodeSettings

TASKS_PER_CATEGORY = 10
CORRUPTIONS = ("drop_call", "skip_turn", "duplicate_call")


def sampled_tasks(seed=7):
    rng = random.Random(seed)
    return [tid for c in CATEGORIES for tid in rng.sample(task_ids(c), TASKS_PER_CATEGORY)]


def corrupted(task, kind, rng):
    clean = gt.ground_truth_trajectory(task)
    turn = rng.choice([i for i, steps in enumerate(clean) if steps])
    n_calls = len(clean[turn][0])
    if kind == "drop_call":
        return gt.drop_call(clean, turn, rng.randrange(n_calls))
    if kind == "skip_turn":
        return gt.skip_turn(clean, turn)
    return gt.duplicate_call(clean, turn, rng.randrange(n_calls))


@pytest.mark.parametrize("category", CATEGORIES)
def test_ground_truth_passes_both(category):
    for task_id in task_ids(category)[:4] + task_ids(category)[-2:]:
        task = load_task(task_id)
        trajectory = gt.ground_truth_trajectory(task)
        d = diagnose(task, trajectory)
        assert d.accuracy == 1, (task_id, d.tags)
        assert all(tag in (PASS, "correct_abstention") for tag in d.tags)
        assert official_accuracy(task, gt.decoded_for_checker(trajectory)) == 1, task_id
    assert bfcl_globals_left() == []


def test_corruptions_get_the_official_verdict():
    rng = random.Random(0)
    outcomes = {kind: [] for kind in CORRUPTIONS}
    disagreements = []
    for task_id in sampled_tasks():
        task = load_task(task_id)
        for kind in CORRUPTIONS:
            trajectory = corrupted(task, kind, rng)
            ours = diagnose(task, trajectory).accuracy
            official = official_accuracy(task, gt.decoded_for_checker(trajectory))
            outcomes[kind].append(official)
            if ours != official:
                disagreements.append((task_id, kind, ours, official))
    assert disagreements == []
    # Not vacuous: dropping or skipping calls always fails, duplicating a call sometimes
    # passes (a read-only call) and sometimes fails (a state-changing one).
    assert set(outcomes["drop_call"]) == {0}
    assert set(outcomes["skip_turn"]) == {0}
    assert set(outcomes["duplicate_call"]) == {0, 1}
    assert bfcl_globals_left() == []


def test_episodes_through_text_get_the_official_verdict():
    # The whole path: scripted assistant texts -> parse -> run -> replay -> diagnose.
    rng = random.Random(1)
    verdicts = set()
    for task_id in sampled_tasks(seed=3)[::3]:
        task = load_task(task_id)
        for kind in ("ground_truth", "duplicate_call", "drop_call"):
            if kind == "ground_truth":
                trajectory = gt.ground_truth_trajectory(task)
            else:
                trajectory = corrupted(task, kind, rng)
            episode = EngineEpisode(task.task_id, EpisodeSettings(mode="validate"))
            for texts in gt.assistant_messages(trajectory):
                for text in texts:
                    outcome = episode.step(text)
            assert outcome.terminated
            official = official_accuracy(task, gt.decoded_for_checker(trajectory))
            assert episode.evaluation()["accuracy"] == official, (task_id, kind)
            assert outcome.reward == official
            verdicts.add(official)
    assert verdicts == {0, 1}


def test_official_checks_restore_bfcl_defaults_and_globals():
    # bfcl-eval's executor mutates TwitterAPI.post_tweet's default `mentions` list when a
    # tweet without mentions is mentioned later; the oracle must undo that, or every later
    # check in the process would see leaked mentions.
    task = load_task("multi_turn_base_147")
    module = importlib.import_module(CLASS_FILE_PATH_MAPPING["TwitterAPI"])
    post_tweet = module.TwitterAPI.post_tweet
    defaults = repr(post_tweet.__defaults__)
    leaky = [
        [["post_tweet(content='no mentions')", "mention(tweet_id=1, mentioned_usernames=['@x'])"]],
        [],
    ]
    assert official_accuracy(task, leaky) == 0
    assert repr(post_tweet.__defaults__) == defaults
    assert bfcl_globals_left() == []
    trajectory = gt.ground_truth_trajectory(task)
    assert official_accuracy(task, gt.decoded_for_checker(trajectory)) == 1
    assert diagnose(task, trajectory).accuracy == 1


def test_verdicts_do_not_depend_on_what_ran_before():
    # The same checks, before and after a batch of unrelated episodes and checks.
    probe = ["multi_turn_base_147", "multi_turn_base_90", "multi_turn_miss_param_5"]

    def verdicts():
        out = []
        for task_id in probe:
            task = load_task(task_id)
            trajectory = gt.duplicate_call(gt.ground_truth_trajectory(task), 0, 0)
            out.append(
                (
                    diagnose(task, trajectory).tags,
                    official_accuracy(task, gt.decoded_for_checker(trajectory)),
                )
            )
        return out

    before = verdicts()
    for task_id in task_ids("multi_turn_base")[80:100] + task_ids("multi_turn_base")[140:150]:
        task = load_task(task_id)
        trajectory = gt.ground_truth_trajectory(task)
        diagnose(task, trajectory)
        official_accuracy(task, gt.decoded_for_checker(trajectory))
        episode = EngineEpisode(task.task_id, EpisodeSettings())
        episode.step(gt.tool_call_text([ToolCall("post_tweet", {"content": "x"})]))
        episode.step(
            gt.tool_call_text([ToolCall("mention", {"tweet_id": 1, "mentioned_usernames": ["@x"]})])
        )
    assert verdicts() == before
    assert bfcl_globals_left() == []


def test_miss_func_49_is_unsolvable_when_held_out_tools_are_refused():
    # docs/design.md, "BFCL facts": the ground truth calls `tail` before BFCL reveals it. The service
    # refuses tools that are not revealed yet, so this ground truth fails through an
    # episode, while the official checker (which runs whatever is called) passes it.
    task = load_task("multi_turn_miss_func_49")
    reveal = next(t for t, docs in task.held_out.items() if "tail" in {d["name"] for d in docs})
    first_use = next(
        i for i, calls in enumerate(task.ground_truth) if any(c.startswith("tail(") for c in calls)
    )
    assert first_use < reveal
    trajectory = gt.ground_truth_trajectory(task)
    assert official_accuracy(task, gt.decoded_for_checker(trajectory)) == 1
    assert diagnose(task, trajectory).accuracy == 1  # replaying everything agrees
    episode = EngineEpisode(task.task_id, EpisodeSettings(mode="validate"))
    observations = []
    for texts in gt.assistant_messages(trajectory):
        for text in texts:
            observations += episode.step(text).messages
    refusal = "Tool 'tail' is not available in the current tool list."  # the release's
    assert any(refusal in m["content"] for m in observations)
    report = episode.evaluation()
    assert report["accuracy"] == 0
    assert report["failure_tags"][first_use] != PASS
    assert report["invalid_by_kind"]["unavailable_tool"] >= 1


def test_the_agreement_check_runs_as_the_docs_say():
    # `python tests/check_agreement.py` (docs/development.md): tests/ is then sys.path[0],
    # and tests/seal/ shadowed the seal package (ModuleNotFoundError before any check).
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "tests/check_agreement.py", "--help"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "official checker" in done.stdout
