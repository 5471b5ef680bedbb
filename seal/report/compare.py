"""Arms of runs side by side, with the statistics a claim needs: `seal-report --compare`.

    seal-report --compare --arm GRPO RUN [RUN ...] --arm SEAL RUN [RUN ...] [--baseline GRPO]
    seal-report --compare RUN [RUN ...] [--baseline RUN]      # each RUN an arm of one run

Each run is scored at its final and its best validation step; per arm, the mean over its
runs with a standard error over seeds and tasks, and against the baseline the difference,
its 95% interval and a Holm-adjusted p-value (seal.report.stats). Which step, which test
and why: docs/comparing_runs.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from seal.bfcl.tasks import CATEGORIES
from seal.report import stats as S
from seal.report.compare_runs import (
    ALL_TASKS,
    AVERAGE,
    BEST,
    FINAL,
    HELDOUT,
    SELECTIONS,
    TEST,
    ComparedRun,
    choose_steps,
    heldout_halves,
    load_arms,
    paired_tasks,
    task_scores,
)
from seal.report.config_diff import differing_keys, flatten

RESAMPLES = 10_000
BOOTSTRAP_MCNEMAR = "paired bootstrap / exact McNemar"
POOLED_T = "pooled over seeds and tasks / t-test"
POOLED_T_FIXED = "over seeds, tasks fixed / Welch t-test"


# --- rows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """An arm's (or one run's) score on a column at a selection, in points (pct)."""

    arm: str
    run: str | None
    """The run's label for a per-run score; None for the arm's mean over its runs."""
    selection: str
    column: str
    tasks: int
    runs: int
    pct: float
    se_pct: float
    """Standard error over seeds and tasks (over tasks for one run); nan if undefined."""


@dataclass(frozen=True)
class Difference:
    """An arm against the baseline arm on a column at a selection, in points (pct)."""

    arm: str
    selection: str
    column: str
    tasks: int
    runs: int
    baseline_runs: int
    arm_pct: float
    baseline_pct: float
    difference_pct: float
    se_pct: float
    low_pct: float
    high_pct: float
    """The 95% interval of the difference."""
    method: str
    p_value: float
    holm_p: float = math.nan
    """The p-value Holm-adjusted across all rows of the comparison."""
    df: float = math.nan
    """Satterthwaite's degrees of freedom of a pooled t interval."""
    gained: int | None = None
    """Tasks the arm's run passed and the baseline's failed (one run each, 0/1 outcomes)."""
    lost: int | None = None


@dataclass
class Comparison:
    arms: dict[str, list[ComparedRun]]
    baseline: str
    select: str
    tasks_fixed: bool
    tasks: dict[str, list[str]] = field(default_factory=dict)
    """Per selection, the task ids every run validated at its chosen step (paired)."""
    columns: list[str] = field(default_factory=list)
    scores: list[Score] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config_differences: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def runs(self) -> list[ComparedRun]:
        return [run for runs in self.arms.values() for run in runs]


def category_of(task_id: str) -> str:
    return task_id.rsplit("_", 1)[0]


def columns_of(task_ids: list[str]) -> list[str]:
    """The categories present (in the paper's order), then AVERAGE when all four are,
    else ALL_TASKS."""
    present = [c for c in CATEGORIES if any(category_of(t) == c for t in task_ids)]
    return [*present, AVERAGE if len(present) == len(CATEGORIES) else ALL_TASKS]


def score_matrix(runs: list[ComparedRun], selection: str, task_ids: list[str]) -> np.ndarray:
    """runs x tasks: each run's per-task score at its chosen step."""
    rows = []
    for run in runs:
        step = run.chosen[selection]
        scores = task_scores(run.steps[step], f"{run.path}: step {step}")
        rows.append([scores[t][0] for t in task_ids])
    return np.array(rows, dtype=float).reshape(len(runs), len(task_ids))


def strata(column: str, task_ids: list[str], matrices: list[np.ndarray]) -> list[S.Stratum]:
    """The strata of a column: one category; the four, a quarter each (AVERAGE); or all
    tasks as one (ALL_TASKS). `matrices`: per arm, runs x `task_ids`."""
    if column == ALL_TASKS:
        return [S.Stratum(1.0, tuple(matrices), ALL_TASKS)]
    categories = CATEGORIES if column == AVERAGE else [column]
    out = []
    for category in categories:
        keep = [k for k, t in enumerate(task_ids) if category_of(t) == category]
        out.append(S.Stratum(1 / len(categories), tuple(m[:, keep] for m in matrices), category))
    return out


def bootstrap_difference(parts: list[S.Stratum], resamples: int, seed: int) -> dict:
    """One run against one run with 0/1 outcomes: the paired percentile bootstrap interval
    (stratified by category for the average: each resample draws every category's tasks
    anew and averages the category differences) and the exact McNemar test of the pooled
    discordant tasks. A category's resamples come from default_rng([seed, k]), k its
    position in CATEGORIES (4 for ALL_TASKS), as scipy.stats.bootstrap draws them."""
    boots = []
    for s in parts:
        k = CATEGORIES.index(s.name) if s.name in CATEGORIES else len(CATEGORIES)
        boots.append(S.bootstrap_means(s.scores[0][0] - s.scores[1][0], resamples, seed, k))
    low, high = S.percentile_interval(np.mean(boots, axis=0))
    ours = np.concatenate([s.scores[0][0] for s in parts])
    theirs = np.concatenate([s.scores[1][0] for s in parts])
    gained = int(((ours == 1) & (theirs == 0)).sum())
    lost = int(((ours == 0) & (theirs == 1)).sum())
    return {
        "low_pct": low * 100,
        "high_pct": high * 100,
        "method": BOOTSTRAP_MCNEMAR,
        "p_value": S.mcnemar_exact(gained, lost),
        "gained": gained,
        "lost": lost,
    }


def _one_outcome_per_task(runs: list[ComparedRun], selection: str) -> bool:
    return all(
        n == 1
        for run in runs
        for _, n in task_scores(run.steps[run.chosen[selection]], str(run.path)).values()
    )


def difference(
    arm: str,
    selection: str,
    column: str,
    parts: list[S.Stratum],
    exact: bool,
    tasks_fixed: bool,
    resamples: int,
    seed: int,
) -> Difference:
    """`parts`' arm 0 against arm 1 (the baseline). `exact`: one run each with 0/1
    outcomes, so the bootstrap and McNemar's test apply (unless tasks are fixed)."""
    pooled = S.pooled_difference(parts, tasks_fixed)
    # The standard error always comes from the pooled estimate (over tasks for one run
    # each), so every row shows one.
    found = {
        "low_pct": pooled.low * 100,
        "high_pct": pooled.high * 100,
        "method": POOLED_T_FIXED if tasks_fixed else POOLED_T,
        "p_value": pooled.p_value,
        "df": pooled.df,
    }
    if exact and not tasks_fixed:
        found = bootstrap_difference(parts, resamples, seed)
    return Difference(
        arm=arm,
        selection=selection,
        column=column,
        tasks=sum(s.scores[0].shape[1] for s in parts),
        runs=parts[0].scores[0].shape[0],
        baseline_runs=parts[0].scores[1].shape[0],
        arm_pct=sum(s.weight * s.scores[0].mean() for s in parts) * 100,
        baseline_pct=sum(s.weight * s.scores[1].mean() for s in parts) * 100,
        difference_pct=pooled.estimate * 100,
        se_pct=pooled.se * 100,
        **found,
    )


def _score(arm, run, selection, column, parts, tasks_fixed) -> Score:
    pooled = S.pooled_score(parts, tasks_fixed)
    tasks = sum(s.scores[0].shape[1] for s in parts)
    runs = parts[0].scores[0].shape[0]
    return Score(arm, run, selection, column, tasks, runs, pooled.estimate * 100, pooled.se * 100)


# --- the comparison -----------------------------------------------------------------------


def small_category_warning(comparison: Comparison) -> str | None:
    """A warning naming the categories with fewer tasks than any paired test needs to
    reach p < 0.05 (the exact McNemar test's smallest p-value on n tasks is 2 / 2^n)."""
    needed = S.tasks_for_a_test()
    counts = defaultdict(int)
    for task_id in comparison.tasks[FINAL]:
        counts[category_of(task_id)] += 1
    small = [
        f"{c} ({counts[c]} task{'s' * (counts[c] != 1)})"
        for c in CATEGORIES
        if 0 < counts[c] < needed
    ]
    if not small:
        return None
    return (
        f"too few tasks for a test in {', '.join(small)}: a paired test needs at least "
        f"{needed} tasks to reach p < 0.05 even if every task is gained (on n tasks the exact "
        "McNemar test's smallest p-value is 2/2^n), and a one-task category has no interval at "
        "all. Read those columns as descriptions, not evidence."
    )


def run_seeds(config: dict) -> dict[str, object]:
    """The seeds a run's saved config sets ({dotted key: value}, every key named `seed`:
    the data order's, the rollouts', a tiny model's, the learning check's)."""
    return {k: v for k, v in flatten(config).items() if k.rsplit(".", 1)[-1] == "seed"}


def shared_seed_warnings(arms: dict[str, list[ComparedRun]]) -> list[str]:
    """A warning per arm whose runs include two with the same seeds: they are not two
    samples of the seed-to-seed variation the arm's interval counts on (a run given twice
    under two names, or a rerun of one seed)."""
    warnings = []
    for arm, runs in arms.items():
        by_seeds: dict[str, list[str]] = defaultdict(list)
        for run in runs:
            if run.config is not None and (seeds := run_seeds(run.config)):
                by_seeds[", ".join(f"{k}={v!r}" for k, v in sorted(seeds.items()))].append(
                    run.label
                )
        for seeds, labels in by_seeds.items():
            if len(labels) > 1:
                warnings.append(
                    f"arm {arm}: runs {', '.join(labels)} have the same seeds ({seeds}), so they are "
                    "not independent seeds: the arm's standard error and intervals, which "
                    "count its runs as samples of the seed-to-seed variation, are too narrow"
                )
    return warnings


def compare_arms(
    arms: list[tuple[str, list[str]]],
    baseline: str | None = None,
    select: str = TEST,
    tasks_fixed: bool = False,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Load the arms (name, [RUN spec, ...]), score every run at its final and best step,
    and compare each arm with `baseline` (an arm's name; default the first arm)."""
    loaded = load_arms(arms)
    baseline = baseline if baseline is not None else arms[0][0]
    if baseline not in loaded:
        raise ValueError(f"--baseline {baseline!r} is none of the arms {list(loaded)}")
    comparison = Comparison(loaded, baseline, select, tasks_fixed)
    runs = comparison.runs
    selection_tasks = report_tasks = None
    if select == HELDOUT:
        everywhere = set.intersection(
            *({r.task_id for records in run.steps.values() for r in records} for run in runs)
        )
        selection_tasks, report_tasks = heldout_halves(everywhere)
    for run in runs:
        choose_steps(run, select, selection_tasks)
    for selection in SELECTIONS:
        task_ids, left_out = paired_tasks(runs, selection)
        if selection == BEST and report_tasks is not None:
            task_ids = [t for t in task_ids if t in report_tasks]
        if not task_ids:
            raise ValueError(f"the runs share no validated task at their {selection} steps")
        comparison.tasks[selection] = task_ids
        for label, count in left_out.items():
            if count:
                comparison.notes.append(
                    f"{label}: {count} task(s) of its {selection} step are not validated by "
                    "every run and are left out"
                )
    comparison.columns = columns_of(comparison.tasks[FINAL])
    _fill_rows(comparison, resamples, seed)
    warning = small_category_warning(comparison)
    if warning:
        comparison.warnings.append(warning)
    comparison.warnings += shared_seed_warnings(comparison.arms)
    comparison.config_differences = differing_keys(
        {run.label: run.config for run in runs if run.config is not None}
    )
    return comparison


def _fill_rows(comparison: Comparison, resamples: int, seed: int) -> None:
    fixed = comparison.tasks_fixed
    base_runs = comparison.arms[comparison.baseline]
    for selection in SELECTIONS:
        task_ids = comparison.tasks[selection]
        columns = [c for c in comparison.columns if c in columns_of(task_ids)]
        matrices = {
            arm: score_matrix(rs, selection, task_ids) for arm, rs in comparison.arms.items()
        }
        # The exact tests need one 0/1 outcome per task (not a sampled task's rate).
        single = {arm: _one_outcome_per_task(rs, selection) for arm, rs in comparison.arms.items()}
        for column in columns:
            for arm, arm_runs in comparison.arms.items():
                parts = strata(column, task_ids, [matrices[arm]])
                comparison.scores.append(_score(arm, None, selection, column, parts, fixed))
                for k, run in enumerate(arm_runs):
                    one = strata(column, task_ids, [matrices[arm][k : k + 1]])
                    comparison.scores.append(_score(arm, run.label, selection, column, one, False))
                if arm == comparison.baseline:
                    continue
                parts = strata(column, task_ids, [matrices[arm], matrices[comparison.baseline]])
                exact = (
                    single[arm]
                    and single[comparison.baseline]
                    and len(arm_runs) == len(base_runs) == 1
                )
                comparison.differences.append(
                    difference(arm, selection, column, parts, exact, fixed, resamples, seed)
                )
    arms, columns = list(comparison.arms), comparison.columns
    comparison.differences.sort(
        key=lambda d: (arms.index(d.arm), SELECTIONS.index(d.selection), columns.index(d.column))
    )
    adjusted = S.holm([d.p_value for d in comparison.differences])
    comparison.differences = [
        replace(d, holm_p=p) for d, p in zip(comparison.differences, adjusted, strict=True)
    ]
    cut = [
        f"{d.arm} {d.column} ({d.selection})"
        for d in comparison.differences
        if d.method in (POOLED_T, POOLED_T_FIXED) and (d.low_pct <= -100 or d.high_pct >= 100)
    ]
    if cut:
        comparison.notes.append(
            f"the t interval of {', '.join(cut)} reached past ±100 points, the most a "
            "difference of pass rates can be, and is cut there: so few runs or tasks bound "
            "the difference hardly at all"
        )
    if any(len(rs) == 1 for rs in comparison.arms.values()) and not fixed:
        comparison.notes.append(
            "an arm of one run: its seed-to-seed variation is not in the standard errors and "
            "intervals (they cover the tasks only); train several seeds per arm"
        )
