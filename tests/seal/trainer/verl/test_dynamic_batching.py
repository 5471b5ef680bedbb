"""The actor update with dynamic batching (micro-batches packed by token budget, what the
config mapping now sets) gives the gradient that one sample per micro-batch gives, on the
same mini-batch: verl 0.9.1's own FSDP engine and `ppo_loss` on CPU
(tests/verl_update_probe.py), the CPU smoke config's loss (entropy term on) under the
paper's aggregation (token-mean, the default) and seq-mean-token-mean, 8 samples of 18 to
330 tokens. verl scales each micro-batch's loss by its share of
the mini-batch, so packing must not change the sum."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import free_port

pytest.importorskip("verl")

from seal.trainer.model import save_tiny_model  # noqa: E402
from seal.trainer_config import ModelSettings  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
BUDGET = 800
"""Tokens per micro-batch: above the longest sample (330), below the mini-batch's 1399."""


def update(model_dir: Path, out: Path, *mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "tests/verl_update_probe.py", str(model_dir), str(out), *mode],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PROBE_PORT": str(free_port())},
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return torch.load(out)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_dynamic_batching_gives_the_micro_batch_1_gradient(tmp_path, loss_agg_mode):
    model_dir = save_tiny_model(ModelSettings(path="tiny-qwen2"), tmp_path / "tiny")
    packed = update(model_dir, tmp_path / "dynamic.pt", "dynamic", loss_agg_mode, str(BUDGET))
    single = update(model_dir, tmp_path / "micro1.pt", "micro1", loss_agg_mode)
    assert len(single["losses"]) == 8 and 1 < len(packed["losses"]) < 8  # really packed
    assert sum(packed["losses"]) == pytest.approx(sum(single["losses"]), rel=1e-6)
    assert sorted(packed["grads"]) == sorted(single["grads"]) and len(single["grads"]) > 10
    scale = max(g.abs().max() for g in single["grads"].values())
    assert scale > 0
    for name, grad in single["grads"].items():
        torch.testing.assert_close(
            packed["grads"][name], grad, rtol=1e-5, atol=1e-6 * scale, msg=name
        )
