"""The report's views of what the paper logs per round: the distribution of its trajectory
labels (Table 5), the interface state of each step (Appendix C.4) and, with guidelines on,
whether the failure a guideline targets recurred less after it appeared.

Plain functions from loaded data (validation records, metrics rows, interface records)
to Markdown; ``seal.report.run_page`` places them on the page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from seal.bfcl.tags import PAPER_LABELS
from seal.report.tables import markdown_table
from seal.runs import metrics_log
from seal.runs.interface_log import LAYERS
from seal.runs.records import ValidationRecord

LABEL_COLUMNS = (*PAPER_LABELS, metrics_log.UNLABELLED)


def _share(count: int, total: int) -> str:
    return f"{count / total:.2f} ({count})"


def validation_label_table(validation: Mapping[int, Sequence[ValidationRecord]]) -> str:
    """Per validation step: failed tasks, and each label's share of them (count)."""
    rows = []
    for step, records in sorted(validation.items()):
        failed = [r.paper_label or metrics_log.UNLABELLED for r in records if not r.score]
        counts = Counter(failed)
        cells = [_share(counts[label], len(failed)) if failed else None for label in LABEL_COLUMNS]
        rows.append([step, f"{len(failed)}/{len(records)}", *cells])
    return markdown_table(["step", "failed", *LABEL_COLUMNS], rows)


def training_label_table(metrics: Sequence[Mapping]) -> str | None:
    """Per training step: each label's share of the step's failed rollouts (the
    `train/paper_label/*` metrics); None when the log has none."""
    rows = []
    for row in metrics:
        shares = {k: v for k, v in row.items() if k.startswith(metrics_log.PAPER_LABEL_PREFIX)}
        if shares:
            cells = [shares.get(metrics_log.paper_label_key(label)) for label in LABEL_COLUMNS]
            rows.append([row[metrics_log.STEP], *("–" if v is None else f"{v:.2f}" for v in cells)])
    if not rows:
        return None
    return markdown_table(["step", *LABEL_COLUMNS], rows)


def _profile_cell(profile: Mapping | None) -> str:
    if profile is None:
        return "not pushed"
    entries = profile.get("tags", [])
    return ", ".join(f"{e['tag']} {e['share']:.2f}" for e in entries) or "no tag"


def _layer_order(name: str) -> tuple[int, str]:
    return (LAYERS.index(name) if name in LAYERS else len(LAYERS), name)


def interface_table(interfaces: Sequence[Mapping]) -> str:
    """Per training step: the layers on (episodes with it / episodes), the guidelines
    shown and their tags, the profile that chose them and the step's own profile."""
    rows = []
    for row in interfaces:
        n = row["episodes"]
        on = row["layers"]
        layers = ", ".join(
            name if on[name] == n else f"{name} {on[name]}/{n}"
            for name in sorted(on, key=_layer_order)
            if on[name]
        )
        shown = "; ".join(
            f"[{e['tag']}] {e['text']}" + ("" if e["episodes"] == n else f" ({e['episodes']}/{n})")
            for e in row["shown"]
        )
        rows.append(
            [
                row["step"],
                n,
                layers or "none",
                shown or "–",
                _profile_cell(row["served_profile"]),
                _profile_cell(row["failure_profile"]),
            ]
        )
    header = [
        "step",
        "episodes",
        "layers on",
        "guidelines shown [tag]",
        "profile served (tag share)",
        "profile after the step",
    ]
    return markdown_table(header, rows)


def guideline_recurrence(interfaces: Sequence[Mapping], metrics: Sequence[Mapping]) -> list[dict]:
    """Each guideline shown: the first step its episodes showed it, and its tag's mean
    share of the diagnosed training turns (`train/tag_frac/<tag>`) over the logged steps
    before that step and from it on (None where there is no such step)."""
    first: dict[tuple[str, str], int] = {}
    for row in interfaces:
        for entry in row["shown"]:
            first.setdefault((entry["tag"], entry["text"]), row["step"])
    logged = [row for row in metrics if any(k.startswith(metrics_log.TAG_FRAC_PREFIX) for k in row)]
    out = []
    for (tag, text), step in sorted(first.items(), key=lambda item: (item[1], item[0])):
        # A tag absent from a step's shares did not occur in that step's rollouts.
        before = [
            row.get(metrics_log.tag_frac_key(tag)) or 0.0
            for row in logged
            if row[metrics_log.STEP] < step
        ]
        after = [
            row.get(metrics_log.tag_frac_key(tag)) or 0.0
            for row in logged
            if row[metrics_log.STEP] >= step
        ]
        out.append(
            {
                "tag": tag,
                "text": text,
                "first_step": step,
                "steps_before": len(before),
                "share_before": sum(before) / len(before) if before else None,
                "steps_after": len(after),
                "share_after": sum(after) / len(after) if after else None,
            }
        )
    return out


def recurrence_table(recurrence: Sequence[Mapping]) -> str:
    def share(value):
        return None if value is None else f"{value:.3f}"

    def steps(n):
        return f"{n} step" if n == 1 else f"{n} steps"

    rows = []
    for r in recurrence:
        change = None
        if r["share_before"] is not None and r["share_after"] is not None:
            change = f"{r['share_after'] - r['share_before']:+.3f}"
        rows.append(
            [
                f"[{r['tag']}] {r['text']}",
                r["first_step"],
                f"{share(r['share_before']) or '–'} ({steps(r['steps_before'])})",
                f"{share(r['share_after']) or '–'} ({steps(r['steps_after'])})",
                change,
            ]
        )
    header = ["guideline [tag]", "first shown", "tag share before", "tag share from then", "change"]
    return markdown_table(header, rows)
