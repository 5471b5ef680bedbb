"""Benchmark the local trainer on one GPU: step time and peak GPU memory by model size.

    python scripts/bench_local_gpu.py [--sizes tiny 0.5b 1.5b] [--steps 3] [--n 8]

For each size, runs the CPU default's loop (exp/cpu_default.yaml) through `launcher.py` on
CUDA in bfloat16 with a randomly initialised Qwen2 of that size (nothing is downloaded).
Prints, per size, each step's rollout and update seconds and their peak GPU memory, and
the medians over the steps after the first (which pays for CUDA's warm-up). A random model
writes until the limits, so the figures are an upper bound: docs/benchmarks.md, "The local
trainer on a GPU".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from seal.runs import metrics_log

ROOT = Path(__file__).resolve().parents[1]

SIZES = {
    "tiny": {},  # exp/cpu_default.yaml's own tiny model
    # Qwen2.5-0.5B's and 1.5B's shapes (their config.json), tied embeddings as both have.
    "0.5b": {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
    },
    "1.5b": {
        "hidden_size": 1536,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
    },
}


def overrides(size: str, args: argparse.Namespace, output_dir: Path) -> list[str]:
    keys = {
        "name": f"bench_gpu_{size}",
        "output_dir": str(output_dir),
        "trainer.total_steps": args.steps,
        "trainer.model.device": "cuda",
        "trainer.model.dtype": "bfloat16",
        "trainer.rollout.n": args.n,
        "trainer.rollout.max_batch_size": args.n * 4,
        "trainer.limits.max_new_tokens": args.max_new_tokens,
        "trainer.validation.test_freq": args.steps,
        "trainer.checkpoint.save_freq": args.steps,
    }
    keys |= {f"trainer.model.tiny.{k}": v for k, v in SIZES[size].items()}
    return [f"{k}={v}" for k, v in keys.items()]


def run_size(size: str, args: argparse.Namespace, output_dir: Path) -> list[dict]:
    command = [sys.executable, str(ROOT / "launcher.py"), "--conf", str(ROOT / args.conf), "--"]
    command += overrides(size, args, output_dir)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(
            f"{size}: launcher failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    rows = [
        json.loads(line)
        for line in (output_dir / f"bench_gpu_{size}" / metrics_log.METRICS_FILENAME).open()
    ]
    print(
        f"\n== {size}: the whole run (validation twice, {args.steps} steps, a checkpoint) {wall:.1f} s"
    )
    return [r for r in rows if r[metrics_log.STEP] > 0]


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--steps", type=int, default=3, help="training steps per size (default 3)")
    p.add_argument("--n", type=int, default=8, help="samples per task (default 8; 4 tasks a step)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="per generation (default 256)")
    p.add_argument("--conf", default="exp/cpu_default.yaml", help="the run config the sizes change")
    args = p.parse_args()

    import torch  # after argparse, so --help works without it

    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this bench measures the local trainer on a GPU")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    columns = {
        "rollout_s": metrics_log.TIME_ROLLOUT_S,
        "update_s": metrics_log.TIME_UPDATE_S,
        "rollout_gb": metrics_log.PEAK_GPU_ROLLOUT_GB,
        "update_gb": metrics_log.PEAK_GPU_UPDATE_GB,
        "resp_tokens": metrics_log.RESPONSE_TOKENS_MEAN,
    }
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            rows = run_size(size, args, Path(tmp))
            print("step " + " ".join(f"{name:>11}" for name in columns))
            for row in rows:
                print(
                    f"{row[metrics_log.STEP]:>4} "
                    + " ".join(f"{row[key]:>11.3f}" for key in columns.values())
                )
            later = rows[1:] or rows
            medians = [statistics.median(r[key] for r in later) for key in columns.values()]
            print(
                "med  "
                + " ".join(f"{m:>11.3f}" for m in medians)
                + f"   (steps {later[0][metrics_log.STEP]}-{later[-1][metrics_log.STEP]})"
            )


if __name__ == "__main__":
    main()
