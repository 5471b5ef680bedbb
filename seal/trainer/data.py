"""Which tasks the trainer sees, and in what order."""

from __future__ import annotations

import random

import pyarrow.parquet as pq


def task_ids_of(parquet: str, limit: int = 0) -> list[str]:
    """The task ids of a data file (scripts/prepare_data.py), the first `limit` if set."""
    rows = pq.read_table(parquet, columns=["extra_info"]).column("extra_info").to_pylist()
    ids = [r["task_id"] for r in rows]
    return ids[:limit] if limit else ids


def epoch_order(task_ids: list[str], seed: int, epoch: int) -> list[str]:
    """The training order of one epoch: a function of seed and epoch only, so restoring
    the step count restores the data order exactly."""
    order = list(task_ids)
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order
