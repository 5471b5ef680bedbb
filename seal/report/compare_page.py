"""The page of `seal-report --compare`: compare.md, its figure compare.png and the numbers
in compare.json, from a seal.report.compare.Comparison."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from seal.bfcl.tasks import CATEGORIES
from seal.report import compare_plot, plots
from seal.report import stats as S
from seal.report.compare import Comparison, Difference
from seal.report.compare_runs import ALL_TASKS, AVERAGE, BEST, FINAL, HELDOUT, SELECTIONS
from seal.report.config_diff import MISSING
from seal.report.paper import backbone_of, controlled_results
from seal.report.tables import markdown_table

COMPARE_FILENAME = "compare.md"


def column_name(column: str) -> str:
    return plots.short_category(column) if column in CATEGORIES else column


def selection_name(comparison: Comparison, selection: str) -> str:
    """A selection as the tables name it; the best step is flagged as chosen on the test
    set (or on the held-out half, and scored on the other)."""
    if selection == FINAL:
        return "final step"
    if comparison.select == HELDOUT:
        return "best step (chosen on the held-out half, scored on the other)"
    return "best step (selected on the test set: optimistic)"


def _pct(value: float, se: float | None = None) -> str:
    if math.isnan(value):
        return "–"
    if se is None:
        return f"{value:.2f}"
    return f"{value:.2f} ± {'n/a' if math.isnan(se) else f'{se:.2f}'}"


def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3g}"


def arms_table(comparison: Comparison) -> str:
    """Per arm and selection: the mean over its runs ± its standard error, per column."""
    by_key = {(s.arm, s.selection, s.column): s for s in comparison.scores if s.run is None}
    rows = []
    for selection in SELECTIONS:
        for arm, runs in comparison.arms.items():
            name = arm + (" (baseline)" if arm == comparison.baseline else "")
            cells = [by_key.get((arm, selection, c)) for c in comparison.columns]
            tasks = next(
                s.tasks for s in cells if s is not None and s.column in (AVERAGE, ALL_TASKS)
            )
            rows.append(
                [name, selection_name(comparison, selection), len(runs), tasks]
                + ["–" if s is None else _pct(s.pct, s.se_pct) for s in cells]
            )
    for backbone in _backbones(comparison):
        matched = [run.paper for run in comparison.runs if run.paper is not None]
        for result in controlled_results(backbone):
            mark = " (reproduced above)" if result in matched else ""
            cells = {**result.category_pct, AVERAGE: result.average_pct}
            rows.append(
                [f"paper: {result.label}{mark}", "–", "–", "–"]
                + [_pct(cells[c]) if c in cells else "–" for c in comparison.columns]
            )
    header = ["arm", "step", "runs", "tasks", *map(column_name, comparison.columns)]
    return markdown_table(header, rows)


def _backbones(comparison: Comparison) -> list[str]:
    out = []
    for run in comparison.runs:
        backbone = backbone_of(run.model) if run.model else None
        if backbone and backbone not in out:
            out.append(backbone)
    return out


def runs_table(comparison: Comparison) -> str:
    """The per-seed table: every run's score ± its standard error over tasks, at its final
    and its best step."""
    by_key = {(s.run, s.selection, s.column): s for s in comparison.scores if s.run is not None}
    rows = []
    for run in comparison.runs:
        for selection in SELECTIONS:
            step = run.chosen[selection]
            how = "given" if run.given is not None else selection
            if selection == BEST and run.given is None:
                how += f", by {run.best_by}"
            cells = [by_key.get((run.label, selection, c)) for c in comparison.columns]
            rows.append(
                [run.arm, run.label, f"{step} ({how})"]
                + ["–" if s is None else _pct(s.pct, s.se_pct) for s in cells]
            )
    header = ["arm", "run", "step", *map(column_name, comparison.columns)]
    return markdown_table(header, rows)


def _interval(d: Difference) -> str:
    if math.isnan(d.low_pct):
        return "–"
    return f"[{d.low_pct:+.2f}, {d.high_pct:+.2f}]"


def differences_table(comparison: Comparison) -> str:
    rows = []
    for d in comparison.differences:
        discordant = "–" if d.gained is None else f"{d.gained} / {d.lost}"
        se = "n/a" if math.isnan(d.se_pct) else f"{d.se_pct:.2f}"
        rows.append(
            [
                d.arm,
                selection_name(comparison, d.selection),
                column_name(d.column),
                f"{d.runs} vs {d.baseline_runs}",
                d.tasks,
                f"{d.arm_pct:.2f} vs {d.baseline_pct:.2f}",
                f"{d.difference_pct:+.2f} ± {se}",
                _interval(d),
                discordant,
                d.method,
                _p(d.p_value),
                _p(d.holm_p),
            ]
        )
    header = [
        "arm",
        "step",
        "column",
        "runs",
        "paired tasks",
        "arm vs baseline (%)",
        "difference ± s.e. (pp)",
        "95% interval",
        "gained / lost",
        "interval / test",
        "p",
        "Holm p",
    ]
    return markdown_table(header, rows)


def config_table(comparison: Comparison) -> str:
    found = comparison.config_differences
    with_config = [run.label for run in comparison.runs if run.config is not None]
    if len(with_config) < 2:
        return (
            f"Fewer than two runs have a saved config (`config.yaml`: {with_config or 'none'}): "
            "nothing to compare.\n"
        )
    if not found:
        return f"The configs of {', '.join(with_config)} are identical.\n"
    rows = [
        [key, *(values.get(label, MISSING) for label in with_config)]
        for key, values in found.items()
    ]
    return markdown_table(["key", *with_config], rows)


def _tasks_sentence(comparison: Comparison) -> str:
    categories = [task_id.rsplit("_", 1)[0] for task_id in comparison.tasks[FINAL]]
    listed = ", ".join(
        f"{column_name(c)} {categories.count(c)}" for c in CATEGORIES if c in categories
    )
    return f"{len(comparison.tasks[FINAL])} paired tasks ({listed})"


def intro(comparison: Comparison) -> str:
    arms = "; ".join(
        f"**{arm}**{' (baseline)' if arm == comparison.baseline else ''}: "
        + ", ".join(run.label for run in runs)
        for arm, runs in comparison.arms.items()
    )
    select = (
        "The best step is chosen on one half of each category's tasks (in id order, taken "
        "alternately) and scored on the other half."
        if comparison.select == HELDOUT
        else "The best step is chosen on the very tasks it is scored on: its row is selected on "
        "the test set and is optimistic (the best of several noisy points); the final step's "
        "row is the one to cite."
    )
    spread = (
        "over the seeds only: the tasks are taken as fixed (`--tasks fixed`), so the claim is "
        "about these tasks"
        if comparison.tasks_fixed
        else "over seeds and tasks (the runs of an arm as a sample of seeds, the tasks as a "
        "sample of tasks)"
    )
    return (
        f"Arms: {arms}. Each run is scored at its final validation step and at its best one "
        f"(highest average of the four categories, or of all tasks when the runs do not cover "
        f"the four; the later step on a tie). {select} Scores are the mean over an arm's runs "
        f"± its standard error {spread}; {_tasks_sentence(comparison)} at the final step.\n"
    )


def differences_text(comparison: Comparison, resamples: int, seed: int) -> str:
    return (
        "Each arm against the baseline, paired over the tasks every run validated. One run "
        "per arm with one 0/1 outcome per task: the 95% percentile bootstrap interval over "
        f"tasks ({resamples} resamples, stratified by category for the average; seed {seed}) "
        "and the exact McNemar test of the tasks gained and lost. Otherwise: the difference of "
        "the arms' means with a 95% t interval whose variance pools the seed-to-seed and the "
        "task-to-task variation (Satterthwaite's degrees of freedom) and the t-test of no "
        "difference (docs/comparing_runs.md). `Holm p`: the p-values adjusted with Holm's "
        f"method across all {sum(not math.isnan(d.p_value) for d in comparison.differences)} "
        "rows with a test, so a row may be called significant at 0.05 when its Holm p is "
        f"below it. {_tasks_sentence(comparison)}: an interval that holds 0 is a difference "
        "within the noise of these runs and tasks.\n"
    )


def write_comparison(comparison: Comparison, out_dir: Path, resamples: int, seed: int) -> Path:
    """compare.md, compare.png and compare.json (the numbers) in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_comparison(comparison, out_dir / "compare.png")
    page = ["# Runs compared\n"]
    if comparison.warnings:
        page.append("".join(f"**Warning:** {w}\n\n" for w in comparison.warnings))
    page += [
        intro(comparison),
        "## Scores per arm (%)\n",
        arms_table(comparison),
        "\nThe paper's rows (Tables 1 and 3) are those of the runs' backbones.\n"
        if _backbones(comparison)
        else "",
        "## Scores per run (%)\n",
        "Each run ± its standard error over tasks.\n",
        runs_table(comparison),
        "## Differences to the baseline\n",
        differences_text(comparison, resamples, seed),
        differences_table(comparison),
        "## Config keys that differ\n",
        config_table(comparison),
        f"\n![runs compared]({png.name})\n",
    ]
    if comparison.notes:
        page.append("\nNotes:\n\n" + "".join(f"- {note}\n" for note in comparison.notes))
    path = out_dir / COMPARE_FILENAME
    path.write_text("\n".join(part for part in page if part), encoding="utf-8")
    numbers = {
        "baseline": comparison.baseline,
        "select": comparison.select,
        "tasks_fixed": comparison.tasks_fixed,
        "arms": [
            {
                "name": arm,
                "runs": [
                    {
                        "label": r.label,
                        "path": str(r.path),
                        "final_step": r.chosen[FINAL],
                        "best_step": r.chosen[BEST],
                        "best_by": r.best_by,
                        "step_given": r.given is not None,
                    }
                    for r in runs
                ],
            }
            for arm, runs in comparison.arms.items()
        ],
        "tasks": {selection: len(ids) for selection, ids in comparison.tasks.items()},
        "scores": [_finite(asdict(s)) for s in comparison.scores],
        "differences": [_finite(asdict(d)) for d in comparison.differences],
        "warnings": comparison.warnings,
        "notes": comparison.notes,
        "config_differences": comparison.config_differences,
        "resamples": resamples,
        "seed": seed,
        "tasks_for_a_test": S.tasks_for_a_test(),
    }
    (out_dir / "compare.json").write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return path


def _finite(row: dict) -> dict:
    """NaN as null (NaN is not JSON)."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def plot_comparison(comparison: Comparison, path: Path) -> Path:
    columns = comparison.columns
    by_key = {(s.arm, s.selection, s.column): s for s in comparison.scores if s.run is None}
    scores = {
        arm: [
            (by_key[arm, FINAL, c].pct, by_key[arm, FINAL, c].se_pct)
            if (arm, FINAL, c) in by_key
            else (math.nan, math.nan)
            for c in columns
        ]
        for arm in comparison.arms
    }
    paper = {}
    for arm, runs in comparison.arms.items():
        rows = [run.paper for run in runs if run.paper is not None]
        if rows and len(rows) == len(runs) and all(r == rows[0] for r in rows):
            row = rows[0]
            cells = {**row.category_pct, AVERAGE: row.average_pct}
            paper[arm] = (row.label, [cells.get(c, math.nan) for c in columns])
    differences = {}
    for d in comparison.differences:
        entry = differences.setdefault(d.arm, {FINAL: {}, BEST: {}})
        entry[d.selection][d.column] = (d.difference_pct, d.low_pct, d.high_pct)
    intervals = {
        arm: {
            selection: [found[selection].get(c, (math.nan,) * 3) for c in columns]
            for selection in SELECTIONS
        }
        for arm, found in differences.items()
    }
    labels = [column_name(c) for c in columns]
    best_note = (
        "chosen on a held-out half" if comparison.select == HELDOUT else "selected on the test set"
    )
    return compare_plot.plot_comparison(
        labels, scores, paper, intervals, comparison.baseline, best_note, path
    )
