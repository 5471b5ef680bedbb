"""The local trainer's model helpers: peak GPU memory per phase (seal/trainer/model.py),
float32 master weights with a compute copy in the configured dtype (precision.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from tiny_models import SMALL_VOCAB, tiny_qwen2

from seal.trainer.local import LocalTrainer
from seal.trainer.model import gpu_peak_gb
from seal.trainer.precision import MixedPrecision
from seal.trainer_config import TrainerConfig


def test_gpu_peak_is_not_reported_for_a_model_on_the_cpu():
    # The trainer leaves the perf/*_peak_gpu_gb metrics out rather than report 0 GB.
    assert gpu_peak_gb(tiny_qwen2(vocab_size=SMALL_VOCAB)) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_peak_counts_each_phase_from_the_last_call():
    model = tiny_qwen2(vocab_size=SMALL_VOCAB).cuda()
    gpu_peak_gb(model)  # starts a count
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")  # 0.27 GB
    del block
    first = gpu_peak_gb(model)
    second = gpu_peak_gb(model)
    assert first >= 0.268
    assert second < first  # the block was freed before the second count began


# --- mixed precision: float32 master weights, compute in trainer.model.dtype ----------------


def bf16_trainer(tmp_path, lr: float):
    """The local trainer on the CPU as exp/SEAL.yaml configures its model (dtype bfloat16),
    with the tests' tiny Qwen2 shape; it never reaches the service (no rollout here)."""
    shape = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1, "intermediate_size": 64}  # fmt: skip
    cfg = OmegaConf.merge(
        OmegaConf.structured(TrainerConfig),
        {
            "model": {"path": "tiny-qwen2", "dtype": "bfloat16", "device": "cpu", "tiny": shape},
            "data": {"train_batch_size": 1, "max_train_tasks": 2, "max_val_tasks": 1},
            "rollout": {"n": 4},
            "optim": {"lr": lr, "mini_batch_size": 1, "micro_batch_size": 2},
            "logging": {"wandb": "disabled"},
        },
    )
    (tmp_path / "run").mkdir()
    return LocalTrainer(cfg, "http://127.0.0.1:1", tmp_path / "run")


SAMPLES = [
    SimpleNamespace(prompt_ids=[11, 12, 13, 14], response_ids=[21, 22, 23, 24, 25],
                    response_mask=[1, 1, 0, 1, 1]),
    SimpleNamespace(prompt_ids=[31, 32], response_ids=[41, 42, 43], response_mask=[1, 0, 1]),
    SimpleNamespace(prompt_ids=[51, 52, 53], response_ids=[61, 62, 63, 64],
                    response_mask=[0, 1, 1, 1]),
    SimpleNamespace(prompt_ids=[71], response_ids=[81, 82], response_mask=[1, 1]),
]  # fmt: skip


def test_one_adamw_step_at_the_papers_lr_moves_the_weights_in_bfloat16(tmp_path):
    """exp/SEAL.yaml's dtype bfloat16 and lr 1e-6: the trainer's own update (old and
    reference log-probs, the clipped loss with KL, AdamW) must move the weights. bf16
    weights updated in place kept ~98% of them unchanged (the step rounds away)."""
    trainer = bf16_trainer(tmp_path, lr=1e-6)
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    width = max(len(s.response_ids) for s in SAMPLES)
    advantages = torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]).expand(-1, width).contiguous()
    trainer._update(SAMPLES, advantages, width)
    moved = sum(int((p.detach() != before[n]).sum()) for n, p in trainer.policy.named_parameters())
    total = sum(p.numel() for p in before.values())
    assert moved / total >= 0.99, f"one step moved {moved / total:.2%} of the weights"
    # The master weights are float32; generation and the passes compute with their bf16
    # copy, which follows them; the KL reference stays the base model, in bf16.
    assert {p.dtype for p in trainer.policy.parameters()} == {torch.float32}
    for master, compute in zip(
        trainer.policy.parameters(), trainer.weights.compute.parameters(), strict=True
    ):
        assert compute.dtype == torch.bfloat16
        assert torch.equal(compute, master.to(torch.bfloat16))
    assert trainer.generator.model is trainer.weights.compute
    reference = dict(trainer.reference.named_parameters())
    for name, start in before.items():
        assert reference[name].dtype == torch.bfloat16
        assert torch.equal(reference[name], start.to(torch.bfloat16)), name


def test_the_compute_copy_sums_micro_batch_gradients_in_float32():
    """Two micro-batches' bf16 gradients add up in the master's float32 gradient, equal to
    the sum of each one's (cast to float32), and the compute copy holds none after."""
    weights = MixedPrecision(tiny_qwen2(vocab_size=SMALL_VOCAB), torch.bfloat16)
    sums = None
    for ids in ([[1, 2, 3]], [[4, 5, 6, 7]]):
        weights.compute(torch.tensor(ids)).logits.float().logsumexp(-1).sum().backward()
        grads = [p.grad.float().clone() for p in weights.compute.parameters()]
        sums = grads if sums is None else [a + b for a, b in zip(sums, grads, strict=True)]
        weights.accumulate_grads()
        assert all(p.grad is None for p in weights.compute.parameters())
    for master, expected in zip(weights.master.parameters(), sums, strict=True):
        assert master.grad.dtype == torch.float32
        torch.testing.assert_close(master.grad, expected)
    # Buffers (the rotary frequencies) stay float32 in the compute copy, as Hugging Face
    # keeps them when it loads a model in bf16.
    assert {b.dtype for b in weights.compute.buffers()} == {torch.float32}
    with pytest.raises(TypeError, match="master weights must be torch.float32"):
        MixedPrecision(tiny_qwen2(vocab_size=SMALL_VOCAB).to(torch.bfloat16), torch.bfloat16)
