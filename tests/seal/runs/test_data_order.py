"""The training data order (seal/runs/data_order.py): the paper configs take the original
release's, which is checked here against the release's own loading machinery rebuilt from
the libraries it used (its task mixture's `random.Random(42)` shuffle, then torch's
`RandomSampler` with a generator seeded by `data.seed`, default 1, inside torchdata's
`StatefulDataLoader` with drop_last), and verl's loader takes the same batches through
`EpochOrderSampler`, across a checkpoint and resume too."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import RandomSampler

from seal.runs.data_order import epoch_order, task_ids_of

torchdata = pytest.importorskip("torchdata.stateful_dataloader")

REPO = Path(__file__).resolve().parents[3]
TRAIN = str(REPO / "data/bfcl_train.parquet")
BATCH = 32


def release_loader(task_ids: list[str], seed: int):
    """The release's train loader (its ae_ray_trainer.py `create_rl_sampler` and
    `_create_dataloader_from_manager`, over its mixture's order), yielding task ids."""
    mixed = list(task_ids)
    random.Random(42).shuffle(mixed)  # its UnifiedMixtureStrategy(seed=42), shuffle on
    generator = torch.Generator()
    generator.manual_seed(seed)  # data_config.get("seed", 1); its configs set no seed
    sampler = RandomSampler(data_source=mixed, generator=generator)
    return torchdata.StatefulDataLoader(
        mixed, batch_size=BATCH, drop_last=True, collate_fn=list, sampler=sampler
    )


def test_the_release_order_is_the_release_loaders():
    ids = task_ids_of(TRAIN)
    loader = release_loader(ids, seed=1)
    for epoch in range(4):  # the release re-iterates its loader once per epoch
        ours = epoch_order(ids, 1, epoch, "release")
        assert list(loader) == [ours[k * BATCH : (k + 1) * BATCH] for k in range(len(ids) // BATCH)]


def test_the_paper_configs_take_the_release_s_seed_and_order():
    sys.path.insert(0, str(REPO))
    from launcher import compose

    for name in ("SEAL", "GRPO", "SEAL_no_closed_loop", "SEAL_qwen2.5_3b", "SEAL_toolace2_8b"):
        data = compose(REPO / f"exp/{name}.yaml", []).trainer.data
        assert (data.seed, data.order) == (1, "release"), name


def sampled_batches(task_ids, seed, order, count, resume_after=None, workers=0):
    """`count` batches of a loader over `task_ids` rows sampled by EpochOrderSampler,
    re-iterated at each epoch's end as verl does; with `resume_after`, its state saved
    after that many batches and loaded into a fresh loader and sampler."""
    from seal.trainer.verl.sampler import EpochOrderSampler

    def loader():
        sampler = EpochOrderSampler(task_ids, seed, order)
        return torchdata.StatefulDataLoader(
            list(range(len(task_ids))), batch_size=BATCH, drop_last=True, collate_fn=list,
            sampler=sampler, num_workers=workers,
        )  # fmt: skip

    current = loader()
    batches, it = [], iter(current)
    while len(batches) < count:
        try:
            batches.append([task_ids[row] for row in next(it)])
        except StopIteration:
            it = iter(current)
            continue
        if len(batches) == resume_after:
            state = current.state_dict()
            current = loader()
            current.load_state_dict(state)
            it = iter(current)
    return batches


@pytest.mark.parametrize("order", ["release", "shuffle_per_epoch"])
def test_verl_s_loader_takes_the_local_trainer_s_batches_across_a_resume(order):
    ids = task_ids_of(TRAIN)
    steps = len(ids) // BATCH
    local = [
        epoch_order(ids, 1, epoch, order)[k * BATCH : (k + 1) * BATCH]
        for epoch in range(3)
        for k in range(steps)
    ]
    assert sampled_batches(ids, 1, order, len(local)) == local
    for cut in (5, steps, steps + 1, 2 * steps):  # mid-epoch and at epoch ends
        assert sampled_batches(ids, 1, order, len(local), resume_after=cut) == local, cut


def test_loader_workers_use_up_no_epoch():
    """With workers the loader makes iterators it never reads (verl's default is 8): the
    first epoch is still epoch 0, across a resume too."""
    ids = task_ids_of(TRAIN)
    local = [epoch_order(ids, 1, e, "release")[k * BATCH : (k + 1) * BATCH] for e in (0, 1)
             for k in range(len(ids) // BATCH)]  # fmt: skip
    assert sampled_batches(ids, 1, "release", 14, workers=1) == local[:14]
    assert sampled_batches(ids, 1, "release", 14, resume_after=12, workers=1) == local[:14]
