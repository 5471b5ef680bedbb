"""The learning check's supervised warm-up: the ground truth played through the service,
NLL steps on it until the sampled success is in the target range."""

from __future__ import annotations

import asyncio

import torch

from seal.learning_check.tasks import gt_texts, sampled_success
from seal.rollout.driver import EpisodeSample, run_episode
from seal.rollout.env_client import EnvClient
from seal.rollout.scripted import ScriptedGenerator
from seal.trainer.local import LocalTrainer
from seal.trainer.update import collate, response_logprobs


async def _gt_episodes(trainer: LocalTrainer, task_ids, settings) -> list[EpisodeSample]:
    tokenizer = trainer.tokenizer
    async with EnvClient(trainer.env_url, trainer.client, token=trainer.token) as env:
        jobs = [
            run_episode(
                env,
                ScriptedGenerator.from_texts(tokenizer, gt_texts(t)),
                tokenizer,
                t,
                settings,
                tool_format=trainer.tool_format,
            )  # fmt: skip
            for t in task_ids
        ]
        return await asyncio.gather(*jobs)


def ground_truth_samples(
    trainer: LocalTrainer, task_ids: list[str], modes: tuple[str, ...] = ("sample",)
) -> list[EpisodeSample]:
    """The ground truth played through the service in each episode mode, so the warm-up
    sees the prompts and observations of the GRPO rollouts (`sample`) and of the evaluation;
    an episode equal to one already played (no layer differs) is played once."""
    samples, seen = [], set()
    for mode in modes:
        settings = trainer.cfg.episode_settings(mode)
        for sample in asyncio.run(_gt_episodes(trainer, task_ids, settings)):
            key = (tuple(sample.prompt_ids), tuple(sample.response_ids))
            if key not in seen:
                seen.add(key)
                samples.append(sample)
    failed = [s.task_id for s in samples if not s.accuracy]
    if failed:
        raise SystemExit(f"error: the ground truth fails through the service on {failed}")
    return samples


def nll_step(model, optimizer, samples: list[EpisodeSample], pad_id: int, chunk: int) -> float:
    """One supervised step on the mean NLL per generated token over all samples; returns
    the NLL per episode (nats), whose exp(-x) approximates the chance that sampling
    reproduces the ground truth. The gradient is accumulated one episode at a time: the
    same gradient as one batch, without padding every episode to the longest, and the
    logits of one episode in memory at a time (151,936 per token)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    tokens = sum(sum(s.response_mask) for s in samples)
    total = 0.0
    for k in range(len(samples)):
        batch = collate(samples, [k], pad_id, torch.device("cpu"))
        logp, _ = response_logprobs(model, batch, chunk)
        nll = -(logp * batch.response_mask).sum()
        (nll / tokens).backward()
        total += nll.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return total / len(samples)


def warm_up(trainer: LocalTrainer, task_ids: list[str], args) -> tuple[list[dict], bool]:
    """Supervised warm-up on the ground truth of the training episodes and of the
    evaluation's (when they differ), until the evaluation's sampled success rate is in
    [low, high] (or the budget is spent)."""
    gt = ground_truth_samples(trainer, task_ids, tuple(dict.fromkeys(("sample", args.eval_mode))))
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
        check, _ = sampled_success(trainer, task_ids, args.warmup_check_samples, args.eval_mode)
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
