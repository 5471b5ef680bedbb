"""Combine several learning-check runs (one per seed) into one table and one figure.

    python scripts/learning_check_seeds.py OUT1/curve.json OUT2/curve.json ... \
        [--label guidelines-off ...] [--png docs/learning_check.png]

Prints, per evaluated step, each run's sampled eval success and the mean over runs
with its standard error (between runs), then the change from step 0 per run; draws
each run's eval curve and the mean. Runs are grouped by --label (one per file, or one
for all; default the file's parent directory name), so settings can be compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


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


def plot(groups: dict[str, dict[str, dict[int, float]]], path: Path) -> None:
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("curves", nargs="+", type=Path, help="curve.json files of learning_check.py")
    p.add_argument("--label", nargs="*", default=None, help="group label per file, or one for all")
    p.add_argument("--png", type=Path, default=None, help="write the figure here")
    args = p.parse_args()
    labels = args.label or [c.parent.name for c in args.curves]
    if len(labels) == 1:  # one label for all files
        labels = labels * len(args.curves)
    if len(labels) != len(args.curves):
        p.error(f"{len(labels)} labels for {len(args.curves)} files")
    groups: dict[str, dict[str, dict[int, float]]] = defaultdict(dict)
    for label, path in zip(labels, args.curves, strict=True):
        groups[label][path.parent.name] = eval_curve(path)
    for label, runs in groups.items():
        print_group(label, runs)
    if args.png:
        plot(groups, args.png)


if __name__ == "__main__":
    main()
