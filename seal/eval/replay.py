"""The `replay` job: run scripted policies through the service and score them.

The environment service's own demonstration, and a smoke test of the whole
verification path: the ground-truth policy should pass every task but the one that is
unsolvable by construction (multi_turn_miss_func_49), and a corrupted policy shows
the diagnosis at work. Each policy's results are written as validation records
(seal.runs.records), so the summary script and reports read them like a trainer's.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from pathlib import Path

from tqdm.asyncio import tqdm_asyncio

from seal.bfcl import ground_truth as gt
from seal.bfcl.tasks import load_task, task_ids
from seal.report.summary import render_markdown, summarize_step
from seal.rollout.env_client import EnvClient
from seal.rollout.scripted import run_scripted_episode
from seal.runs.records import ValidationRecord, evaluation_record, write_step
from seal.runs.run import Run
from seal.service_contract import EpisodeSettings


def ground_truth_policy(task, rng: random.Random) -> gt.Trajectory:
    return gt.ground_truth_trajectory(task)


def drop_call_policy(task, rng: random.Random) -> gt.Trajectory:
    clean = gt.ground_truth_trajectory(task)
    turn = rng.choice([i for i, steps in enumerate(clean) if steps])
    return gt.drop_call(clean, turn, rng.randrange(len(clean[turn][0])))


POLICIES = {"ground_truth": ground_truth_policy, "drop_call": drop_call_policy}


def split_task_ids(split: str, split_file: Path) -> list[str]:
    if split == "all":
        return task_ids()
    ids = json.loads(split_file.read_text())
    if split not in ids:
        raise ValueError(f"unknown split {split!r}; expected train, eval or all")
    return ids[split]


def record_from_evaluation(evaluation: dict, step: int) -> ValidationRecord:
    """A validation record from a scripted or model episode's evaluation."""
    return evaluation_record(
        evaluation,
        step,
        input=json.dumps(evaluation["input"], ensure_ascii=False),
        output=json.dumps(evaluation["output"], ensure_ascii=False),
        turns=evaluation["steps"],
    )


async def replay_policy(
    url: str, ids: list[str], policy: str, concurrency: int, seed: int
) -> list[dict]:
    rng = random.Random(seed)
    scripts = {tid: gt.assistant_messages(POLICIES[policy](load_task(tid), rng)) for tid in ids}
    gate = asyncio.Semaphore(concurrency)
    async with EnvClient(url, max_connections=concurrency) as client:

        async def one(task_id: str) -> dict:
            async with gate:
                return await run_scripted_episode(
                    client, task_id, scripts[task_id], EpisodeSettings(mode="validate")
                )

        return await tqdm_asyncio.gather(*(one(t) for t in ids), desc=policy, unit="episode")


def run_replay_job(cfg, url: str, run: Run | Path, split_file: Path) -> None:
    run_dir = Path(run)
    ids = split_task_ids(cfg.replay.split, split_file)
    for policy in cfg.replay.policies:
        if policy not in POLICIES:
            raise ValueError(f"unknown replay policy {policy!r}; choose from {sorted(POLICIES)}")
        evaluations = asyncio.run(
            replay_policy(url, ids, policy, cfg.replay.concurrency, cfg.replay.seed)
        )
        records = [record_from_evaluation(r, step=0) for r in evaluations]
        path = write_step(run_dir / "validation" / policy, 0, records, overwrite=True)
        tags = Counter(tag for r in evaluations for tag in r["failure_tags"])
        print(f"\n## policy: {policy}  ({len(ids)} tasks, records in {path})\n")
        print(render_markdown([summarize_step(0, records)]))
        print(
            "\nfailure tags (one per ground-truth turn): "
            + ", ".join(f"{t} {n}" for t, n in tags.most_common())
        )
        failed = sorted(r["task_id"] for r in evaluations if not r["accuracy"])
        if policy == "ground_truth":
            print(f"ground truths that fail through the service: {failed or 'none'}")
