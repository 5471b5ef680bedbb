"""Wall seconds of `launcher.py --conf CONF --preflight`, checkouts alternated run by run.

    python scripts/bench_preflight.py [--conf exp/SEAL.yaml] [--runs 3] CHECKOUT [CHECKOUT ...]

Each run is timed to its verdict and exit (passed, or the blockers found: on a machine
without GPUs or the model, exit 1 with the table, which is the figure docs/benchmarks.md
keeps), with the load average before it and the CPU seconds the run used (the launcher and
its service). A run that ends without a verdict is an error. Runs use this Python for every
checkout, from the checkout's folder, so each imports its own `seal`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VERDICTS = ("preflight passed", "the preflight found")
"""The launcher's last line on a pass, on a blocker (seal/trainer/preflight_rows.py)."""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(checkout: Path, conf: str, output_dir: Path) -> dict:
    load = Path("/proc/loadavg").read_text().split()[0]
    cmd = [
        sys.executable,
        "launcher.py",
        "--conf",
        conf,
        "--preflight",
        "--",
        f"output_dir={output_dir}",
    ]
    cpu, start = children_cpu_s(), time.perf_counter()
    done = subprocess.run(
        cmd,
        cwd=checkout,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu
    out = done.stdout + done.stderr
    if not any(v in out for v in VERDICTS):
        raise RuntimeError(
            f"{checkout}: no verdict (exit {done.returncode}); output ends:\n{out[-2000:]}"
        )
    return {"wall_s": wall, "cpu_s": cpu, "load": load, "rc": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path, help="repository folders to compare")
    parser.add_argument("--conf", default="exp/SEAL.yaml")
    parser.add_argument(
        "--runs", type=int, default=3, help="rounds; medians are printed (default 3)"
    )
    args = parser.parse_args()
    runs: dict[Path, list[dict]] = {c: [] for c in args.checkouts}
    with tempfile.TemporaryDirectory(prefix="bench_preflight_") as tmp:
        for round_ in range(args.runs):
            for checkout in args.checkouts:
                run = one_run(checkout, args.conf, Path(tmp) / checkout.name)
                runs[checkout].append(run)
                print(
                    f"round {round_ + 1} {checkout}: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s "
                    f"CPU, exit {run['rc']}, load average {run['load']} before",
                    flush=True,
                )
    print(f"\n{args.conf} --preflight, {args.runs} rounds alternated (median):")
    for checkout, seen in runs.items():
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in seen)
        loads = ", ".join(r["load"] for r in seen)
        print(
            f"  {checkout}: {statistics.median(r['wall_s'] for r in seen):.1f} s wall "
            f"({walls}; load {loads}), {statistics.median(r['cpu_s'] for r in seen):.1f} s CPU"
        )


if __name__ == "__main__":
    main()
