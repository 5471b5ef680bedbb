"""What the report's figures draw (issue 42, item 12), read from the figure itself rather
than its pixels: every series present and told apart where values coincide, the legend
naming a curve drawn on another, axes that show what the values can be."""

from __future__ import annotations

import numpy as np
import pytest

from seal.bfcl.tasks import CATEGORIES
from seal.report import compare_plot, plots
from seal.report import stats as S


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The figures the plot functions made, kept open instead of written."""
    figures = []

    def keep(fig, path):
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    yield figures
    for fig in figures:
        plots.plt.close(fig)


def series_lines(ax) -> dict[str, object]:
    """Legend label -> the line drawn with it."""
    return {
        line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")
    }


def assert_told_apart(lines) -> None:
    looks = [(line.get_linestyle(), line.get_marker()) for line in lines]
    assert len(set(looks)) == len(looks), f"two series look alike: {looks}"


def test_equal_pass_rates_stay_visible_and_the_legend_names_them(drawn, tmp_path):
    steps = [0, 10, 20]
    rates = {c: [0.0, 0.0, 0.0] for c in CATEGORIES}  # three categories at 0: one line before
    rates["multi_turn_base"] = [10.0, 20.0, 30.0]
    plots.plot_pass_rates(steps, rates, [2.5, 5.0, 7.5], 20, tmp_path / "p.png")
    (ax,) = drawn[0].axes
    lines = series_lines(ax)
    assert {"average", "base", "miss_func"} <= set(lines)
    assert "miss_param (= miss_func, drawn on it)" in lines
    assert "long_context (= miss_func, drawn on it)" in lines
    categories = [line for label, line in lines.items() if label not in ("average",)
                  and not label.startswith("best")]  # fmt: skip
    assert len(categories) == 4
    assert_told_apart(categories)
    assert list(lines["base"].get_ydata()) == [10.0, 20.0, 30.0]
    assert ax.get_ylim() == (0, 105)


def test_equal_training_curves_and_tag_weights_are_told_apart(drawn, tmp_path):
    steps = list(range(1, 31))
    curves = {"reward (mean)": (steps, [0.0] * 30)}
    curves |= {f"accuracy {c}": (steps, [0.0] * 30) for c in ("base", "miss_func", "miss_param")}
    curves["accuracy long_context"] = (steps, [k / 30 for k in steps])
    plots.plot_training_curves([("rewards", "reward", curves, {})], tmp_path / "t.png")
    lines = series_lines(drawn[0].axes[0])
    assert len(lines) == 5
    assert "accuracy base (= reward (mean), drawn on it) (3-step mean)" in lines
    assert "accuracy long_context (3-step mean)" in lines
    assert_told_apart(lines.values())

    weights = {"pass": (steps, [1.0] * 30), "state_mismatch": (steps, [1.0] * 30),
               "spurious_tool_call": (steps, [2.0] * 30)}  # fmt: skip
    scale, share = (steps, [1.0] * 30), (steps, [0.0] * 30)
    plots.plot_weights_and_scale(weights, scale, share, tmp_path / "w.png")
    top, bottom = drawn[1].axes
    lines = series_lines(top)
    assert set(lines) == {"pass", "state_mismatch (= pass, drawn on it)", "spurious_tool_call"}
    assert_told_apart(lines.values())
    assert set(series_lines(bottom)) == {"mean scale (1: unchanged)", "share of samples scaled"}


def comparison(drawn, tmp_path, scores, differences):
    columns = ["base", "average"]
    compare_plot.plot_comparison(
        columns, scores, {}, differences, "GRPO", "test", tmp_path / "c.png"
    )
    return drawn[-1].axes


def test_all_zero_scores_get_an_axis_from_zero(drawn, tmp_path):
    """Before: the score axis ran from -0.04 to +0.04 (%), the differences' likewise."""
    scores = {"GRPO": [(0.0, 0.0)] * 2, "SEAL": [(0.0, 0.0)] * 2}
    no_difference = {"SEAL": {s: [(0.0, 0.0, 0.0)] * 2 for s in ("final", "best")}}
    left, right = comparison(drawn, tmp_path, scores, no_difference)
    assert left.get_ylim() == (0.0, 10.0), "a pass rate axis from 0, ten points at least"
    assert right.get_ylim() == (-5.0, 5.0), "no difference: +-5 points at least"


def test_the_difference_axis_covers_every_interval_and_stops_at_100_points(drawn, tmp_path):
    scores = {"GRPO": [(20.0, 5.0)] * 2, "SEAL": [(90.0, 3.0)] * 2}
    wide = {"SEAL": {s: [(70.0, 20.0, 100.0), (30.0, -12.0, 60.0)] for s in ("final", "best")}}
    left, right = comparison(drawn, tmp_path, scores, wide)
    assert left.get_ylim() == (0.0, pytest.approx(93 * 1.1))  # 90 + its error bar, and room
    assert right.get_ylim() == (-105.0, 105.0)


def test_an_interval_stops_where_a_pass_rate_or_a_difference_of_two_does():
    """The learning check's page drew +137 points: Welch's t interval of SEAL's 3 runs at
    75% (no spread) against GRPO's at 0, 25 and 75%, on df = 2, reaching past what a
    difference of pass rates can be (+100). Cut there, it covers the true difference as
    often as before (the true value lies in the range), and says no more than the data."""
    seal = np.array([[0.75], [0.75], [0.75]])
    grpo = np.array([[0.0], [0.25], [0.75]])
    found = S.pooled_difference([S.Stratum(1.0, (seal, grpo))], tasks_fixed=True)
    assert found.estimate == pytest.approx(5 / 12) and found.df == pytest.approx(2)
    half = S.t_quantile(0.95, 2) * found.se
    assert found.estimate + half > 1.3  # the interval the t quantile gives
    assert found.high == 1.0 and found.low == pytest.approx(found.estimate - half)
    # GRPO's score: 1/3 +- 0.95 by the t quantile, cut to [0, 1].
    score = S.pooled_score([S.Stratum(1.0, (grpo,))], tasks_fixed=True)
    assert (score.low, score.high) == (0.0, 1.0) and score.se == pytest.approx(found.se)
