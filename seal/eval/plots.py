"""The report's figures: matplotlib (Agg backend), one function per PNG, plain data in.

Every function takes numbers already gathered by ``seal.eval.report`` and writes one PNG.
Colours are fixed per category and per failure tag, so one tag looks the same in every
figure of every report; legends sit outside the axes so that they never hide a curve.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on training nodes and CI

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from seal.tocf import tags as T  # noqa: E402

Series = tuple[Sequence[int], Sequence[float]]  # steps, values

CATEGORY_COLORS = {
    "multi_turn_base": "#1f77b4",
    "multi_turn_miss_func": "#ff7f0e",
    "multi_turn_miss_param": "#2ca02c",
    "multi_turn_long_context": "#9467bd",
}
AVERAGE_COLOR = "black"
# Greens for the turns the model got right, warm colours for what it did, cold for what it
# missed, greys for infrastructure failures that say nothing about the model.
TAG_COLORS = {
    T.PASS: "#2ca02c",
    T.CORRECT_ABSTENTION: "#a6dba0",
    T.SPURIOUS_TOOL_CALL: "#d62728",
    T.EMPTY_TURN_MODEL_RESPONSE: "#ff7f0e",
    T.INSTANCE_MISMATCH: "#8c564b",
    T.STATE_MISMATCH: "#1f77b4",
    T.RESPONSE_MISMATCH: "#9467bd",
    T.CHECKER_ERROR: "#7f7f7f",
    T.GT_ERROR: "#c7c7c7",
}
_SPARE_COLORS = ("#17becf", "#bcbd22", "#e377c2", "#393b79", "#637939", "#843c39")
# Stacking order, bottom up: failures at the bottom, where their changes are easiest to read.
TAG_ORDER = (
    T.SPURIOUS_TOOL_CALL,
    T.EMPTY_TURN_MODEL_RESPONSE,
    T.INSTANCE_MISMATCH,
    T.STATE_MISMATCH,
    T.RESPONSE_MISMATCH,
    T.CHECKER_ERROR,
    T.GT_ERROR,
    T.CORRECT_ABSTENTION,
    T.PASS,
)
DPI = 120


def short_category(category: str) -> str:
    """`multi_turn_miss_func` -> `miss_func`, as the paper's table heads read."""
    return category.removeprefix("multi_turn_")


def tag_color(tag: str) -> str:
    if tag in TAG_COLORS:
        return TAG_COLORS[tag]
    # A tag this module does not know still gets the same colour in every figure.
    return _SPARE_COLORS[zlib.crc32(tag.encode()) % len(_SPARE_COLORS)]


def ordered_tags(tags: Sequence[str]) -> list[str]:
    known = [tag for tag in TAG_ORDER if tag in tags]
    return sorted(set(tags) - set(known)) + known


def _legend_outside(ax: plt.Axes, title: str | None = None) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title=title)


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # "tight" keeps the outside legends
    plt.close(fig)
    return path


def _integer_steps(ax: plt.Axes) -> None:
    ax.xaxis.get_major_locator().set_params(integer=True)


def plot_pass_rates(
    steps: Sequence[int],
    rates_pct: Mapping[str, Sequence[float]],
    average_pct: Sequence[float],
    best: int | None,
    path: Path,
) -> Path:
    """Pass rate (%) per category and their average over the validation steps."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    for category, rates in rates_pct.items():
        ax.plot(
            steps,
            rates,
            marker="o",
            color=CATEGORY_COLORS.get(category),
            label=short_category(category),
        )
    ax.plot(
        steps,
        average_pct,
        marker="s",
        linestyle="--",
        linewidth=2.5,
        color=AVERAGE_COLOR,
        label="average",
    )
    if best is not None:
        ax.axvline(best, color="grey", linestyle=":", label=f"best step ({best})")
    ax.set_ylim(-2, 102)
    ax.set_xlabel("training step")
    ax.set_ylabel("pass rate (%)")
    ax.set_title("Validation pass rate per BFCL multi-turn category")
    ax.grid(alpha=0.3)
    _integer_steps(ax)
    _legend_outside(ax, "category")
    return _save(fig, path)


def _stacked_bars(ax: plt.Axes, steps: Sequence[int], shares: Mapping[str, Sequence[float]]):
    gaps = np.diff(sorted(steps))
    width = 0.8 * (gaps.min() if len(gaps) else 1.0)
    bottom = np.zeros(len(steps))
    for tag in ordered_tags(list(shares)):
        values = np.asarray(shares[tag], dtype=float) * 100
        ax.bar(steps, values, width, bottom=bottom, color=tag_color(tag), label=tag)
        bottom += values


def _stacked_areas(ax: plt.Axes, steps: Sequence[int], shares: Mapping[str, Sequence[float]]):
    tags = ordered_tags(list(shares))
    values = [np.nan_to_num(np.asarray(shares[tag], dtype=float)) * 100 for tag in tags]
    ax.stackplot(steps, values, colors=[tag_color(tag) for tag in tags], labels=tags)


def plot_tag_shares(
    panels: Sequence[tuple[str, Sequence[int], Mapping[str, Sequence[float]]]], path: Path
) -> Path:
    """One panel per source (validation, training): each tag's share of the diagnosed turns.

    Few steps (validation) are drawn as stacked bars, many (training) as stacked areas.
    """
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 3.6 * len(panels)), squeeze=False, sharex=True
    )
    for ax, (title, steps, shares) in zip(axes[:, 0], panels, strict=True):
        if len(steps) <= 20:
            _stacked_bars(ax, steps, shares)
        else:
            _stacked_areas(ax, steps, shares)
        ax.set_ylim(0, 100)
        ax.set_ylabel("share of turns (%)")
        ax.set_title(title)
        _integer_steps(ax)
        handles, labels = ax.get_legend_handles_labels()
        # Top of the legend = top of the stack.
        ax.legend(
            handles[::-1],
            labels[::-1],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
            title="failure tag",
        )
    axes[-1, 0].set_xlabel("training step")
    fig.suptitle("Failure-tag distribution (one tag per ground-truth turn)")
    return _save(fig, path)


def plot_weights_and_scale(
    weights: Mapping[str, Series],
    mean_scale: Series | None,
    scaled_frac: Series | None,
    path: Path,
) -> Path:
    """Dynamic tag weights (top) and A-Patch's mean scale and scaled share (bottom)."""
    has_apatch = mean_scale is not None or scaled_frac is not None
    rows = int(bool(weights)) + int(has_apatch)
    fig, axes = plt.subplots(rows, 1, figsize=(9, 3.6 * rows), squeeze=False, sharex=True)
    axes = list(axes[:, 0])
    if weights:
        ax = axes.pop(0)
        for tag in reversed(ordered_tags(list(weights))):
            ax.plot(*weights[tag], color=tag_color(tag), label=tag)
        ax.set_ylabel("weight")
        ax.set_title("Dynamic tag weights (clamped to [0.5, 2.0])")
        ax.grid(alpha=0.3)
        _legend_outside(ax, "failure tag")
    if has_apatch:
        ax = axes.pop(0)
        if mean_scale is not None:
            ax.plot(*mean_scale, color="black", label="mean scale")
        if scaled_frac is not None:
            ax.plot(*scaled_frac, color="tab:cyan", label="share of samples scaled")
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_ylabel("scale / share")
        ax.set_title("A-Patch: mean advantage scale and share of samples scaled")
        ax.grid(alpha=0.3)
        _legend_outside(ax)
    fig.axes[-1].set_xlabel("training step")
    _integer_steps(fig.axes[-1])
    return _save(fig, path)


def plot_training_curves(
    panels: Sequence[tuple[str, str, Mapping[str, Series], Mapping[str, str]]], path: Path
) -> Path:
    """Panels of (title, y label, {label: series}, {label: colour}) over training steps."""
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 3.2 * len(panels)), squeeze=False, sharex=True
    )
    for ax, (title, ylabel, curves, colors) in zip(axes[:, 0], panels, strict=True):
        for label, (steps, values) in curves.items():
            ax.plot(steps, values, label=label, color=colors.get(label))
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        _legend_outside(ax)
    axes[-1, 0].set_xlabel("training step")
    _integer_steps(axes[-1, 0])
    return _save(fig, path)


def _annotated_heatmap(ax, values, counts, cmap, title, rows, columns, vmax=1.0):
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if counts[i, j] == 0:
                ax.text(j, i, "–", ha="center", va="center", color="grey")
                continue
            value = values[i, j]
            shade = image.cmap(image.norm(value))
            # Dark text on light cells, light text on dark ones (relative luminance).
            light = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] > 0.5
            ax.text(
                j,
                i,
                f"{value:.2f}\nn={counts[i, j]}",
                ha="center",
                va="center",
                fontsize=8,
                color="black" if light else "white",
            )
    ax.set_xticks(range(len(columns)), columns, rotation=35, ha="right")
    ax.set_yticks(range(len(rows)), [short_category(row) for row in rows])
    ax.set_title(title)
    return image


def plot_capability(
    categories: Sequence[str],
    tags: Sequence[str],
    cells: Mapping[str, Mapping[str, Mapping[str, float]]],
    source: str,
    path: Path,
) -> Path:
    """Category x tag from a capability-state table ({category: {tag: tally summary}}):
    each tag's share of the category's turns, and the mean reward of those turns' episodes."""
    counts = np.array(
        [[cells.get(c, {}).get(t, {}).get("count", 0) for t in tags] for c in categories]
    )
    rewards = np.array(
        [
            [cells.get(c, {}).get(t, {}).get("mean_reward", math.nan) for t in tags]
            for c in categories
        ]
    )
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)

    fig, (left, right) = plt.subplots(1, 2, figsize=(4 + 1.9 * len(tags), 4.2), sharey=True)
    image = _annotated_heatmap(
        left, shares, counts, "Blues", "share of the category's turns", categories, tags
    )
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.03)
    image = _annotated_heatmap(
        right, rewards, counts, "RdYlGn", "mean reward of their episodes", categories, tags
    )
    fig.colorbar(image, ax=right, fraction=0.046, pad=0.03)
    fig.suptitle(f"Capability state per category and failure tag ({source})")
    return _save(fig, path)
