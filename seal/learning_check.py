"""Learning check: the SEAL loop raises the success rate of a small policy on a few tasks.

    seal-learning-check run [--k 4] [--steps 12] [--warmup-max-steps 200]
                            [--seed 0] [--out-dir outputs/learning_check]
    seal-learning-check table OUT/curve.json      # redraw a saved run's table and figure
    seal-learning-check seeds OUT_*/curve.json [--label NAME ...] [--png FILE]
                                                  # combine several seeds
    seal-learning-check arms [--seeds 0 1 2] [--out-dir DIR] [-- RUN ARGS]
                                                  # SEAL against vanilla GRPO, compared
    (or python -m seal.learning_check ...)

A tiny random Qwen2 is warmed up on the ground truth of K easy tasks, then GRPO through the
real service raises its sampled success; what each command does, what the check
simplifies and why its defaults: docs/development.md, "Learning check (CPU)".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from seal.bfcl.ground_truth import ground_truth_texts
from seal.bfcl.tasks import load_task
from seal.launch.service import new_token, start_service
from seal.report import cli
from seal.rollout.driver import EpisodeSample, run_episode
from seal.rollout.env_client import EnvClient
from seal.rollout.scripted import ScriptedGenerator
from seal.runs.data_order import task_ids_of
from seal.runs.metrics_log import APATCH_MEAN_SCALE
from seal.runs.records import write_step
from seal.trainer.local import LocalTrainer, validation_record
from seal.trainer.model import load_tokenizer
from seal.trainer.update import collate, response_logprobs
from seal.trainer_config import TrainerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
SEAL_ARM, GRPO_ARM = "seal", "grpo"
ARMS = {
    SEAL_ARM: {"apatch": True, "schema_cues": True, "push_profile": True},
    GRPO_ARM: {"apatch": False, "schema_cues": False, "push_profile": False},
}
"""What each arm switches: A-Patch, the schema-cue layer, the failure profile pushed."""


# --- settings ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="seal-learning-check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="warm up, then SEAL GRPO; write OUT/curve.{json,png}")
    p.add_argument("--k", type=int, default=4, help="number of easy training tasks (4)")
    p.add_argument("--steps", type=int, default=12, help="GRPO steps (12)")
    p.add_argument("--n", type=int, default=8, help="GRPO samples per task (8)")
    p.add_argument("--lr", type=float, default=1e-4, help="GRPO learning rate (1e-4)")
    p.add_argument(
        "--arm",
        choices=sorted(ARMS),
        default=SEAL_ARM,
        help="seal: A-Patch, schema cues and the closed loop on; grpo: vanilla GRPO, all "
        "three off (as exp/GRPO.yaml) (default: %(default)s)",
    )
    p.add_argument(
        "--eval-mode",
        choices=("sample", "validate"),
        default="sample",
        help="episodes the evaluation (and the warm-up's check) plays: sample = the training "
        "episodes' layers, validate = the plain benchmark, the same for every arm (sample)",
    )
    p.add_argument(
        "--guidelines",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="diagnostic guidelines in training episodes (default off: see the module doc)",
    )
    p.add_argument("--eval-every", type=int, default=4, help="evaluate every N GRPO steps (4)")
    p.add_argument("--eval-samples", type=int, default=32, help="eval samples per task (32)")
    p.add_argument(
        "--warmup-max-steps", type=int, default=200, help="warm-up budget, NLL steps (200)"
    )
    p.add_argument("--warmup-lr", type=float, default=1e-2, help="warm-up learning rate (1e-2)")
    p.add_argument(
        "--warmup-check-every", type=int, default=4, help="check success every N steps (4)"
    )
    p.add_argument("--warmup-check-samples", type=int, default=4, help="per task (4)")
    p.add_argument(
        "--warmup-check-nll",
        type=float,
        default=6.0,
        help="check only once the ground-truth episode NLL (nats) is below this (6.0)",
    )
    p.add_argument("--warmup-low", type=float, default=0.1, help="stop warm-up at >= (0.1)")
    p.add_argument("--warmup-high", type=float, default=0.6, help="... and <= this (0.6)")
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="the trainer's compute dtype (float32); bfloat16 checks mixed precision: float32 "
        "master weights, generation and the update in bf16 (slow on a CPU)",
    )
    p.add_argument("--hidden", type=int, default=64, help="tiny Qwen2 hidden size (64)")
    p.add_argument("--layers", type=int, default=2, help="tiny Qwen2 layers (2)")
    p.add_argument(
        "--warm-policy",
        type=Path,
        default=None,
        help="skip the warm-up: load this state_dict (a previous run's OUT/warm_policy.pt, "
        "same --hidden/--layers/--k/--seed) and only run GRPO (default: warm up)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of everything (0)")
    p.add_argument("--port", type=int, default=0, help="the service's port (0: a free one)")
    p.add_argument(
        "--out-dir",
        type=Path,
        default=REPO_ROOT / "outputs" / "learning_check",
        help="outputs: curve.json, curve.png, warm_policy.pt, run/ "
        "(default outputs/learning_check)",
    )
    a = commands.add_parser(
        "arms",
        help="the seal and grpo arms over several seeds, one run at a time, one shared "
        "warm-up; then seal-report --compare",
    )
    a.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="(0 1 2)")
    a.add_argument("--out-dir", type=Path, default=REPO_ROOT / "outputs" / "learning_check_arms")
    a.add_argument(
        "--warm-policy",
        type=Path,
        default=None,
        help="start every run from this warm-up (a seal `run --eval-mode validate`'s "
        "OUT/warm_policy.pt) (default: the first seal run warms up)",
    )
    a.add_argument(
        "run_args",
        nargs=argparse.REMAINDER,
        help="after --: arguments of every `run` (e.g. -- --steps 4 --eval-every 2)",
    )
    t = commands.add_parser("table", help="print a saved curve.json's table, redraw its PNG")
    t.add_argument("curve", type=Path, help="a run's curve.json")
    s = commands.add_parser("seeds", help="combine runs: per-run table, mean ± s.e., figure")
    s.add_argument("curves", nargs="+", type=Path, help="curve.json files of `run`")
    s.add_argument("--label", nargs="*", default=None, help="group label per file, or one for all")
    s.add_argument("--png", type=Path, default=None, help="write the figure here")
    args = parser.parse_args(argv)
    if args.command == "seeds":
        labels = args.label or [c.parent.name for c in args.curves]
        if len(labels) == 1:  # one label for all files
            labels = labels * len(args.curves)
        if len(labels) != len(args.curves):
            parser.error(f"{len(labels)} labels for {len(args.curves)} files")
        args.label = labels
    return args


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
        "data": {"train_batch_size": args.k, "seed": args.seed},
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
        "evolution": {"guidelines": args.guidelines, "schema_cues": arm["schema_cues"]},
        # One optimizer step per task group: 4 updates per GRPO step with K = 4.
        "optim": {"lr": args.lr, "mini_batch_size": 1, "micro_batch_size": 4},
        "apatch": {"enable": arm["apatch"]},
        "validation": {"before_train": False},
        "checkpoint": {"save_freq": 0},
        "logging": {"wandb": "disabled"},
    }
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainerConfig), overrides))


# --- tasks and the success measures --------------------------------------------------------


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


def sampled_success(
    trainer: LocalTrainer, task_ids: list[str], n: int, mode: str
) -> tuple[dict, list[EpisodeSample]]:
    """Success rate and mean reward of n episodes per task at temperature 1 in `mode`
    (`sample`: the training layers; `validate`: the plain benchmark), and the episodes."""
    samples = trainer.rollout(task_ids, n, mode=mode, temperature=1.0)
    per_task = {
        t: float(np.mean([s.accuracy for s in samples if s.task_id == t])) for t in task_ids
    }
    check = {
        "success": float(np.mean([s.accuracy for s in samples])),
        "reward": float(np.mean([s.reward for s in samples])),
        "per_task": per_task,
    }
    return check, samples


def write_eval_records(run_dir: Path, step: int, samples: list[EpisodeSample], mode: str) -> None:
    """The evaluation's episodes as validation records (RUN/validation/step_N.jsonl), the
    samples of a task numbered, so `seal-report --compare` scores each task by its mean."""
    numbers: dict[str, int] = defaultdict(int)
    records = []
    for sample in samples:
        record = validation_record(sample, step)
        extra = {"sample": numbers[sample.task_id], "mode": mode, "temperature": 1.0}
        numbers[sample.task_id] += 1
        records.append(record.model_copy(update={"extra": extra}))
    write_step(run_dir / "validation", step, records)


def greedy_success(trainer: LocalTrainer, task_ids: list[str]) -> dict[str, int]:
    """Greedy success per task on the plain benchmark (validate mode), for reference."""
    samples = trainer.rollout(task_ids, 1, mode="validate", temperature=0.0)
    return {s.task_id: int(s.accuracy) for s in samples}


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


# --- GRPO ----------------------------------------------------------------------------------


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
            parts.append(f"{key} {_fmt(row[key], off=key == 'apatch_mean_scale')}")
    return "[grpo] " + "  ".join(parts)


# --- outputs -------------------------------------------------------------------------------


def _fmt(value, off: bool = False) -> str:
    """A table cell; `off`: the column is A-Patch's, whose None means it was off."""
    if value is None:
        return "off" if off else ""
    return f"{value:.3f}"


def print_table(curve: list[dict]) -> None:
    header = "| step | train success (n x K) | train reward | A-Patch mean scale | eval success (temp 1) | eval reward |"
    print("\n" + header + "\n|---|---|---|---|---|---|")
    for r in curve:
        cells = [
            _fmt(r.get(k), off=k == "apatch_mean_scale" and "train_success" in r)
            for k in (
                "train_success",
                "train_reward",
                "apatch_mean_scale",
                "eval_success",
                "eval_reward",
            )
        ]
        print(f"| {r['step']} | " + " | ".join(cells) + " |")


def plot_curve(curve: list[dict], warm: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    checks = [w for w in warm if "success" in w]
    ax0.plot([w["step"] for w in warm], [w["nll"] for w in warm], "-", color="grey")
    ax0.set(title="supervised warm-up", xlabel="NLL step", ylabel="ground-truth episode NLL")
    ax0.set_yscale("log")
    ax0r = ax0.twinx()
    ax0r.plot([w["step"] for w in checks], [w["success"] for w in checks], "o-", color="C0")
    ax0r.set(ylabel="sampled success (temp 1)", ylim=(0, 1))
    train = [r for r in curve if "train_success" in r]
    evals = [r for r in curve if "eval_success" in r]
    ax1.plot(
        [r["step"] for r in train],
        [r["train_success"] for r in train],
        ".-",
        label="train success (rollouts)",
    )
    ax1.plot(
        [r["step"] for r in evals],
        [r["eval_success"] for r in evals],
        "o-",
        label="eval success (temp 1)",
    )
    scaled = [r for r in train if r.get("apatch_mean_scale") is not None]
    if scaled:  # A-Patch off scales nothing: no line that would read like a SEAL run's
        ax1.plot(
            [r["step"] for r in scaled],
            [r["apatch_mean_scale"] for r in scaled],
            "x:",
            label="A-Patch mean scale",
        )
    ax1.set(
        title="GRPO on the same tasks" + (" (SEAL: A-Patch on)" if scaled else " (A-Patch off)"),
        xlabel="GRPO step",
        ylim=(0, max(2.0, ax1.get_ylim()[1])),
    )
    ax1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def eval_curve(path: Path) -> dict[int, float]:
    curve = json.loads(path.read_text())["curve"]
    return {r["step"]: r["eval_success"] for r in curve if "eval_success" in r}


def mean_and_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return mean, se


def print_group(label: str, runs: dict[str, dict[int, float]]) -> None:
    steps = sorted(set.intersection(*(set(c) for c in runs.values())))
    names = list(runs)
    print(f"\n### {label} ({len(runs)} runs)\n")
    print("| step | " + " | ".join(names) + " | mean ± s.e. |")
    print("|---|" + "---|" * (len(names) + 1))
    for step in steps:
        values = [runs[n][step] for n in names]
        mean, se = mean_and_se(values)
        cells = " | ".join(f"{v:.3f}" for v in values)
        print(f"| {step} | {cells} | {mean:.3f} ± {se:.3f} |")
    first, last = steps[0], steps[-1]
    deltas = [runs[n][last] - runs[n][first] for n in names]
    rose = sum(d > 0 for d in deltas)
    mean, se = mean_and_se(deltas)
    print(
        f"\nstep {first} -> {last}: change {mean:+.3f} ± {se:.3f}; rose in {rose}/{len(deltas)} runs"
    )


def plot_seeds(groups: dict[str, dict[str, dict[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for color, (label, runs) in zip(("C0", "C3", "C2", "C1"), groups.items(), strict=False):
        steps = sorted(set.intersection(*(set(c) for c in runs.values())))
        for curve in runs.values():
            ax.plot(steps, [curve[s] for s in steps], ".-", color=color, alpha=0.3)
        means = [statistics.fmean(c[s] for c in runs.values()) for s in steps]
        ax.plot(steps, means, "o-", color=color, lw=2, label=f"{label}: mean of {len(runs)}")
    ax.set(xlabel="GRPO step", ylabel="sampled eval success (temp 1)", ylim=(0, None))
    ax.set_title("learning check: tiny Qwen2, 4 BFCL tasks, SEAL GRPO steps")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nfigure: {path}")


# --- main ----------------------------------------------------------------------------------


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


def table_command(path: Path) -> int:
    """The `table` command: a saved run's table printed, its PNG redrawn beside it."""
    saved = json.loads(path.read_text())
    print_table(saved["curve"])
    plot_curve(saved["curve"], saved["warmup"]["history"], path.with_suffix(".png"))
    return 0


def seeds_command(paths: list[Path], labels: list[str], png: Path | None) -> int:
    """The `seeds` command: each group's table and change, and the figure with --png."""
    groups: dict[str, dict[str, dict[int, float]]] = defaultdict(dict)
    for label, path in zip(labels, paths, strict=True):
        groups[label][path.parent.name] = eval_curve(path)
    for label, runs in groups.items():
        print_group(label, runs)
    if png:
        plot_seeds(groups, png)
    return 0


def arms_command(
    seeds: list[int], out_dir: Path, run_args: list[str], warm: Path | None = None
) -> int:
    """The `arms` command: `run` for the seal and the grpo arm over `seeds`, one run at a
    time and each in its own process (a run's memory is freed before the next starts), all
    from one warm-up (the first seal run's, on the ground truth of both arms' training
    episodes and the plain benchmark), all evaluated on the plain benchmark
    (`--eval-mode validate`, the same episodes for both arms); then `seal-report --compare`
    of the two arms into OUT/compare/ (tasks as a sample) and OUT/compare_fixed/ (`--tasks
    fixed`). `warm`: a warm-up to start every run from instead.
    Returns 1 if a run failed."""
    run_args = [a for a in run_args if a != "--"]
    warmed_here = warm is None
    warm = warm or out_dir / f"{SEAL_ARM}_{seeds[0]}" / "warm_policy.pt"
    times = []
    for arm in (SEAL_ARM, GRPO_ARM):
        for seed in seeds:
            out = out_dir / f"{arm}_{seed}"
            command = [sys.executable, "-m", "seal.learning_check", "run", *run_args,
                       "--eval-mode", "validate", "--arm", arm, "--seed", str(seed),
                       "--out-dir", str(out)]  # fmt: skip
            if not warmed_here or (arm, seed) != (SEAL_ARM, seeds[0]):  # else it warms up
                command += ["--warm-policy", str(warm)]
            print(f"[arms] {' '.join(command)}", flush=True)
            if subprocess.run(command, check=False).returncode != 0:
                print(f"[arms] the {arm} run of seed {seed} failed", file=sys.stderr)
                return 1
            saved = json.loads((out / "curve.json").read_text())
            times.append(
                (arm, seed, saved["warmup"]["seconds"], saved["grpo_s"], saved["runtime_s"])
            )
    print("\n| arm | seed | warm-up (s) | GRPO and its evaluations (s) | run (s) |")
    print("|---|---|---|---|---|")
    for arm, seed, warm_s, grpo_s, run_s in times:
        print(f"| {arm} | {seed} | {warm_s:.0f} | {grpo_s:.0f} | {run_s:.0f} |")
    arms = []
    for arm in (SEAL_ARM, GRPO_ARM):
        arms += ["--arm", arm.upper(), *(str(out_dir / f"{arm}_{seed}" / "run") for seed in seeds)]
    argv = ["--compare", *arms, "--baseline", GRPO_ARM.upper()]
    # The tasks taken as a sample (the default) and as fixed: the check trains and evaluates
    # on the same K tasks, so its own claim is about these tasks.
    if cli.main([*argv, "--out-dir", str(out_dir / "compare")]):
        return 1
    return cli.main([*argv, "--tasks", "fixed", "--out-dir", str(out_dir / "compare_fixed")])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "arms":
        return arms_command(args.seeds, args.out_dir, args.run_args, args.warm_policy)
    if args.command == "table":
        return table_command(args.curve)
    if args.command == "seeds":
        return seeds_command(args.curves, args.label, args.png)
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
