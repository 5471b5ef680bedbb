"""The learning check's curves: a run's table and figure, and several runs' (seeds')
eval curves combined; the `table` and `seeds` commands."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path


def format_cell(value, off: bool = False) -> str:
    """A table cell; `off`: the column is A-Patch's, whose None means it was off."""
    if value is None:
        return "off" if off else ""
    return f"{value:.3f}"


def print_table(curve: list[dict]) -> None:
    header = "| step | train success (n x K) | train reward | A-Patch mean scale | eval success (temp 1) | eval reward |"
    print("\n" + header + "\n|---|---|---|---|---|---|")
    for r in curve:
        cells = [
            format_cell(r.get(k), off=k == "apatch_mean_scale" and "train_success" in r)
            for k in (
                "train_success",
                "train_reward",
                "apatch_mean_scale",
                "eval_success",
                "eval_reward",
            )
        ]
        print(f"| {r['step']} | " + " | ".join(cells) + " |")


def plot_curve(curve: list[dict], warm: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    checks = [w for w in warm if "success" in w]
    ax0.plot([w["step"] for w in warm], [w["nll"] for w in warm], "-", color="grey")
    ax0.set(title="supervised warm-up", xlabel="NLL step", ylabel="ground-truth episode NLL")
    ax0.set_yscale("log")
    ax0r = ax0.twinx()
    ax0r.plot([w["step"] for w in checks], [w["success"] for w in checks], "o-", color="C0")
    ax0r.set(ylabel="sampled success (temp 1)", ylim=(0, 1))
    train = [r for r in curve if "train_success" in r]
    evals = [r for r in curve if "eval_success" in r]
    ax1.plot(
        [r["step"] for r in train],
        [r["train_success"] for r in train],
        ".-",
        label="train success (rollouts)",
    )
    ax1.plot(
        [r["step"] for r in evals],
        [r["eval_success"] for r in evals],
        "o-",
        label="eval success (temp 1)",
    )
    scaled = [r for r in train if r.get("apatch_mean_scale") is not None]
    if scaled:  # A-Patch off scales nothing: no line that would read like a SEAL run's
        ax1.plot(
            [r["step"] for r in scaled],
            [r["apatch_mean_scale"] for r in scaled],
            "x:",
            label="A-Patch mean scale",
        )
    ax1.set(
        title="GRPO on the same tasks" + (" (SEAL: A-Patch on)" if scaled else " (A-Patch off)"),
        xlabel="GRPO step",
        ylim=(0, max(2.0, ax1.get_ylim()[1])),
    )
    ax1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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


def plot_seeds(groups: dict[str, dict[str, dict[int, float]]], path: Path) -> None:
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


def table_command(path: Path) -> int:
    """The `table` command: a saved run's table printed, its PNG redrawn beside it."""
    saved = json.loads(path.read_text())
    print_table(saved["curve"])
    plot_curve(saved["curve"], saved["warmup"]["history"], path.with_suffix(".png"))
    return 0


def seeds_command(paths: list[Path], labels: list[str], png: Path | None) -> int:
    """The `seeds` command: each group's table and change, and the figure with --png."""
    groups: dict[str, dict[str, dict[int, float]]] = defaultdict(dict)
    for label, path in zip(labels, paths, strict=True):
        groups[label][path.parent.name] = eval_curve(path)
    for label, runs in groups.items():
        print_group(label, runs)
    if png:
        plot_seeds(groups, png)
    return 0
