"""What one run directory holds for its report: validation records, metrics, capability
state and interface records (each optional), and the series each figure of the page draws
from them. The page: seal.report.run_page."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from seal.bfcl.tasks import CATEGORIES
from seal.report import figure_style as style
from seal.runs import metrics_log
from seal.runs.interface_log import read_interfaces
from seal.runs.records import ValidationRecord, read_val_dir
from seal.tocf.state import STATE_FILENAME, CapabilityState

_EPOCH_FILE = re.compile(r"epoch_(\d+)\.json")


class EmptyRunError(RuntimeError):
    """The run directory holds nothing a report can be made of."""


@dataclass
class Capability:
    """A category x tag table of tally summaries and where it came from."""

    source: str
    category_tag: dict[str, dict[str, dict]]


@dataclass
class RunData:
    validation: dict[int, list[ValidationRecord]]
    metrics: list[dict]
    capability: Capability | None
    interfaces: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load_capability(run_dir: Path) -> Capability | None:
    """The latest epoch summary's window, else the saved state's whole-run tables."""
    epochs = {
        int(match.group(1)): path
        for path in (run_dir / "tocf").glob("epoch_*.json")
        if (match := _EPOCH_FILE.fullmatch(path.name))
    }
    if epochs:
        latest = max(epochs)
        summary = json.loads(epochs[latest].read_text(encoding="utf-8"))
        source = f"epoch {summary['epoch']} window, up to step {summary['step']}"
        return Capability(source, summary["category_tag"])
    state_path = run_dir / STATE_FILENAME
    if state_path.exists():
        state = CapabilityState.load(state_path)
        table = {
            category: {tag: tally.summary() for tag, tally in tags.items()}
            for category, tags in state.run.by_category_tag.items()
        }
        return Capability(f"whole run up to step {state.step}", table)
    return None


def load_run(run_dir: Path, val_dir: Path) -> RunData:
    notes = []
    validation = {}
    if val_dir.is_dir():
        validation = read_val_dir(val_dir)
    if not validation:
        notes.append(
            f"no validation records in `{val_dir}`: pass rates and the paper table skipped"
        )
    metrics = []
    if (run_dir / metrics_log.METRICS_FILENAME).exists():
        metrics = metrics_log.read_metrics(run_dir / metrics_log.METRICS_FILENAME)
    if not metrics:
        notes.append(
            f"no `{metrics_log.METRICS_FILENAME}` rows: training curves and tag weights skipped"
        )
    capability = load_capability(run_dir)
    if capability is None:
        notes.append("no capability state (`tocf/epoch_*.json`, `capability_state.json`): skipped")
    interfaces = read_interfaces(run_dir)
    if not (validation or metrics or capability):
        raise EmptyRunError(
            f"{run_dir} has no validation records, metrics or capability state to report on"
        )
    return RunData(validation, metrics, capability, interfaces, notes)


# --- the numbers behind each figure --------------------------------------------------------


def validation_tag_shares(validation: dict[int, list[ValidationRecord]]):
    """Steps and, per tag, its share of all turns validated at each step."""
    steps = sorted(validation)
    counts = {step: Counter(t for r in validation[step] for t in r.failure_tags) for step in steps}
    tags = sorted({tag for counter in counts.values() for tag in counter})
    shares = {
        tag: [counts[s][tag] / max(1, sum(counts[s].values())) for s in steps] for tag in tags
    }
    return steps, shares


def training_tag_shares(rows: list[dict]):
    tags = metrics_log.names_under(rows, metrics_log.TAG_FRAC_PREFIX)
    rows = [row for row in rows if any(metrics_log.tag_frac_key(tag) in row for tag in tags)]
    steps = [row[metrics_log.STEP] for row in rows]
    # A tag absent from a step's row did not occur in that step's rollouts.
    shares = {tag: [row.get(metrics_log.tag_frac_key(tag)) or 0.0 for row in rows] for tag in tags}
    return steps, shares


def training_panels(rows: list[dict]) -> list:
    """(title, y label, curves, colours) for each group of training metrics the log holds."""
    panels = []
    rewards = {"reward (mean)": metrics_log.series(rows, metrics_log.REWARD_MEAN)}
    colors = {"reward (mean)": style.AVERAGE_COLOR}
    logged = metrics_log.names_under(rows, metrics_log.ACCURACY_PREFIX)
    for category in [c for c in CATEGORIES if c in logged] + sorted(set(logged) - set(CATEGORIES)):
        label = f"accuracy {style.short_category(category)}"
        rewards[label] = metrics_log.series(rows, metrics_log.accuracy_key(category))
        colors[label] = style.CATEGORY_COLORS.get(category)
    groups = [
        ("Rollout reward and accuracy per category", "reward / accuracy", rewards, colors),
        ("Policy loss", "loss", {"policy": metrics_log.series(rows, metrics_log.LOSS_POLICY)}, {}),
        (
            "KL loss to the reference policy",
            "loss",
            {"kl": metrics_log.series(rows, metrics_log.LOSS_KL)},
            {},
        ),
        (
            "Time per step",
            "seconds",
            {
                "rollout": metrics_log.series(rows, metrics_log.TIME_ROLLOUT_S),
                "update": metrics_log.series(rows, metrics_log.TIME_UPDATE_S),
            },
            {},
        ),
    ]
    for title, ylabel, curves, curve_colors in groups:
        present = {label: curve for label, curve in curves.items() if curve[0]}
        if present:
            panels.append((title, ylabel, present, curve_colors))
    return panels


def apatch_steps(rows: list[dict]) -> tuple[int, int]:
    """(steps A-Patch scaled advantages in, steps that say whether it did)."""
    _, active = metrics_log.series(rows, metrics_log.APATCH_ACTIVE)
    return sum(1 for value in active if value), len(active)
