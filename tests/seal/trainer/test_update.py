"""The trainer's numerics: chunked log-probs equal full logits, the update does not depend
on how a mini-batch is split into micro-batches, the paper config weighs each episode as the
release's actor does, checkpoints round-trip."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tiny_models import PAD, SAMPLES, SMALL_VOCAB, sample, tiny_qwen2
from transformers import Qwen2ForCausalLM

import launcher
from seal.algos.loss import PolicyLossConfig, actor_loss
from seal.atomic_file import StateFileError
from seal.runs import checkpoint as ckpt
from seal.runs.data_order import epoch_order
from seal.tocf.state import STATE_FILENAME
from seal.trainer.precision import MixedPrecision
from seal.trainer.seal_hooks import BEST_FILE, SealHooks
from seal.trainer.update import batch_logprobs, collate, policy_update, response_logprobs
from seal.trainer_config import TrainerConfig

REPO = Path(__file__).resolve().parents[3]


def full_logprobs(model, s) -> torch.Tensor:
    ids = torch.tensor([s.prompt_ids + s.response_ids])
    logp = model(ids).logits.float().log_softmax(-1)[0]
    start = len(s.prompt_ids)
    return torch.stack([logp[start + j - 1, t] for j, t in enumerate(s.response_ids)])


@pytest.mark.parametrize("chunk", [1, 2, 1024])
def test_chunked_logprobs_equal_full_logits(chunk):
    model = tiny_qwen2(vocab_size=SMALL_VOCAB)
    batch = collate(SAMPLES, [0, 1, 2], PAD, torch.device("cpu"))
    with torch.no_grad():
        logp, entropy = response_logprobs(model, batch, chunk_tokens=chunk, with_entropy=True)
        for row, s in enumerate(SAMPLES[:3]):
            expected = full_logprobs(model, s)
            torch.testing.assert_close(logp[row, : len(expected)], expected, rtol=1e-5, atol=1e-5)
    assert entropy.shape == logp.shape and bool((entropy[:, :2] > 0).all())


def test_chunked_gradients_equal_full_gradients():
    model = tiny_qwen2(vocab_size=SMALL_VOCAB)
    batch = collate(SAMPLES, [0, 1], PAD, torch.device("cpu"))
    logp, _ = response_logprobs(model, batch, chunk_tokens=2)
    (logp * batch.response_mask).sum().backward()
    chunked = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    total = sum(
        (full_logprobs(model, s) * torch.tensor(s.response_mask)).sum() for s in SAMPLES[:2]
    )
    total.backward()
    for name, p in model.named_parameters():
        # float32 sums in a different order: compare as a relative error of the whole tensor
        relative = ((chunked[name] - p.grad).norm() / p.grad.norm()).item()
        assert relative < 1e-4, f"{name}: relative gradient error {relative:.1e}"


def run_update(micro_batch_size: int, agg: str) -> dict[str, torch.Tensor]:
    model = tiny_qwen2(vocab_size=SMALL_VOCAB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    width = 5
    advantages = torch.tensor([[1.0] * width, [-0.5] * width, [2.0] * width, [-1.0] * width])
    old = batch_logprobs(model, SAMPLES, width, 4, 1024, PAD)
    config = PolicyLossConfig(loss_agg_mode=agg, use_kl_loss=False)
    metrics = policy_update(
        MixedPrecision(model, torch.float32), optimizer, SAMPLES, advantages, old, None, config,
        samples_per_mini_batch=4, micro_batch_size=micro_batch_size, chunk_tokens=1024,
        grad_clip=1e9, pad_id=PAD,
    )  # fmt: skip
    assert metrics["actor/pg_loss"] != 0.0
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_update_is_independent_of_micro_batching(agg):
    one_pass, micro = run_update(4, agg), run_update(1, agg)
    initial = {n: p.detach() for n, p in tiny_qwen2(vocab_size=SMALL_VOCAB).named_parameters()}
    assert any(not torch.equal(one_pass[n], initial[n]) for n in initial), (
        "the update changed nothing"
    )
    for name in one_pass:
        torch.testing.assert_close(micro[name], one_pass[name], rtol=1e-4, atol=1e-6, msg=name)


# One long and one short episode of a mini-batch: 6 generated tokens among 10 with
# advantage 0.5, and 2 of 2 with advantage -1.5; the KL reference log(2) above the policy
# on the long one's tokens, equal on the short one's.
LONG = sample([1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [1, 1, 0, 0, 1, 1, 0, 0, 1, 1])
SHORT = sample([20, 21], [22, 23], [1, 1])
K3_LOG2 = 2 - math.log(2) - 1  # low_var_kl where the reference is log(2) above the policy
RELEASE_PG, RELEASE_KL = (6 * -0.5 / 6 + 2 * 1.5 / 2) / 2, (K3_LOG2 + 0.0) / 2
"""The release's loss: each episode's token mean, averaged over the two (its actor: a
token mean per one-sample micro-batch, divided by the two micro-batches)."""
TOKEN_MEAN_PG, TOKEN_MEAN_KL = (6 * -0.5 + 2 * 1.5) / 8, 6 * K3_LOG2 / 8


def paper_loss() -> PolicyLossConfig:
    return OmegaConf.to_object(launcher.compose(REPO / "exp/SEAL.yaml", []).trainer.loss)


def one_step(step, config: PolicyLossConfig, micro_batch_size: int = 2):
    """`step` (policy_update, or the release's accumulation) on [LONG, SHORT] from the
    same tiny model, with SGD at lr 1; (its metrics, the weights after)."""
    model, samples = tiny_qwen2(vocab_size=SMALL_VOCAB), [LONG, SHORT]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    width = len(LONG.response_ids)
    advantages = torch.tensor([[0.5] * width, [-1.5] * width])
    old = batch_logprobs(model, samples, width, 2, 1024, PAD)
    ref = old + torch.tensor([[math.log(2)], [0.0]])
    metrics = step(model, optimizer, samples, advantages, old, ref, config, micro_batch_size)
    return metrics, {n: p.detach().clone() for n, p in model.named_parameters()}


def ours(model, optimizer, samples, advantages, old, ref, config, micro_batch_size, size=2):
    return policy_update(
        MixedPrecision(model, torch.float32), optimizer, samples, advantages, old, ref, config,
        samples_per_mini_batch=size, micro_batch_size=micro_batch_size, chunk_tokens=1024,
        grad_clip=1e9, pad_id=PAD,
    )  # fmt: skip


def release_accumulation(model, optimizer, samples, advantages, old, ref, config, _):
    """The release's actor (het_actor.update_policy): one sample per micro-batch, its loss
    the token mean over that sample, divided by the number of micro-batches."""
    token_mean = dataclasses.replace(config, loss_agg_mode="token-mean")
    optimizer.zero_grad()
    for k in range(len(samples)):
        batch = collate(samples, [k], PAD, torch.device("cpu"))
        logp, _ = response_logprobs(model, batch)
        w = batch.response_len
        loss, _ = actor_loss(
            logp, old[[k], :w], advantages[[k], :w], batch.response_mask, token_mean,
            ref_log_prob=ref[[k], :w],
        )  # fmt: skip
        (loss / len(samples)).backward()
    optimizer.step()


@pytest.mark.parametrize("micro_batch_size", [1, 2])
def test_the_paper_config_weighs_each_episode_as_the_release_does(micro_batch_size):
    config = paper_loss()
    metrics, weights = one_step(ours, config, micro_batch_size)
    assert metrics["actor/pg_loss"] == pytest.approx(RELEASE_PG, abs=1e-6)  # 0.5
    assert metrics["actor/kl_loss"] == pytest.approx(RELEASE_KL, abs=1e-6)
    _, expected = one_step(release_accumulation, config)
    moved = max(
        (expected[n] - p).abs().max().item()
        for n, p in tiny_qwen2(vocab_size=SMALL_VOCAB).named_parameters()
    )
    assert moved > 1e-3  # the step changed the weights
    for name, value in expected.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_a_short_mini_batch_divides_by_the_configured_size_as_the_release_does():
    """Two samples where four were configured (episodes left out after failing): each still
    weighs a quarter, as in the release (each micro-batch's loss / the configured number of
    micro-batches) and verl (/ the configured global batch size)."""

    def four(*args):
        return ours(*args, size=4)

    metrics, _ = one_step(four, paper_loss())
    assert metrics["actor/pg_loss"] == pytest.approx(RELEASE_PG / 2, abs=1e-6)


def test_token_mean_stays_an_option_weighing_each_token():
    config = dataclasses.replace(paper_loss(), loss_agg_mode="token-mean")
    metrics, _ = one_step(ours, config)
    assert metrics["actor/pg_loss"] == pytest.approx(TOKEN_MEAN_PG, abs=1e-6)  # 0
    assert metrics["actor/kl_loss"] == pytest.approx(TOKEN_MEAN_KL, abs=1e-6)


def test_checkpoint_round_trip(tmp_path):
    model = tiny_qwen2(seed=3, vocab_size=SMALL_VOCAB)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    state = ckpt.TrainerState(step=7, epoch=1)
    saved_into = []
    path = ckpt.save_checkpoint(tmp_path, state, model, optimizer, saved_into.append)
    assert saved_into == [path.with_name(path.name + ".tmp")]  # inside, before the rename
    assert ckpt.latest_checkpoint(tmp_path) == path
    assert ckpt.load_trainer_state(path) == state
    restored = Qwen2ForCausalLM.from_pretrained(path)
    for (name, a), (_, b) in zip(
        model.named_parameters(), restored.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name
    other = torch.optim.AdamW(copy.deepcopy(model).parameters(), lr=1e-3)
    other.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    assert other.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_prune_keeps_best_and_latest(tmp_path):
    model = tiny_qwen2(vocab_size=SMALL_VOCAB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (1, 2, 3, 4):
        state = ckpt.TrainerState(step=step)
        ckpt.save_checkpoint(tmp_path, state, model, optimizer, lambda folder: None)
    ckpt.prune_checkpoints(tmp_path, 3, best_step=1)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert kept == ["step_000001", "step_000003"]
    ckpt.prune_checkpoints(tmp_path, 3, best_step=None)  # no validation yet: the latest only
    assert [p.name for p in (tmp_path / "checkpoints").glob("step_*")] == ["step_000003"]


def test_the_seal_hooks_keep_the_capability_state_and_best_step_in_a_checkpoint(tmp_path):
    """The best step lives in the SEAL hooks alone (both trainers); a checkpoint holds it."""
    cfg = TrainerConfig()
    cfg.checkpoint.best_rule = "average"
    seal = SealHooks(tmp_path / "run", cfg, "http://127.0.0.1:1")  # no request is made
    seal.start()
    assert seal.validated(2, {"val/average": 0.25})
    assert not seal.validated(3, {"val/average": 0.2})
    assert seal.validated(4, {"val/average": 0.25})  # a tie: the later step
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    seal.save(folder)
    resumed = SealHooks(tmp_path / "run", cfg, "http://127.0.0.1:1")
    resumed.restore(folder)
    assert resumed.best == {"step": 4, "rule": "average", "metric": "val/average", "value": 0.25}
    assert resumed.capability.to_dict() == seal.capability.to_dict()
    assert not resumed.validated(6, {"val/average": 0.2})  # the restored best still counts
    release = TrainerConfig()  # the paper configs' rule: a checkpoint of another is refused
    with pytest.raises(StateFileError, match="chosen by the average rule"):
        SealHooks(tmp_path / "run", release, "http://127.0.0.1:1").restore(folder)
    # A record from before the rule was a key (its metric was val/average) restores.
    (folder / BEST_FILE).write_text('{"step": 4, "metric": "val/average", "value": 0.25}')
    SealHooks(tmp_path / "run", cfg, "http://127.0.0.1:1").restore(folder)

    (folder / BEST_FILE).write_text('{"step": 4}')
    with pytest.raises(StateFileError, match=BEST_FILE):
        SealHooks(tmp_path / "run", cfg, "http://127.0.0.1:1").restore(folder)
    (folder / BEST_FILE).unlink()
    with pytest.raises(StateFileError, match="no such file"):
        SealHooks(tmp_path / "run", cfg, "http://127.0.0.1:1").restore(folder)
    assert (folder / STATE_FILENAME).exists()


@pytest.mark.parametrize("order", ["release", "shuffle_per_epoch"])
def test_epoch_order_is_a_function_of_seed_and_epoch(order):
    ids = [f"multi_turn_base_{i}" for i in range(20)]
    assert epoch_order(ids, 0, 1, order) == epoch_order(list(ids), 0, 1, order)
    assert epoch_order(ids, 0, 1, order) != epoch_order(ids, 0, 2, order)
    assert epoch_order(ids, 0, 1, order) != epoch_order(ids, 1, 1, order)
    assert sorted(epoch_order(ids, 5, 3, order)) == sorted(ids)


def test_task_subsets_cover_every_category():
    from seal.runs.data_order import task_ids_of

    ids = task_ids_of("data/bfcl_eval.parquet", limit=8)
    assert len(ids) == 8
    assert {i.rsplit("_", 1)[0] for i in ids} == {
        "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"
    }  # fmt: skip
    assert len(task_ids_of("data/bfcl_eval.parquet")) == 400
