"""`SealPPOTrainer`: verl's synchronous PPO trainer with the SEAL hooks added.

Registered as trainer mode `seal_sync`. verl runs the step; this class adds the SEAL hooks
(capability state, A-Patch, the failure profile), the project's validation records, the
capability state in verl's checkpoints and metrics.jsonl, each through an overridden hook
that calls verl's own first, so verl's `fit()` is never copied. Each hook and why:
docs/verl_notes.md, "The SEAL trainer's hooks".
"""

from __future__ import annotations

import json
import os
import shutil
import time
from numbers import Real
from pathlib import Path

import transfer_queue as tq
from tensordict import TensorDict
from torchdata.stateful_dataloader import StatefulDataLoader
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from seal.atomic_file import write_json_atomic
from seal.rollout.env_client import is_healthy
from seal.runs.metrics_log import MetricsWriter, validation_metrics
from seal.runs.records import ValidationRecord, evaluation_record, write_step
from seal.trainer.seal_hooks import BEST_FILE, SealHooks
from seal.trainer.verl.episode_fields import EpisodeFields
from seal.trainer.verl.sampler import EpochOrderSampler
from seal.trainer.verl.section import SealSection

TRAINER_MODE = "seal_sync"
BEST_DIR = "best"
"""checkpoints/best: hard links to the files of the best validated checkpoint."""


def _of_seal_hooks(name: str) -> property:
    """The SEAL hooks' attribute `name`, where verl's hooks and their tests look for it."""
    return property(
        lambda self: getattr(self.seal_hooks, name),
        lambda self, value: setattr(self.seal_hooks, name, value),
    )


@register_trainer(TRAINER_MODE)
class SealPPOTrainer(PPOTrainerSync):
    def __init__(self, config):
        self.seal = SealSection.from_config(config)
        # Before verl starts its workers (minutes on a cluster): a run without its
        # environment service can only fail later, less clearly.
        require_service(self.seal.env_url, "at the start of the run")
        super().__init__(config)
        # verl 0.9.1 gives synchronous semantics (its sync replay buffer, prompt fetching,
        # no TransferQueue checkpoints) only to the trainer mode named "sync"
        # (verl/trainer/ppo/v1/trainer_base.py compares the name); this is that trainer
        # under its own registry name, so it takes the name's behaviour back. Otherwise
        # verl runs the async buffer, which refills failed groups without end.
        self.trainer_mode = "sync"
        self.replay_buffer = self._build_replay_buffer()
        self.trainer_cfg = self.seal.trainer  # the run's `trainer` section
        self.run_dir = Path(self.seal.run_dir)
        if not config.trainer.get("validation_data_dir"):
            raise ValueError(
                "trainer.validation_data_dir must be set: the SEAL trainer writes its "
                "validation records from verl's validation dump"
            )
        # Its capability state is opened by _load_checkpoint; the token is $SEAL_ENV_TOKEN.
        self.seal_hooks = SealHooks(
            self.run_dir, self.trainer_cfg, self.seal.env_url, self.seal.client
        )
        self._resumed_from_step = 0
        self._val_metrics: dict[str, float] = {}
        self.metrics_log: MetricsWriter | None = None  # opened by _load_checkpoint

    capability = _of_seal_hooks("capability")
    capability_path = _of_seal_hooks("capability_path")
    best = _of_seal_hooks("best")

    def fit(self, agent_loop_manager):
        try:
            super().fit(agent_loop_manager)
        except Exception as error:
            # With the service gone, every episode fails and verl stops on what that did
            # to its batch (e.g. "selected terminal groups with no materializable
            # trajectories"): say what happened instead, keeping verl's error as the cause.
            require_service(self.seal.env_url, f"at step {self.global_steps}", cause=error)
            raise

    # --- the data order ------------------------------------------------------------------

    def _init_dataloader(self):
        super()._init_dataloader()
        # verl's loader again, sampling in the run's data order (trainer.data.order), so
        # verl takes the local trainer's batches; its other arguments are verl's own.
        data, verl_loader = self.seal.trainer.data, self.train_dataloader
        task_ids = [row["task_id"] for row in self.train_dataset.dataframe["extra_info"]]
        self.train_dataloader = StatefulDataLoader(
            dataset=verl_loader.dataset,
            batch_size=verl_loader.batch_size,
            num_workers=verl_loader.num_workers,
            drop_last=verl_loader.drop_last,
            collate_fn=verl_loader.collate_fn,
            sampler=EpochOrderSampler(task_ids, data.seed, data.order),
        )

    # --- the SEAL hooks ----------------------------------------------------------------

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = super()._compute_advantage(batch, metrics)
        start = time.perf_counter()
        fields = ["advantages", "response_mask", "rm_scores", "extra_fields", "uid"]
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        nested_mask = data["response_mask"]
        advantages = data["advantages"].to_padded_tensor(0.0)
        mask = nested_mask.to_padded_tensor(0).to(advantages.dtype)
        rewards = data["rm_scores"].to_padded_tensor(0.0).sum(dim=-1)
        # list(): the non-tensor field comes back as a list, a NonTensorStack or an
        # array depending on the TransferQueue backend (as verl reads raw_prompt).
        extras = list(data["extra_fields"])
        # verl's batch balancing appends no-op padding samples (a copy of the first
        # sample's fields): they must not be counted as outcomes or rescaled.
        real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        samples = [
            EpisodeFields.from_extra_fields(extras[i]).outcome(float(rewards[i])) for i in real
        ]
        patched, seal_metrics = self.seal_hooks.reweight(
            samples,
            advantages[real],
            mask[real],
            step=self.global_steps,
            epoch=self.capability.epoch,
        )
        if self.seal.dump_advantages:
            dump_advantages(
                self.run_dir / "advantages", self.global_steps, data["uid"], samples, real,
                grpo=advantages, patched=patched, mask=mask,
            )  # fmt: skip
        advantages[real] = patched
        output = TensorDict(
            {"advantages": response_to_nested(advantages, nested_mask)}, batch_size=len(batch)
        )
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
        metrics.update(seal_metrics)
        self.seal_hooks.close_loop()
        metrics["seal/step_s"] = time.perf_counter() - start
        return batch

    def on_step_begin(self):
        super().on_step_begin()
        self.seal_hooks.begin_epoch((self.global_steps - 1) // self.steps_per_epoch)

    def on_step_end(self):
        super().on_step_end()
        if self.global_steps >= self.total_training_steps:  # verl's fit returns after it
            self.seal_hooks.finish()

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        self.metrics_log.write(global_steps, numeric(metrics))

    # --- validation records and the best checkpoint --------------------------------------

    def _validate(self) -> dict[str, float]:
        val_metrics = super()._validate() | self._val_metrics  # verl's and the project's
        if self.global_steps == 0:  # fit() logs the initial validation on its own
            self.metrics_log.write(0, numeric(val_metrics))
        return val_metrics

    def _dump_generations(self, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):
        super()._dump_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path)
        if dump_path != self.config.trainer.validation_data_dir:
            return  # a rollout dump (trainer.rollout_data_dir), not a validation
        records = validation_records(
            self.global_steps, inputs, outputs, scores, reward_extra_infos_dict
        )
        write_step(self.run_dir / "validation", self.global_steps, records, overwrite=True)
        self._val_metrics = validation_metrics(records)
        self._track_best(self._val_metrics)

    def _track_best(self, val_metrics: dict[str, float]) -> None:
        if not self.seal_hooks.validated(self.global_steps, val_metrics):
            return
        # fit() saves a step's checkpoint before validating it, so it exists here when
        # save_freq divides test_freq (step 0 is the base model: nothing to keep).
        folder = self._checkpoint_folder(self.global_steps)
        if self.global_steps > 0 and folder.exists():
            link_checkpoint(folder, self._checkpoint_root() / BEST_DIR, self.best)
        elif self.global_steps > 0:
            print(
                f"[seal] best step {self.global_steps} has no checkpoint: set save_freq = test_freq"
            )

    # --- checkpoints ---------------------------------------------------------------------

    def _checkpoint_root(self) -> Path:
        return Path(self.config.trainer.default_local_dir).absolute()

    def _checkpoint_folder(self, step: int) -> Path:
        if self.config.trainer.resume_mode == "resume_path" and step == self._resumed_from_step:
            return Path(self.config.trainer.resume_from_path).absolute()
        return self._checkpoint_root() / f"global_step_{step}"

    def _save_checkpoint(self):
        super()._save_checkpoint()
        self.seal_hooks.save(self._checkpoint_folder(self.global_steps))

    def _load_checkpoint(self):
        super()._load_checkpoint()  # sets global_steps (0 on a fresh start)
        self._resumed_from_step = self.global_steps
        resumed = self.global_steps > 0
        resume_step = self.global_steps if resumed else None
        # No wandb settings: verl's Tracking (trainer.logger) logs the same metrics there.
        self.metrics_log = MetricsWriter(self.run_dir, resume_step=resume_step)
        if not resumed:  # refuses a run_dir that holds another run's state
            self.seal_hooks.start()
        else:
            folder = self._checkpoint_folder(self.global_steps)
            self.seal_hooks.restore(folder)  # the capability state and the best step
            # The service may be a fresh one: give it the profile the next step's
            # training episodes would have had in the uninterrupted run.
            if self.trainer_cfg.rollout.push_profile:
                self.seal_hooks.push_profile()


class EnvServiceUnavailable(RuntimeError):
    """The environment service does not answer: the run cannot go on."""


def require_service(env_url: str, when: str, cause: BaseException | None = None) -> None:
    """Raise EnvServiceUnavailable, naming the URL, if no service answers there."""
    if is_healthy(env_url, timeout_s=10.0):
        return
    detail = f"; the run failed with {type(cause).__name__}: {cause}" if cause else ""
    raise EnvServiceUnavailable(
        f"the environment service at {env_url} does not answer {when}{detail}"
    ) from cause


def numeric(metrics: dict) -> dict[str, float]:
    """The metrics a JSON Lines row can hold (verl also logs a few non-numbers)."""
    return {k: v for k, v in metrics.items() if isinstance(v, Real) and not isinstance(v, bool)}


def validation_records(step, inputs, outputs, scores, infos) -> list[ValidationRecord]:
    """Records from verl's validation dump arguments (one entry per sample; `infos`: the
    columns of the agent loop's reward_extra_info)."""
    records = []
    for i in range(len(inputs)):
        episode = EpisodeFields.from_validation_columns(infos, i)
        evaluation, turns = episode.evaluation(float(scores[i])), episode.num_generations
        records.append(
            evaluation_record(evaluation, step, input=inputs[i], output=outputs[i], turns=turns)
        )
    return records


def dump_advantages(folder: Path, step: int, uids, samples, real, grpo, patched, mask) -> None:
    """One JSON file per step: each real sample's group (uid), outcome, verl's GRPO
    advantage and the advantage after the SEAL hooks (their means over the response
    mask; both are constant along it, `spread` says by how much they are not)."""
    rows = []
    for k, (i, sample) in enumerate(zip(real, samples, strict=True)):
        on = mask[i].bool()
        rows.append(
            {
                "uid": str(uids[i]),
                "task_id": sample.task_id,
                "category": sample.category,
                "reward": sample.reward,
                "accuracy": sample.accuracy,
                "failure_tags": sample.failure_tags,
                "grpo_advantage": float(grpo[i][on].mean()),
                "advantage": float(patched[k][on].mean()),
                "spread": float(patched[k][on].max() - patched[k][on].min()),
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / f"step_{step:06d}.json", {"step": step, "samples": rows})


def link_checkpoint(source: Path, target: Path, best: dict) -> None:
    """Make `target` a copy of checkpoint `source` made of hard links (no data copied), so
    verl's rotation of old checkpoints (max_actor_ckpt_to_keep) cannot delete it."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, copy_function=os.link)
    (tmp / BEST_FILE).unlink(missing_ok=True)  # a link: writing through it edits the source
    (tmp / BEST_FILE).write_text(json.dumps(best))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
