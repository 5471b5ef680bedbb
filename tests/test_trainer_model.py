"""The local trainer's model helpers: peak GPU memory per phase (seal/trainer/model.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_qwen2

from seal.trainer.model import gpu_peak_gb


def test_gpu_peak_is_not_reported_for_a_model_on_the_cpu():
    # The trainer leaves the perf/*_peak_gpu_gb metrics out rather than report 0 GB.
    assert gpu_peak_gb(tiny_qwen2()) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_peak_counts_each_phase_from_the_last_call():
    model = tiny_qwen2().cuda()
    gpu_peak_gb(model)  # starts a count
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")  # 0.27 GB
    del block
    first = gpu_peak_gb(model)
    second = gpu_peak_gb(model)
    assert first >= 0.268
    assert second < first  # the block was freed before the second count began
