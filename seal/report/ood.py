"""The paper's Table 2 (out of distribution) for evaluated checkpoints: BFCL V4 agentic and
tau2-bench, the paper's rows beside them.

`seal-report --table2 RUN [RUN ...]` scores BFCL V4 from each RUN's validation records as
bfcl-eval's leaderboard summarises it (`bfcl_v4_scores`) and tau2-bench's pass^1 from the
results under RUN/tau2/ (`tau2_scores`); a column with a part missing stays empty, never
averaged over fewer. The formulas and the results format: docs/evaluation.md, "Table 2".
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from statistics import fmean

from seal.bfcl.agentic.tasks import MEMORY_CATEGORIES, WEB_SEARCH_CATEGORIES, is_agentic
from seal.report.paper import BFCL_V4_PARTS, TAU2_PARTS, backbone_of, ood_results
from seal.report.run_source import validation_dir
from seal.report.summary import PassCount
from seal.report.tables import markdown_table
from seal.runs.records import STEP_FILE_GLOB, ValidationRecord, read_val_dir

TAU2_DOMAINS = ("retail", "airline", "telecom")
TAU2_DIRNAME = "tau2"
"""Where `seal-report --table2` looks for a run's tau2-bench results: RUN/tau2/."""
INFRASTRUCTURE_ERROR = "infrastructure_error"
SUCCESS_TOLERANCE = 1e-6
"""tau2-bench's `is_successful`: a reward within this of 1."""


@dataclass
class Scores:
    """One row of Table 2, in percent; a part is None when it was not (fully) evaluated."""

    bfcl_v4: dict[str, float | None] = field(default_factory=dict)
    tau2: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What the cells are made of (counts), and what is missing."""


def _mean_pct(rates: list[Fraction | None]) -> float | None:
    """The mean of pass rates, in percent; None if any is missing."""
    if not rates or any(rate is None for rate in rates):
        return None
    return 100 * fmean(float(rate) for rate in rates)


def bfcl_v4_scores(records: list[ValidationRecord]) -> tuple[dict[str, float | None], list[str]]:
    """BFCL V4 average, web search and memory (percent) of one step's records, and a note
    per category (its count, or that it is missing)."""
    counts = {}
    for category in WEB_SEARCH_CATEGORIES + MEMORY_CATEGORIES:
        scores = [r.score for r in records if r.data_source == category]
        counts[category] = PassCount(sum(scores), len(scores))
    web = _mean_pct([counts[c].rate for c in WEB_SEARCH_CATEGORIES])
    memory = _mean_pct([counts[c].rate for c in MEMORY_CATEGORIES])
    average = None if web is None or memory is None else (web + memory) / 2
    notes = [
        f"{c} {counts[c].passed}/{counts[c].total}" if counts[c].total else f"{c} not evaluated"
        for c in counts
    ]
    return {"average": average, "web_search": web, "memory": memory}, notes


class Tau2FormatError(ValueError):
    """A file that is not a tau2-bench results file; the message names it."""


def _results_files(path: Path) -> list[Path]:
    """tau2-bench results under `path`: the file itself, a run folder's results.json, or
    every results file below a folder of them."""
    if path.is_file():
        return [path]
    if (path / "results.json").is_file():
        return [path / "results.json"]
    found = sorted(p for p in path.rglob("*.json") if p.parent.name != "simulations")
    return [p for p in found if p.name == "results.json" or p.parent == path]


def read_tau2_results(path: Path) -> tuple[str, Fraction, int, int]:
    """(domain, pass^1, tasks, simulations) of one tau2-bench results file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        domain = data["info"]["environment_info"]["domain_name"]
        simulations = data.get("simulations") or []
        if not simulations and (path.parent / "simulations").is_dir():  # the folder format
            simulations = [
                json.loads(p.read_text(encoding="utf-8"))
                for p in sorted((path.parent / "simulations").glob("*.json"))
            ]
        per_task: dict[str, list[bool]] = defaultdict(list)
        for sim in simulations:
            if sim.get("termination_reason") == INFRASTRUCTURE_ERROR:
                continue
            reward = (sim.get("reward_info") or {}).get("reward")
            if reward is None:
                raise Tau2FormatError(f"{path}: simulation {sim.get('id')} has no reward")
            per_task[str(sim["task_id"])].append(abs(reward - 1) <= SUCCESS_TOLERANCE)
    except Tau2FormatError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        why = f"{type(e).__name__}: {e}"
        raise Tau2FormatError(f"{path}: not a tau2-bench results file ({why})") from None
    if not per_task:
        raise Tau2FormatError(f"{path}: no simulation with a reward")
    pass1 = sum((Fraction(sum(t), len(t)) for t in per_task.values()), Fraction(0))
    return domain, pass1 / len(per_task), len(per_task), sum(map(len, per_task.values()))


def tau2_scores(path: Path) -> tuple[dict[str, float | None], list[str]]:
    """tau2-bench average, retail, airline and telecom (percent) of the results under
    `path`, and a note per domain; a domain found twice is an error."""
    found: dict[str, tuple[Fraction, int, int, Path]] = {}
    for file in _results_files(path) if path.exists() else []:
        domain, pass1, tasks, sims = read_tau2_results(file)
        if domain in found:
            raise Tau2FormatError(
                f"tau2-bench domain {domain} twice: {found[domain][3]} and {file}; keep one"
            )
        found[domain] = (pass1, tasks, sims, file)
    parts: dict[str, float | None] = {d: None for d in TAU2_DOMAINS}
    notes = []
    for domain in TAU2_DOMAINS:
        if domain in found:
            pass1, tasks, sims, _ = found[domain]
            parts[domain] = 100 * float(pass1)
            notes.append(f"{domain} pass^1 over {tasks} tasks ({sims} simulations)")
        else:
            notes.append(f"{domain} not evaluated")
    domains = [parts[d] for d in TAU2_DOMAINS]
    parts["average"] = None if None in domains else fmean(domains)
    return {k: parts[k] for k in TAU2_PARTS}, notes


def _cell(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


TABLE2_HEADER = [
    "model", "BFCL V4 avg", "web search", "memory", "tau2 avg", "retail", "airline", "telecom"
]  # fmt: skip


def table2(ours: dict[str, Scores], backbones: list[str | None]) -> str:
    """Table 2's layout: our rows (label -> Scores), then the paper's rows of `backbones`
    (all of them when none is one of the paper's), with a line of counts per row of ours."""
    rows = [
        [label, *(_cell(s.bfcl_v4.get(k)) for k in BFCL_V4_PARTS),
         *(_cell(s.tau2.get(k)) for k in TAU2_PARTS)]
        for label, s in ours.items()
    ]  # fmt: skip
    known = [b for b in dict.fromkeys(backbones) if b is not None and ood_results(b)]
    paper = [r for b in known for r in ood_results(b)] if known else ood_results()
    mark = "paper: " if ours else ""  # told apart from ours only when there are ours
    rows += [
        [f"{mark}{r.label}", *(_cell(r.bfcl_v4[k]) for k in BFCL_V4_PARTS),
         *(_cell(r.tau2[k]) for k in TAU2_PARTS)]
        for r in paper
    ]  # fmt: skip
    notes = "".join(f"- {label}: {'; '.join(s.notes)}\n" for label, s in ours.items())
    return (
        markdown_table(TABLE2_HEADER, rows)
        + "\nPercent. BFCL V4 (bfcl-eval's agentic checker): web search is the mean of "
        "web_search_base and web_search_no_snippet, memory the mean of the KV, vector and "
        "recursive-summary backends, the average the mean of the two. tau2-bench: pass^1 "
        "per domain, the average their mean. A cell is empty (–) where a part was not "
        "evaluated. " + ("Rows marked paper: are" if ours else "The rows are") + " the paper's "
        "Table 2.\n\n" + notes
    )


def run_scores(run: Path) -> tuple[str, Scores, str | None]:
    """(label, Scores, backbone) of one run: `RUN` or `RUN@STEP` (default: the latest step
    with BFCL V4 records), its tau2-bench results from RUN/tau2/."""
    path, _, step = str(run).partition("@")
    run = Path(path)
    scores = Scores()
    backbone = None
    if any((run / "validation").glob(STEP_FILE_GLOB)) or any(run.glob(STEP_FILE_GLOB)):
        steps = read_val_dir(validation_dir(run))
        agentic = [s for s, records in steps.items() if any(is_agentic(r.task_id) for r in records)]
        chosen = int(step) if step else (max(agentic) if agentic else None)
        if chosen is not None and chosen not in steps:
            raise ValueError(f"{run}: no validation step {chosen}")
        if chosen is not None:
            records = steps[chosen]
            scores.bfcl_v4, notes = bfcl_v4_scores(records)
            scores.notes += [f"step {chosen}", *notes]
            models = {r.extra.get("model") for r in records} - {None}
            backbone = backbone_of(models.pop()) if len(models) == 1 else None
    if not scores.notes:
        scores.notes.append("BFCL V4 not evaluated")
    scores.tau2, notes = tau2_scores(run / TAU2_DIRNAME)
    scores.notes += notes
    return run.name, scores, backbone


def write_table2(runs: list[Path], out_dir: Path) -> Path:
    """Table 2 of `runs` (seal-report --table2) in OUT_DIR/table2.md; returns the file."""
    ours, backbones = {}, []
    for run in runs:
        label, scores, backbone = run_scores(run)
        if label in ours:
            raise ValueError(f"two runs named {label}: give each run its own folder name")
        ours[label] = scores
        backbones.append(backbone)
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / "table2.md"
    page.write_text("# Out of distribution (the paper's Table 2)\n\n" + table2(ours, backbones))
    return page
