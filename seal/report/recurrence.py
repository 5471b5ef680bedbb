"""Did a guideline make its failure recur less? Measured against a matched control run.

The report's descriptive table (before/after shares of the training turns) cannot answer
that: the episodes carry the guideline, the tag was chosen for being frequent, training
lowers failures anyway, and shares sum to one. Here (`seal-report RUN --control CONTROL`)
each guideline's tag rate per eligible turn on the plain-benchmark validation steps of the
run and of a control trained alike without guidelines, their difference and a paired
bootstrap interval over tasks (one run per side: not seed-to-seed variation). Details:
docs/comparing_runs.md, "Guidelines".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seal.bfcl import tags as T
from seal.report import stats as S
from seal.report.tables import markdown_table
from seal.runs.records import ValidationRecord

EMPTY_GROUND_TRUTH = frozenset({T.SPURIOUS_TOOL_CALL, T.CORRECT_ABSTENTION})
"""The tags a turn whose ground truth calls no tool can get."""
CALLING_GROUND_TRUTH = frozenset(
    {
        T.PASS,
        T.EMPTY_TURN_MODEL_RESPONSE,
        T.INSTANCE_MISMATCH,
        T.STATE_MISMATCH,
        T.RESPONSE_MISMATCH,
    }
)
"""The tags a turn whose ground truth calls tools can get (infrastructure tags left out)."""


def eligible_tags(tag: str) -> frozenset[str] | None:
    """The turn tags of the turns on which `tag` can occur, or None for a tag that is no
    model failure (its rate says nothing about the policy)."""
    if tag == T.SPURIOUS_TOOL_CALL:
        return EMPTY_GROUND_TRUTH
    if tag in T.FAILURE_TAGS:
        return CALLING_GROUND_TRUTH
    return None


def per_task_counts(
    records: Sequence[ValidationRecord], tag: str, eligible: frozenset[str]
) -> dict[str, tuple[int, int]]:
    """Per task: (turns tagged `tag`, eligible turns), summed over its records (several
    samples of a task are pooled)."""
    out: dict[str, tuple[int, int]] = {}
    for record in records:
        hits, turns = out.get(record.task_id, (0, 0))
        hits += sum(t == tag for t in record.failure_tags)
        turns += sum(t in eligible for t in record.failure_tags)
        out[record.task_id] = (hits, turns)
    return out


def first_shown(interfaces: Sequence[Mapping]) -> dict[str, int]:
    """Each guideline tag and the first training step whose episodes showed it."""
    first: dict[str, int] = {}
    for row in interfaces:
        for entry in row["shown"]:
            first.setdefault(entry["tag"], row["step"])
    return first


@dataclass(frozen=True)
class Recurrence:
    """One guideline tag at one validation step: its rate per eligible turn in the run and
    in the control (fractions of 1), their difference and its 95% interval."""

    tag: str
    first_shown: int
    step: int
    tasks: int
    run_hits: int
    run_turns: int
    control_hits: int
    control_turns: int
    run_rate: float
    control_rate: float
    difference: float
    low: float
    high: float


def _ratio(hits: np.ndarray, turns: np.ndarray) -> np.ndarray:
    """Hits over turns along the last axis; nan where there is no eligible turn."""
    total = turns.sum(axis=-1)
    return np.divide(hits.sum(axis=-1), total, out=np.full(total.shape, np.nan), where=total > 0)


def compare_rates(
    tag: str,
    first: int,
    step: int,
    run: Mapping[str, tuple[int, int]],
    control: Mapping[str, tuple[int, int]],
    resamples: int,
    seed: int,
    k: int = 0,
) -> Recurrence:
    """The tag's rate per eligible turn in the run and the control over the tasks both
    validated, and the paired percentile bootstrap interval of the difference (tasks drawn
    from default_rng([seed, k]); resamples without an eligible turn are left out)."""
    tasks = sorted(run.keys() & control.keys())
    hits = np.array([[run[t][0] for t in tasks], [control[t][0] for t in tasks]], dtype=float)
    turns = np.array([[run[t][1] for t in tasks], [control[t][1] for t in tasks]], dtype=float)
    rate, control_rate = _ratio(hits, turns)
    picks = np.random.default_rng([seed, k]).integers(0, len(tasks), (resamples, len(tasks)))
    boot = _ratio(hits[0][picks], turns[0][picks]) - _ratio(hits[1][picks], turns[1][picks])
    boot = boot[~np.isnan(boot)]
    low, high = S.percentile_interval(boot) if len(boot) else (np.nan, np.nan)
    return Recurrence(
        tag, first, step, len(tasks),
        int(hits[0].sum()), int(turns[0].sum()), int(hits[1].sum()), int(turns[1].sum()),
        float(rate), float(control_rate), float(rate - control_rate), low, high,
    )  # fmt: skip


def guideline_recurrence(
    interfaces: Sequence[Mapping],
    run_validation: Mapping[int, Sequence[ValidationRecord]],
    control_validation: Mapping[int, Sequence[ValidationRecord]],
    resamples: int = 10_000,
    seed: int = 0,
) -> list[Recurrence]:
    """Per guideline tag (in the order first shown) and per validation step both runs have,
    from the last step before it was first shown (for reference) on: the tag's rate per
    eligible turn in the run and the control. Tags that are no model failure are skipped."""
    steps = sorted(run_validation.keys() & control_validation.keys())
    out = []
    for k, (tag, first) in enumerate(sorted(first_shown(interfaces).items(), key=lambda i: i[1])):
        eligible = eligible_tags(tag)
        if eligible is None:
            continue
        before = [s for s in steps if s < first]
        for step in before[-1:] + [s for s in steps if s >= first]:
            run = per_task_counts(run_validation[step], tag, eligible)
            control = per_task_counts(control_validation[step], tag, eligible)
            out.append(compare_rates(tag, first, step, run, control, resamples, seed, k))
    return out


def recurrence_table(rows: Sequence[Recurrence]) -> str:
    def rate(hits, turns, value):
        return "–" if turns == 0 else f"{value:.3f} ({hits}/{turns})"

    table = []
    for r in rows:
        interval = "–" if np.isnan(r.low) else f"[{r.low:+.3f}, {r.high:+.3f}]"
        table.append(
            [
                r.tag,
                r.first_shown,
                f"{r.step}" + (" (before)" if r.step < r.first_shown else ""),
                r.tasks,
                rate(r.run_hits, r.run_turns, r.run_rate),
                rate(r.control_hits, r.control_turns, r.control_rate),
                "–" if np.isnan(r.difference) else f"{r.difference:+.3f}",
                interval,
            ]
        )
    header = [
        "guideline tag",
        "first shown (training step)",
        "validation step",
        "paired tasks",
        "rate per eligible turn: run",
        "control",
        "difference",
        "95% bootstrap interval",
    ]
    return markdown_table(header, table)
