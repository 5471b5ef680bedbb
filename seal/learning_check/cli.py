"""Learning check: the SEAL loop raises the success rate of a small policy on a few tasks.

    seal-learning-check run [--k 4] [--steps 12] [--seed 0] [--out-dir outputs/learning_check]
    seal-learning-check table OUT/curve.json     # redraw a saved run's table and figure
    seal-learning-check seeds OUT_*/curve.json [--label NAME ...] [--png FILE]  # seeds combined
    seal-learning-check arms [--seeds 0 1 2] [--out-dir DIR] [-- RUN ARGS]  # SEAL against GRPO

A tiny random Qwen2 is warmed up on the ground truth of K easy tasks, then GRPO through the
real service raises its sampled success. Each command (also `python -m seal.learning_check`),
what the check simplifies and why its defaults: docs/development.md, "Learning check (CPU)".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from seal.learning_check.arms import ARMS, GRPO_ARM, SEAL_ARM

REPO_ROOT = Path(__file__).resolve().parents[2]


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
    from seal.report import cli  # (matplotlib: only when there is something to draw)

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
    # Each command imports what it needs once the arguments are accepted: `--help` and a
    # refused argument answer without torch or matplotlib.
    from seal.learning_check.curves import seeds_command, table_command
    from seal.learning_check.run import run_check

    if args.command == "arms":
        return arms_command(args.seeds, args.out_dir, args.run_args, args.warm_policy)
    if args.command == "table":
        return table_command(args.curve)
    if args.command == "seeds":
        return seeds_command(args.curves, args.label, args.png)
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
