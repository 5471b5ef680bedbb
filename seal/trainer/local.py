"""The single-process SEAL trainer: any Hugging Face causal LM on one CPU or GPU.

One step (`train_step`), as in the paper: roll out `batch` tasks x `n` samples against the
environment service -> the service diagnoses each episode -> the capability state updates
the tag weights -> GRPO advantages -> A-Patch -> the actor update (clipped loss + KL) ->
the failure profile goes back to the service. What SEAL adds is the `SealHooks` both
trainers call. Validation, checkpoints, precision and the simplifications, named:
docs/design.md, "The paper's recipe".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, fields
from functools import partial
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from seal import commands
from seal.algos.advantage import grpo_advantages
from seal.algos.loss import needs_reference
from seal.atomic_file import StateFileError
from seal.rollout.driver import EpisodeSample, play_batch, run_episode
from seal.rollout.env_client import EnvClient, EnvClientSettings
from seal.rollout.hf_generator import HFGenerator
from seal.rollout.turn_tokens import turn_tokenizer
from seal.runs import checkpoint as ckpt
from seal.runs import metrics_log
from seal.runs.data_order import epoch_order, task_ids_of
from seal.runs.records import ValidationRecord, evaluation_record, write_step
from seal.runs.run import Run, open_run
from seal.runs.run_record import model_identity, record_base_model, weights_sha256
from seal.trainer.local_preflight import refuse_if_it_cannot_fit
from seal.trainer.model import (
    TINY_MODELS,
    base_model_kind,
    build_tiny_model,
    compute_dtype,
    frozen_copy,
    gpu_peak_gb,
    load_policy,
    load_tokenizer,
)
from seal.trainer.precision import MixedPrecision
from seal.trainer.response_cut import ResponseCut
from seal.trainer.seal_hooks import SealHooks
from seal.trainer.update import batch_logprobs, policy_update, response_mask_matrix
from seal.trainer_config import ModelSettings, TrainerConfig


class LocalTrainer:
    def __init__(
        self,
        cfg: TrainerConfig,
        env_url: str,
        run: Run | Path,
        client: EnvClientSettings | None = None,
        token: str | None = None,
    ):
        """`run`: the launcher's opened run, or a directory to open (locked until `fit`
        ends); `client`: how to wait for and retry the service (default settings);
        `token`: the service's bearer token (default $SEAL_ENV_TOKEN)."""
        if isinstance(cfg, DictConfig):  # from the launcher: make it the typed dataclasses
            cfg = OmegaConf.to_object(cfg)
        opened_here = not isinstance(run, Run)
        if opened_here:
            run = open_run(run, cfg, backend="local", who="trainer")
        self.cfg, self.env_url, self.run, self.run_dir = cfg, env_url, run, run.dir
        self.client, self.token = client or EnvClientSettings(), token
        self._lock = run.lock if opened_here else None
        """The claim this trainer took and releases (None: the caller's run)."""
        try:
            self._open(cfg, self.run_dir)
            if opened_here:  # the launcher's run has recorded it with its other files
                run.record_data_order(cfg)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise

    def _open(self, cfg: TrainerConfig, run_dir: Path) -> None:
        self.tokenizer = load_tokenizer(cfg.model)
        self.tool_format = cfg.model.resolved_tool_format()
        self.response_cut = ResponseCut(cfg.loss.trained_response_tokens, self.tokenizer)
        end_of_turn = turn_tokenizer(self.tokenizer, self.tool_format).end_of_turn_id
        resume_from = ckpt.latest_checkpoint(run_dir) if cfg.checkpoint.resume else None
        refuse_if_it_cannot_fit(cfg)  # on a GPU: from the model's config, before its weights
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
        dtype = compute_dtype(cfg.model)
        self.weights = MixedPrecision(self.policy, dtype)
        """The float32 master weights (`self.policy`: the optimizer's, the checkpoints') and
        the copy in `trainer.model.dtype` that generation and the update compute with."""
        # The KL reference is the base model, on a resume too.
        self.reference = None
        if needs_reference(cfg.loss):
            fresh = resume_from is None  # then the compute copy holds the base weights
            base = self.weights.compute if fresh else load_policy(cfg.model, self.tokenizer)
            self.reference = frozen_copy(base, dtype)
        self.optimizer = self._new_optimizer()
        if self.run.attempt is not None:  # the launcher's run keeps the attempt's record
            # Before the random state is seeded or restored: building the tiny model seeds it.
            record_base_model(self.run.attempt, base_model_identity(cfg.model, self.tokenizer))
        # No log-probs from generation: the update recomputes them (as verl does).
        self.generator = HFGenerator(
            self.weights.compute,
            self.tokenizer,
            max_batch_size=cfg.rollout.max_batch_size,
            stop_token_ids=[end_of_turn],
            with_logprobs=False,
        )
        self.state = ckpt.TrainerState()
        self.seal = SealHooks(run_dir, cfg, self.env_url, self.client, self.token)
        self.failed_episodes = 0
        """Episodes of the last rollout that failed twice and were left out."""
        if resume_from is not None:
            self._restore(resume_from)
        else:
            self.seal.start()
            ckpt.seed_rng(cfg.rollout.seed)
        self.train_ids = task_ids_of(cfg.data.train_file, cfg.data.max_train_tasks)
        self.val_ids = task_ids_of(cfg.data.val_file, cfg.data.max_val_tasks)
        self.steps_per_epoch = max(1, len(self.train_ids) // cfg.data.train_batch_size)
        self.total_steps = cfg.total_steps or cfg.total_epochs * self.steps_per_epoch
        wandb = metrics_log.WandbSettings(cfg.logging.wandb, cfg.logging.project, asdict(cfg))
        resume_step = self.state.step if resume_from else None
        self.log = metrics_log.MetricsWriter(run_dir, resume_step=resume_step, wandb=wandb)
        """The run's metrics.jsonl (and wandb, `trainer.logging`)."""

    def _new_optimizer(self) -> torch.optim.Optimizer:
        o = self.cfg.optim
        return torch.optim.AdamW(self.policy.parameters(), lr=o.lr, weight_decay=o.weight_decay)

    def restart_from_current_policy(self) -> None:
        """Make the current weights the training's starting point: its KL reference (when
        the loss has one) becomes a frozen copy of them and the optimizer starts afresh.
        For weights changed outside training before it starts (the learning check's
        supervised warm-up, seal/learning_check/warm_up.py)."""
        self.weights.sync()
        if self.reference is not None:
            self.reference = frozen_copy(self.weights.compute, self.weights.dtype)
        self.optimizer = self._new_optimizer()

    def _restore(self, path: Path) -> None:
        optimizer_state = ckpt.load_torch_file(path / "optimizer.pt", "optimizer state")
        self.optimizer.load_state_dict(optimizer_state)
        self.state = ckpt.load_trainer_state(path)
        self.seal.restore(path)  # the capability state and the best step so far
        ckpt.restore_rng(path)
        print(f"[trainer] resumed from {path} at step {self.state.step}")

    @property
    def capability(self):
        """The run's capability state (seal/tocf/state.py)."""
        return self.seal.capability

    # --- the step ----------------------------------------------------------------------

    def train_step(self, step: int, epoch: int, task_ids: list[str]) -> dict[str, float]:
        cfg, t0 = self.cfg, time.perf_counter()
        gpu_peak_gb(self.policy)  # starts the step's count
        # 1. Roll out every task n times; the service verifies and tags each episode.
        episodes = self.rollout(task_ids, cfg.rollout.n, "sample", cfg.rollout.temperature)
        t1, rollout_peak = time.perf_counter(), gpu_peak_gb(self.policy)
        # What is trained of each: its response's first tokens (trainer.loss).
        samples = [self.response_cut(e) for e in episodes]
        # 2. GRPO: outcome rewards normalised within each task's group of samples.
        mask = response_mask_matrix(samples)
        rewards = torch.tensor([s.reward for s in samples])
        groups = [s.task_id for s in samples]
        advantages = grpo_advantages(rewards, groups, mask, cfg.advantage)
        # 3. SEAL: the capability state observes the tags and moves the dynamic tag
        #    weights; A-Patch scales each sample's advantages by the weights of its tags.
        advantages, seal_metrics = self.seal.reweight(
            samples, advantages, mask, step=step, epoch=epoch
        )
        # 4. The actor update: clipped loss with KL to the frozen reference.
        update_metrics = self._update(samples, advantages, width=mask.shape[1])
        # 5. Close the loop: the service's guidelines follow the current failure profile.
        self.seal.close_loop()
        t2, update_peak = time.perf_counter(), gpu_peak_gb(self.policy)
        peaks = {
            metrics_log.PEAK_GPU_ROLLOUT_GB: rollout_peak,
            metrics_log.PEAK_GPU_UPDATE_GB: update_peak,
        }
        return {
            **metrics_log.episode_metrics(episodes, samples),
            metrics_log.FAILED_EPISODES: float(self.failed_episodes),
            **seal_metrics,
            **update_metrics,
            metrics_log.TIME_ROLLOUT_S: t1 - t0,
            metrics_log.TIME_UPDATE_S: t2 - t1,
            **{key: gb for key, gb in peaks.items() if gb is not None},
        }

    def _update(self, samples: list[EpisodeSample], advantages: torch.Tensor, width: int):
        o = self.cfg.optim
        logprob_args = (samples, width, o.micro_batch_size, o.logprob_chunk_tokens, self.pad_id)
        old = batch_logprobs(self.weights.compute, *logprob_args)
        ref = None if self.reference is None else batch_logprobs(self.reference, *logprob_args)
        return policy_update(
            self.weights, self.optimizer, samples, advantages, old, ref, self.cfg.loss,
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
        self.weights.sync()  # the master weights may have changed outside the update too
        self.weights.compute.eval()
        with torch.no_grad():
            samples, errors = asyncio.run(self._rollout(task_ids, n, settings, temperature, mode))
        self.failed_episodes = len(errors)
        return samples

    async def _rollout(self, task_ids, n, settings, temperature, mode):
        async with EnvClient(self.env_url, self.client, token=self.token) as env:
            return await play_batch(
                partial(
                    run_episode, env, self.generator, self.tokenizer, settings=settings,
                    tool_format=self.tool_format, temperature=temperature,
                    top_p=self.cfg.rollout.top_p,
                ),
                [t for t in task_ids for _ in range(n)],
                max_failed_share=self.cfg.rollout.max_failed_share,
                what=mode,
            )  # fmt: skip

    def validate(self, step: int) -> dict[str, float]:
        samples = self.rollout(
            self.val_ids, 1, mode="validate", temperature=self.cfg.validation.temperature
        )
        records = [validation_record(s, step) for s in samples]
        write_step(self.run_dir / "validation", step, records, overwrite=True)
        return metrics_log.validation_metrics(records) | {
            metrics_log.VAL_FAILED_EPISODES: self.failed_episodes
        }

    # --- the loop ----------------------------------------------------------------------

    def fit(self) -> ckpt.TrainerState:
        try:
            return self._fit()
        finally:
            if self._lock is not None:
                self._lock.release()

    def _fit(self) -> ckpt.TrainerState:
        cfg, state = self.cfg, self.state
        if cfg.rollout.push_profile:
            # First: the service may be a fresh one (a resumed run, a restarted service)
            # or hold another run's profile, and the next step's guidelines must be this
            # state's, as in an uninterrupted run.
            self.seal.push_profile()
        if state.step == 0 and cfg.validation.before_train:
            self._after_validation(0, self.validate(0))
        progress = tqdm(total=self.total_steps, initial=state.step, desc="train", unit="step")
        while state.step < self.total_steps:
            epoch, offset = divmod(state.step, self.steps_per_epoch)
            self.seal.begin_epoch(epoch)
            order = epoch_order(self.train_ids, cfg.data.seed, epoch, cfg.data.order)
            batch = order[
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
            progress.set_postfix(reward=f"{metrics[metrics_log.REWARD_MEAN]:.3f}")
            if last or (cfg.checkpoint.save_freq and state.step % cfg.checkpoint.save_freq == 0):
                self._save()
        progress.close()
        self.seal.finish()
        self.log.close()
        return state

    def _after_validation(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        self.seal.validated(step, metrics)  # keeps the best step (`self.seal.best`)
        if step == 0:
            self.log.write(0, metrics)
        return metrics

    def _save(self) -> None:
        ckpt.save_checkpoint(
            self.run_dir, self.state, self.policy, self.optimizer, self.seal.save, self.tokenizer
        )
        if self.cfg.checkpoint.keep_only_best:
            ckpt.prune_checkpoints(self.run_dir, self.state.step, self.seal.best["step"])

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def run_local_training(cfg, env_url: str, run: Run, split_file: Path) -> str:
    """The launcher's `local` job: train; return the line the launcher prints under the
    run's pass rates (the best step, where the checkpoints and the report are)."""
    client = OmegaConf.to_object(cfg.service.client)
    trainer = LocalTrainer(cfg.trainer, env_url, run, client=client)
    trainer.fit()
    best, run_dir = trainer.seal.best, run.dir
    return (
        f"\nbest step {best['step']} ({best['metric']} = {best['value']:.4f}); "
        f"checkpoints in {run_dir / 'checkpoints'}; report: "
        f"{commands.script('seal-report', Path(run_dir))}"
    )


# --- helpers -------------------------------------------------------------------------------


def _console_line(step: int, m: dict[str, float]) -> str:
    """The step's line: reward, accuracy, A-Patch's mean scale or "apatch off", the layers
    its training episodes had on ("layers none" when off), losses, times, validation."""
    keys = {"reward": metrics_log.REWARD_MEAN, "acc": metrics_log.ACCURACY}
    later = {
        "pg": metrics_log.LOSS_POLICY,
        "kl": metrics_log.LOSS_KL,
        "clip": "actor/pg_clipfrac",
        "rollout_s": metrics_log.TIME_ROLLOUT_S,
        "update_s": metrics_log.TIME_UPDATE_S,
        "val_avg": metrics_log.VAL_AVERAGE,
    }
    parts = [f"{name} {m[key]:.4g}" for name, key in keys.items() if key in m]
    if metrics_log.APATCH_ACTIVE in m:
        on = m[metrics_log.APATCH_ACTIVE] and metrics_log.APATCH_MEAN_SCALE in m
        parts.append(f"apatch scale {m[metrics_log.APATCH_MEAN_SCALE]:.4g}" if on else "apatch off")
    layers = {
        k.removeprefix(metrics_log.LAYER_PREFIX): v
        for k, v in m.items()
        if k.startswith(metrics_log.LAYER_PREFIX)
    }
    if layers:
        shown = [
            name if share == 1 else f"{name} {share:.2g}" for name, share in layers.items() if share
        ]
        parts.append("layers " + (", ".join(shown) or "none"))
    parts += [f"{name} {m[key]:.4g}" for name, key in later.items() if key in m]
    return f"[step {step}] " + "  ".join(parts)


def base_model_identity(model: ModelSettings, tokenizer) -> dict:
    """What the run started from (seal/runs/run_record.py): a named or local model's
    revision or file hashes; the tiny model's settings and its weights' sha256 (it is
    built again here: deterministic, and it seeds torch's generator, so call this before
    the random state is set)."""
    if model.path not in TINY_MODELS:
        return model_identity(model.path)
    weights = weights_sha256(build_tiny_model(model, tokenizer).state_dict())
    settings = {f.name: getattr(model.tiny, f.name) for f in fields(model.tiny)}
    return {"path": model.path, "kind": base_model_kind(model), "settings": settings,
            "tokenizer": tokenizer.name_or_path, "weights_sha256": weights}  # fmt: skip


def validation_record(s: EpisodeSample, step: int) -> ValidationRecord:
    """The validation record of one episode (seal/runs/records.py)."""
    return evaluation_record(
        s.evaluation, step, input=s.input_text, output=s.output_text, turns=s.num_generations
    )
