"""The whole local SEAL loop on CPU through the real service: a tiny model trains two
steps, writes validation records, a checkpoint and the capability state; a second run
resumes from the checkpoint, against a service that lost the profile (as a restarted
one has), gives its first episodes the checkpoint's failure profile, and continues
exactly where the first stopped. The kill -9 version is test_kill_resume.py."""

from __future__ import annotations

import json

import pytest
from misbehaving import is_request
from omegaconf import OmegaConf

from env_service.app import create_app
from seal.runs import checkpoint as ckpt
from seal.runs.interface_log import read_interfaces
from seal.runs.metrics_log import read_metrics
from seal.runs.records import read_val_dir
from seal.tocf.state import STATE_FILENAME, CapabilityState
from seal.trainer.local import LocalTrainer
from seal.trainer.seal_hooks import BEST_FILE
from seal.trainer_config import BEST_RULES, TrainerConfig

NO_LAYERS = {"schema_cues": 0, "type_hints": 0, "recovery_feedback": 0, "guidelines": 0}


def tiny_config(**overrides) -> TrainerConfig:
    base = {
        "total_steps": 2,
        "model": {"path": "tiny-qwen2", "dtype": "float32", "device": "cpu"},
        "data": {"train_batch_size": 1, "max_train_tasks": 4, "max_val_tasks": 2},
        "rollout": {"n": 2},
        "limits": {
            "max_generations": 2, "max_new_tokens": 6, "max_context_tokens": 8192,
            "max_observation_tokens": 64,
        },
        "optim": {"lr": 1e-3, "mini_batch_size": 1, "micro_batch_size": 2},
        "validation": {"test_freq": 2},
        "checkpoint": {"save_freq": 1},
        "logging": {"wandb": "disabled"},
    }  # fmt: skip
    cfg = OmegaConf.merge(OmegaConf.structured(TrainerConfig), base, overrides)
    return cfg


class ProfileAtCreate:
    """Keeps the service's failure profile at the moment each create request arrives."""

    def __init__(self, app):
        self.app, self.seen = app, []

    async def __call__(self, scope, receive, send):
        if is_request(scope, "POST", "/v1/episodes"):
            self.seen.append(self.app.state.engine.profiles.profile())
        await self.app(scope, receive, send)


def test_train_two_steps_then_resume(live_service, serve_app, tmp_path):
    url, engine = live_service
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state = LocalTrainer(tiny_config(), url, run_dir).fit()
    assert state.step == 2

    steps = read_val_dir(run_dir / "validation")
    assert sorted(steps) == [0, 2] and all(len(records) == 2 for records in steps.values())
    assert all(len(r.failure_tags) > 0 for r in steps[2])
    assert ckpt.latest_checkpoint(run_dir).name == "step_000002"
    capability = CapabilityState.load(run_dir / STATE_FILENAME)
    assert capability.run.num_trajectories == 2 * 1 * 2  # steps x tasks x samples
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "apatch/mean_scale" in rows[1] and "actor/pg_loss" in rows[1]
    assert engine.stats()["live_episodes"] == 0, "episodes leaked"
    assert engine.profiles.pushed is not None, "the failure profile never reached the service"
    # The interface state of each step beside its profiles (the paper's Appendix C.4):
    # the paper's layers (schema cues only) on every episode, no guideline shown.
    rows = read_interfaces(run_dir)
    assert [(r["step"], r["episodes"]) for r in rows] == [(1, 2), (2, 2)]
    assert all(r["layers"] == {**NO_LAYERS, "schema_cues": 2} and r["shown"] == [] for r in rows)
    assert rows[0]["served_profile"] == {"step": 0, "epoch": 0, "num_turns": 0, "tags": []}
    assert rows[1]["served_profile"] == rows[0]["failure_profile"]
    assert rows[1]["failure_profile"] == capability.failure_profile()

    # A fresh run in the same directory is refused: resuming must be explicit.
    with pytest.raises(FileExistsError):
        LocalTrainer(tiny_config(), url, run_dir)

    # A fresh service, which never saw the profile: the resumed step's episodes must be
    # created under the checkpoint's profile, as the uninterrupted run's were.
    fresh = create_app()
    recorder = ProfileAtCreate(fresh)
    resumed = LocalTrainer(
        tiny_config(total_steps=3, checkpoint={"resume": True}), serve_app(recorder), run_dir
    )
    assert resumed.state.step == 2
    best_at_2 = json.loads((ckpt.latest_checkpoint(run_dir) / BEST_FILE).read_text())
    assert best_at_2["step"] in (0, 2) and resumed.seal.best == best_at_2
    expected = CapabilityState.load(ckpt.latest_checkpoint(run_dir) / STATE_FILENAME)
    expected_profile = expected.failure_profile()
    assert expected_profile["tags"], "the test needs a profile with guidelines to push"
    state = resumed.fit()
    assert recorder.seen and recorder.seen[0] == expected_profile
    assert read_interfaces(run_dir)[-1]["served_profile"] == expected_profile
    assert state.step == 3
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    assert sorted(read_val_dir(run_dir / "validation")) == [0, 2, 3]
    assert CapabilityState.load(run_dir / STATE_FILENAME).run.num_trajectories == 3 * 1 * 2
    saved = json.loads((ckpt.latest_checkpoint(run_dir) / "trainer_state.json").read_text())
    assert saved == {"step": 3, "epoch": saved["epoch"]}
    # The best step, carried over the resume: by the run's rule (the release's by default:
    # the earliest of the highest multi_turn_base) over the validations of both parts of
    # the run (steps 0, 2 and 3).
    rule = BEST_RULES[resumed.cfg.checkpoint.best_rule]
    assert rule.name == "release"
    validated = [r for r in read_metrics(run_dir / "metrics.jsonl") if rule.metric in r]
    top = max(r[rule.metric] for r in validated)
    best = {"step": min(r["step"] for r in validated if r[rule.metric] == top)}
    best |= {"metric": rule.metric, "value": top, "rule": "release"}
    assert [r["step"] for r in validated] == [0, 2, 3]
    assert resumed.seal.best == best
    assert json.loads((ckpt.latest_checkpoint(run_dir) / BEST_FILE).read_text()) == best
