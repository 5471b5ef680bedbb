"""Micro-benchmark: GRPO advantages plus A-Patch on one trainer step's worth of samples.

The default shape is the paper's step, 32 tasks x 8 samples = 256 samples of up to 4096
response tokens, on CPU. Prints the median time of each part over several runs; a trainer
step must never wait on this.

    python scripts/bench_apatch.py [--samples 256] [--tokens 4096] [--runs 30] [--threads N]
"""

import argparse
import random
import statistics
import time

import torch

from seal.algos.advantage import grpo_advantages
from seal.bfcl.tags import FAILURE_TAGS, PASS
from seal.bfcl.tasks import CATEGORIES
from seal.tocf.apatch import APatchConfig, apply_apatch
from seal.tocf.state import CapabilityState, TrajectoryOutcome


def time_ms(fn, runs: int) -> tuple[float, float]:
    """Median and best of `runs` calls; the best shows the cost without other load."""
    fn()  # warm-up: first-call allocations are not what a running trainer pays
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    rng = random.Random(0)
    torch.manual_seed(0)
    n, length = args.samples, args.tokens
    rewards = torch.randint(0, 2, (n,)).float()
    group_ids = [f"task{i // args.group_size}" for i in range(n)]
    lengths = torch.randint(length // 8, length + 1, (n,))
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    tags = [[rng.choice((PASS, *FAILURE_TAGS)) for _ in range(rng.randint(1, 8))] for _ in range(n)]
    outcomes = [
        TrajectoryOutcome(
            CATEGORIES[i % 4], group_ids[i], float(rewards[i]), bool(rewards[i]), tags[i], 1, 0
        )
        for i in range(n)
    ]
    state = CapabilityState()
    for item in outcomes:
        state.observe(item)
    weights = state.update_weights()
    config = APatchConfig()
    advantages = grpo_advantages(rewards, group_ids, mask)

    def observe_and_update():
        fresh = CapabilityState()
        for item in outcomes:
            fresh.observe(item)
        fresh.update_weights()

    timings = {
        "grpo_advantages": time_ms(lambda: grpo_advantages(rewards, group_ids, mask), args.runs),
        "apply_apatch": time_ms(
            lambda: apply_apatch(advantages, mask, tags, config, step=1, weights=weights),
            args.runs,
        ),
        "grpo_advantages + apply_apatch": time_ms(
            lambda: apply_apatch(
                grpo_advantages(rewards, group_ids, mask),
                mask,
                tags,
                config,
                step=1,
                weights=weights,
            ),
            args.runs,
        ),
        "capability observe + update_weights": time_ms(observe_and_update, args.runs),
    }
    print(
        f"{n} samples x {length} tokens, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.runs} runs (median, best)"
    )
    for name, (median, best) in timings.items():
        print(f"  {name:<38} median {median:7.2f} ms   best {best:7.2f} ms")


if __name__ == "__main__":
    main()
