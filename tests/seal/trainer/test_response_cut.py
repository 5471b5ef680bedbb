"""The training cut (`trainer.loss.trained_response_tokens`): a long ground-truth episode's
trained tokens stop at the release's response length, 4,096 tokens counted as the release
counts them (from the first assistant header, which here ends the prompt), and the local
trainer updates on the cut samples. The verl agent loop's cut:
tests/seal/trainer/verl/test_plugin_agent_loop.py."""

from __future__ import annotations

from conftest import gt_texts
from driver_episodes import play
from omegaconf import OmegaConf

from seal.rollout.scripted import ScriptedGenerator
from seal.runs import metrics_log
from seal.service_contract import EpisodeLimits
from seal.trainer.local import LocalTrainer
from seal.trainer.response_cut import ResponseCut
from seal.trainer_config import TrainerConfig

LONG_TASK = "multi_turn_long_context_84"
"""A training task whose ground truth finishes under the paper's limits with a response of
4,325 tokens (scripts/count_context_stops.py)."""
PAPER = TrainerConfig()


def test_a_long_ground_truth_episode_is_trained_on_its_first_4096_tokens(live_service, tokenizer):
    generator = ScriptedGenerator.from_texts(tokenizer, gt_texts(LONG_TASK))
    sample, _ = play(live_service[0], tokenizer, LONG_TASK, generator, PAPER.limits)
    assert sample.accuracy == 1 and sample.stop_reason == "terminated"
    assert len(sample.response_ids) == 4325

    trained = ResponseCut(PAPER.loss.trained_response_tokens, tokenizer)(sample)
    # The release's response starts with the assistant header our prompt ends with; its
    # first 4,096 tokens are that header and what is trained here.
    header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert sample.prompt_ids[-len(header) :] == header
    release_response = header + sample.response_ids
    assert header + trained.response_ids == release_response[:4096]
    assert trained.response_ids == sample.response_ids[:4093]
    assert trained.response_mask == sample.response_mask[:4093]
    assert sum(trained.response_mask) < sum(sample.response_mask)  # later replies untrained
    assert (trained.prompt_ids, trained.reward, trained.evaluation) == (
        sample.prompt_ids,
        sample.reward,
        sample.evaluation,
    )
    # 0 trains the whole response; a short one is never cut.
    assert ResponseCut(0, tokenizer)(sample) is sample
    assert ResponseCut(4096 + 4325, tokenizer)(sample) is sample


def test_the_local_trainer_updates_on_the_cut_samples(live_service, tmp_path, monkeypatch):
    url, _ = live_service
    config = {
        "model": {"path": "tiny-qwen2", "dtype": "float32", "device": "cpu"},
        "rollout": {"n": 1},
        "logging": {"wandb": "disabled"},
    }
    cfg = OmegaConf.merge(OmegaConf.structured(TrainerConfig), config)
    (tmp_path / "run").mkdir()
    trainer = LocalTrainer(cfg, url, tmp_path / "run")
    # The ground truth instead of the tiny model's replies; the update records its samples.
    trainer.generator = ScriptedGenerator.from_texts(trainer.tokenizer, gt_texts(LONG_TASK))
    updated = []
    monkeypatch.setattr(trainer, "_update", lambda samples, *_, **__: updated.extend(samples) or {})
    try:
        metrics = trainer.train_step(1, 0, [LONG_TASK])
    finally:
        trainer._lock.release()  # the run's claim, which `fit` would release
    assert [len(s.response_ids) for s in updated] == [4093]
    assert metrics[metrics_log.RESPONSE_TOKENS_MEAN] == 4325
    assert metrics[metrics_log.TRAINED_RESPONSE_TOKENS_MEAN] == 4093
    assert metrics[metrics_log.ACCURACY] == 1.0


def test_paper_limits_are_the_release_s():
    assert PAPER.limits == EpisodeLimits()
    assert (PAPER.limits.context_stop, PAPER.loss.trained_response_tokens) == ("release", 4096)
