"""Which tasks the trainer sees, in what order, and the record that keeps a resume on it.

The data order is the sequence of task batches the steps see: a function of the training
tasks (the data file and `max_train_tasks`), `train_batch_size`, the `order` and its
`seed` (`epoch_order`; both trainers take their batches from it, verl through
seal/trainer/verl/sampler.py). A fresh run records it in `data_order.json`; resuming with other
settings would give the remaining steps other batches than the interrupted run's, so it
is refused unless `trainer.checkpoint.allow_data_order_change` is set (then the record
is rewritten and the change printed).
"""

from __future__ import annotations

import hashlib
import random
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from seal.atomic_file import StateFileError, read_json, write_json_atomic

if TYPE_CHECKING:  # the run config's `trainer` section; read, never built, here
    from seal.trainer_config import TrainerConfig


def task_ids_of(parquet: str, limit: int = 0) -> list[str]:
    """The task ids of a data file (scripts/prepare_data.py); with `limit`, that many taken
    round-robin across the categories, so a small subset still covers all four."""
    rows = pq.read_table(parquet, columns=["extra_info"]).column("extra_info").to_pylist()
    ids = [r["task_id"] for r in rows]
    if not limit:
        return ids
    by_category: dict[str, list[str]] = {}
    for task_id in ids:
        by_category.setdefault(task_id.rsplit("_", 1)[0], []).append(task_id)
    interleaved = [t for group in zip_longest(*by_category.values()) for t in group if t]
    return interleaved[:limit]


RELEASE_MIXTURE_SEED = 42
"""The seed the original release's trainer gives its task mixture, which shuffles the
training tasks once before its data loader samples them (its `main_ppo.py`)."""


def epoch_order(task_ids: list[str], seed: int, epoch: int, order: str) -> list[str]:
    """The training order of one epoch (`trainer.data.order`): a function of the tasks,
    seed and epoch only, so restoring the step count restores the data order exactly."""
    if order == "release":
        return release_epoch_order(task_ids, seed, epoch)
    if order == "shuffle_per_epoch":
        shuffled = list(task_ids)
        random.Random(seed * 1_000_003 + epoch).shuffle(shuffled)
        return shuffled
    raise ValueError(f"unknown data order {order!r}")


def release_epoch_order(task_ids: list[str], seed: int, epoch: int) -> list[str]:
    """The original release's order: its task mixture shuffles the tasks once
    (`random.Random(42)`); its data loader's torch `RandomSampler` holds one generator,
    seeded with `seed`, and draws `torch.randperm(n)` for the epoch's order and a second
    one it discards (the sampler's generator runs on to its `[: n % n]` remainder when the
    loader asks past the epoch's last sample), so epoch e uses permutation 2e of the stream."""
    import torch  # the launcher composes configs without it

    mixed = list(task_ids)
    random.Random(RELEASE_MIXTURE_SEED).shuffle(mixed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    for _ in range(2 * epoch):
        torch.randperm(len(mixed), generator=generator)
    return [mixed[i] for i in torch.randperm(len(mixed), generator=generator).tolist()]


DATA_ORDER_FILENAME = "data_order.json"
OVERRIDE_KEY = "trainer.checkpoint.allow_data_order_change"

# The record's keys, as the run config names what determines each.
_SOURCES = {
    "train_tasks": "trainer.data.train_file / trainer.data.max_train_tasks (the task list)",
    "train_batch_size": "trainer.data.train_batch_size",
    "seed": "trainer.data.seed",
    "order": "trainer.data.order",
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
        "order": cfg.data.order,
        "train_file": cfg.data.train_file,  # for the reader; the task list is what counts
    }


def record_data_order(run_dir: Path, cfg: TrainerConfig) -> None:
    write_json_atomic(run_dir / DATA_ORDER_FILENAME, data_order(cfg))


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
            "resuming with another data order than the interrupted run's (recorded in "
            f"{path}) would give the remaining steps other batches: {'; '.join(changes)}. "
            f"Restore those settings (or the record), or set {OVERRIDE_KEY}=true to resume "
            "anyway"
        )
    return changes
