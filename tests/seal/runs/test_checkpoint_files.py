"""A checkpoint's torch files load as tensors and plain data only: what the current
writer saves resumes (the optimizer and both random states exactly), and a crafted
`rng.pt` or `optimizer.pt` that would run a command when unpickled is refused, naming
the file, without running it (a full unpickling ran it at resume)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch
from tiny_models import SMALL_VOCAB, tiny_qwen2

from seal.atomic_file import StateFileError
from seal.runs import checkpoint as ckpt


@pytest.fixture
def saved(tmp_path) -> tuple[Path, dict, torch.Tensor, float]:
    """(checkpoint folder, the optimizer's state, the torch and Python draws that follow
    the save) of a tiny model after one optimizer step, written by `save_checkpoint`."""
    policy = tiny_qwen2(vocab_size=SMALL_VOCAB)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    policy(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    state = ckpt.TrainerState(step=1, epoch=0)
    path = ckpt.save_checkpoint(tmp_path, state, policy, optimizer, lambda folder: None)
    return path, optimizer.state_dict(), torch.rand(4), random.random()


def test_a_checkpoint_of_the_current_writer_resumes_exactly(saved):
    path, optimizer_state, torch_draw, python_draw = saved
    loaded = ckpt.load_torch_file(path / "optimizer.pt", "optimizer state")
    assert loaded["param_groups"] == optimizer_state["param_groups"]
    for index, values in optimizer_state["state"].items():
        assert all(torch.equal(loaded["state"][index][k], v) for k, v in values.items())
    torch.manual_seed(123)  # another state, which the restore replaces
    random.seed(123)
    ckpt.restore_rng(path)
    assert torch.equal(torch.rand(4), torch_draw) and random.random() == python_draw


class RunsACommand:
    """Unpickled, it runs `touch MARKER` (what the crafted file of the finding did)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["rng.pt", "optimizer.pt"])
def test_a_crafted_file_is_refused_and_its_code_never_runs(saved, tmp_path, name):
    path = saved[0]
    marker = tmp_path / "the_command_ran"
    file = path / name
    torch.save({"torch": torch.get_rng_state(), "python": RunsACommand(marker)}, file)
    with pytest.raises(StateFileError) as refused:
        if name == "rng.pt":
            ckpt.restore_rng(path)
        else:
            ckpt.load_torch_file(file, "optimizer state")
    assert not marker.exists(), "loading the checkpoint ran the file's command"
    message = str(refused.value)
    assert str(file) in message and "would run as code" in message
    assert "system" in message, "the refusal does not say what the file asks for"
    assert "weights_only" not in message, "torch's advice to load it unsafely was passed on"


def test_an_rng_file_of_the_wrong_shape_names_the_file(saved):
    path = saved[0]
    torch.save({"torch": torch.zeros(3)}, path / "rng.pt")
    with pytest.raises(StateFileError, match="rng.pt: not the random number generator"):
        ckpt.restore_rng(path)
