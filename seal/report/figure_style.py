"""The report's colours and orders, fixed per category and per failure tag so that one tag
looks the same in every figure and table of every report (seal.report.plots draws with
them; a module of its own so that what reads runs need not import matplotlib)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence

from seal.bfcl import tags as T

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


LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MAX_MARKERS = 12
"""Markers drawn on a line of many points: every step's would blot the line out."""


def series_style(k: int, points: int) -> dict:
    """Matplotlib line keywords of the k-th series of a panel: its own dash pattern and
    hollow marker, markers smaller from one series to the next so that equal values nest
    rather than cover each other; on a line of many points, a few markers, each series'
    at other steps (staggered), so that a line drawn over another still shows its own."""
    style = {
        "linestyle": LINE_STYLES[k % len(LINE_STYLES)],
        "marker": MARKERS[k % len(MARKERS)],
        "markersize": 10.0 - 1.5 * (k % 4),
        "markerfacecolor": "none",
        "markeredgewidth": 1.5,
    }
    if points > MAX_MARKERS:
        every = math.ceil(points / MAX_MARKERS)
        style["markevery"] = (k % every, every)
    return style


def _same(a: Sequence, b: Sequence) -> bool:
    pairs = list(zip(a, b, strict=False))
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        for x, y in ((float(x), float(y)) for x, y in pairs)
    )


def equal_series(curves: Mapping[str, tuple[Sequence, Sequence]]) -> dict[str, str]:
    """{label: the first earlier label whose series (steps and values) it equals}: the
    curves a plot draws over another, which the legend names (`equal_label`)."""
    out: dict[str, str] = {}
    seen: list[str] = []
    for label, (steps, values) in curves.items():
        for earlier in seen:
            other_steps, other_values = curves[earlier]
            if _same(steps, other_steps) and _same(values, other_values):
                out[label] = out.get(earlier, earlier)
                break
        seen.append(label)
    return out


def equal_label(label: str, equals: Mapping[str, str]) -> str:
    """A legend entry that says when its curve lies on another's."""
    return f"{label} (= {equals[label]}, drawn on it)" if label in equals else label
