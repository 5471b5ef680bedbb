"""A local training step when the service fails some of its episodes: each failed episode
is retried once, then left out and counted; the step trains on the others, and a share
of failures above `rollout.max_failed_share` stops the run naming the task and the
status."""

from __future__ import annotations

import pytest
from misbehaving import PlainText500, steps_of_task
from test_e2e import tiny_config

from env_service.app import create_app
from seal.rollout.driver import TooManyFailedEpisodes
from seal.runs.data_order import task_ids_of
from seal.runs.interface_log import read_interfaces
from seal.trainer.local import LocalTrainer
from seal.trainer_config import TrainerConfig


def test_a_training_step_goes_on_when_the_service_fails_one_task(serve_app, tmp_path):
    """The service answers a plain-text 500 to every step of one task's episodes."""
    app = create_app()
    train_ids = task_ids_of(TrainerConfig().data.train_file, 4)
    batch, poisoned = train_ids[:2], train_ids[1]
    url = serve_app(PlainText500(app, steps_of_task(app, poisoned)))
    cfg = tiny_config(rollout={"n": 2, "max_failed_share": 0.5})
    trainer = LocalTrainer(cfg, url, tmp_path / "run")

    metrics = trainer.train_step(1, 0, batch)
    assert metrics["train/failed_episodes"] == 2  # both samples of the task, each tried twice
    assert trainer.capability.run.num_trajectories == 2, "only the healthy task is observed"
    assert "actor/pg_loss" in metrics
    # The failed episodes enter neither the profile nor the step's interface record.
    [row] = read_interfaces(tmp_path / "run")
    assert row["episodes"] == 2
    assert row["failure_profile"]["num_turns"] == trainer.capability.window.num_turns
    assert trainer.capability.run.by_task.keys() == {batch[0]}

    trainer.cfg.rollout.max_failed_share = 0.05
    with pytest.raises(TooManyFailedEpisodes) as info:
        trainer.train_step(2, 0, batch)
    message = str(info.value)
    assert "2 of 4 episodes failed twice" in message
    assert f"task {poisoned}" in message and "HTTP 500" in message
    assert app.state.engine.stats()["live_episodes"] == 0
