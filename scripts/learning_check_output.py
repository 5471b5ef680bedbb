"""The learning check's outputs: the curve as a Markdown table and as a PNG.

Kept apart from scripts/learning_check.py (the experiment) so either can be read alone;
`python scripts/learning_check_output.py OUT/curve.json` redraws both from a saved run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _fmt(value) -> str:
    return "" if value is None else f"{value:.3f}"


def print_table(curve: list[dict]) -> None:
    header = "| step | train success (n x K) | train reward | A-Patch mean scale | eval success (temp 1) | eval reward |"
    print("\n" + header + "\n|---|---|---|---|---|---|")
    for r in curve:
        cells = [
            _fmt(r.get(k))
            for k in (
                "train_success",
                "train_reward",
                "apatch_mean_scale",
                "eval_success",
                "eval_reward",
            )
        ]
        print(f"| {r['step']} | " + " | ".join(cells) + " |")


def plot(curve: list[dict], warm: list[dict], path: Path) -> None:
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
    ax1.plot(
        [r["step"] for r in train],
        [r["apatch_mean_scale"] for r in train],
        "x:",
        label="A-Patch mean scale",
    )
    ax1.set(
        title="GRPO (SEAL) on the same tasks",
        xlabel="GRPO step",
        ylim=(0, max(2.0, ax1.get_ylim()[1])),
    )
    ax1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    saved = json.loads(Path(sys.argv[1]).read_text())
    print_table(saved["curve"])
    plot(saved["curve"], saved["warmup"]["history"], Path(sys.argv[1]).with_suffix(".png"))
