"""Benchmark the episode driver without a model: what it costs on top of the service.

    python scripts/bench_rollout.py [--concurrency 64] [--runs 3] [--split train] [--n 1]

Two measurements: (1) throughput over HTTP, the service alone (scripted runner) against
the same ground truths through `run_episode` with a scripted generator, the difference
being the driver's cost; (2) sample building against episode length in process, beside
what re-tokenizing the whole conversation each generation would cost. Medians over
--runs. In detail, with the measured figures: docs/benchmarks.md, "The hot routes".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

from transformers import AutoTokenizer

from seal.eval.replay import split_task_ids
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.driver import run_episode
from seal.rollout.env_client import EnvClient, StepReply
from seal.rollout.scripted import ScriptedGenerator, run_scripted_episode, text_generation
from seal.service_contract import EpisodeLimits, EpisodeSettings, InterfaceSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchfixtures: not installed
from benchfixtures.service import bench_service, ground_truth_scripts  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = REPO_ROOT / "seal/assets/qwen2.5-tokenizer"
SETTINGS = EpisodeSettings(mode="sample", interface=InterfaceSettings(schema_cues=True))
LENGTHS = (2, 5, 10, 20, 40)
UNSOLVABLE = {"multi_turn_miss_func_49"}  # see README: its ground truth fails by design
QWEN = get_format(PAPER_QWEN)
TOOL_CALL = '<tool_call>\n{"name": "grep", "arguments": {"file_name": "report.txt", "pattern": "budget"}}\n</tool_call>'


# --- 1. throughput over HTTP ---------------------------------------------------------


async def play_all(service, tokenizer, scripts: dict, args, driver: bool) -> dict:
    gate = asyncio.Semaphore(args.concurrency)
    episodes = [tid for tid in scripts for _ in range(args.n)]
    env = EnvClient(service.url, max_connections=args.concurrency, token=service.token)
    async with env:

        async def one(task_id: str) -> int:
            async with gate:
                if not driver:
                    await run_scripted_episode(env, task_id, scripts[task_id], SETTINGS)
                    return 0
                texts = [t for turn in scripts[task_id] for t in turn]
                sample = await run_episode(
                    env,
                    ScriptedGenerator.from_texts(tokenizer, texts),
                    tokenizer,
                    task_id,
                    SETTINGS,
                    tool_format=QWEN,
                )
                assert sample.accuracy == 1 or task_id in UNSOLVABLE, task_id
                return len(sample.prompt_ids) + len(sample.response_ids)

        cpu0, t0 = time.process_time(), time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(tid) for tid in episodes)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    row = {"episodes/s": len(episodes) / elapsed}
    if driver:
        row["tokens/s"] = tokens / elapsed
    row["client CPU ms/episode"] = 1e3 * cpu / len(episodes)
    return row


def bench_http(args, tokenizer) -> None:
    ids = split_task_ids(args.split, REPO_ROOT / "data/seal_split.json")
    scripts = ground_truth_scripts(ids)
    rows = {"service alone (scripted runner)": [], "driver (run_episode)": []}
    with bench_service(args.port) as service:
        for run in range(1, args.runs + 1):
            for name, driver in zip(rows, (False, True), strict=True):
                row = asyncio.run(play_all(service, tokenizer, scripts, args, driver))
                rows[name].append(row)
                print(f"run {run} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    print(
        f"\nHTTP: median of {args.runs} runs, {len(ids)} {args.split} tasks x {args.n}, "
        f"{args.concurrency} live at once"
    )
    for name, runs in rows.items():
        cells = ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f}" for k in runs[0])
        print(f"  {name:<34} {cells}")


# --- 2. sample building against episode length ---------------------------------------


class SyntheticEnv:
    """Stands in for EnvClient: its episode has a fixed long prompt, then answers the
    k-th generation with `observations[k]` until all are used. Contents are made before
    timing starts."""

    def __init__(self, system: str, observations: list[str]):
        self.system, self.observations = system, observations

    def episode(self, task_id, settings=None):
        return SyntheticEpisode(self)


class SyntheticEpisode:
    def __init__(self, env: SyntheticEnv):
        self.env, self.steps, self.what = env, 0, "synthetic"
        self.tools: list[dict] = []  # as the client's episode: the tools shown so far
        self.created = {
            "task_id": "synthetic",
            "system": [env.system],
            "tools": [],
            "messages": [{"role": "user", "content": "Find the budget figures in every report."}],
            "interface": {},
        }

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        pass

    async def step(self, content, calls):
        self.steps += 1
        done = self.steps >= len(self.env.observations)
        observation = [{"role": "user", "content": self.env.observations[self.steps - 1]}]
        return StepReply(observation, done, truncated=False)

    async def finish(self):
        return {
            "category": "synthetic",
            "reward": 0.0,
            "accuracy": 0,
            "progress": 0.0,
            "failure_tags": [],
            "paper_label": None,
        }


def tool_output(rng: random.Random, approx_tokens: int) -> str:
    """A JSON tool response of about `approx_tokens` tokens (about 4 per record field)."""
    words = ["budget", "revenue", "margin", "quarter", "growth", "cost", "asset", "equity"]
    records = [
        {"line": i, "text": " ".join(rng.choices(words, k=6)), "value": rng.randint(0, 10**6)}
        for i in range(approx_tokens // 24)
    ]
    return "<tool_response>\n" + json.dumps({"matching_lines": records}) + "\n</tool_response>"


def rerender_cost(tokenizer, first: list[dict], observations: list[str], k: int) -> float:
    """Seconds to render and tokenize the whole conversation before each of k generations."""
    messages = list(first)
    t0 = time.perf_counter()
    for step in range(k):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        tokenizer.encode(text, add_special_tokens=False)
        messages += [
            {"role": "assistant", "content": TOOL_CALL},
            {"role": "user", "content": observations[step]},
        ]
    return time.perf_counter() - t0


def bench_lengths(args, tokenizer) -> None:
    rng = random.Random(0)
    system = tool_output(rng, 5000)  # about the size of a BFCL system prompt with tools
    observations = [tool_output(rng, args.observation_tokens) for _ in range(max(LENGTHS))]
    limits = EpisodeLimits(max_generations=max(LENGTHS), max_context_tokens=10**8)
    generation = text_generation(tokenizer, TOOL_CALL)
    print(
        f"\nsample building, synthetic episodes: observations of about "
        f"{args.observation_tokens} tokens, median of {args.runs} runs"
    )
    print(
        f"{'generations':>12} {'tokens':>8} {'driver ms':>10} {'ms/gen':>8} {'re-render ms/gen':>17}"
    )
    for k in LENGTHS:
        times, rerenders, length = [], [], 0
        for _ in range(args.runs):
            env = SyntheticEnv(system, observations[:k])
            generator = ScriptedGenerator([generation] * k)
            t0 = time.perf_counter()
            sample = asyncio.run(
                run_episode(
                    env,
                    generator,
                    tokenizer,
                    "synthetic",
                    EpisodeSettings(limits=limits),
                    tool_format=QWEN,
                )  # fmt: skip
            )
            times.append(time.perf_counter() - t0)
            first = [{"role": "system", "content": system}, {"role": "user", "content": "x"}]
            rerenders.append(rerender_cost(tokenizer, first, observations, k))
            length = len(sample.prompt_ids) + len(sample.response_ids)
            assert sample.num_generations == k
        t, r = statistics.median(times), statistics.median(rerenders)
        print(f"{k:>12} {length:>8} {1e3 * t:>10.1f} {1e3 * t / k:>8.2f} {1e3 * r / k:>17.2f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--concurrency", type=int, default=64, help="live episodes at once (default 64)")
    p.add_argument("--runs", type=int, default=3, help="repetitions; medians printed (default 3)")
    p.add_argument(
        "--split", choices=["train", "eval"], default="train", help="tasks to play (default train)"
    )
    p.add_argument(
        "--n",
        type=int,
        default=1,
        help="episodes per task, like the trainer's rollout.n (default 1; 8 in the paper)",
    )
    p.add_argument(
        "--observation-tokens",
        type=int,
        default=2000,
        help="approximate length of each synthetic observation (default 2000)",
    )
    p.add_argument("--port", type=int, default=0, help="port for the service (default: a free one)")
    p.add_argument(
        "--skip-http", action="store_true", help="only the in-process length measurement"
    )
    args = p.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    if not args.skip_http:
        bench_http(args, tokenizer)
    bench_lengths(args, tokenizer)


if __name__ == "__main__":
    main()
