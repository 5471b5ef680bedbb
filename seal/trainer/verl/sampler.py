"""The run's data order as a torch sampler, so verl's data loader takes the local trainer's
batches (seal/runs/data_order.py) instead of its own `RandomSampler`'s.

`SealPPOTrainer._init_dataloader` builds verl's train loader again with it. Its state is
the epoch in progress, which verl's dataloader checkpoint carries (the loader skips the
samples already taken), so a resumed run continues the same order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler

from seal.runs.data_order import epoch_order


class EpochOrderSampler(Sampler[int]):
    def __init__(self, task_ids: Sequence[str], seed: int, order: str):
        """`task_ids`: the dataset's rows' task ids, in row order."""
        self.task_ids, self.seed, self.order = list(task_ids), seed, order
        self.row = {task_id: i for i, task_id in enumerate(self.task_ids)}
        if len(self.row) != len(self.task_ids):
            raise ValueError("the training data holds a task twice")
        self.next_epoch = 0

    def __len__(self) -> int:
        return len(self.task_ids)

    def __iter__(self) -> Iterator[int]:
        epoch, self.next_epoch = self.next_epoch, self.next_epoch + 1
        ordered = epoch_order(self.task_ids, self.seed, epoch, self.order)
        return _Rows([self.row[task_id] for task_id in ordered])

    # A stateful sampler (torchdata's protocol): the loader restores it, then its iterator,
    # instead of skipping the samples already taken.
    def state_dict(self) -> dict:
        return {"epoch": self.next_epoch - 1}  # the epoch being iterated

    def load_state_dict(self, state: dict) -> None:
        self.next_epoch = state["epoch"]


class _Rows(Iterator[int]):
    """One epoch's row indices; its state is how many were taken."""

    def __init__(self, rows: list[int]):
        self.rows, self.taken = rows, 0

    def __next__(self) -> int:
        if self.taken == len(self.rows):
            raise StopIteration
        self.taken += 1
        return self.rows[self.taken - 1]

    def state_dict(self) -> dict:
        return {"taken": self.taken}

    def load_state_dict(self, state: dict) -> None:
        self.taken = state["taken"]
