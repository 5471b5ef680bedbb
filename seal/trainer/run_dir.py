"""What a training run may find in its run directory, checked before anything is written.

A fresh run needs a directory without an earlier run's state; a resumed one needs its
state, readable, and the same data order. The launcher calls `check_run_dir` before it
writes anything into the directory (config.yaml included), so a refused start leaves the
earlier run as it was; the local trainer calls it again for callers that use it without
the launcher. Every refusal says what was found and how to proceed.

The data order is the sequence of task batches the steps see: a function of the training
tasks (the data file and `max_train_tasks`), `train_batch_size` and the shuffle `seed`
(seal/trainer/data.py). A fresh run records it in `data_order.json`; resuming with other
settings would give the remaining steps other batches than the interrupted run's, so it
is refused unless `trainer.checkpoint.allow_data_order_change` is set (then the record
is rewritten and the change printed).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from seal.atomic_file import StateFileError, read_json, write_json_atomic
from seal.eval.metrics_log import METRICS_FILENAME
from seal.tocf.state import STATE_FILENAME, CapabilityState
from seal.trainer import checkpoint as ckpt
from seal.trainer.config import TrainerConfig
from seal.trainer.data import task_ids_of

DATA_ORDER_FILENAME = "data_order.json"
OVERRIDE_KEY = "trainer.checkpoint.allow_data_order_change"

# The record's keys, as the run config names what determines each.
_SOURCES = {
    "train_tasks": "trainer.data.train_file / trainer.data.max_train_tasks (the task list)",
    "train_batch_size": "trainer.data.train_batch_size",
    "seed": "trainer.data.seed",
}


class DataOrderChanged(ValueError):
    """A resumed run's data-order settings differ from the interrupted run's."""


def data_order(cfg: TrainerConfig) -> dict:
    """The settings that fix which tasks each step sees, as `data_order.json` holds them."""
    ids = task_ids_of(cfg.data.train_file, cfg.data.max_train_tasks)
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    return {
        "train_tasks": f"{len(ids)} tasks, sha256 {digest}",
        "train_batch_size": cfg.data.train_batch_size,
        "seed": cfg.data.seed,
        "train_file": cfg.data.train_file,  # for the reader; the task list is what counts
    }


def record_data_order(run_dir: Path, cfg: TrainerConfig) -> None:
    write_json_atomic(run_dir / DATA_ORDER_FILENAME, data_order(cfg))


def earlier_state(run_dir: Path) -> list[str]:
    """The files of an earlier training run in `run_dir`."""
    found = []
    if (run_dir / STATE_FILENAME).exists():
        found.append(STATE_FILENAME)
    metrics = run_dir / METRICS_FILENAME
    if metrics.exists() and metrics.stat().st_size:
        found.append(METRICS_FILENAME)
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        found.append("checkpoints/")
    return found


def check_run_dir(run_dir: Path, cfg: TrainerConfig, backend: str) -> list[str]:
    """Refuse a run that does not fit `run_dir`; returns the data-order changes that
    `allow_data_order_change` let through (to be printed). Reads, never writes.

    `backend` is `local` (its checkpoints are checked file by file) or `verl` (verl
    reads its own checkpoints; the capability state and the data order are checked).
    """
    run_dir = Path(run_dir)
    if not cfg.checkpoint.resume:
        found = earlier_state(run_dir)
        if found:
            raise FileExistsError(
                f"{run_dir} holds an earlier run ({', '.join(found)}): resume it with "
                "trainer.checkpoint.resume=true, or give this run another name"
            )
        return []
    if backend == "local":
        latest = ckpt.latest_checkpoint(run_dir)
        if latest is None:
            raise FileNotFoundError(
                f"trainer.checkpoint.resume is set but {run_dir} has no checkpoint "
                f"({run_dir / 'checkpoints' / ckpt.LATEST} is missing)"
            )
        ckpt.load_trainer_state(latest)
        CapabilityState.load(latest / STATE_FILENAME)
    else:
        state = run_dir / STATE_FILENAME
        if not state.exists():
            raise FileNotFoundError(
                f"trainer.checkpoint.resume is set but there is no capability state at {state}"
            )
        CapabilityState.load(state)
    return check_data_order(run_dir, cfg)


def check_data_order(run_dir: Path, cfg: TrainerConfig) -> list[str]:
    """Compare the resumed run's data order with the record; see the module docstring."""
    path = run_dir / DATA_ORDER_FILENAME
    now = data_order(cfg)
    if not path.exists():
        changes = [f"no record of the interrupted run's data order ({path} is missing)"]
    else:
        recorded = read_json(path, "data order record")
        if not isinstance(recorded, dict):
            raise StateFileError(f"{path}: expected a JSON object, got {recorded!r:.200}")
        changes = [
            f"{source}: {recorded.get(key)!r} -> {now[key]!r}"
            for key, source in _SOURCES.items()
            if recorded.get(key) != now[key]
        ]
    if changes and not cfg.checkpoint.allow_data_order_change:
        raise DataOrderChanged(
            "resuming with another data order than the interrupted run's would give the "
            f"remaining steps other batches: {'; '.join(changes)}. Restore those settings, "
            f"or set {OVERRIDE_KEY}=true to resume anyway"
        )
    return changes
