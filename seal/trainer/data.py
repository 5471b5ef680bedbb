"""Which tasks the trainer sees, and in what order."""

from __future__ import annotations

import random
from itertools import zip_longest

import pyarrow.parquet as pq


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


def epoch_order(task_ids: list[str], seed: int, epoch: int) -> list[str]:
    """The training order of one epoch: a function of seed and epoch only, so restoring
    the step count restores the data order exactly."""
    order = list(task_ids)
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order
