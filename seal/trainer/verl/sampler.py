"""The run's data order as a torch sampler, so verl's data loader takes the local trainer's
batches (seal/runs/data_order.py) instead of its own `RandomSampler`'s.

`SealPPOTrainer._init_dataloader` builds verl's train loader again with it. Its state (the
next epoch, and the epoch in progress with the rows taken) travels in verl's dataloader
checkpoint, so a resumed run continues the same order.
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
        """The epoch the next iterator to start will take."""

    def __len__(self) -> int:
        return len(self.task_ids)

    def __iter__(self) -> Iterator[int]:
        return _EpochRows(self)

    def take_epoch(self) -> tuple[int, list[int]]:
        """The next epoch's row indices; the epoch is used up."""
        epoch, self.next_epoch = self.next_epoch, self.next_epoch + 1
        ordered = epoch_order(self.task_ids, self.seed, epoch, self.order)
        return epoch, [self.row[task_id] for task_id in ordered]

    # A stateful sampler (torchdata's protocol): the loader restores it, then its iterator,
    # instead of skipping the samples already taken.
    def state_dict(self) -> dict:
        return {"next_epoch": self.next_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.next_epoch = state["next_epoch"]


class _EpochRows(Iterator[int]):
    """One epoch's row indices, taken from the sampler at the first row asked for: the
    loader makes iterators it never reads (two when it starts workers), which must not use
    up an epoch. Its state: its epoch (None before its first row) and the rows taken."""

    def __init__(self, sampler: EpochOrderSampler):
        self.sampler, self.epoch, self.rows, self.taken = sampler, None, [], 0

    def __next__(self) -> int:
        if self.epoch is None:
            self.epoch, self.rows = self.sampler.take_epoch()
        if self.taken == len(self.rows):
            raise StopIteration
        self.taken += 1
        return self.rows[self.taken - 1]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "taken": self.taken}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.taken = state["epoch"], state["taken"]
        if self.epoch is not None:
            ordered = epoch_order(
                self.sampler.task_ids, self.sampler.seed, self.epoch, self.sampler.order
            )
            self.rows = [self.sampler.row[task_id] for task_id in ordered]
