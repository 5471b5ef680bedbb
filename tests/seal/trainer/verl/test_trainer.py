"""SealPPOTrainer's SEAL hooks on a real TransferQueue batch on a local Ray (2 CPUs, one
storage unit): the advantages it writes back equal what the core computes for the same
samples (GRPO, then the capability state + A-Patch of seal/trainer/reweight.py), padding
samples are left alone, the profile reaches the service, and the capability state and
best checkpoint travel with verl's checkpoint folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")

import ray  # noqa: E402
import transfer_queue as tq  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput  # noqa: E402
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from launcher import compose  # noqa: E402
from seal.algos.advantage import GRPOConfig, grpo_advantages  # noqa: E402
from seal.bfcl.tags import PASS  # noqa: E402
from seal.runs.interface_log import read_interfaces  # noqa: E402
from seal.tocf.apatch import APatchConfig  # noqa: E402
from seal.tocf.state import STATE_FILENAME, CapabilityState, open_capability_state  # noqa: E402
from seal.trainer.reweight import SampleOutcome, observe_and_reweight  # noqa: E402
from seal.trainer.seal_hooks import BEST_FILE  # noqa: E402
from seal.trainer.verl.episode_fields import EpisodeFields  # noqa: E402
from seal.trainer.verl.trainer import (  # noqa: E402
    BEST_DIR,
    EnvServiceUnavailable,
    SealPPOTrainer,
    link_checkpoint,
    numeric,
)
from seal.trainer.verl.verl_config import compose_verl_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
# (task, category, tag vocabulary) of three GRPO groups of four samples each
GROUPS = [
    ("multi_turn_base_3", "multi_turn_base", ["wrong_args", "missing_call"]),
    ("multi_turn_miss_func_7", "multi_turn_miss_func", ["premature_call", "wrong_args"]),
    ("multi_turn_long_context_5", "multi_turn_long_context", ["state_mismatch", "missing_call"]),
]
N = 4
INTERFACE = {
    "schema_cues": True,
    "type_hints": False,
    "recovery_feedback": False,
    "guidelines": True,
    "shown": [{"tag": "state_mismatch", "text": "Check the state."}],
}
"""What each sample's episode was shown (the create reply's `interface`)."""


def verl_config(tmp_path: Path, env_url: str):
    run_cfg = compose(ROOT / "exp/SEAL.yaml", ["job=verl", "verl.n_gpus_per_node=1"])
    run_cfg.trainer.rollout.n = N
    config = compose_verl_config(run_cfg, env_url, tmp_path / "run")
    # 2 CPUs: more than one storage unit hangs TransferQueue (docs/design.md, "verl 0.9.1").
    config.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
    config.transfer_queue.backend.SimpleStorage.total_storage_size = 1000
    return config


@pytest.fixture(scope="module")
def local_tq(tmp_path_factory):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tq.init(verl_config(tmp_path_factory.mktemp("tq"), "http://127.0.0.1:1").transfer_queue)
    yield
    tq.close()
    ray.shutdown()


def make_samples(seed: int = 0) -> list[dict]:
    """AgentLoopOutput fields of GROUPS x N episodes with varied lengths, rewards, tags."""
    rng = torch.Generator().manual_seed(seed)
    samples = []
    for g, (task_id, category, vocabulary) in enumerate(GROUPS):
        for k in range(N):
            length = int(torch.randint(5, 40, (1,), generator=rng))
            mask = (torch.rand(length, generator=rng) > 0.3).long().tolist()
            mask[0] = 1
            accuracy = int(torch.rand(1, generator=rng) > 0.5)
            tags = [PASS, PASS] if accuracy else [PASS, vocabulary[k % 2]]
            samples.append(
                {
                    "uid": f"u{g}",
                    "session": k,
                    "output": AgentLoopOutput(
                        prompt_ids=list(range(1, 8)),
                        response_ids=list(range(100, 100 + length)),
                        response_mask=mask,
                        response_logprobs=[-0.5] * length,
                        reward_score=float(accuracy),
                        num_turns=3,
                        metrics=AgentLoopMetrics(),
                        extra_fields=EpisodeFields(
                            task_id=task_id,
                            category=category,
                            accuracy=accuracy,
                            progress=1.0 if accuracy else 0.5,
                            failure_tags=tags,
                            paper_label=None if accuracy else "response_mismatch",
                            interface=INTERFACE,
                            num_generations=3,
                            stop_reason="terminated",
                            tool_calls=2,
                            invalid_calls=0,
                            tool_errors=0,
                            turns_reached=2,
                            min_weight_version=1,
                            max_weight_version=1,
                        ).to_extra_fields(),
                    ),
                }
            )
    return samples


def put_batch(samples: list[dict]):
    """Store the samples as verl's AgentLoopWorkerTQ does, plus the log-prob fields the
    earlier stages of the step add."""
    keys, fields, tags = [], [], []
    for s in samples:
        field = s["output"].as_dict()
        length = field["responses"].size(0)
        field |= {
            "uid": s["uid"],
            "old_log_probs": torch.full((length,), -0.5),
            "ref_log_prob": torch.full((length,), -0.5),
        }
        keys.append(f"{s['uid']}_{s['session']}_0")
        fields.append(field)
        tags.append({"status": "success", "global_steps": 1, "seq_len": 7 + length})
    return tq.kv_batch_put(
        keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags
    )


def expected_advantages(samples, apatch: APatchConfig):
    """The core's computation for the same samples: GRPO, then SEAL's reweighting."""
    outputs = [s["output"] for s in samples]
    width = max(len(o.response_ids) for o in outputs)
    mask = torch.zeros(len(outputs), width)
    for i, o in enumerate(outputs):
        mask[i, : len(o.response_mask)] = torch.tensor(o.response_mask, dtype=torch.float32)
    rewards = torch.tensor([o.reward_score for o in outputs])
    advantages = grpo_advantages(rewards, [s["uid"] for s in samples], mask, GRPOConfig())
    outcomes = [
        EpisodeFields.from_extra_fields(o.extra_fields).outcome(o.reward_score) for o in outputs
    ]
    capability = CapabilityState()
    patched, _ = observe_and_reweight(
        capability, outcomes, advantages, mask, apatch, step=1, epoch=0
    )
    return patched, mask, capability


def test_advantage_step_equals_core(local_tq, tmp_path, live_service):
    url, engine = live_service
    config = verl_config(tmp_path, url)
    trainer = SealPPOTrainer(config)
    trainer.global_steps = 1
    trainer.capability, trainer.capability_path = open_capability_state(trainer.run_dir)

    samples = make_samples()
    batch = put_batch(samples)
    # verl's batch balancing pads to a multiple of the data-parallel size: 12 -> 16.
    batch = upsample_batch_to_divisible_size(batch, 16, eos_token_id=151645)
    assert len(batch) == 16 and sum(t.get("is_padding", False) for t in batch.tags) == 4
    metrics = {}
    batch = trainer._compute_advantage(batch, metrics)

    stored = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages"])
    got = stored["advantages"].to_padded_tensor(0.0)
    want, mask, capability = expected_advantages(samples, trainer.trainer_cfg.apatch)
    torch.testing.assert_close(got[:12, : want.shape[1]] * mask, want * mask)
    assert got[:12].abs().sum() > 0  # the groups have mixed rewards: not a zero check
    assert got[12:].abs().sum() == 0  # padding samples: zero GRPO advantage, not rescaled
    assert metrics["apatch/mean_scale"] != 1.0 and 0 < metrics["apatch/scaled_count"] <= 12
    accuracy = [EpisodeFields.from_extra_fields(s["output"].extra_fields).accuracy for s in samples]
    assert metrics["train/accuracy"] == sum(accuracy) / 12
    assert metrics["train/accuracy/multi_turn_base"] == sum(accuracy[:N]) / N
    # The paper's labels of the failed samples (all response_mismatch here), none padding's.
    assert {k: v for k, v in metrics.items() if "/paper_label/" in k} == {
        "train/paper_label/response_mismatch": 1.0
    }
    # The capability state saw the 12 real samples only, exactly as the core's did.
    assert trainer.capability.to_dict() == capability.to_dict()
    assert CapabilityState.load(trainer.capability_path).to_dict() == capability.to_dict()
    assert engine.profiles.pushed == capability.failure_profile()
    # The step's interface record: the 12 real samples' interface, beside the profiles.
    [row] = read_interfaces(trainer.run_dir)
    assert row["step"] == 1 and row["episodes"] == 12
    assert row["layers"] == {
        "schema_cues": 12,
        "type_hints": 0,
        "recovery_feedback": 0,
        "guidelines": 12,
    }
    assert row["shown"] == [{"tag": "state_mismatch", "text": "Check the state.", "episodes": 12}]
    assert row["served_profile"] is None  # nothing pushed before this first step
    assert row["failure_profile"] == capability.failure_profile()
    tq.kv_clear(keys=batch.keys, partition_id="train")


def test_best_checkpoint_is_hard_linked(tmp_path):
    source = tmp_path / "global_step_10"
    (source / "actor").mkdir(parents=True)
    (source / "actor" / "model.bin").write_bytes(b"weights")
    (source / BEST_FILE).write_text('{"step": 0}')
    best = tmp_path / BEST_DIR
    link_checkpoint(source, best, {"step": 10, "value": 0.5})
    assert os.path.samefile(source / "actor" / "model.bin", best / "actor" / "model.bin")
    assert json.loads((best / BEST_FILE).read_text())["step"] == 10
    assert json.loads((source / BEST_FILE).read_text()) == {"step": 0}  # source untouched
    (source / "actor" / "model.bin").unlink()  # verl rotating the checkpoint away
    assert (best / "actor" / "model.bin").read_bytes() == b"weights"


def test_capability_state_travels_with_checkpoints(local_tq, tmp_path, monkeypatch, live_service):
    config = verl_config(tmp_path, live_service[0])
    config.seal.trainer.rollout.push_profile = False
    trainer = SealPPOTrainer(config)
    folder = Path(config.trainer.default_local_dir) / "global_step_3"
    folder.mkdir(parents=True)
    # verl's own saving and loading need GPU workers; the SEAL part is what is tested.
    monkeypatch.setattr(SealPPOTrainer.__mro__[1], "_save_checkpoint", lambda self: None)
    monkeypatch.setattr(
        SealPPOTrainer.__mro__[1], "_load_checkpoint", lambda self: setattr(self, "global_steps", 3)
    )
    trainer.global_steps = 3
    trainer.capability, trainer.capability_path = open_capability_state(trainer.run_dir)
    outcome = SampleOutcome("multi_turn_base_3", "multi_turn_base", 0.0, 0, [PASS, "wrong_args"])
    mask = torch.ones(1, 4)
    observe_and_reweight(trainer.capability, [outcome], mask, mask, APatchConfig(), step=3, epoch=0)
    trainer.best = {"step": 3, "metric": "val/multi_turn_base", "value": 0.25, "rule": "release"}
    trainer._save_checkpoint()
    trainer.capability.save(trainer.capability_path)

    resumed = SealPPOTrainer(config)
    resumed._load_checkpoint()
    assert resumed.capability.to_dict() == trainer.capability.to_dict()
    assert resumed.best == trainer.best
    assert resumed.metrics_log.path == trainer.run_dir / "metrics.jsonl"
    assert CapabilityState.load(folder / STATE_FILENAME).to_dict() == trainer.capability.to_dict()

    fresh = SealPPOTrainer(config)  # a fresh start must not adopt the run's state
    monkeypatch.setattr(
        SealPPOTrainer.__mro__[1], "_load_checkpoint", lambda self: setattr(self, "global_steps", 0)
    )
    with pytest.raises(FileExistsError):
        fresh._load_checkpoint()


def test_the_seal_trainer_has_verl_sync_semantics(local_tq, tmp_path, live_service):
    """verl keys its synchronous behaviour on the mode name "sync"; under "seal_sync" it
    would build the async replay buffer (which refills failed groups without end)."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    trainer = SealPPOTrainer(verl_config(tmp_path, live_service[0]))
    assert trainer.config.trainer.v1.trainer_mode == "seal_sync"
    assert trainer.trainer_mode == "sync" and type(trainer.replay_buffer) is ReplayBuffer
    assert trainer.parameter_sync_step == 1


def test_verl_s_train_loader_takes_the_run_s_data_order(local_tq, tmp_path, live_service):
    """verl's loader samples in the run's data order (the release's for SEAL.yaml), so it
    takes the local trainer's batches (tests/seal/runs/test_data_order.py: the order and a
    resume through verl's loader state)."""
    from itertools import islice

    from conftest import shipped_tokenizer

    from seal.runs.data_order import epoch_order, task_ids_of

    config = verl_config(tmp_path, live_service[0])
    # No loader processes: forked from this process, they stay alive with the loader and
    # hang the next test's service, whose workers fork from here too (the order is the
    # sampler's, whatever the workers).
    config.data.dataloader_num_workers = 0
    trainer = SealPPOTrainer(config)
    # What verl's init (its _setup) does first, with the model's tokenizer offline.
    trainer.tokenizer, trainer.processor = shipped_tokenizer(), None
    trainer._init_dataloader()
    data = trainer.seal.trainer.data
    taken = [
        task_id
        for batch in islice(trainer.train_dataloader, 2)
        for task_id in (info["task_id"] for info in batch["extra_info"])
    ]
    order = epoch_order(task_ids_of(str(ROOT / data.train_file)), data.seed, 0, data.order)
    assert (data.seed, data.order) == (1, "release")
    assert taken == order[:64]  # two batches of 32


def test_a_missing_service_is_named_at_start_and_when_the_run_fails(
    local_tq, tmp_path, monkeypatch, live_service
):
    dead = "http://127.0.0.1:1"
    with pytest.raises(EnvServiceUnavailable, match=f"{dead} does not answer at the start"):
        SealPPOTrainer(verl_config(tmp_path / "a", dead))

    trainer = SealPPOTrainer(verl_config(tmp_path / "b", live_service[0]))
    verl_error = RuntimeError("Sync replay buffer selected terminal groups with no trajectories")

    def failing_fit(self, manager):
        self.global_steps = 2
        raise verl_error

    monkeypatch.setattr(SealPPOTrainer.__mro__[1], "fit", failing_fit)
    with pytest.raises(RuntimeError) as raised:  # service up: verl's own error, unchanged
        trainer.fit(None)
    assert raised.value is verl_error
    trainer.seal.env_url = dead  # the service went away during the run
    with pytest.raises(EnvServiceUnavailable, match="does not answer at step 2.*no trajectories"):
        trainer.fit(None)


def test_only_numbers_go_to_the_metrics_log():
    import numpy as np

    metrics = {"a": 1, "b": np.float32(0.5), "c": "text", "d": True, "e": [1]}
    assert numeric(metrics) == {"a": 1, "b": np.float32(0.5)}
