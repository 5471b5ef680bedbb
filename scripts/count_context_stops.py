"""Count the ground-truth episodes the context stop ends: the release's rule, counted its
way, against this project's driver under each `trainer.limits.context_stop`.

    python scripts/count_context_stops.py [--concurrency 8] [--out counts.json]

Plays every one of the 800 tasks (data/seal_split.json) with its ground truth through the
environment service, each split in its own episode mode, with the paper's limits; counts
per split and category the release's rule its way (the raw history tokenized whole before
each generation, as its `check_context_token_num_safe`), the driver under `release` and
under `fill`. Each count and the figures: docs/paper_configs.md, "The release's arithmetic".
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path

from transformers import AutoTokenizer

from seal.bfcl.ground_truth import ground_truth_texts
from seal.bfcl.tasks import CATEGORIES, category_of, load_task
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.driver import run_episode
from seal.rollout.env_client import EnvClient
from seal.rollout.scripted import ScriptedGenerator, run_scripted_episode
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.service_contract import EpisodeLimits
from seal.trainer.response_cut import ResponseCut
from seal.trainer_config import TrainerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchfixtures: not installed
from benchfixtures.service import bench_service  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
FORMAT = get_format(PAPER_QWEN)
PAPER = TrainerConfig()
MODES = {"train": "sample", "eval": "validate"}
"""Each split in the episode mode the paper's run plays it in."""


def release_stop(tokenizer, first: list[dict], transcript: list[dict], limit: int) -> int | None:
    """The generation before which the release's rule stops the episode (None: never):
    the raw conversation before it, through the generation prompt, tokenized whole."""
    replies = [i for i, m in enumerate(transcript) if m["role"] == "assistant"]
    for k, index in enumerate(replies):
        text = tokenizer.apply_chat_template(
            first + transcript[:index], tokenize=False, add_generation_prompt=True
        )
        if len(tokenizer.encode(text, add_special_tokens=False)) >= limit:
            return k
    return None


async def one_task(env, tokenizer, cut: ResponseCut, task_id: str, split: str) -> dict:
    settings = PAPER.episode_settings(MODES[split])
    texts = ground_truth_texts(load_task(task_id), FORMAT.call_text)
    whole = EpisodeLimits(max_observation_tokens=10**6, max_context_tokens=10**7)
    scripted = await run_scripted_episode(
        env, task_id, [texts], dataclasses.replace(settings, limits=whole), tool_format=FORMAT
    )
    reserve = PAPER.limits.max_context_tokens - PAPER.limits.max_new_tokens
    row = {
        "task_id": task_id,
        "split": split,
        "category": category_of(task_id),
        "generations": len(texts),
        "release_stop": release_stop(tokenizer, scripted["input"], scripted["output"], reserve),
    }
    for rule in ("release", "fill"):
        limits = dataclasses.replace(PAPER.limits, context_stop=rule)
        sample = await run_episode(
            env, ScriptedGenerator.from_texts(tokenizer, texts), tokenizer, task_id,
            dataclasses.replace(settings, limits=limits), tool_format=FORMAT,
        )  # fmt: skip
        row[rule] = {
            "stop_reason": sample.stop_reason,
            "generations": sample.num_generations,
            "accuracy": sample.accuracy,
            "response_tokens": len(sample.response_ids),
            "cut": len(cut(sample).response_ids) < len(sample.response_ids),
        }
    return row


def driver_stop(outcome: dict) -> int | None:
    """The generation before which the driver stopped for the context (None: never)."""
    return outcome["generations"] if outcome["stop_reason"] == "context_limit" else None


async def play_all(url: str, token: str, tokenizer, ids: dict, concurrency: int) -> list[dict]:
    gate = asyncio.Semaphore(concurrency)
    cut = ResponseCut(PAPER.loss.trained_response_tokens, tokenizer)
    async with EnvClient(url, token=token, max_connections=concurrency) as env:

        async def guarded(task_id: str, split: str) -> dict:
            async with gate:
                return await one_task(env, tokenizer, cut, task_id, split)

        jobs = [guarded(t, split) for split, tasks in ids.items() for t in tasks]
        return await asyncio.gather(*jobs)


def table(rows: list[dict]) -> str:
    """Per split and category: tasks; episodes the release's rule stops, counted its way
    and by the driver; those whose ground truth then fails though it passes under fill;
    tasks where both stop at the same generation (or neither); under fill, the stopped
    episodes, the responses over the training cut and the longest response."""
    lines = [
        "split  category                 tasks  release its way  driver  cannot finish  "
        "same  fill stops  fill > cut  longest (fill)"
    ]
    for split in MODES:
        for category in [*CATEGORIES, "all"]:
            group = [r for r in rows if r["split"] == split and category in ("all", r["category"])]
            if not group:
                continue
            its_way = sum(r["release_stop"] is not None for r in group)
            driver = sum(driver_stop(r["release"]) is not None for r in group)
            fails = sum(r["fill"]["accuracy"] and not r["release"]["accuracy"] for r in group)
            same = sum(r["release_stop"] == driver_stop(r["release"]) for r in group)
            fill = sum(driver_stop(r["fill"]) is not None for r in group)
            cut = sum(r["fill"]["cut"] for r in group)
            longest = max(r["fill"]["response_tokens"] for r in group)
            lines.append(
                f"{split:<6} {category:<24} {len(group):>5}  {its_way:>15}  {driver:>6}  "
                f"{fails:>13}  {same:>4}  {fill:>10}  {cut:>10}  {longest:>14}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, help="write every task's counts as JSON here")
    parser.add_argument("--max-tasks", type=int, default=0, help="per split (0: all 400)")
    args = parser.parse_args(argv)
    split = json.loads((REPO_ROOT / "data/seal_split.json").read_text())
    ids = {name: split[name][: args.max_tasks or None] for name in MODES}
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    start = time.perf_counter()
    with bench_service() as service:
        rows = asyncio.run(play_all(service.url, service.token, tokenizer, ids, args.concurrency))
    print(table(rows))
    failed_gt = Counter(r["split"] for r in rows if not r["fill"]["accuracy"])
    print(f"ground truths failing with no context stop near (fill): {dict(failed_gt)}")
    print(f"{len(rows)} episodes in {time.perf_counter() - start:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
