"""`seal-report --compare` with one run per arm: paired bootstrap intervals and exact
McNemar p-values, on constructed runs whose per-task outcomes are known; the numbers are
checked against computations made independently here (scipy's exact binomial test and
bootstrap, and a plain loop for the stratified average). Several runs per arm:
tests/seal/report/test_compare_arms.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from seal.bfcl.tasks import CATEGORIES
from seal.report import cli
from seal.report import compare as C
from seal.report import compare_runs as R
from seal.report import plots as plots_module
from seal.report import stats as S
from seal.report.summary import load_split_ids
from seal.runs.records import ValidationRecord, write_step

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402

EVAL_IDS = load_split_ids(REPO / "data/seal_split.json", "eval")
BY_CATEGORY = {c: [t for t in EVAL_IDS if t.startswith(c + "_")] for c in CATEGORIES}
RESAMPLES = 2000


def record(task_id: str, step: int, score: int, **extra) -> ValidationRecord:
    category = task_id.rsplit("_", 1)[0]
    fields = {"input": "", "output": "", "failure_tags": ["pass"], "turns": 1}
    return ValidationRecord(
        task_id=task_id, data_source=category, score=score, reward=score, step=step, extra=extra,
        **fields,
    )  # fmt: skip


def write_run(folder: Path, passed: dict[str, set[int]], step: int = 10, **extra) -> Path:
    """A run whose step `step` passes, per category, the tasks at the given positions
    (in the split's order) and fails the others."""
    records = [
        record(task_id, step, int(k in passed.get(category, set())), **extra)
        for category, ids in BY_CATEGORY.items()
        for k, task_id in enumerate(ids)
    ]
    write_step(folder / "validation", step, records)
    return folder


# Per category: the baseline passes the first `base` tasks; the run passes the first
# `base - lost` and the `gained` tasks after the baseline's, so the counts are known.
DESIGN = {  # category: (baseline passes, run gains, run loses)
    "multi_turn_base": (22, 40, 4),
    "multi_turn_miss_func": (14, 25, 3),
    "multi_turn_miss_param": (10, 26, 2),
    "multi_turn_long_context": (10, 5, 6),
}


def baseline_and_run(tmp_path):
    base = {c: set(range(b)) for c, (b, _, _) in DESIGN.items()}
    run = {c: set(range(lost, b + gained)) for c, (b, gained, lost) in DESIGN.items()}
    return write_run(tmp_path / "vanilla", base), write_run(tmp_path / "seal", run)


def compare(baseline: Path, run: Path, seed: int = 3) -> C.Comparison:
    return C.compare_arms(
        [("vanilla", [str(baseline)]), ("seal", [str(run)])], resamples=RESAMPLES, seed=seed
    )


def differences(baseline: Path, run: Path, seed: int = 3, selection: str = R.FINAL):
    found = compare(baseline, run, seed).differences
    return {d.column: d for d in found if d.selection == selection}


def test_a_run_compared_with_a_copy_of_itself_differs_by_zero_with_p_one(tmp_path):
    baseline, _ = baseline_and_run(tmp_path)
    copy = shutil.copytree(baseline, tmp_path / "copy")
    comparison = C.compare_arms([("vanilla", [str(baseline)]), ("copy", [str(copy)])])
    found = comparison.differences
    assert [(d.selection, d.column) for d in found] == [
        (selection, column) for selection in R.SELECTIONS for column in [*CATEGORIES, R.AVERAGE]
    ]
    for d in found:
        assert (d.difference_pct, d.low_pct, d.high_pct) == (0.0, 0.0, 0.0)
        assert (d.gained, d.lost, d.p_value, d.holm_p) == (0, 0, 1.0, 1.0)
        assert d.method == C.BOOTSTRAP_MCNEMAR
    assert found[4].tasks == 400 and found[0].tasks == 100


def test_differences_and_discordant_counts_are_the_constructed_ones(tmp_path):
    found = differences(*baseline_and_run(tmp_path))
    for category, (_, gained, lost) in DESIGN.items():
        d = found[category]
        assert (d.tasks, d.gained, d.lost) == (100, gained, lost)
        assert d.difference_pct == pytest.approx(gained - lost)
    net = [gained - lost for _, gained, lost in DESIGN.values()]
    average = found[R.AVERAGE]
    assert average.difference_pct == pytest.approx(sum(net) / 4)
    assert average.arm_pct == pytest.approx(sum(b + g - lost for b, g, lost in DESIGN.values()) / 4)
    gained = sum(g for _, g, _ in DESIGN.values())
    assert (average.gained, average.lost) == (gained, sum(lost for *_, lost in DESIGN.values()))


def test_p_values_equal_scipys_exact_binomial_test(tmp_path):
    found = differences(*baseline_and_run(tmp_path))
    for d in found.values():
        expected = stats.binomtest(d.gained, d.gained + d.lost, 0.5).pvalue
        assert d.p_value == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert found["multi_turn_long_context"].p_value == pytest.approx(1.0)  # 5 against 6
    assert found["multi_turn_base"].p_value < 1e-6
    for gained, lost in [(0, 0), (0, 1), (1, 0), (3, 3), (7, 2), (0, 30), (210, 180), (400, 0)]:
        expected = 1.0 if gained + lost == 0 else stats.binomtest(gained, gained + lost).pvalue
        assert S.mcnemar_exact(gained, lost) == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_category_intervals_equal_scipys_percentile_bootstrap(tmp_path):
    baseline, run = baseline_and_run(tmp_path)
    seed = 3
    found = differences(baseline, run, seed)
    comparison = compare(baseline, run, seed)
    task_ids = comparison.tasks[R.FINAL]
    for k, category in enumerate(CATEGORIES):
        ours, theirs = (
            C.score_matrix(comparison.arms[arm], R.FINAL, task_ids)[0]
            for arm in ("seal", "vanilla")
        )
        keep = [i for i, t in enumerate(task_ids) if C.category_of(t) == category]
        ours, theirs = ours[keep], theirs[keep]
        result = stats.bootstrap(
            (ours - theirs,),
            np.mean,
            n_resamples=RESAMPLES,
            method="percentile",
            confidence_level=0.95,
            rng=np.random.default_rng([seed, k]),
        )
        low, high = result.confidence_interval
        assert found[category].low_pct == pytest.approx(low * 100, abs=1e-9)
        assert found[category].high_pct == pytest.approx(high * 100, abs=1e-9)
        assert found[category].low_pct < found[category].difference_pct < found[category].high_pct


def test_the_average_interval_is_the_stratified_bootstrap(tmp_path):
    """Recomputed with a plain loop: each resample draws every category's tasks anew (the
    generators of the module's docstring) and averages the four category differences."""
    baseline, run = baseline_and_run(tmp_path)
    seed = 5
    average = differences(baseline, run, seed)[R.AVERAGE]
    draws = {}
    for k, category in enumerate(CATEGORIES):
        # The tasks in task-id order (the module pairs them so), each with its position in
        # the split, which decided its outcomes above.
        positions = [BY_CATEGORY[category].index(t) for t in sorted(BY_CATEGORY[category])]
        b, gained, lost = DESIGN[category]
        diffs = [int(lost <= p < b + gained) - int(p < b) for p in positions]
        picks = np.random.default_rng([seed, k]).integers(0, 100, (RESAMPLES, 100))
        draws[category] = [sum(diffs[i] for i in row) / 100 for row in picks.tolist()]
    means = sorted(sum(draws[c][r] for c in CATEGORIES) / 4 for r in range(RESAMPLES))

    # numpy's default percentile: linear between the order statistics around q (n - 1)
    def percentile(q):
        position = q / 100 * (RESAMPLES - 1)
        low = int(position)
        return means[low] + (means[low + 1] - means[low]) * (position - low)

    assert average.low_pct == pytest.approx(percentile(2.5) * 100, abs=1e-9)
    assert average.high_pct == pytest.approx(percentile(97.5) * 100, abs=1e-9)


def save_training_config(run: Path, conf: str) -> None:
    cfg = launcher.compose(REPO / f"exp/{conf}.yaml", ["job=local"])
    OmegaConf.save(cfg, run / "config.yaml")


def test_command_line_compares_training_runs_and_an_endpoint_evaluation(tmp_path, capsys):
    baseline, run = baseline_and_run(tmp_path)
    save_training_config(baseline, "GRPO")
    save_training_config(run, "SEAL")
    write_run(run, {"multi_turn_base": set(range(5))}, step=20)  # a worse later step
    untrained = write_run(
        tmp_path / "qwen7b", {c: set(range(10)) for c in CATEGORIES}, step=0,
        model="Qwen/Qwen2.5-7B-Instruct",
    )  # fmt: skip
    out = tmp_path / "cmp"
    argv = [
        "--compare",
        str(run),
        str(untrained),
        "--baseline",
        str(baseline),
        "--out-dir",
        str(out),
    ]
    assert cli.main([*argv, "--resamples", "500"]) == 0
    assert "compare.md" in capsys.readouterr().out
    page = (out / "compare.md").read_text()
    assert (out / "compare.png").stat().st_size > 10_000
    # The arms' scores with standard errors over tasks (one run each: sqrt(p (1 - p) /
    # (n - 1)) for 0/1 outcomes), at the final step (seal's worse step 20) and the best.
    assert (
        "| vanilla (baseline) | final step | 1 | 400 | 22.00 ± 4.16 | 14.00 ± 3.49 |" in page
    )  # sqrt(.22 * .78 / 99) = 0.0416
    assert "| seal | seal | 20 (final) | 5.00 ± 2.19 | 0.00 ± 0.00 |" in page
    # SEAL.yaml records the release's best-step rule: multi_turn_base alone.
    assert "| seal | seal | 10 (best, by multi_turn_base) | 58.00 ± 4.96 |" in page
    assert (
        "| seal | best step (selected on the test set: optimistic) | 1 | 400 | 58.00 ± 4.96" in page
    )
    # The paper's rows of the runs' backbone, the reproduced ones marked.
    assert (
        "paper: Qwen2.5-7B-Instruct + SEAL (reproduced above) | – | – | – | 58.00 | 36.00 "
        "| 34.00 | 33.00 | 40.25 |" in page
    )
    assert "paper: Qwen2.5-7B-Instruct + vanilla RL (reproduced above)" in page
    assert "paper: Qwen2.5-7B-Instruct (reproduced above)" in page
    assert "paper: Qwen2.5-7B-Instruct + SEAL w/o closed-loop update |" in page
    numbers = json.loads((out / "compare.json").read_text())
    assert [a["name"] for a in numbers["arms"]] == ["vanilla", "seal", "qwen7b"]
    rows = {(d["arm"], d["selection"], d["column"]): d for d in numbers["differences"]}
    final, best = rows["seal", "final", R.AVERAGE], rows["seal", "best", R.AVERAGE]
    assert (final["gained"], final["lost"], best["gained"], best["lost"]) == (0, 51, 96, 15)
    assert len(rows) == 20 and all(d["holm_p"] >= d["p_value"] for d in rows.values())
    # A given step instead of the final and the best.
    assert cli.main(["--compare", f"{run}@20", "--baseline", str(baseline),
                        "--out-dir", str(tmp_path / "cmp20"), "--resamples", "200"]) == 0  # fmt: skip
    page = (tmp_path / "cmp20" / "compare.md").read_text()
    assert "| seal | seal | 20 (given) | 5.00 ± 2.19 |" in page


def test_unpaired_tasks_are_left_out_and_named(tmp_path):
    baseline, _ = baseline_and_run(tmp_path)
    partial = tmp_path / "partial" / "validation"
    records = [record(t, 0, 1) for ids in BY_CATEGORY.values() for t in ids[:50]]
    write_step(partial, 0, records)
    comparison = C.compare_arms([("vanilla", [str(baseline)]), ("partial", [str(partial.parent)])])
    found = {d.column: d for d in comparison.differences if d.selection == R.FINAL}
    assert found["multi_turn_base"].tasks == 50 and found[R.AVERAGE].tasks == 200
    assert comparison.notes[0] == (
        "vanilla: 200 task(s) of its final step are not validated by every run and are left out"
    )


def test_bad_arguments_are_clear(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["--baseline", "x"])
    baseline, _ = baseline_and_run(tmp_path)
    assert cli.main(["--compare", f"{baseline}@7"]) == 1
    assert "no validation step 7" in capsys.readouterr().err
    assert cli.main(["--compare", str(tmp_path / "nowhere")]) == 1
    assert "nowhere: no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["--compare", str(tmp_path / "empty")]) == 1
    assert "no validation records" in capsys.readouterr().err


# --- issue 32, finding 4: what a comparison of short or flat runs said -----------------


def test_a_tie_of_the_best_step_goes_to_the_later_step_and_the_final_step_is_shown(tmp_path):
    """Two short runs whose steps 0 and 10 have equal averages: the best step is 10 (not the
    identical untrained step 0 of both), and the final step (10) is scored beside it."""
    untrained = {c: set(range(10)) for c in CATEGORIES}
    run_a = write_run(tmp_path / "a", untrained, step=0)
    write_run(run_a, {c: set(range(10)) for c in CATEGORIES}, step=10)
    run_b = write_run(tmp_path / "b", untrained, step=0)
    write_run(run_b, {c: set(range(5, 15)) for c in CATEGORIES}, step=10)  # 5 gained, 5 lost
    out = tmp_path / "cmp"
    argv = ["--compare", str(run_a), str(run_b), "--out-dir", str(out), "--resamples", "200"]
    assert cli.main(argv) == 0
    numbers = json.loads((out / "compare.json").read_text())
    runs = [run for arm in numbers["arms"] for run in arm["runs"]]
    assert [(r["label"], r["final_step"], r["best_step"]) for r in runs] == [
        ("a", 10, 10),
        ("b", 10, 10),
    ]
    rows = {(d["selection"], d["column"]): d for d in numbers["differences"]}
    assert rows["final", "multi_turn_base"]["gained"] == 5
    assert rows["best", "multi_turn_base"]["lost"] == 5


def test_a_category_too_small_for_a_test_is_warned_about(tmp_path):
    """2 tasks per category: no test can reach p < 0.05 (the exact McNemar test's smallest
    p-value with 2 tasks is 0.5); the page says so and never speaks of 100 tasks."""
    small = {c: ids[:2] for c, ids in BY_CATEGORY.items()}

    def small_run(folder, passed):
        records = [
            record(t, 10, int(k in passed)) for ids in small.values() for k, t in enumerate(ids)
        ]
        write_step(folder / "validation", 10, records)
        return folder

    base, run = small_run(tmp_path / "base", set()), small_run(tmp_path / "run", {0, 1})
    out = tmp_path / "cmp"
    assert cli.main(["--compare", str(base), str(run), "--out-dir", str(out)]) == 0
    page = (out / "compare.md").read_text()
    assert "100 tasks" not in page
    warning = next(line for line in page.splitlines() if "too few tasks" in line)
    assert "multi_turn_base (2 tasks)" in warning and "at least 6" in warning
    numbers = json.loads((out / "compare.json").read_text())
    assert any("too few tasks" in w for w in numbers["warnings"])


def test_the_figure_titles_say_what_is_drawn(tmp_path, monkeypatch):
    """No paper row is drawn for runs of an unknown model: no title speaks of one."""
    titles = []

    def keep_titles(fig, path):
        titles.extend(ax.get_title() for ax in fig.axes)
        path.write_bytes(b"png")
        return path

    monkeypatch.setattr(plots_module, "_save", keep_titles)
    baseline, run = baseline_and_run(tmp_path)
    argv = ["--compare", str(baseline), str(run), "--out-dir", str(tmp_path / "cmp")]
    assert cli.main([*argv, "--resamples", "200"]) == 0
    assert titles and not any("paper" in title for title in titles)
    assert any("95%" in title for title in titles)


def test_the_config_keys_that_differ_between_the_runs_are_tabled(tmp_path):
    baseline, run = baseline_and_run(tmp_path)
    save_training_config(baseline, "GRPO")
    save_training_config(run, "SEAL")
    out = tmp_path / "cmp"
    argv = ["--compare", str(baseline), str(run), "--out-dir", str(out), "--resamples", "200"]
    assert cli.main(argv) == 0
    page = (out / "compare.md").read_text()
    assert "## Config keys that differ" in page
    assert "| trainer.apatch.enable | False | True |" in page
    assert "| trainer.interface.schema_cues | False | True |" in page
    numbers = json.loads((out / "compare.json").read_text())
    assert numbers["config_differences"]["trainer.apatch.enable"] == {
        "vanilla": False,
        "seal": True,
    }
