"""Checkpoints of the local trainer: save, find the latest, resume exactly, keep the best.

A checkpoint directory `checkpoints/step_000010/` holds the policy (Hugging Face
`save_pretrained`, safetensors), the optimizer state, the capability state and
`trainer_state.json` (step, epoch, best metric so far, RNG states). The data order is a
function of the seed, the epoch and the step, so restoring the step restores it.
`latest` names the newest complete checkpoint; it is written last, atomically, so a
crash while saving leaves the previous checkpoint as the latest. A checkpoint file that
cannot be read is a `StateFileError` naming it.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from seal.atomic_file import StateFileError, read_json, write_json_atomic

LATEST = "latest"


@dataclass
class TrainerState:
    step: int = 0
    """Steps completed."""
    epoch: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    history: list[dict] = field(default_factory=list)
    """Validation metrics per validated step, for choosing the best checkpoint."""


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(
    run_dir: Path, state: TrainerState, policy, optimizer, capability_state
) -> Path:
    path = checkpoint_dir(run_dir, state.step)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.save_pretrained(tmp, safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    capability_state.save(tmp / "capability_state.json")
    write_json_atomic(tmp / "trainer_state.json", asdict(state))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    write_json_atomic(run_dir / "checkpoints" / LATEST, {"step": state.step, "path": path.name})
    return path


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / LATEST
    if not pointer.exists():
        return None
    data = read_json(pointer, "pointer to the latest checkpoint")
    if not isinstance(data, dict) or not isinstance(data.get("path"), str):
        raise StateFileError(
            f"{pointer}: expected {{'step': N, 'path': 'step_...'}}, got {data!r:.200}"
        )
    path = run_dir / "checkpoints" / data["path"]
    if not path.is_dir():
        raise StateFileError(f"{pointer} names the checkpoint {path}, which does not exist")
    return path


def load_trainer_state(path: Path) -> TrainerState:
    file = path / "trainer_state.json"
    data = read_json(file, "trainer state")
    try:
        return TrainerState(**data)
    except TypeError as error:
        raise StateFileError(f"{file}: not a trainer state ({error})") from None


def load_torch_file(file: Path, what: str):
    """`torch.load` of a checkpoint file; any failure names the file."""
    try:
        return torch.load(file, weights_only=False)
    except Exception as error:  # noqa: BLE001 - torch raises many types for a bad file
        raise StateFileError(
            f"{file}: cannot load the {what}: {type(error).__name__}: {error}"
        ) from error


def restore_rng(path: Path) -> None:
    rng = load_torch_file(path / "rng.pt", "random number generator states")
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])


def prune_checkpoints(run_dir: Path, state: TrainerState) -> None:
    """Delete every checkpoint but the best and the latest."""
    keep = {checkpoint_dir(run_dir, state.step).name}
    if state.best_step is not None:
        keep.add(checkpoint_dir(run_dir, state.best_step).name)
    for path in (run_dir / "checkpoints").glob("step_*"):
        if path.name not in keep:
            shutil.rmtree(path)
