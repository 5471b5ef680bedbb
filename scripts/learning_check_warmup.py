"""The learning check's supervised warm-up (scripts/learning_check.py explains why).

A tiny random model solves no BFCL task, so GRPO would see only zero rewards. The
warm-up plays the ground truth of the K tasks through the real service with the real
driver (scripted generator), then takes supervised steps on the negative log-likelihood
of the generated tokens until the sampled success rate (temperature 1, training episode
mode) lies in the target range. Also here: the task choice and the success measures the
GRPO part reports with.
"""

from __future__ import annotations

import asyncio

import numpy as np
import torch

from seal.bfcl.ground_truth import ground_truth_texts
from seal.bfcl.tasks import load_task
from seal.rollout.driver import EpisodeSample, run_episode
from seal.rollout.env_client import EnvClient
from seal.rollout.scripted import ScriptedGenerator
from seal.runs.data_order import task_ids_of
from seal.trainer.local import LocalTrainer
from seal.trainer.update import collate, response_logprobs

# --- tasks ---------------------------------------------------------------------------------


def gt_texts(task_id: str) -> list[str]:
    """The ground-truth policy's assistant texts in the Qwen2.5 format, in order (one
    per generation; the learning check trains the tiny Qwen2)."""
    return ground_truth_texts(load_task(task_id))


def pick_tasks(k: int, tokenizer, train_file: str) -> list[str]:
    """The k training tasks with the fewest generated ground-truth tokens (ties: fewer
    generations, then id). long_context tasks repeat base tasks with longer
    observations, so they are skipped to keep k distinct problems."""

    def cost(task_id: str) -> tuple[int, int, str]:
        texts = gt_texts(task_id)
        tokens = sum(len(tokenizer.encode(t, add_special_tokens=False)) + 1 for t in texts)
        return tokens, len(texts), task_id

    ids = [t for t in task_ids_of(train_file) if "long_context" not in t]
    return sorted(ids, key=cost)[:k]


def episode_sizes(task_ids: list[str], tokenizer) -> tuple[int, int]:
    """(longest ground-truth generation in tokens incl. eos, most ground-truth generations)."""
    texts = [gt_texts(t) for t in task_ids]
    longest = max(
        len(tokenizer.encode(x, add_special_tokens=False)) + 1 for ts in texts for x in ts
    )
    return longest, max(len(ts) for ts in texts)


# --- warm-up -------------------------------------------------------------------------------


async def _gt_episodes(url, tokenizer, task_ids, settings, tool_format) -> list[EpisodeSample]:
    async with EnvClient(url) as env:
        jobs = [
            run_episode(
                env,
                ScriptedGenerator.from_texts(tokenizer, gt_texts(t)),
                tokenizer,
                t,
                settings,
                tool_format=tool_format,
            )  # fmt: skip
            for t in task_ids
        ]
        return await asyncio.gather(*jobs)


def ground_truth_samples(trainer: LocalTrainer, task_ids: list[str]) -> list[EpisodeSample]:
    """The ground truth played through the service in the training episode mode, so the
    warm-up sees the same prompts and observations as the GRPO rollouts."""
    settings = trainer.cfg.episode_settings("sample")
    samples = asyncio.run(
        _gt_episodes(trainer.env_url, trainer.tokenizer, task_ids, settings, trainer.tool_format)
    )
    failed = [s.task_id for s in samples if not s.accuracy]
    if failed:
        raise SystemExit(f"error: the ground truth fails through the service on {failed}")
    return samples


def nll_step(model, optimizer, samples: list[EpisodeSample], pad_id: int, chunk: int) -> float:
    """One supervised step on the mean NLL per generated token (one batch of all
    samples); returns the NLL per episode (nats), whose exp(-x) approximates the chance
    that sampling reproduces the ground truth."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    batch = collate(samples, list(range(len(samples))), pad_id, torch.device("cpu"))
    logp, _ = response_logprobs(model, batch, chunk)
    loss = -(logp * batch.response_mask).sum() / batch.response_mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item() * float(batch.response_mask.sum()) / len(samples)


def sampled_success(trainer: LocalTrainer, task_ids: list[str], n: int) -> dict[str, float]:
    """Success rate and mean reward of n episodes per task at temperature 1, training mode."""
    samples = trainer.rollout(task_ids, n, mode="sample", temperature=1.0)
    per_task = {
        t: float(np.mean([s.accuracy for s in samples if s.task_id == t])) for t in task_ids
    }
    return {
        "success": float(np.mean([s.accuracy for s in samples])),
        "reward": float(np.mean([s.reward for s in samples])),
        "per_task": per_task,
    }


def greedy_success(trainer: LocalTrainer, task_ids: list[str]) -> dict[str, int]:
    """Greedy success per task on the plain benchmark (validate mode), for reference."""
    samples = trainer.rollout(task_ids, 1, mode="validate", temperature=0.0)
    return {s.task_id: int(s.accuracy) for s in samples}


def warm_up(trainer: LocalTrainer, task_ids: list[str], args) -> tuple[list[dict], bool]:
    """Supervised warm-up until the sampled success rate is in [low, high] (or budget)."""
    gt = ground_truth_samples(trainer, task_ids)
    optimizer = torch.optim.AdamW(trainer.policy.parameters(), lr=args.warmup_lr)
    chunk = trainer.cfg.optim.logprob_chunk_tokens
    history: list[dict] = []
    for step in range(1, args.warmup_max_steps + 1):
        loss = nll_step(trainer.policy, optimizer, gt, trainer.pad_id, chunk)
        history.append({"step": step, "nll": loss})
        print(f"[warm-up {step:4d}] ground-truth episode NLL {loss:.2f}", flush=True)
        # Sampled checks cost a rollout each; while the ground truth's likelihood is
        # ~exp(-NLL) < exp(-6) they cannot succeed, so they start once it is in reach.
        due = step % args.warmup_check_every == 0 and loss <= args.warmup_check_nll
        if not due and step != args.warmup_max_steps:
            continue
        check = sampled_success(trainer, task_ids, args.warmup_check_samples)
        history[-1] |= check
        print(
            f"[warm-up {step:4d}] episode NLL {loss:.2f}  sampled success {check['success']:.3f}  "
            f"per task {check['per_task']}",
            flush=True,
        )
        if args.warmup_low <= check["success"] <= args.warmup_high:
            return history, True
        if check["success"] > args.warmup_high:
            # Overshot between checks: GRPO has little left to learn; say so, go on.
            print("[warm-up] overshot the target range; continuing with this policy")
            return history, False
    print("[warm-up] budget spent before the target range; continuing with this policy")
    return history, False
