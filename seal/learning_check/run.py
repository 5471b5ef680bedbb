"""The learning check's `run` command: the arm's tiny CPU trainer, the warm-up, GRPO steps
with periodic evaluation, and the curve written under --out-dir."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from seal.launch.service import new_token, start_service
from seal.learning_check.arms import ARMS
from seal.learning_check.curves import format_cell, plot_curve, print_table
from seal.learning_check.tasks import (
    episode_sizes,
    greedy_success,
    pick_tasks,
    sampled_success,
    write_eval_records,
)
from seal.learning_check.warm_up import warm_up
from seal.runs.metrics_log import APATCH_MEAN_SCALE
from seal.trainer.local import LocalTrainer
from seal.trainer.model import load_tokenizer
from seal.trainer_config import TrainerConfig


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def trainer_config(args, max_new_tokens: int, max_generations: int) -> TrainerConfig:
    """The tiny CPU trainer, shaped like tests/seal/trainer/test_e2e.py, sized to the tasks, with
    the arm's switches (ARMS)."""
    arm = ARMS[args.arm]
    overrides = {
        "total_steps": args.steps,
        "model": {
            "path": "tiny-qwen2",
            "dtype": args.dtype,
            "device": "cpu",
            "tiny": {
                "hidden_size": args.hidden,
                "num_hidden_layers": args.layers,
                "intermediate_size": 2 * args.hidden,
                "seed": args.seed,
            },
        },
        # This project's data order and best-step rule (the paper configs take the release's).
        "data": {"train_batch_size": args.k, "seed": args.seed, "order": "shuffle_per_epoch"},
        "rollout": {
            "n": args.n,
            "temperature": 1.0,
            "max_batch_size": 64,
            "seed": args.seed,
            "push_profile": arm["push_profile"],
        },
        "limits": {
            "max_generations": max_generations,
            "max_new_tokens": max_new_tokens,
            "max_context_tokens": 12288,
            "max_observation_tokens": 512,
        },
        # Guidelines change the system prompt mid-run; a tiny model that memorised its
        # warm-up prompt is thrown off by that (suspected cause of the first run's collapse).
        "interface": {"guidelines": args.guidelines, "schema_cues": arm["schema_cues"]},
        # The loss, the training cut and the context stop keep the paper's defaults (each
        # episode's token mean averaged; these episodes are far below 4,096 tokens and the
        # context's reserve): the check trains as the paper configs do.
        # One optimizer step per task group: 4 updates per GRPO step with K = 4.
        "optim": {"lr": args.lr, "mini_batch_size": 1, "micro_batch_size": 4},
        "apatch": {"enable": arm["apatch"]},
        "validation": {"before_train": False},
        "checkpoint": {"save_freq": 0, "best_rule": "average"},
        "logging": {"wandb": "disabled"},
    }
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainerConfig), overrides))


def grpo(trainer: LocalTrainer, task_ids: list[str], args) -> list[dict]:
    """GRPO steps on all K tasks; the curve rows (train metrics, periodic evaluation)."""
    curve = [{"step": 0, **_eval_row(trainer, task_ids, args, 0)}]
    print(_row_line(curve[-1]), flush=True)
    for step in range(1, args.steps + 1):
        trainer.capability.start_epoch(step - 1)
        metrics = trainer.train_step(step, step - 1, list(task_ids))
        trainer.log.write(step, metrics)
        row = {
            "step": step,
            "train_success": metrics["train/accuracy"],
            "train_reward": metrics["train/reward_mean"],
            # None when A-Patch is off: it scales nothing (table and figure say "off").
            "apatch_mean_scale": metrics.get(APATCH_MEAN_SCALE),
            "kl": metrics.get("actor/kl_loss", float("nan")),
            "time_s": metrics["time/rollout_s"] + metrics["time/update_s"],
        }
        if step % args.eval_every == 0 or step == args.steps:
            row |= _eval_row(trainer, task_ids, args, step)
        curve.append(row)
        print(_row_line(row), flush=True)
    trainer.log.close()
    return curve


def _eval_row(trainer: LocalTrainer, task_ids: list[str], args, step: int) -> dict:
    check, samples = sampled_success(trainer, task_ids, args.eval_samples, args.eval_mode)
    write_eval_records(trainer.run_dir, step, samples, args.eval_mode)
    return {
        "eval_success": check["success"],
        "eval_reward": check["reward"],
        "eval_per_task": check["per_task"],
    }


def _row_line(row: dict) -> str:
    parts = [f"step {row['step']:3d}"]
    for key in (
        "train_success",
        "train_reward",
        "apatch_mean_scale",
        "eval_success",
        "eval_reward",
    ):
        if key in row:
            parts.append(f"{key} {format_cell(row[key], off=key == 'apatch_mean_scale')}")
    return "[grpo] " + "  ".join(parts)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds, so the service context stops its process


def run_check(args: argparse.Namespace) -> int:
    """The `run` command: warm-up, GRPO, the curve written under --out-dir."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    t_start = time.perf_counter()
    seed_everything(args.seed)
    out_dir: Path = args.out_dir
    run_dir = out_dir / "run"
    if run_dir.exists():  # this check's own previous run: the trainer refuses to mix runs
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)

    probe = trainer_config(args, 1, 1)
    tokenizer = load_tokenizer(probe.model)
    task_ids = pick_tasks(args.k, tokenizer, probe.data.train_file)
    longest, generations = episode_sizes(task_ids, tokenizer)
    # A little room beyond the ground truth: a sample can be wrong without being cut off.
    cfg = trainer_config(args, max_new_tokens=longest + 8, max_generations=generations + 1)
    settings = {"args": {k: str(v) for k, v in vars(args).items()}, "tasks": task_ids,
                "max_new_tokens": cfg.limits.max_new_tokens,
                "max_generations": cfg.limits.max_generations}  # fmt: skip
    print(f"[learning-check] arm {args.arm}, seed {args.seed}; tasks {task_ids}")
    print(f"[learning-check] settings {json.dumps(settings)}", flush=True)
    # The run's config, as a training run's config.yaml, for seal-report (--compare tables
    # the keys that differ between runs).
    config = {"job": "learning_check", "learning_check": settings["args"], "trainer": cfg}
    OmegaConf.save(OmegaConf.create(config), run_dir / "config.yaml")

    with start_service("127.0.0.1", args.port, run_dir / "service.log", new_token()) as service:
        # The warm-up's client takes the trainer's token and client settings too.
        trainer = LocalTrainer(cfg, service.url, run_dir, token=service.token)
        greedy_start = greedy_success(trainer, task_ids)
        t0 = time.perf_counter()
        if args.warm_policy is not None:  # re-tune GRPO without repeating the warm-up
            trainer.policy.load_state_dict(torch.load(args.warm_policy, weights_only=True))
            warm, in_range = [], None
        else:
            warm, in_range = warm_up(trainer, task_ids, args)
            torch.save(trainer.policy.state_dict(), out_dir / "warm_policy.pt")
        warm_s = time.perf_counter() - t0
        greedy_warm = greedy_success(trainer, task_ids)
        print(f"[learning-check] warm-up {warm_s:.0f} s; greedy success (validate) {greedy_warm}")
        trainer.restart_from_current_policy()  # GRPO starts from the warmed-up weights
        seed_everything(args.seed + 1)  # GRPO's sampling does not depend on the warm-up length
        t1 = time.perf_counter()
        curve = grpo(trainer, task_ids, args)
        grpo_s = time.perf_counter() - t1
        greedy_end = greedy_success(trainer, task_ids)
    runtime = time.perf_counter() - t_start

    print_table(curve)
    evals = [r["eval_success"] for r in curve if "eval_success" in r]
    rose = evals[-1] > evals[0]
    print(
        f"\n[learning-check] eval success {evals[0]:.3f} -> {evals[-1]:.3f} "
        f"({'rose' if rose else 'did not rise'}); greedy (validate) before warm-up "
        f"{greedy_start}, after warm-up {greedy_warm}, after GRPO {greedy_end}; "
        f"runtime {runtime:.0f} s"
    )
    result = {
        **settings,
        "warmup": {"history": warm, "in_target_range": in_range, "seconds": warm_s},
        "greedy_validate": {
            "initial": greedy_start,
            "after_warmup": greedy_warm,
            "after_grpo": greedy_end,
        },
        "curve": curve,
        "eval_success_rose": rose,
        "grpo_s": grpo_s,
        "runtime_s": runtime,
    }
    (out_dir / "curve.json").write_text(json.dumps(result, indent=2))
    plot_curve(curve, warm, out_dir / "curve.png")
    print(f"[learning-check] wrote {out_dir / 'curve.json'} and {out_dir / 'curve.png'}")
    return 0
