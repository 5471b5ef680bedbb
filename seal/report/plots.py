"""The report's figures: matplotlib (Agg backend), one function per PNG, plain data in.

Every function takes numbers already gathered by ``seal.report.run_page`` and writes one PNG.
Colours are fixed per category and per failure tag (seal.report.figure_style), so one tag
looks the same in every figure of every report; legends sit outside the axes so that they
never hide a curve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on training nodes and CI

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from seal.report.figure_style import (  # noqa: E402
    AVERAGE_COLOR,
    CATEGORY_COLORS,
    equal_label,
    equal_series,
    ordered_tags,
    series_style,
    short_category,
    tag_color,
)

Series = tuple[Sequence[int], Sequence[float]]  # steps, values

DPI = 120


def _is_light(color) -> bool:
    """Whether dark text reads better than white on `color` (by its luminance)."""
    red, green, blue, _ = matplotlib.colors.to_rgba(color)
    return 0.299 * red + 0.587 * green + 0.114 * blue > 0.5


def _legend_outside(ax: plt.Axes, title: str | None = None) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title=title)


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # "tight" keeps the outside legends
    plt.close(fig)
    return path


def _integer_steps(ax: plt.Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))


def _step_ticks(ax: plt.Axes, steps: Sequence[int]) -> None:
    """A tick at each validation step while they are few and far enough apart to read
    (a last step just after a round one would print as "7072"), else integer ticks."""
    gaps = np.diff(sorted(steps))
    if len(steps) <= 15 and (not len(gaps) or gaps.min() * 20 >= steps[-1] - steps[0]):
        ax.set_xticks(steps)
    else:
        _integer_steps(ax)


def _pass_rate_bars(ax: plt.Axes, rates_pct: Mapping[str, float], average_pct: float) -> None:
    """One validation step: a bar per category and the average, each labelled."""
    labels = [short_category(c) for c in rates_pct] + ["average"]
    colors = [CATEGORY_COLORS.get(c) for c in rates_pct] + [AVERAGE_COLOR]
    bars = ax.bar(labels, [*rates_pct.values(), average_pct], color=colors, width=0.6)
    ax.bar_label(bars, fmt="%.1f", padding=2)
    ax.set_xlabel("category")


def _pass_rate_lines(ax, steps, rates_pct, average_pct, best) -> None:
    # The average goes underneath as a wide translucent band, so that a category with the
    # same values stays visible on top of it; each category has its own dashes and marker
    # (nested where values are equal), and the legend names a category drawn on another.
    ax.plot(
        steps,
        average_pct,
        marker="s",
        markersize=12,
        linewidth=6,
        alpha=0.3,
        color=AVERAGE_COLOR,
        label="average",
    )
    equals = equal_series({short_category(c): (steps, r) for c, r in rates_pct.items()})
    for k, (category, rates) in enumerate(rates_pct.items()):
        ax.plot(
            steps,
            rates,
            color=CATEGORY_COLORS.get(category),
            label=equal_label(short_category(category), equals),
            clip_on=False,  # a marker at 0% is drawn whole, not cut by the axis
            **series_style(k, len(steps)),
        )
    if best is not None:
        ax.axvline(best, color="grey", linestyle=":", label=f"best step ({best})")
    ax.set_xlabel("training step")
    _step_ticks(ax, steps)
    _legend_outside(ax, "category")


def plot_pass_rates(
    steps: Sequence[int],
    rates_pct: Mapping[str, Sequence[float]],
    average_pct: Sequence[float],
    best: int | None,
    path: Path,
) -> Path:
    """Pass rate (%) per category and their average over the validation steps; a bar
    chart when there is only one step, where lines would collapse into one point."""
    fig, ax = plt.subplots(figsize=(9, 4.8), layout="constrained")
    if len(steps) == 1:
        _pass_rate_bars(ax, {c: rates[0] for c, rates in rates_pct.items()}, average_pct[0])
        ax.set_title(f"Validation pass rate per BFCL multi-turn category (step {steps[0]})")
    else:
        _pass_rate_lines(ax, steps, rates_pct, average_pct, best)
        ax.set_title("Validation pass rate per BFCL multi-turn category")
    ax.set_ylim(0, 105)
    ax.set_ylabel("pass rate (%)")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _stacked_bars(ax: plt.Axes, steps: Sequence[int], shares: Mapping[str, Sequence[float]]):
    # Evenly spaced bars labelled with their step: validation steps need not be evenly
    # spaced (every 10 steps and the last one), and bars at true positions would collide.
    slots = np.arange(len(steps))
    bottom = np.zeros(len(steps))
    for tag in ordered_tags(list(shares)):
        values = np.asarray(shares[tag], dtype=float) * 100
        bars = ax.bar(slots, values, 0.7, bottom=bottom, color=tag_color(tag), label=tag)
        # Shares in the bars are readable only while there are few of them.
        labels = [f"{v:.0f}%" if v >= 5 and len(steps) <= 12 else "" for v in values]
        text_color = "black" if _is_light(tag_color(tag)) else "white"
        ax.bar_label(bars, labels, label_type="center", fontsize=8, color=text_color)
        bottom += values
    ax.set_xticks(slots, [str(step) for step in steps])
    pad = 0.75 if len(steps) > 1 else 1.5  # a lone bar would otherwise fill the panel
    ax.set_xlim(-pad, len(steps) - 1 + pad)


def _stacked_areas(ax: plt.Axes, steps: Sequence[int], shares: Mapping[str, Sequence[float]]):
    tags = ordered_tags(list(shares))
    values = [np.nan_to_num(np.asarray(shares[tag], dtype=float)) * 100 for tag in tags]
    ax.stackplot(steps, values, colors=[tag_color(tag) for tag in tags], labels=tags)
    _integer_steps(ax)


def plot_tag_shares(
    panels: Sequence[tuple[str, Sequence[int], Mapping[str, Sequence[float]]]], path: Path
) -> Path:
    """One panel per source (validation, training): each tag's share of the diagnosed turns.

    Few steps (validation) are drawn as stacked bars, many (training) as stacked areas.
    """
    # Not sharing x: validation bars and training areas have different step spans.
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 3.6 * len(panels)), squeeze=False, layout="constrained"
    )
    for ax, (title, steps, shares) in zip(axes[:, 0], panels, strict=True):
        if len(steps) <= 20:
            _stacked_bars(ax, steps, shares)
        else:
            _stacked_areas(ax, steps, shares)
        ax.set_ylim(0, 100)
        ax.set_ylabel("share of turns (%)")
        ax.set_title(title)
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
        ax.set_xlabel("training step")
    fig.suptitle("Failure-tag distribution (one tag per ground-truth turn)")
    return _save(fig, path)


def plot_weights_and_scale(
    weights: Mapping[str, Series],
    mean_scale: Series | None,
    scaled_frac: Series | None,
    path: Path,
    apatch_off: bool = False,
) -> Path:
    """Dynamic tag weights (top) and A-Patch's mean scale and scaled share (bottom, for the
    steps it was on). `apatch_off`: A-Patch was off throughout, so the weights were
    computed but not applied (the title says so)."""
    has_apatch = mean_scale is not None or scaled_frac is not None
    rows = int(bool(weights)) + int(has_apatch)
    fig, axes = plt.subplots(
        rows, 1, figsize=(9, 3.6 * rows), squeeze=False, sharex=True, layout="constrained"
    )
    axes = list(axes[:, 0])
    if weights:
        ax = axes.pop(0)
        tags = list(reversed(ordered_tags(list(weights))))
        equals = equal_series({tag: weights[tag] for tag in tags})
        for k, tag in enumerate(tags):
            ax.plot(
                *weights[tag],
                color=tag_color(tag),
                label=equal_label(tag, equals),
                **series_style(k, len(weights[tag][0])),
            )
        ax.set_ylabel("weight")
        title = "Dynamic tag weights (clamped to [0.5, 2.0])"
        if apatch_off:
            title += ": computed, not applied (A-Patch off)"
        ax.set_title(title)
        ax.grid(alpha=0.3)
        _legend_outside(ax, "failure tag")
    if has_apatch:
        ax = axes.pop(0)
        if mean_scale is not None:
            ax.plot(*mean_scale, color="black", label="mean scale (1: unchanged)",
                    **series_style(0, len(mean_scale[0])))  # fmt: skip
        if scaled_frac is not None:
            ax.plot(*scaled_frac, color="tab:cyan", label="share of samples scaled",
                    **series_style(1, len(scaled_frac[0])))  # fmt: skip
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_ylabel("scale / share")
        ax.set_title("A-Patch: mean advantage scale and share of samples scaled (steps it was on)")
        ax.grid(alpha=0.3)
        _legend_outside(ax)
    fig.axes[-1].set_xlabel("training step")
    _integer_steps(fig.axes[-1])
    return _save(fig, path)


def _smoothing_window(num_points: int) -> int:
    return 1 if num_points < 20 else max(3, num_points // 15)


def _trailing_mean(values: Sequence[float], window: int) -> np.ndarray:
    """Mean of each value and the `window - 1` before it (fewer at the start); NaN-safe."""
    values = np.asarray(values, dtype=float)
    out = np.empty_like(values)
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out[i] = np.nanmean(chunk) if np.isfinite(chunk).any() else np.nan
    return out


def plot_training_curves(
    panels: Sequence[tuple[str, str, Mapping[str, Series], Mapping[str, str]]], path: Path
) -> Path:
    """Panels of (title, y label, {label: series}, {label: colour}) over training steps."""
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(9, 3.2 * len(panels)),
        squeeze=False,
        sharex=True,
        layout="constrained",
    )
    for ax, (title, ylabel, curves, colors) in zip(axes[:, 0], panels, strict=True):
        drawn = {}  # what each curve's bold line shows: its values or their trend
        for label, (steps, values) in curves.items():
            window = _smoothing_window(len(steps))
            trend = values if window == 1 else _trailing_mean(values, window)
            drawn[label] = (steps, trend)
        equals = equal_series(drawn)
        for k, (label, (steps, values)) in enumerate(curves.items()):
            window = _smoothing_window(len(steps))
            style = series_style(k, len(steps)) if len(curves) > 1 else {}
            name = equal_label(label, equals)
            if window == 1:
                ax.plot(steps, values, label=name, color=colors.get(label), **style)
                continue
            # Per-step values of a 32-task batch are noisy: faint raw values, a bold trend.
            (raw,) = ax.plot(steps, values, color=colors.get(label), alpha=0.25, linewidth=0.8)
            ax.plot(*drawn[label], color=raw.get_color(), label=f"{name} ({window}-step mean)",
                    **style)  # fmt: skip
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(curves) > 1 or _smoothing_window(len(next(iter(curves.values()))[0])) > 1:
            _legend_outside(ax)  # a single unsmoothed curve is named by the title
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
            light = _is_light(image.cmap(image.norm(value)))
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

    # Stacked, not side by side: the long tag names are written once, and the figure keeps
    # a width that stays legible when a page scales it down.
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(3 + 1.3 * len(tags), 1.2 + 1.5 * len(categories)),
        sharex=True,
        layout="constrained",
    )
    image = _annotated_heatmap(
        top, shares, counts, "Blues", "share of the category's turns", categories, tags
    )
    fig.colorbar(image, ax=top, pad=0.02)
    image = _annotated_heatmap(
        bottom, rewards, counts, "RdYlGn", "mean reward of their episodes", categories, tags
    )
    fig.colorbar(image, ax=bottom, pad=0.02)
    fig.suptitle(f"Capability state per category and failure tag ({source})")
    return _save(fig, path)
