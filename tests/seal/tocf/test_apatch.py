"""A-Patch: per-sample scales from failure tags, applied to token-level advantages."""

import pytest
import torch

from seal.tocf.apatch import APatchConfig, apply_apatch, sample_scale, tag_weights
from seal.tocf.state import CapabilityConfig, CapabilityState
from seal.tocf.weights import BASE_TAG_WEIGHTS


def scale(tags, weights=BASE_TAG_WEIGHTS):
    return sample_scale(tags, weights, 0.5, 2.0)


def test_sample_scale_is_mean_of_tag_weights():
    assert scale(["state_mismatch", "response_mismatch"]) == pytest.approx(0.95)
    assert scale(["pass", "pass", "spurious_tool_call"]) == pytest.approx(4 / 3)
    assert scale(["mystery_tag", "spurious_tool_call"]) == pytest.approx(1.5)  # unknown weighs 1


def test_sample_scale_clamps():
    assert scale(["a"], {"a": 3.0}) == 2.0
    assert scale(["a", "a"], {"a": 0.1}) == 0.5


def test_sample_scale_excludes_infrastructure_tags():
    assert scale(["checker_error", "spurious_tool_call"]) == 2.0
    assert scale(["gt_error", "instance_mismatch", "checker_error"]) == pytest.approx(0.6)
    assert scale(["checker_error", "gt_error"]) == 1.0


def test_sample_scale_without_tags_is_one():
    assert scale([]) == 1.0


# Three samples, four tokens; the last token of each is padding.
ADVANTAGES = torch.tensor(
    [
        [1.0, 1.0, 1.0, 0.0],
        [-0.5, -0.5, -0.5, 0.0],
        [0.25, -0.25, 0.0, 0.0],
    ]
)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]])
TAGS = [
    ["spurious_tool_call", "pass"],  # (2.0 + 1.0) / 2 = 1.5
    ["instance_mismatch"],  # 0.6
    [],  # 1.0
]


def patch(config, step=0, tags=TAGS, weights=BASE_TAG_WEIGHTS):
    return apply_apatch(ADVANTAGES, MASK, tags, config, step=step, weights=weights)


def test_static_weights_scale_each_sample():
    patched, metrics = patch(APatchConfig(weight_source="static"))
    expected = ADVANTAGES * torch.tensor([[1.5], [0.6], [1.0]])
    torch.testing.assert_close(patched, expected)
    assert metrics["apatch/active"] == 1.0
    assert metrics["apatch/mean_scale"] == pytest.approx((1.5 + 0.6 + 1.0) / 3)
    assert metrics["apatch/scaled_count"] == 2
    assert metrics["apatch/tag_frac/pass"] == pytest.approx(1 / 3)
    assert metrics["apatch/weight/spurious_tool_call"] == 2.0


def test_input_is_not_modified():
    before = ADVANTAGES.clone()
    patch(APatchConfig(weight_source="static"))
    assert torch.equal(ADVANTAGES, before)


def test_weights_come_from_the_caller():
    weights = {"spurious_tool_call": 1.2, "pass": 1.0, "instance_mismatch": 0.8}
    patched, metrics = patch(APatchConfig(), weights=weights)
    torch.testing.assert_close(patched, ADVANTAGES * torch.tensor([[1.1], [0.8], [1.0]]))
    assert metrics["apatch/weight/spurious_tool_call"] == 1.2


def test_weight_source_picks_live_or_base_weights_of_the_capability_state():
    capability = CapabilityState(
        CapabilityConfig(base_weights={"pass": 1.0, "state_mismatch": 1.3})
    )
    capability.weights["state_mismatch"] = 1.7  # as update_weights would move it
    assert tag_weights(APatchConfig(), capability)["state_mismatch"] == 1.7
    static = tag_weights(APatchConfig(weight_source="static"), capability)
    assert static == {"pass": 1.0, "state_mismatch": 1.3}


def test_apply_to_positive_and_negative():
    tags = [["spurious_tool_call"], ["spurious_tool_call"], ["spurious_tool_call"]]  # scale 2
    positive, _ = patch(APatchConfig(weight_source="static", apply_to="positive"), tags=tags)
    torch.testing.assert_close(
        positive,
        torch.tensor([[2.0, 2.0, 2.0, 0.0], [-0.5, -0.5, -0.5, 0.0], [0.5, -0.25, 0.0, 0.0]]),
    )
    negative, metrics = patch(APatchConfig(weight_source="static", apply_to="negative"), tags=tags)
    torch.testing.assert_close(
        negative,
        torch.tensor([[1.0, 1.0, 1.0, 0.0], [-1.0, -1.0, -1.0, 0.0], [0.25, -0.5, 0.0, 0.0]]),
    )
    assert metrics["apatch/scaled_count"] == 2


def test_padding_is_never_scaled():
    advantages = torch.tensor([[1.0, 3.0]])
    patched, _ = apply_apatch(
        advantages,
        torch.tensor([[1, 0]]),
        [["spurious_tool_call"]],
        APatchConfig(weight_source="static"),
        step=0,
        weights=BASE_TAG_WEIGHTS,
    )
    torch.testing.assert_close(patched, torch.tensor([[2.0, 3.0]]))


def test_warmup_and_disable_leave_advantages_alone():
    config = APatchConfig(weight_source="static", warmup_steps=5)
    early, metrics = patch(config, step=4)
    assert torch.equal(early, ADVANTAGES)
    assert metrics["apatch/active"] == 0.0 and metrics["apatch/scaled_count"] == 0
    later, _ = patch(config, step=5)
    assert not torch.equal(later, ADVANTAGES)
    off, _ = patch(APatchConfig(weight_source="static", enable=False))
    assert torch.equal(off, ADVANTAGES)


def test_renormalize_divides_by_the_mean_scale_over_touched_samples():
    # scales 1.5, 0.6, 1.0 over three touched samples: mean 31/30
    patched, metrics = patch(APatchConfig(weight_source="static", renormalize=True))
    expected_scales = torch.tensor([1.5, 0.6, 1.0]) / (3.1 / 3)
    torch.testing.assert_close(patched, ADVANTAGES * expected_scales[:, None])
    assert metrics["apatch/mean_scale"] == pytest.approx(1.0)
    # a zero-advantage sample (equal rewards in its group) does not count in the mean
    advantages = torch.tensor([[1.0], [0.0]])
    tags = [["spurious_tool_call"], ["instance_mismatch"]]
    patched, _ = apply_apatch(
        advantages,
        torch.ones(2, 1),
        tags,
        APatchConfig(weight_source="static", renormalize=True),
        step=0,
        weights=BASE_TAG_WEIGHTS,
    )
    torch.testing.assert_close(patched, torch.tensor([[1.0], [0.0]]))


def test_rejects_mismatched_lengths_and_bad_options():
    with pytest.raises(ValueError, match="tag lists"):
        patch(APatchConfig(weight_source="static"), tags=TAGS[:2])
    with pytest.raises(ValueError, match="apply_to"):
        APatchConfig(apply_to="sometimes")
    with pytest.raises(ValueError, match="weight_source"):
        APatchConfig(weight_source="learned")
    with pytest.raises(ValueError, match="min_scale"):
        APatchConfig(min_scale=2.0, max_scale=1.0)


def test_a_patch_off_reports_no_scale():
    """With A-Patch off (or in its warm-up) no advantage is scaled: the metrics say it is
    off and carry no mean scale that would read like a SEAL run's (issue 32)."""
    for config, step in ((APatchConfig(weight_source="static", enable=False), 0),
                         (APatchConfig(weight_source="static", warmup_steps=5), 4)):  # fmt: skip
        _, metrics = patch(config, step=step)
        assert metrics["apatch/active"] == 0.0
        assert "apatch/mean_scale" not in metrics and "apatch/scaled_frac" not in metrics


def test_the_console_line_shows_a_patch_and_the_layers_off():
    from seal.trainer.local import _console_line

    _, off = patch(APatchConfig(weight_source="static", enable=False))
    layers_off = {"layer/schema_cues": 0.0, "layer/guidelines": 0.0}
    line = _console_line(3, {"train/reward_mean": 0.5, **off, **layers_off})
    assert "apatch off" in line and "scale" not in line and "layers none" in line
    _, on = patch(APatchConfig(weight_source="static"))
    line = _console_line(3, {**on, "layer/schema_cues": 1.0, "layer/guidelines": 0.5})
    assert "apatch scale 1.033" in line and "layers schema_cues, guidelines 0.5" in line


def test_mean_scale_is_the_scale_applied_so_it_agrees_with_the_share_scaled():
    """Issue 42: a batch of equal-reward groups (all advantages 0) was reported with the
    tags' mean scale (1.7 in a cpu_default run) beside a share scaled of 0. A sample whose
    advantages were not touched was multiplied by 1."""
    tags = [["spurious_tool_call"], ["spurious_tool_call"]]  # scale 2 each
    config = APatchConfig(weight_source="static")
    patched, metrics = apply_apatch(
        torch.zeros(2, 3), torch.ones(2, 3), tags, config, step=0, weights=BASE_TAG_WEIGHTS
    )
    assert torch.equal(patched, torch.zeros(2, 3))
    assert (metrics["apatch/scaled_frac"], metrics["apatch/mean_scale"]) == (0.0, 1.0)
    # One group with a gradient (scaled by 2), one without: half scaled, mean (2 + 1) / 2.
    _, metrics = apply_apatch(
        torch.tensor([[1.0], [0.0]]), torch.ones(2, 1), tags, config, step=0,
        weights=BASE_TAG_WEIGHTS,
    )  # fmt: skip
    assert (metrics["apatch/scaled_frac"], metrics["apatch/mean_scale"]) == (0.5, 1.5)
