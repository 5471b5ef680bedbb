"""Per-category pass rates of each validation step, in the paper's table format.

One row per step: the paper's average (the unweighted mean of the four category rates), the
four BFCL multi-turn categories and overall, in percent as the paper gives them, each with
its counts (``58.00 (58/100)``; csv and json give rates as fractions of 1, for programs). The
table stars the step the trainer kept, by the run's `trainer.checkpoint.best_rule`
(docs/paper_configs.md, "Seed, data order and best step"). Steps whose task ids differ from
the expected split are reported, since their rates are not comparable with the paper's 400
held-out tasks. ``seal-report --table`` (seal/report/cli.py) is this module's command line.
"""

import csv
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from seal.bfcl.tasks import CATEGORIES
from seal.runs.records import ValidationRecord
from seal.trainer_config import BEST_RULES, BestRule

COLUMNS = ("step", *CATEGORIES, "overall", "average", "best")
UNRECORDED_RULE = BEST_RULES["average"]
"""The best-step rule of records whose run config records none (an endpoint evaluation,
bare step files, a run from before the rule was a key, whose trainer applied this one)."""
PAPER_HEADS = {
    "average": "avg",
    "multi_turn_base": "base",
    "multi_turn_miss_func": "miss_func",
    "multi_turn_miss_param": "miss_param",
    "multi_turn_long_context": "long_ctx",
}
"""The paper's column heads (its Tables 1 and 3), which every Markdown table of pass rates
uses: the end-of-run table, `seal-eval`'s, `seal-report --table` and the report page's."""
MARKDOWN_COLUMNS = ("step", *PAPER_HEADS, "overall", "best")
"""The paper's order: the average first, then the four categories."""
BEST_MARK = "*"
MAX_EXAMPLES = 3


def percent(rate: Fraction | None) -> str:
    return "n/a" if rate is None else f"{float(rate) * 100:.2f}"


@dataclass(frozen=True)
class PassCount:
    """Accurate tasks out of validated tasks."""

    passed: int
    total: int

    @property
    def rate(self) -> Fraction | None:
        # Exact, so that equal averages compare equal when choosing the best step.
        return Fraction(self.passed, self.total) if self.total else None

    def cell(self) -> str:
        """The rate in percent, as the paper writes it, and the counts: `58.00 (58/100)`."""
        return f"{percent(self.rate)} ({self.passed}/{self.total})"

    def as_json(self) -> dict:
        rate = None if self.rate is None else float(self.rate)
        return {"passed": self.passed, "total": self.total, "rate": rate}


@dataclass(frozen=True)
class StepSummary:
    """Pass counts of one validation step, per category and overall."""

    step: int
    by_category: dict[str, PassCount]
    overall: PassCount

    @property
    def average(self) -> Fraction | None:
        """Mean of the four category rates; None when a category has no tasks."""
        rates = [self.by_category[category].rate for category in CATEGORIES]
        if any(rate is None for rate in rates):
            return None
        return sum(rates, Fraction(0)) / len(rates)


def summarize_step(step: int, records: Sequence[ValidationRecord]) -> StepSummary:
    """Count accurate tasks per category in one step's records."""
    by_category = {}
    for category in CATEGORIES:
        scores = [record.score for record in records if record.data_source == category]
        by_category[category] = PassCount(passed=sum(scores), total=len(scores))
    overall = PassCount(passed=sum(record.score for record in records), total=len(records))
    return StepSummary(step=step, by_category=by_category, overall=overall)


def summarize(steps: dict[int, list[ValidationRecord]]) -> list[StepSummary]:
    """One summary per step, in ascending step order."""
    return [summarize_step(step, steps[step]) for step in sorted(steps)]


def rule_value(summary: StepSummary, rule: BestRule) -> Fraction | None:
    """What `rule` maximises at this step (None: the step lacks it)."""
    if rule.category is None:
        return summary.average
    return summary.by_category[rule.category].rate


def best_step(summaries: Sequence[StepSummary], rule: BestRule) -> int | None:
    """The best step by `rule` (its tie rule included); None if no step has its metric."""
    return rule.best_of({summary.step: rule_value(summary, rule) for summary in summaries})


def load_split_ids(path: str | Path, key: str) -> list[str]:
    """The task ids of one part of a split file (a JSON dict of lists of ids, e.g. "eval")."""
    with Path(path).open(encoding="utf-8") as split_file:
        split = json.load(split_file)
    if key not in split or not isinstance(split[key], list):
        raise ValueError(f"{path} has no list of task ids under {key!r}")
    return split[key]


def _mismatch(records: Sequence[ValidationRecord], expected_ids: Sequence[str]) -> str | None:
    """Missing, extra and duplicated task ids of a step; None if it matches the split."""
    counts = Counter(record.task_id for record in records)
    expected = set(expected_ids)
    missing = [task_id for task_id in expected_ids if task_id not in counts]
    extra = [task_id for task_id in counts if task_id not in expected]
    duplicated = [f"{task_id} x{count}" for task_id, count in counts.items() if count > 1]

    problems = []
    for label, ids in (("missing", missing), ("extra", extra), ("duplicated", duplicated)):
        if ids:
            examples = ", ".join(ids[:MAX_EXAMPLES]) + (", ..." if len(ids) > MAX_EXAMPLES else "")
            problems.append(f"{len(ids)} {label} (e.g. {examples})")
    return "; ".join(problems) or None


def split_mismatch(
    step: int, records: Sequence[ValidationRecord], expected_ids: Sequence[str]
) -> str | None:
    """A warning naming missing, extra and duplicated task ids of a step; None if it matches."""
    problems = _mismatch(records, expected_ids)
    return problems and f"step {step}: task ids differ from the expected split: {problems}"


def is_chosen_subset(
    records: Sequence[ValidationRecord], expected_ids: Sequence[str], subset: int
) -> bool:
    """Whether a step validated `subset` distinct tasks of the split, as a run that asks for
    a subset (`trainer.data.max_val_tasks`) does: no extra task, none twice."""
    ids = [record.task_id for record in records]
    return 0 < subset == len(ids) == len(set(ids)) and set(ids) <= set(expected_ids)


def split_warnings(
    steps: dict[int, Sequence[ValidationRecord]], expected_ids: Sequence[str], subset: int = 0
) -> list[str]:
    """The steps whose task ids differ from the split, one warning per difference (steps
    that differ alike share it), leaving out steps that are the run's chosen subset of
    `subset` tasks (`is_chosen_subset`): the run asked for them, and its tables count
    the tasks."""
    grouped: dict[str, list[int]] = {}
    for step, records in steps.items():
        problems = _mismatch(records, expected_ids)
        if problems and not is_chosen_subset(records, expected_ids, subset):
            grouped.setdefault(problems, []).append(step)
    return [
        f"step{'s' if len(group) > 1 else ''} {', '.join(map(str, group))}: task ids differ "
        f"from the expected split: {problems}"
        for problems, group in grouped.items()
    ]


def table_rows(
    summaries: Sequence[StepSummary], rule: BestRule = UNRECORDED_RULE
) -> list[dict[str, str]]:
    """The summary as text cells, one dict per step keyed by COLUMNS; `best` stars the best
    step by `rule`."""
    best = best_step(summaries, rule)
    rows = []
    for summary in summaries:
        row = {"step": str(summary.step)}
        row.update({category: summary.by_category[category].cell() for category in CATEGORIES})
        row["overall"] = summary.overall.cell()
        row["average"] = percent(summary.average)
        row["best"] = BEST_MARK if summary.step == best else ""
        rows.append(row)
    return rows


def render_markdown(summaries: Sequence[StepSummary], rule: BestRule = UNRECORDED_RULE) -> str:
    """Pass rates in percent under the paper's heads (`PAPER_HEADS`), columns aligned, the
    best step by `rule` starred."""
    # A pipe table is a few lines by hand; tabulate is not worth a dependency for it.
    header = {column: PAPER_HEADS.get(column, column) for column in MARKDOWN_COLUMNS}
    rows = [header, *table_rows(summaries, rule)]
    columns = MARKDOWN_COLUMNS
    widths = {column: max(len(row[column]) for row in rows) for column in columns}
    lines = ["| " + " | ".join(row[c].ljust(widths[c]) for c in columns) + " |" for row in rows]
    lines.insert(1, "| " + " | ".join("-" * widths[c] for c in columns) + " |")
    return "\n".join(lines) + "\n"


def csv_rows(
    summaries: Sequence[StepSummary], rule: BestRule = UNRECORDED_RULE
) -> list[dict[str, object]]:
    """The summary as numbers, one dict per step: per category and overall the rate (empty
    when no task was validated), `<column>_passed` and `<column>_total`; the average
    (empty when a category is missing) and `best` (1 or 0, by `rule`)."""
    best = best_step(summaries, rule)
    rows = []
    for summary in summaries:
        row: dict[str, object] = {"step": summary.step}
        counts = {**summary.by_category, "overall": summary.overall}
        for column, count in counts.items():
            row[column] = "" if count.rate is None else float(count.rate)
            row[f"{column}_passed"], row[f"{column}_total"] = count.passed, count.total
        row["average"] = "" if summary.average is None else float(summary.average)
        row["best"] = int(summary.step == best)
        rows.append(row)
    return rows


def render_csv(summaries: Sequence[StepSummary], rule: BestRule = UNRECORDED_RULE) -> str:
    """Numeric cells (`csv_rows`), for spreadsheets and pandas."""
    rows = csv_rows(summaries, rule)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else COLUMNS,
                            lineterminator="\n")  # fmt: skip
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def render_json(summaries: Sequence[StepSummary], rule: BestRule = UNRECORDED_RULE) -> str:
    """Numbers rather than text cells, for programs; rates are fractions of 1."""
    best = best_step(summaries, rule)
    rows = []
    for summary in summaries:
        row = {"step": summary.step}
        row.update({c: summary.by_category[c].as_json() for c in CATEGORIES})
        row["overall"] = summary.overall.as_json()
        row["average"] = None if summary.average is None else float(summary.average)
        row["best"] = summary.step == best
        rows.append(row)
    return json.dumps(rows, indent=2) + "\n"


RENDERERS = {"markdown": render_markdown, "csv": render_csv, "json": render_json}
