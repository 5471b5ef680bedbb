"""Runs side by side, with honest statistics: `seal-report --compare RUN [RUN ...]`.

Each RUN is a training run's directory, an endpoint evaluation's output directory
(`seal-eval --out-dir`) or a directory of `step_*.jsonl` records
(seal.eval.run_source); `RUN@STEP` picks a validation step, else the run's best (the
highest average of the four categories, the earliest on a tie). The page shows every run's
pass rates per category and average, the paper's rows of the runs' backbones beside them,
and for each run its difference to the baseline (`--baseline`, default the first run):

- paired over the tasks both runs validated at their steps (the 400 held-out tasks when
  both ran them all; tasks only one run has are left out and counted);
- a 95% percentile bootstrap interval of the difference in pass rate, resampling tasks
  with replacement: within each category for the category's difference, and, for the
  average, within every category at once (a stratified resample, as the average is the
  mean of the four category rates). Category k's resamples come from
  `numpy.random.default_rng([seed, k])` (k its position in seal.tocf.tags.CATEGORIES),
  each drawn as `rng.integers(0, n, (resamples, n))`, so a category's interval is
  exactly `scipy.stats.bootstrap`'s percentile interval under that generator;
- the exact McNemar test: of the discordant tasks (one run passed, the other failed),
  how likely a split at least as uneven is under a fair coin (two-sided binomial test);
  computed exactly with integers here (scipy is not a dependency of the package; the
  tests check it against `scipy.stats.binomtest`).

With 100 tasks per category, a 95% interval of a difference is about +-10 points wide for
pass rates near 30%: differences of a few points are noise, which this page shows.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from statistics import fmean

import numpy as np

from seal.eval import plots
from seal.eval.paper import PaperResult, backbone_of, controlled_results
from seal.eval.run_source import paper_row, run_model, validation_dir
from seal.eval.summary import best_step, summarize, summarize_step
from seal.eval.tables import markdown_table
from seal.runs.records import ValidationRecord, read_val_dir
from seal.tocf.tags import CATEGORIES

RESAMPLES = 10_000
CONFIDENCE = 0.95
AVERAGE = "average"
COMPARE_FILENAME = "compare.md"


@dataclass
class ComparedRun:
    label: str
    path: Path
    step: int
    step_given: bool
    """The step was asked for (RUN@STEP), not chosen as the best."""
    records: dict[str, ValidationRecord]
    """The step's records by task id."""
    model: str | None
    paper: PaperResult | None
    """The paper's row this run reproduces, if any."""


def parse_spec(spec: str) -> tuple[Path, int | None]:
    """`PATH` or `PATH@STEP`."""
    path, at, step = spec.rpartition("@")
    if at and step.isdigit():
        return Path(path), int(step)
    return Path(spec), None


def load_compared(spec: str) -> ComparedRun:
    path, step = parse_spec(spec)
    steps = read_val_dir(validation_dir(path))
    if not steps:
        raise FileNotFoundError(f"{path}: no validation step to compare")
    given = step is not None
    if given and step not in steps:
        raise ValueError(f"{path}: no validation step {step} (it has {sorted(steps)})")
    if not given:
        step = best_step(summarize(steps))
        if step is None:
            raise ValueError(f"{path}: no validation step covers all four categories")
    records = steps[step]
    by_task = {record.task_id: record for record in records}
    if len(by_task) != len(records):
        raise ValueError(f"{path}: step {step} validates a task twice")
    model, _ = run_model(path, records)
    label = path.resolve().name
    return ComparedRun(label, path, step, given, by_task, model, paper_row(path, records))


# --- statistics ---------------------------------------------------------------------------


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value of `gained` tasks only the run passed against
    `lost` ones only the baseline passed: 2 x P(X <= min) for X ~ Binomial(gained + lost,
    1/2), at most 1; 1 when no task is discordant."""
    n = gained + lost
    if n == 0:
        return 1.0
    # Exact integers: the tail of 400 discordant tasks is far below float's resolution.
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def bootstrap_means(differences: np.ndarray, resamples: int, seed: int, k: int) -> np.ndarray:
    """`resamples` means of `differences` resampled with replacement, drawn from
    default_rng([seed, k]) as scipy.stats.bootstrap draws them."""
    rng = np.random.default_rng([seed, k])
    n = len(differences)
    return differences[rng.integers(0, n, (resamples, n))].mean(axis=-1)


def percentile_interval(means: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    return float(np.percentile(means, alpha * 100)), float(np.percentile(means, (1 - alpha) * 100))


@dataclass(frozen=True)
class Difference:
    """One run against the baseline on one category (or the average), in points (pp)."""

    category: str
    tasks: int
    """Tasks both runs validated (per category; for the average, all of them)."""
    run_pct: float
    baseline_pct: float
    difference_pct: float
    low_pct: float
    high_pct: float
    """The 95% paired bootstrap interval of the difference."""
    gained: int
    """Tasks the run passed and the baseline failed."""
    lost: int
    """Tasks the baseline passed and the run failed."""
    p_value: float
    """Exact McNemar test of gained against lost."""


def paired(run: ComparedRun, baseline: ComparedRun) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per category, the scores of the tasks both validated (in task-id order): (run's,
    baseline's)."""
    shared = sorted(run.records.keys() & baseline.records.keys())
    out = {}
    for category in CATEGORIES:
        ids = [t for t in shared if run.records[t].data_source == category]
        if ids:
            out[category] = (
                np.array([run.records[t].score for t in ids]),
                np.array([baseline.records[t].score for t in ids]),
            )
    return out


def _difference(category, ours, theirs, means) -> Difference:
    low, high = percentile_interval(means)
    gained = int(((ours == 1) & (theirs == 0)).sum())
    lost = int(((ours == 0) & (theirs == 1)).sum())
    return Difference(
        category,
        len(ours),
        float(ours.mean()) * 100,
        float(theirs.mean()) * 100,
        float((ours - theirs).mean()) * 100,
        low * 100,
        high * 100,
        gained,
        lost,
        mcnemar_exact(gained, lost),
    )


def compare_pair(
    run: ComparedRun, baseline: ComparedRun, resamples: int = RESAMPLES, seed: int = 0
) -> list[Difference]:
    """The run's difference to the baseline per category and on the average (when both
    cover all four categories), with intervals and p-values (module docstring)."""
    pairs = paired(run, baseline)
    out, boots = [], []
    for k, category in enumerate(CATEGORIES):
        if category not in pairs:
            continue
        ours, theirs = pairs[category]
        means = bootstrap_means(ours - theirs, resamples, seed, k)
        boots.append(means)
        out.append(_difference(category, ours, theirs, means))
    if len(pairs) == len(CATEGORIES):
        ours = np.concatenate([pairs[c][0] for c in CATEGORIES])
        theirs = np.concatenate([pairs[c][1] for c in CATEGORIES])
        pooled = _difference(AVERAGE, ours, theirs, np.mean(boots, axis=0))
        # The paper's average is the mean of the four category rates, not of all tasks;
        # the discordant counts and McNemar's test pool the tasks.
        out.append(
            dataclasses.replace(
                pooled,
                run_pct=fmean(d.run_pct for d in out),
                baseline_pct=fmean(d.baseline_pct for d in out),
                difference_pct=fmean(d.difference_pct for d in out),
            )
        )
    return out


# --- the page -----------------------------------------------------------------------------


@dataclass
class Comparison:
    runs: list[ComparedRun]
    baseline: ComparedRun
    differences: dict[str, list[Difference]] = field(default_factory=dict)
    """Per run label (the baseline's own included: 0, p = 1)."""
    notes: list[str] = field(default_factory=list)


def compare_runs(
    specs: list[str], baseline_spec: str | None = None, resamples: int = RESAMPLES, seed: int = 0
) -> Comparison:
    if baseline_spec is not None and baseline_spec not in specs:
        specs = [baseline_spec, *specs]
    runs = [load_compared(spec) for spec in specs]
    labels = [run.label for run in runs]
    if len(set(labels)) != len(labels):  # two directories of one name: use the paths
        for run in runs:
            run.label = str(run.path)
    baseline = runs[specs.index(baseline_spec) if baseline_spec is not None else 0]
    comparison = Comparison(runs, baseline)
    for run in runs:
        comparison.differences[run.label] = compare_pair(run, baseline, resamples, seed)
        only_run = len(run.records.keys() - baseline.records.keys())
        only_base = len(baseline.records.keys() - run.records.keys())
        if only_run or only_base:
            comparison.notes.append(
                f"{run.label} (step {run.step}) and the baseline differ in {only_run + only_base} "
                f"tasks ({only_run} only in the run, {only_base} only in the baseline): "
                "they are left out of its differences"
            )
    return comparison


def _rate_cells(records: list[ValidationRecord]) -> list[str]:
    summary = summarize_step(0, records)
    cells = []
    for category in CATEGORIES:
        count = summary.by_category[category]
        cells.append("–" if count.rate is None else f"{float(count.rate) * 100:.2f}")
    average = summary.average
    return ["–" if average is None else f"{float(average) * 100:.2f}", *cells]


def rates_table(comparison: Comparison) -> str:
    rows = []
    for run in comparison.runs:
        chosen = "given" if run.step_given else "best"
        name = run.label + (" (baseline)" if run is comparison.baseline else "")
        row = [name, f"{run.step} ({chosen})", len(run.records)]
        rows.append([*row, *_rate_cells(list(run.records.values()))])
    backbones = []
    for run in comparison.runs:
        backbone = backbone_of(run.model) if run.model else None
        if backbone and backbone not in backbones:
            backbones.append(backbone)
    matched = [run.paper for run in comparison.runs if run.paper is not None]
    for backbone in backbones:
        for result in controlled_results(backbone):
            mark = " (reproduced above)" if result in matched else ""
            cells = [f"{result.average_pct:.2f}"]
            cells += [f"{result.category_pct[c]:.2f}" for c in CATEGORIES]
            rows.append([f"paper: {result.label}{mark}", "–", "–", *cells])
    header = ["run", "step", "tasks", "avg", "base", "miss_func", "miss_param", "long_ctx"]
    return markdown_table(header, rows)


def differences_table(comparison: Comparison) -> str:
    rows = []
    for run in comparison.runs:
        if run is comparison.baseline:
            continue
        for d in comparison.differences[run.label]:
            rows.append(
                [
                    run.label,
                    plots.short_category(d.category),
                    d.tasks,
                    f"{d.run_pct:.2f} vs {d.baseline_pct:.2f}",
                    f"{d.difference_pct:+.2f}",
                    f"[{d.low_pct:+.2f}, {d.high_pct:+.2f}]",
                    f"{d.gained} / {d.lost}",
                    f"{d.p_value:.3g}",
                ]
            )
    header = [
        "run",
        "category",
        "paired tasks",
        "run vs baseline (%)",
        "difference (pp)",
        "95% bootstrap interval",
        "gained / lost",
        "McNemar p",
    ]
    return markdown_table(header, rows)


def write_comparison(
    comparison: Comparison, out_dir: Path, resamples: int = RESAMPLES, seed: int = 0
) -> Path:
    """compare.md, compare.png and compare.json (the numbers) in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_comparison(comparison, out_dir / "compare.png")
    base = comparison.baseline
    page = [
        "# Runs compared\n",
        f"Baseline: **{base.label}** (step {base.step}). Each run at its best validation step "
        "(highest average of the four categories) unless a step was given (`RUN@STEP`).\n",
        "## Pass rates per category (%)\n",
        rates_table(comparison),
        "\nThe paper's rows (Tables 1 and 3) are those of the runs' backbones.\n",
        "## Differences to the baseline\n",
        f"Paired over the tasks both validated: the difference in pass rate (points), its "
        f"95% bootstrap interval ({resamples} resamples of the tasks, within each category; "
        f"seed {seed}), the tasks only the run passed / only the baseline passed, and the "
        "exact McNemar p-value. An interval that holds 0 (a large p) is a difference within "
        "the noise of 100 tasks per category.\n",
        differences_table(comparison),
        f"\n![runs compared]({png.name})\n",
    ]
    if comparison.notes:
        page.append("\nNotes:\n\n" + "".join(f"- {note}\n" for note in comparison.notes))
    path = out_dir / COMPARE_FILENAME
    path.write_text("\n".join(page), encoding="utf-8")
    numbers = {
        "baseline": base.label,
        "runs": [
            {"label": r.label, "path": str(r.path), "step": r.step, "tasks": len(r.records)}
            for r in comparison.runs
        ],
        "differences": {
            label: [asdict(d) for d in diffs] for label, diffs in comparison.differences.items()
        },
        "resamples": resamples,
        "seed": seed,
    }
    (out_dir / "compare.json").write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return path


def plot_comparison(comparison: Comparison, path: Path) -> Path:
    columns = [*CATEGORIES, AVERAGE]
    rates, intervals = {}, {}
    for run in comparison.runs:
        by_column = {d.category: d for d in comparison.differences[run.label]}
        rates[run.label] = [by_column[c].run_pct if c in by_column else math.nan for c in columns]
        if run is not comparison.baseline:
            intervals[run.label] = [
                (by_column[c].difference_pct, by_column[c].low_pct, by_column[c].high_pct)
                if c in by_column
                else (math.nan,) * 3
                for c in columns
            ]
    paper = {
        run.label: (
            run.paper.label,
            [*(run.paper.category_pct[c] for c in CATEGORIES), run.paper.average_pct],
        )
        for run in comparison.runs
        if run.paper is not None
    }
    labels = [plots.short_category(c) for c in columns]
    return plots.plot_comparison(labels, rates, paper, intervals, comparison.baseline.label, path)
