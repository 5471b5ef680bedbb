"""The single-process SEAL trainer: any Hugging Face causal LM on one CPU or GPU.

One step (`train_step`), as in the paper: roll out `batch` tasks x `n` samples against
the environment service (training observations evolved) -> the service verifies and
diagnoses each episode into turn tags -> the capability state observes them and updates
the dynamic tag weights -> GRPO advantages per task group -> A-Patch scales each
sample's advantages by its tags -> the actor update (clipped loss + KL to the frozen
reference) -> the failure profile goes back to the service (the closed loop).
Validation (n = 1, greedy, the plain benchmark) runs at step 0, every `test_freq` steps
and at the end; checkpoints keep the best by `best_metric` and resume exactly.

The run directory is locked for the trainer's life and checked before anything is
written (seal/trainer/run_dir.py). Before its first rollout, `fit` pushes the capability
state's failure profile to the service: a resumed run may meet a fresh service that
never saw it, and its next step must get the guidelines the uninterrupted run's got.

Simplifications, named: generation and training share one model object (no weight
sync), old log-probs are recomputed by the actor before the update (as verl does), and
one pass is made over the samples per step (ppo_epochs = 1, the paper's setting).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from seal.algos.advantage import grpo_advantages
from seal.algos.loss import needs_reference
from seal.atomic_file import StateFileError
from seal.eval.metrics_log import FAILED_EPISODES, VAL_FAILED_EPISODES
from seal.eval.records import ValidationRecord, read_val_dir, write_step
from seal.eval.summary import render_markdown, summarize, validation_metrics
from seal.launch.run_lock import lock_run_dir
from seal.rollout.driver import EpisodeSample, play_batch, run_episode
from seal.rollout.env_client import EnvClient, EnvClientSettings, push_profile
from seal.rollout.hf_generator import HFGenerator
from seal.rollout.turn_tokens import turn_tokenizer
from seal.tocf.state import STATE_FILENAME, CapabilityState, open_capability_state
from seal.tocf.summary import write_epoch_summary
from seal.trainer import checkpoint as ckpt
from seal.trainer.config import TrainerConfig
from seal.trainer.data import epoch_order, task_ids_of
from seal.trainer.metrics import MetricsLogger
from seal.trainer.model import frozen_copy, load_policy, load_tokenizer
from seal.trainer.reweight import observe_and_reweight, outcome_metrics, record_interface
from seal.trainer.run_dir import check_run_dir, record_data_order, set_aside_unfinished_attempt
from seal.trainer.update import batch_logprobs, policy_update, response_mask_matrix


class LocalTrainer:
    def __init__(
        self,
        cfg: TrainerConfig,
        env_url: str,
        run_dir: Path,
        client: EnvClientSettings | None = None,
        token: str | None = None,
    ):
        """`client`: how to wait for and retry the service (default settings); `token`:
        the service's bearer token (default $SEAL_ENV_TOKEN)."""
        if isinstance(cfg, DictConfig):  # from the launcher: make it the typed dataclasses
            cfg = OmegaConf.to_object(cfg)
        self.cfg, self.env_url, self.run_dir = cfg, env_url, Path(run_dir)
        self.client, self.token = client or EnvClientSettings(), token
        self._lock = lock_run_dir(self.run_dir)
        try:
            self._open(cfg, self.run_dir)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, cfg: TrainerConfig, run_dir: Path) -> None:
        for change in check_run_dir(run_dir, cfg, backend="local"):
            print(f"[trainer] resuming with a changed data order (allowed): {change}")
        moved = set_aside_unfinished_attempt(run_dir, cfg, backend="local")
        if moved:  # (the launcher has done it already for its runs)
            print(f"[trainer] {moved}")
        self.tokenizer = load_tokenizer(cfg.model)
        self.tool_format = cfg.model.resolved_tool_format()
        end_of_turn = turn_tokenizer(self.tokenizer, self.tool_format).end_of_turn_id
        resume_from = ckpt.latest_checkpoint(run_dir) if cfg.checkpoint.resume else None
        try:
            self.policy = load_policy(cfg.model, self.tokenizer, resume_from)
        except Exception as error:
            if resume_from is None:
                raise
            # The loader's error seldom names the file: name those the policy comes from.
            files = sorted(resume_from.glob("*.safetensors")) + [resume_from / "config.json"]
            raise StateFileError(
                f"{resume_from}: cannot load the policy from {', '.join(map(str, files))}: "
                f"{type(error).__name__}: {error}"
            ) from error
        self.reference = (
            frozen_copy(load_policy(cfg.model, self.tokenizer))
            if needs_reference(cfg.loss)
            else None
        )
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )
        # No log-probs from generation: the update recomputes them (as verl does).
        self.generator = HFGenerator(
            self.policy,
            self.tokenizer,
            max_batch_size=cfg.rollout.max_batch_size,
            stop_token_ids=[end_of_turn],
            with_logprobs=False,
        )
        self.state = ckpt.TrainerState()
        self.served_profile: dict | None = None
        """The failure profile last pushed to the service (None: never pushed)."""
        self.failed_episodes = 0
        """Episodes of the last rollout that failed twice and were left out."""
        if resume_from is not None:
            self.capability_path = run_dir / STATE_FILENAME
            self._restore(resume_from)
        else:
            self.capability, self.capability_path = open_capability_state(
                run_dir, cfg.capability, resume=False
            )
        record_data_order(run_dir, cfg)
        self.train_ids = task_ids_of(cfg.data.train_file, cfg.data.max_train_tasks)
        self.val_ids = task_ids_of(cfg.data.val_file, cfg.data.max_val_tasks)
        self.steps_per_epoch = max(1, len(self.train_ids) // cfg.data.train_batch_size)
        self.total_steps = cfg.total_steps or cfg.total_epochs * self.steps_per_epoch
        self.log = MetricsLogger(run_dir, cfg, resume_step=self.state.step if resume_from else None)

    def _restore(self, path: Path) -> None:
        optimizer_state = ckpt.load_torch_file(path / "optimizer.pt", "optimizer state")
        self.optimizer.load_state_dict(optimizer_state)
        self.state = ckpt.load_trainer_state(path)
        # The checkpoint's state is the one to continue from: the run directory's copy is
        # saved every step, so it may be ahead of the checkpoint.
        self.capability = CapabilityState.load(path / STATE_FILENAME, self.cfg.capability)
        self.capability.save(self.capability_path)
        ckpt.restore_rng(path)
        print(f"[trainer] resumed from {path} at step {self.state.step}")

    def push_profile(self) -> None:
        """Send the capability state's failure profile to the service (the closed loop)."""
        profile = self.capability.failure_profile()
        push_profile(self.env_url, profile, self.token, self.client)
        self.served_profile = profile

    # --- the step ----------------------------------------------------------------------

    def train_step(self, step: int, epoch: int, task_ids: list[str]) -> dict[str, float]:
        cfg, t0 = self.cfg, time.perf_counter()
        # 1. Roll out every task n times; the service verifies and tags each episode.
        samples = self.rollout(task_ids, cfg.rollout.n, "sample", cfg.rollout.temperature)
        t1 = time.perf_counter()
        # 2. GRPO: outcome rewards normalised within each task's group of samples.
        mask = response_mask_matrix(samples)
        rewards = torch.tensor([s.reward for s in samples])
        groups = [s.task_id for s in samples]
        advantages = grpo_advantages(rewards, groups, mask, cfg.advantage)
        # 3. SEAL: the capability state observes the tags and moves the dynamic tag
        #    weights; A-Patch scales each sample's advantages by the weights of its tags.
        advantages, seal_metrics = observe_and_reweight(
            self.capability, samples, advantages, mask, cfg.apatch, step=step, epoch=epoch
        )
        record_interface(self.run_dir, step, samples, self.served_profile, self.capability)
        # 4. The actor update: clipped loss with KL to the frozen reference.
        update_metrics = self._update(samples, advantages, width=mask.shape[1])
        # 5. Close the loop: the service's guidelines follow the current failure profile.
        self.capability.save(self.capability_path)
        if cfg.rollout.push_profile:
            self.push_profile()
        t2 = time.perf_counter()
        return {
            **_rollout_metrics(samples, prefix="train"),
            FAILED_EPISODES: float(self.failed_episodes),
            **seal_metrics,
            **update_metrics,
            "time/rollout_s": t1 - t0,
            "time/update_s": t2 - t1,
        }

    def _update(self, samples: list[EpisodeSample], advantages: torch.Tensor, width: int):
        o = self.cfg.optim
        logprob_args = (samples, width, o.micro_batch_size, o.logprob_chunk_tokens, self.pad_id)
        old = batch_logprobs(self.policy, *logprob_args)
        ref = None if self.reference is None else batch_logprobs(self.reference, *logprob_args)
        return policy_update(
            self.policy, self.optimizer, samples, advantages, old, ref, self.cfg.loss,
            samples_per_mini_batch=o.mini_batch_size * self.cfg.rollout.n,
            micro_batch_size=o.micro_batch_size,
            chunk_tokens=o.logprob_chunk_tokens,
            grad_clip=o.grad_clip,
            pad_id=self.pad_id,
        )  # fmt: skip

    # --- rollouts and validation ---------------------------------------------------------

    def rollout(
        self, task_ids: list[str], n: int, mode: str, temperature: float
    ) -> list[EpisodeSample]:
        """n episodes per task; failed ones are left out (see rollout.max_failed_share)
        and counted in `self.failed_episodes`."""
        settings = self.cfg.episode_settings(mode)
        self.policy.eval()
        with torch.no_grad():
            samples, errors = asyncio.run(self._rollout(task_ids, n, settings, temperature, mode))
        self.failed_episodes = len(errors)
        return samples

    async def _rollout(self, task_ids, n, settings, temperature, mode):
        top_p = self.cfg.rollout.top_p
        async with EnvClient(self.env_url, self.client, token=self.token) as env:

            def play(task_id: str):
                return run_episode(
                    env, self.generator, self.tokenizer, task_id, settings,
                    tool_format=self.tool_format, temperature=temperature, top_p=top_p,
                )  # fmt: skip

            return await play_batch(
                play,
                [t for t in task_ids for _ in range(n)],
                max_failed_share=self.cfg.rollout.max_failed_share,
                what=mode,
            )

    def validate(self, step: int) -> dict[str, float]:
        samples = self.rollout(
            self.val_ids, 1, mode="validate", temperature=self.cfg.validation.temperature
        )
        records = [_record(s, step) for s in samples]
        write_step(self.run_dir / "validation", step, records, overwrite=True)
        return validation_metrics(step, records) | {VAL_FAILED_EPISODES: self.failed_episodes}

    # --- the loop ----------------------------------------------------------------------

    def fit(self) -> ckpt.TrainerState:
        try:
            return self._fit()
        finally:
            self._lock.release()

    def _fit(self) -> ckpt.TrainerState:
        cfg, state = self.cfg, self.state
        if cfg.rollout.push_profile:
            # First: the service may be a fresh one (a resumed run, a restarted service)
            # or hold another run's profile, and the next step's guidelines must be this
            # state's, as in an uninterrupted run.
            self.push_profile()
        if state.step == 0 and cfg.validation.before_train:
            self._after_validation(0, self.validate(0))
        progress = tqdm(total=self.total_steps, initial=state.step, desc="train", unit="step")
        while state.step < self.total_steps:
            epoch, offset = divmod(state.step, self.steps_per_epoch)
            if epoch > self.capability.epoch:
                write_epoch_summary(self.capability, self.run_dir / "tocf")
            self.capability.start_epoch(epoch)
            batch = epoch_order(self.train_ids, cfg.data.seed, epoch)[
                offset * cfg.data.train_batch_size : (offset + 1) * cfg.data.train_batch_size
            ]
            metrics = self.train_step(state.step + 1, epoch, batch)
            state.step, state.epoch = state.step + 1, epoch
            last = state.step == self.total_steps
            if last or state.step % cfg.validation.test_freq == 0:
                metrics |= self._after_validation(state.step, self.validate(state.step))
            self.log.write(state.step, metrics)
            progress.write(_console_line(state.step, metrics))
            progress.update(1)
            progress.set_postfix(reward=f"{metrics['train/reward_mean']:.3f}")
            if last or (cfg.checkpoint.save_freq and state.step % cfg.checkpoint.save_freq == 0):
                self._save()
        progress.close()
        write_epoch_summary(self.capability, self.run_dir / "tocf")
        self.log.close()
        return state

    def _after_validation(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        state, key = self.state, self.cfg.checkpoint.best_metric
        if key not in metrics:
            raise KeyError(
                f"checkpoint.best_metric {key!r} is not a validation metric: {sorted(metrics)}"
            )
        state.history.append({"step": step, **metrics})
        if state.best_metric is None or metrics[key] > state.best_metric:
            state.best_metric, state.best_step = metrics[key], step
        print(
            f"[trainer] validation at step {step}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        )
        if step == 0:
            self.log.write(0, metrics)
        return metrics

    def _save(self) -> None:
        ckpt.save_checkpoint(self.run_dir, self.state, self.policy, self.optimizer, self.capability)
        if self.cfg.checkpoint.keep_only_best:
            ckpt.prune_checkpoints(self.run_dir, self.state)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def run_local_training(cfg, env_url: str, run_dir: Path, split_file: Path) -> None:
    """The launcher's `local` job: train, then print validation pass rates per category."""
    client = OmegaConf.to_object(cfg.service.client)
    state = LocalTrainer(cfg.trainer, env_url, run_dir, client=client).fit()
    summaries = summarize(read_val_dir(run_dir / "validation"))
    print(f"\nvalidation pass rates per category ({run_dir / 'validation'}):\n")
    print(render_markdown(summaries))
    print(
        f"\nbest step {state.best_step} ({cfg.trainer.checkpoint.best_metric} = {state.best_metric:.4f}); "
        f"checkpoints in {run_dir / 'checkpoints'}; report: seal-report {run_dir}"
    )


# --- helpers -------------------------------------------------------------------------------


def _console_line(step: int, m: dict[str, float]) -> str:
    keys = {
        "reward": "train/reward_mean",
        "acc": "train/accuracy",
        "scale": "apatch/mean_scale",
        "pg": "actor/pg_loss",
        "kl": "actor/kl_loss",
        "clip": "actor/pg_clipfrac",
        "rollout_s": "time/rollout_s",
        "update_s": "time/update_s",
        "val_avg": "val/average",
    }
    parts = [f"{name} {m[key]:.4g}" for name, key in keys.items() if key in m]
    return f"[step {step}] " + "  ".join(parts)


def _rollout_metrics(samples: list[EpisodeSample], prefix: str) -> dict[str, float]:
    n = len(samples)
    return {
        **outcome_metrics(samples, prefix),
        f"{prefix}/generations_mean": sum(s.num_generations for s in samples) / n,
        f"{prefix}/response_tokens_mean": sum(len(s.response_ids) for s in samples) / n,
        # The training layers (guidelines above all) show here: their text is in the prompt.
        f"{prefix}/prompt_tokens_mean": sum(len(s.prompt_ids) for s in samples) / n,
    }


def _record(s: EpisodeSample, step: int) -> ValidationRecord:
    return ValidationRecord(
        task_id=s.task_id,
        data_source=s.category,
        score=s.accuracy,
        reward=s.reward,
        step=step,
        input=s.input_text,
        output=s.output_text,
        failure_tags=s.failure_tags,
        paper_label=s.paper_label,
        turns=s.num_generations,
        progress=s.progress,
    )
