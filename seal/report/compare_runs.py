"""The runs `seal-report --compare` sets side by side: each run's validation steps loaded,
its final and best step chosen (on the scored tasks or a held-out half), the tasks every
run validated. The scores and differences: seal.report.compare."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from seal.report.paper import PaperResult
from seal.report.run_source import (
    paper_row,
    recorded_best_rule,
    run_config,
    run_model,
    validation_dir,
)
from seal.report.summary import StepSummary, best_step, summarize
from seal.runs.records import ValidationRecord, read_val_dir
from seal.trainer_config import BestRule

AVERAGE = "average"
"""The paper's average: the mean of the four category rates."""
ALL_TASKS = "all tasks"
"""The mean over all tasks, the summary column when the runs do not cover the four
categories (e.g. the learning check's few tasks)."""
FINAL, BEST = "final", "best"
SELECTIONS = (FINAL, BEST)
TEST, HELDOUT = "test", "heldout"
"""Where the best step is chosen: on the tasks it is scored on, or on a held-out half."""
SAMPLE_KEY = "sample"
"""A record's `extra` key numbering its task's samples (several episodes of one task at
one step, e.g. the learning check's sampled evaluation): scored as the task's mean."""


@dataclass
class ComparedRun:
    label: str
    path: Path
    arm: str
    steps: dict[int, list[ValidationRecord]]
    given: int | None
    """The step asked for (RUN@STEP), which replaces both the final and the best step."""
    model: str | None
    paper: PaperResult | None
    """The paper's row this run reproduces, if any."""
    config: dict | None
    """The run's saved config (config.yaml), if any."""
    chosen: dict[str, int] = field(default_factory=dict)
    """The step scored per selection (FINAL, BEST)."""
    best_by: str = AVERAGE
    """What the best step maximised (by the run's recorded best-step rule): AVERAGE, the
    category its rule ranks by, or ALL_TASKS."""


def parse_spec(spec: str) -> tuple[Path, int | None]:
    """`PATH` or `PATH@STEP`."""
    path, at, step = spec.rpartition("@")
    if at and step.isdigit():
        return Path(path), int(step)
    return Path(spec), None


def task_scores(records: list[ValidationRecord], where: str) -> dict[str, tuple[float, int]]:
    """Per task id: (mean score, episodes). A task validated more than once must number
    its samples (`extra["sample"]`), else it is an error."""
    by_task: dict[str, list[ValidationRecord]] = defaultdict(list)
    for record in records:
        by_task[record.task_id].append(record)
    out = {}
    for task_id, found in by_task.items():
        samples = [r.extra.get(SAMPLE_KEY) for r in found]
        if len(found) > 1 and (None in samples or len(set(samples)) != len(samples)):
            raise ValueError(f"{where} validates task {task_id} {len(found)} times")
        out[task_id] = (fmean(r.score for r in found), len(found))
    return out


def load_run(spec: str, arm: str) -> ComparedRun:
    path, step = parse_spec(spec)
    steps = read_val_dir(validation_dir(path))
    if not steps:
        raise FileNotFoundError(f"{path}: no validation step to compare")
    if step is not None and step not in steps:
        raise ValueError(f"{path}: no validation step {step} (it has {sorted(steps)})")
    for s, records in steps.items():
        task_scores(records, f"{path}: step {s}")  # refuses a task validated twice
    shown = steps[step if step is not None else max(steps)]
    model, _ = run_model(path, shown)
    label = path.resolve().name
    return ComparedRun(
        label, path, arm, steps, step, model, paper_row(path, shown), run_config(path)
    )


def choose_best(summaries: list[StepSummary], rule: BestRule) -> tuple[int, str]:
    """(best step, what it maximised): the best by the run's rule (AVERAGE or the one
    category it ranks by), or, when no step has the rule's metric (the runs do not cover
    the categories, e.g. the learning check's few tasks), the highest pass rate over all
    tasks, the later step on a tie."""
    step = best_step(summaries, rule)
    if step is not None:
        return step, rule.category or AVERAGE
    scored = [s for s in summaries if s.overall.total]
    return max(scored, key=lambda s: (s.overall.rate, s.step)).step, ALL_TASKS


def heldout_halves(task_ids: set[str]) -> tuple[set[str], set[str]]:
    """(selection half, report half): within each category, the tasks in id order taken
    alternately, so each half holds about half of every category."""
    selection, report = set(), set()
    by_category = defaultdict(list)
    for task_id in task_ids:
        by_category[task_id.rsplit("_", 1)[0]].append(task_id)
    for category, ids in by_category.items():
        if len(ids) < 2:
            raise ValueError(
                f"--select heldout needs at least 2 tasks per category; {category} has {len(ids)}"
            )
        ordered = sorted(ids)
        selection.update(ordered[0::2])
        report.update(ordered[1::2])
    return selection, report


def choose_steps(run: ComparedRun, select: str, selection_tasks: set[str] | None) -> None:
    """Fill `run.chosen` (and `best_by`); with `selection_tasks`, the best step is chosen on
    those tasks' records only."""
    if run.given is not None:
        run.chosen = {FINAL: run.given, BEST: run.given}
        return
    steps = run.steps
    if select == HELDOUT:
        steps = {s: [r for r in rs if r.task_id in selection_tasks] for s, rs in steps.items()}
    rule = recorded_best_rule(run.config, run.path)
    best, run.best_by = choose_best(summarize(steps), rule)
    run.chosen = {FINAL: max(run.steps), BEST: best}


def load_arms(arms: list[tuple[str, list[str]]]) -> dict[str, list[ComparedRun]]:
    """{arm: its runs} from (name, [RUN spec, ...]); run labels made unique."""
    names = [name for name, _ in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must differ: {names}")
    loaded = {name: [load_run(spec, name) for spec in specs] for name, specs in arms}
    runs = [run for found in loaded.values() for run in found]
    parts = [run.path.resolve().parts for run in runs]
    # Two directories of one name (e.g. each seed's OUT/run): the shortest path endings
    # that tell them apart.
    for length in range(1, max(map(len, parts)) + 1):
        labels = ["/".join(p[-length:]) for p in parts]
        if len(set(labels)) == len(labels):
            break
    else:
        raise ValueError(f"a run is given twice: {[str(run.path) for run in runs]}")
    for run, label in zip(runs, labels, strict=True):
        run.label = label
    return loaded


def paired_tasks(runs: list[ComparedRun], selection: str) -> tuple[list[str], dict[str, int]]:
    """The tasks every run validated at its chosen step (sorted), and per run how many of
    its tasks are left out."""
    sets = {run.label: {r.task_id for r in run.steps[run.chosen[selection]]} for run in runs}
    shared = set.intersection(*sets.values())
    return sorted(shared), {label: len(ids - shared) for label, ids in sets.items()}
