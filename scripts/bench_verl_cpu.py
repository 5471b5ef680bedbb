"""Where a verl training step's time goes on the CPU backend, and what the SEAL step costs.

    python scripts/bench_verl_cpu.py [--steps 3] [--keep DIR]
    python scripts/bench_verl_cpu.py --run-dir outputs/verl_cpu_smoke   # an existing run

Runs `exp/verl_cpu_smoke.yaml` through the launcher (verl's own fit(), the tiny model) and
prints, per training step and as the median over steps, verl's own step timings (rollout,
old log-probs, actor update, weight sync) and the SEAL step inside verl's advantage stage
(`seal/step_s`) with its share of the step. What each covers, and why a GPU's share is
larger: docs/verl_notes.md, "The CPU backend".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STAGES = [
    ("rollout", "timing_s/gen"),
    ("old log-probs", "timing_s/old_log_prob"),
    ("advantage (verl + SEAL)", "timing_s/adv"),
    ("  of which SEAL step", "seal/step_s"),
    ("actor update", "timing_s/update_actor"),
    ("weight sync", "timing_s/update_weights"),
    ("checkpoint", "timing_s/save_checkpoint"),
    ("validation", "timing_s/testing"),
    ("step (total)", "timing_s/step"),
]


def training_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("step", 0) > 0 and "timing_s/step" in r]


def table(rows: list[dict]) -> str:
    steps = [r["step"] for r in rows]
    head = "| stage | " + " | ".join(f"step {s}" for s in steps) + " | median |"
    lines = [head, "|" + " --- |" * (len(steps) + 2)]
    for name, key in STAGES:
        values = [r.get(key) for r in rows]
        present = [v for v in values if v is not None]
        if not present:
            continue
        cells = [f"{v:.3f}" if v is not None else "-" for v in values]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {statistics.median(present):.3f} |")
    shares = [100 * r["seal/step_s"] / r["timing_s/step"] for r in rows if "seal/step_s" in r]
    cells = [f"{s:.3f}%" for s in shares]
    lines.append(
        "| SEAL share of step | " + " | ".join(cells) + f" | {statistics.median(shares):.3f}% |"
    )
    return "\n".join(lines)


def run_smoke(out_dir: Path, steps: int) -> Path:
    cmd = [
        sys.executable, "launcher.py", "--conf", "exp/verl_cpu_smoke.yaml", "--",
        f"output_dir={out_dir}", f"trainer.total_steps={steps}",
        f"trainer.checkpoint.save_freq={steps}", f"trainer.validation.test_freq={steps}",
    ]  # fmt: skip
    print("running:", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"the smoke run failed:\n{(result.stdout + result.stderr)[-4000:]}")
    return out_dir / "verl_cpu_smoke"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--run-dir", type=Path, help="read this run instead of starting one")
    p.add_argument("--steps", type=int, default=3, help="training steps of a new run")
    p.add_argument("--keep", type=Path, help="put the new run here (default: a temp dir)")
    args = p.parse_args(argv)
    if args.run_dir is not None:
        run_dir = args.run_dir
    else:
        out = args.keep or Path(tempfile.mkdtemp(prefix="bench_verl_cpu_"))
        run_dir = run_smoke(out.absolute(), args.steps)
    rows = training_rows(run_dir)
    if not rows:
        sys.exit(f"no training step with timings in {run_dir / 'metrics.jsonl'}")
    print(f"\nverl step timings in seconds ({run_dir}):\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
