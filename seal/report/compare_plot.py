"""`seal-report --compare`'s figure (compare.png): each arm's score per column and each
arm's difference to the baseline with its interval; matplotlib through seal.report.plots'
backend, style and save."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from seal.report import plots
from seal.report.plots import plt

MIN_SPAN_PCT = 10.0
"""The least a percentage axis shows: equal or all-zero values otherwise get an axis of
hundredths of a point, which reads as a measured spread."""


def _score_axis(scores_pct, paper_pct) -> tuple[float, float]:
    """0 to a little above the highest bar, error bar or paper mark, at least MIN_SPAN_PCT
    and at most 100 (+5 for room)."""
    tops = [v[0] + np.nan_to_num(v[1]) for values in scores_pct.values() for v in values]
    tops += [p for _, paper in paper_pct.values() for p in paper]
    top = max([t for t in tops if not math.isnan(t)], default=0.0)
    return 0.0, min(105.0, max(MIN_SPAN_PCT, top * 1.1))


def _difference_axis(differences) -> tuple[float, float]:
    """Symmetric about no difference, covering every interval drawn, at least
    ±MIN_SPAN_PCT / 2 and at most ±100 points (+5 for room): what a difference of pass rates
    can be."""
    ends = [
        abs(end)
        for by_selection in differences.values()
        for values in by_selection.values()
        for v in values
        if not math.isnan(v[1])
        for end in v
    ]
    reach = min(105.0, max([MIN_SPAN_PCT / 2, *(e * 1.1 for e in ends)]))
    return -reach, reach


def plot_comparison(
    columns: Sequence[str],
    scores_pct: Mapping[str, Sequence[tuple[float, float]]],
    paper_pct: Mapping[str, tuple[str, Sequence[float]]],
    differences: Mapping[str, Mapping[str, Sequence[tuple[float, float, float]]]],
    baseline: str,
    best_note: str,
    path: Path,
) -> Path:
    """Left: each arm's final-step score (%) per column as grouped bars with their standard
    errors, and a black bar at the paper's number where an arm reproduces one of its rows
    (`paper_pct`: arm -> (row, values)). Right: each other arm's difference to the baseline
    (points) with its 95% interval, filled at the final step and hollow at the best step
    (`differences`: arm -> {"final"|"best": [(difference, low, high)] per column}).
    A difference without an interval is not drawn. `columns`: the categories' short names
    and the summary column; `best_note`: how the best step was chosen."""
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(14, 4.8), layout="constrained", gridspec_kw={"width_ratios": [3, 2]}
    )
    x = np.arange(len(columns))
    width = 0.8 / max(1, len(scores_pct))
    colors = {label: f"C{k}" for k, label in enumerate(scores_pct)}
    for k, (label, values) in enumerate(scores_pct.items()):
        offset = (k - (len(scores_pct) - 1) / 2) * width
        pct = np.array([v[0] for v in values])
        se = np.nan_to_num(np.array([v[1] for v in values]))
        left.bar(x + offset, pct, width=width, yerr=se, capsize=3, label=label,
                 color=colors[label])  # fmt: skip
        if label in paper_pct:
            row, paper = paper_pct[label]
            left.hlines(paper, x + offset - width / 2, x + offset + width / 2, color="black",
                        linewidth=2.5, label=f"paper: {row}")  # fmt: skip
    left.set_xticks(x, columns)
    left.set_ylim(*_score_axis(scores_pct, paper_pct))
    left.set_ylabel("pass rate (%)")
    title = "Final-step score per arm (mean over its runs ± standard error)"
    if paper_pct:
        title += "\nblack: the paper's number of the row an arm reproduces"
    left.set_title(title)
    plots._legend_outside(left)
    spread = 0.6 / max(1, 2 * len(differences))
    slot = 0
    for label, by_selection in differences.items():
        for selection, marker in (("final", "o"), ("best", "s")):
            values = by_selection[selection]
            offset = (slot - (2 * len(differences) - 1) / 2) * spread
            slot += 1
            # No interval: not drawn (a bare point would read as a certain difference).
            diff = np.array([math.nan if math.isnan(v[1]) else v[0] for v in values])
            low = np.nan_to_num(diff - np.array([v[1] for v in values]))
            high = np.nan_to_num(np.array([v[2] for v in values]) - diff)
            right.errorbar(
                x + offset, diff, yerr=[low, high], fmt=marker, capsize=4, color=colors.get(label),
                markerfacecolor=colors.get(label) if selection == "final" else "white",
                label=f"{label}, {selection} step",
            )  # fmt: skip
    right.axhline(0, color="grey", linewidth=1)
    right.set_ylim(*_difference_axis(differences))
    right.set_xticks(x, columns, rotation=20)
    right.set_ylabel("difference to the baseline (points)")
    right.set_title(
        f"Difference to {baseline} with 95% intervals\n(filled: final step; hollow: best "
        f"step, {best_note})"
    )
    if differences:
        right.legend(loc="best", frameon=False)
    return plots._save(fig, path)
