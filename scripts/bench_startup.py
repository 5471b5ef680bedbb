"""Benchmark: how long the command lines take to answer what needs no model (issue 42, item 5).

Each console script's `--help` (and launcher.py's), `seal-eval` against a base URL where
nothing listens (with a running service, and with `--start-env`), and `seal-export` refusing
an output directory that exists. Every case runs as a fresh process, `--runs` times; prints
the median and the range in seconds, and the exit status (each must be the documented one).

    python scripts/bench_startup.py [--runs 5] [--only seal-eval-help ...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from seal.launch.service import new_token, start_service, token_in_environment

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_run(root: Path) -> Path:
    """A run directory whose latest checkpoint has weights: what `seal-export` looks at
    before it refuses an existing output directory."""
    step = root / "run" / "checkpoints" / "step_000001"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"not read before the refusal")
    (step / "seal_best.json").write_text(json.dumps({"step": 1}))
    latest = {"step": 1, "path": "step_000001"}
    (root / "run" / "checkpoints" / "latest").write_text(json.dumps(latest))
    (root / "exists").mkdir()
    return root / "run"


def cases(tmp: Path, env_url: str) -> dict[str, tuple[list[str], int, str]]:
    """name -> (command, expected exit status, text its output must hold)."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    eval_dead = [str(BIN / "seal-eval"), "--base-url", dead, "--model", MODEL, "--quiet"]
    run = fake_run(tmp)
    return {
        "seal-eval --help": ([str(BIN / "seal-eval"), "--help"], 0, "usage"),
        "seal-report --help": ([str(BIN / "seal-report"), "--help"], 0, "usage"),
        "seal-export --help": ([str(BIN / "seal-export"), "--help"], 0, "usage"),
        "seal-learning-check --help": ([str(BIN / "seal-learning-check"), "--help"], 0, "usage"),
        "launcher.py --help": ([sys.executable, str(REPO / "launcher.py"), "--help"], 0, "usage"),
        "seal-eval, dead --base-url (running service)": (
            [*eval_dead, "--env-url", env_url, "--out-dir", str(tmp / "eval_a")],
            1,
            "check --base-url",
        ),
        "seal-eval, dead --base-url (--start-env)": (
            [
                *eval_dead,
                "--start-env",
                "--env-url",
                f"http://127.0.0.1:{free_port()}",
                "--out-dir",
                str(tmp / "eval_b"),
            ],
            1,
            "check --base-url",
        ),  # fmt: skip
        "seal-export, existing OUT_DIR": (
            [str(BIN / "seal-export"), str(run), str(tmp / "exists")],
            1,
            "exists: export into a new directory",
        ),
    }


def time_case(command: list[str], expected: int, says: str, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != expected or says not in done.stdout + done.stderr:
            raise SystemExit(
                f"{' '.join(command)}: exit {done.returncode}, expected {expected} and "
                f"{says!r}\n"
                f"{done.stderr[-2000:]}"
            )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="case names (substrings) to run")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} runs per case")
    token = new_token()
    with (
        tempfile.TemporaryDirectory() as tmp,
        start_service("127.0.0.1", free_port(), Path(tmp) / "env.log", token) as service,
        token_in_environment(token),  # the evaluations' clients (and --start-env's) read it
    ):
        for name, (command, expected, says) in cases(Path(tmp), service.url).items():
            if args.only and not any(part in name for part in args.only):
                continue
            times = time_case(command, expected, says, args.runs)
            print(
                f"{name:48s} median {statistics.median(times):6.2f} s  "
                f"(min {min(times):.2f}, max {max(times):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
