"""Capability state: counting, windows, the dynamic weight rule, failure profile, summaries."""

import json

import pytest

from seal.tocf.state import (
    CapabilityConfig,
    CapabilityState,
    TrajectoryOutcome,
    ema_step,
    target_tag_weight,
    turn_position,
)
from seal.tocf.summary import epoch_summary, write_epoch_summary
from seal.tocf.weights import BASE_TAG_WEIGHTS


def outcome(tags, reward, success=False, task="t0", category="multi_turn_base", step=1, epoch=0):
    return TrajectoryOutcome(category, task, reward, success, list(tags), step, epoch)


# Four trajectories, eight turns. state_mismatch: 3 turns (share 3/8), mean reward of its
# trajectories (0 + 0 + 0.5) / 3 = 1/6. spurious_tool_call: 1 turn, reward 0.
BATCH = [
    outcome(["state_mismatch", "state_mismatch"], 0.0, task="a"),
    outcome(["pass", "state_mismatch"], 0.5, task="b", category="multi_turn_miss_func"),
    outcome(["pass", "pass"], 1.0, success=True, task="c"),
    outcome(["spurious_tool_call", "pass"], 0.0, task="d"),
]


def observed(config=None, batch=BATCH):
    state = CapabilityState(config)
    for item in batch:
        state.observe(item)
    return state


@pytest.mark.parametrize(
    ("num_turns", "expected"),
    [
        (1, ["early"]),
        (2, ["early", "late"]),
        (3, ["early", "middle", "late"]),
        (4, ["early", "middle", "middle", "late"]),
        (7, ["early", "early", "middle", "middle", "middle", "late", "late"]),
    ],
)
def test_turn_position_splits_episode_in_thirds(num_turns, expected):
    assert [turn_position(i, num_turns) for i in range(num_turns)] == expected


def test_turn_position_rejects_turn_outside_episode():
    with pytest.raises(ValueError):
        turn_position(3, 3)


def test_target_weight_by_hand():
    kwargs = dict(alpha=1.0, count_saturation=32, min_weight=0.5, max_weight=2.0)
    # confidence 16/32 = 0.5: 1 * (1 + 0.5 * 0.8 * 0.5) = 1.2
    assert target_tag_weight(1.0, 0.5, 0.2, 16, **kwargs) == pytest.approx(1.2)
    # count above saturation trusts fully: 1 * (1 + 0.5 * 0.8 * 1) = 1.4
    assert target_tag_weight(1.0, 0.5, 0.2, 100, **kwargs) == pytest.approx(1.4)
    assert target_tag_weight(1.8, 0.5, 0.0, 32, **kwargs) == 2.0  # clamped above
    assert target_tag_weight(0.3, 0.0, 0.0, 0, **kwargs) == 0.5  # clamped below
    assert target_tag_weight(0.9, 0.4, 1.0, 32, **kwargs) == pytest.approx(0.9)  # solved: base


def test_ema_step_by_hand():
    assert ema_step(1.0, 1.2, 0.25) == pytest.approx(1.05)


def test_tables_count_trajectories_and_turns():
    state = observed()
    window = state.window
    assert window.num_trajectories == 4 and window.num_turns == 8
    base = window.by_category["multi_turn_base"]
    assert (base.count, base.passes, base.mean_reward) == (3, 1, pytest.approx(1 / 3))
    mismatch = window.by_tag["state_mismatch"]
    assert (mismatch.count, mismatch.passes) == (3, 0)
    assert mismatch.mean_reward == pytest.approx(1 / 6)
    assert window.by_category_tag["multi_turn_miss_func"]["state_mismatch"].count == 1
    assert window.by_position_tag["early"]["state_mismatch"].count == 1
    assert window.by_position_tag["late"]["state_mismatch"].count == 2
    assert window.by_position_tag["late"]["pass"].count == 2
    assert window.by_task["c"].pass_rate == 1.0
    assert state.run.to_dict() == window.to_dict()


def test_update_weights_moves_toward_target_by_hand():
    state = observed()
    weights = state.update_weights()
    # target 1 + (3/8) * (5/6) * (3/32) = 1.029296875; one EMA step of 0.25 from 1.0
    assert weights["state_mismatch"] == pytest.approx(0.75 + 0.25 * 1.029296875)
    assert weights["spurious_tool_call"] == 2.0  # target above 2 clamps to 2
    assert weights["response_mismatch"] == pytest.approx(0.9)  # unseen: stays at base
    assert weights["pass"] == 1.0
    assert state.num_weight_updates == 1


def test_update_weights_accumulates_and_keeps_fixed_tags():
    config = CapabilityConfig(alpha=2.0, count_saturation=1, fixed_tags=["pass", "state_mismatch"])
    fixed = observed(config)
    assert fixed.update_weights()["state_mismatch"] == 1.0

    state = observed(CapabilityConfig(alpha=2.0, count_saturation=1))
    target = 1.0 * (1 + 2.0 * (3 / 8) * (5 / 6))  # 1.625
    first = 0.75 * 1.0 + 0.25 * target
    assert state.update_weights()["state_mismatch"] == pytest.approx(first)
    assert state.update_weights()["state_mismatch"] == pytest.approx(0.75 * first + 0.25 * target)


def test_infrastructure_tags_do_not_dilute_a_tags_share():
    """As the release computes prevalence: over the turns that say something about the
    policy, so a checker failure elsewhere in the window leaves the weights as they were."""
    with_errors = observed(batch=[*BATCH, outcome(["checker_error", "gt_error"], 0.0, task="e")])
    assert with_errors.update_weights() == observed().update_weights()


def test_weights_start_at_base_and_ignore_infrastructure_tags():
    state = observed(batch=[outcome(["checker_error", "gt_error"], 0.0)])
    assert state.weights == BASE_TAG_WEIGHTS
    assert "checker_error" not in state.update_weights()


def test_start_epoch_resets_window_only():
    state = observed()
    state.start_epoch(1)
    assert state.window.num_trajectories == 0
    assert state.run.num_trajectories == 4
    state.observe(outcome(["pass"], 1.0, success=True, epoch=1))
    state.start_epoch(1)  # repeating the current epoch (a resumed run) keeps the window
    assert state.window.num_trajectories == 1
    with pytest.raises(ValueError, match="start_epoch"):
        state.observe(outcome(["pass"], 1.0, epoch=2))
    with pytest.raises(ValueError):
        state.start_epoch(0)


def test_failure_profile_lists_prevalent_unsolved_failures():
    state = observed()
    profile = state.failure_profile(min_share=0.10, min_count=1, max_mean_reward=0.6, top_k=3)
    assert profile["step"] == 1 and profile["epoch"] == 0 and profile["num_turns"] == 8
    assert [e["tag"] for e in profile["tags"]] == ["state_mismatch", "spurious_tool_call"]
    first = profile["tags"][0]
    # Shares of the failing turns (4 of the 8: pass left out), as the paper's selection.
    assert first["share"] == pytest.approx(3 / 4) and first["count"] == 3
    assert first["mean_reward"] == pytest.approx(1 / 6)
    json.dumps(profile)  # the service receives it as JSON


def test_failure_profile_thresholds():
    state = observed()
    assert state.failure_profile()["tags"] == []  # default min_count 8: too few turns
    top = state.failure_profile(min_count=1, top_k=1)["tags"]
    assert [e["tag"] for e in top] == ["state_mismatch"]
    # share of spurious_tool_call is 1/4 of the failing turns
    assert [e["tag"] for e in state.failure_profile(min_count=1, min_share=0.3)["tags"]] == [
        "state_mismatch"
    ]
    assert state.failure_profile(min_count=1, max_mean_reward=0.1)["tags"] == [
        {"tag": "spurious_tool_call", "share": 0.25, "count": 1, "mean_reward": 0.0}
    ]


def test_metrics():
    state = observed()
    metrics = state.metrics()
    assert metrics["tocf/pass_rate/all"] == 0.25
    assert metrics["tocf/pass_rate/multi_turn_miss_func"] == 0.0
    assert metrics["tocf/tag_share/pass"] == pytest.approx(4 / 8)
    assert metrics["tocf/weight/instance_mismatch"] == 0.6


def test_epoch_summary(tmp_path):
    state = observed()
    state.observe(outcome(["state_mismatch"], 0.0, task="a"))
    summary = epoch_summary(state, top_tasks=2)
    assert summary["num_trajectories"] == 5
    assert summary["categories"]["multi_turn_base"]["count"] == 4
    assert summary["tags"]["state_mismatch"]["share"] == pytest.approx(4 / 9)
    assert summary["category_tag"]["multi_turn_base"]["spurious_tool_call"]["count"] == 1
    assert summary["turn_positions"]["late"]["state_mismatch"]["count"] == 2
    # a, b, d never pass; a was tried twice so it leads; c passed and is not listed
    assert [t["task_id"] for t in summary["top_failing_tasks"]] == ["a", "b"]
    assert summary["weights"]["pass"] == 1.0

    path = write_epoch_summary(state, tmp_path, top_tasks=2)
    assert path.name == "epoch_000.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(summary))
