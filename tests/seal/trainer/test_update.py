"""The trainer's numerics: chunked log-probs equal full logits, the update does not depend
on how a mini-batch is split into micro-batches, checkpoints round-trip."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import PAD, SAMPLES, SMALL_VOCAB, tiny_qwen2
from transformers import Qwen2ForCausalLM

from seal.algos.loss import PolicyLossConfig
from seal.atomic_file import StateFileError
from seal.runs import checkpoint as ckpt
from seal.runs.data_order import epoch_order
from seal.tocf.state import STATE_FILENAME
from seal.trainer.precision import MixedPrecision
from seal.trainer.seal_step import BEST_FILE, SealStep
from seal.trainer.update import batch_logprobs, collate, policy_update, response_logprobs
from seal.trainer_config import TrainerConfig


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


def test_the_seal_step_keeps_its_capability_state_and_best_step_in_a_checkpoint(tmp_path):
    """The best step lives in the SEAL step alone (both trainers); a checkpoint holds it."""
    cfg = TrainerConfig()
    cfg.checkpoint.best_rule = "average"
    seal = SealStep(tmp_path / "run", cfg, "http://127.0.0.1:1")  # no request is made
    seal.start()
    assert seal.validated(2, {"val/average": 0.25})
    assert not seal.validated(3, {"val/average": 0.2})
    assert seal.validated(4, {"val/average": 0.25})  # a tie: the later step
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    seal.save(folder)
    resumed = SealStep(tmp_path / "run", cfg, "http://127.0.0.1:1")
    resumed.restore(folder)
    assert resumed.best == {"step": 4, "rule": "average", "metric": "val/average", "value": 0.25}
    assert resumed.capability.to_dict() == seal.capability.to_dict()
    assert not resumed.validated(6, {"val/average": 0.2})  # the restored best still counts
    release = TrainerConfig()  # the paper configs' rule: a checkpoint of another is refused
    with pytest.raises(StateFileError, match="chosen by the average rule"):
        SealStep(tmp_path / "run", release, "http://127.0.0.1:1").restore(folder)
    # A record from before the rule was a key (its metric was val/average) restores.
    (folder / BEST_FILE).write_text('{"step": 4, "metric": "val/average", "value": 0.25}')
    SealStep(tmp_path / "run", cfg, "http://127.0.0.1:1").restore(folder)

    (folder / BEST_FILE).write_text('{"step": 4}')
    with pytest.raises(StateFileError, match=BEST_FILE):
        SealStep(tmp_path / "run", cfg, "http://127.0.0.1:1").restore(folder)
    (folder / BEST_FILE).unlink()
    with pytest.raises(StateFileError, match="no such file"):
        SealStep(tmp_path / "run", cfg, "http://127.0.0.1:1").restore(folder)
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
