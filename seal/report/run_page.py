"""One run's report page: a run directory turned into PNG plots and ``report.md`` beside them.

Reads the run's validation records, metrics, capability state, interface records
(seal.report.run_data) and config, each optional, not all of them; a missing part is
skipped with a note on the page. Beside the pass rates: the paper's rows of the run's
backbone, its failure labels (Table 5), the interface state per step and the failures the
guidelines target (seal.report.recurrence).
``seal-report RUN_DIR`` (seal/report/cli.py) is its command line; docs/evaluation.md the page.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from seal.bfcl.tasks import CATEGORIES
from seal.report import paper_views as V
from seal.report import plots
from seal.report import recurrence as R
from seal.report.config_diff import differing_keys
from seal.report.ood import table2
from seal.report.paper import PaperResult, backbone_of, controlled_results, ood_results
from seal.report.paper_match import RowMatch
from seal.report.run_data import (
    Capability,
    RunData,
    apatch_steps,
    load_run,
    training_panels,
    training_tag_shares,
    validation_tag_shares,
)
from seal.report.run_source import (
    CONFIG_FILENAME,
    DEFAULT_SPLIT,
    REPORT_DIRNAME,
    paper_row,
    recorded_best_rule,
    row_match,
    run_config,
    run_model,
    validation_dir,
    validation_subset,
)
from seal.report.summary import (
    PAPER_HEADS,
    StepSummary,
    best_step,
    is_chosen_subset,
    load_split_ids,
    render_markdown,
    split_warnings,
    summarize,
)
from seal.report.tables import markdown_table
from seal.runs import metrics_log
from seal.runs.records import read_val_dir
from seal.trainer_config import BestRule

REPORT_FILENAME = "report.md"


def _pct(value) -> str:
    return "–" if value is None else f"{float(value) * 100:.2f}"


def paper_rows_table(rows: list[PaperResult], matched: PaperResult | None) -> list[list]:
    """Table rows (model, avg, four categories) of the paper's results; `matched` in bold."""
    out = []
    for result in rows:
        cells = [result.label, f"{result.average_pct:.2f}"]
        cells += [f"{result.category_pct[c]:.2f}" for c in CATEGORIES]
        if result == matched:
            cells = [f"**{cell}**" for cell in cells]
            cells[0] += " (this run's row)"
        out.append(cells)
    return out


def paper_table(
    best: StepSummary,
    label: str,
    model: str | None,
    matched: PaperResult | None,
    rule: BestRule,
    near: RowMatch | None = None,
) -> str:
    """The paper's rows of this run's backbone (all its controlled runs when the backbone
    is not one of the paper's), with this run's best step as the last row; `near`: the row
    the run's model and switches name when its row-defining keys differ (named)."""
    backbone = backbone_of(model) if model else None
    rows = paper_rows_table(controlled_results(backbone), matched)
    ours = [_pct(best.by_category[c].rate) for c in CATEGORIES]
    rows.append([f"**{label}, step {best.step}**", f"**{_pct(best.average)}**"])
    rows[-1] += [f"**{cell}**" for cell in ours]
    header = ["model", *PAPER_HEADS.values()]
    counts = ", ".join(
        f"{plots.short_category(c)} {best.by_category[c].passed}/{best.by_category[c].total}"
        for c in CATEGORIES
    )
    if matched is not None:
        which = f"This run reproduces the paper's row {matched.label} (bold)."
    elif near is not None and near.differences:
        which = (
            f"This run has the model and SEAL switches of the paper's row {near.row.label}, "
            f"but it is not that row: it differs from the row's config in {near.describe()}."
        )
    elif backbone is not None:
        which = f"This run's method is none of the paper's rows for {backbone}."
    else:
        which = (
            f"This run's model ({model or 'unknown'}) is none of the paper's backbones: "
            "all the paper's own runs are shown."
        )
    text = (
        markdown_table(header, rows)
        + f"\nAccuracy in percent, as in the paper's Tables 1 and 3 (400 held-out tasks, 100 "
        f"per category). {which} This run's step {best.step}: {counts}. The best step has "
        f"{rule.describe()}, the run's `trainer.checkpoint.best_rule`, chosen on these same "
        "tasks, so it is optimistic; `seal-report --compare` sets runs side by side at their "
        "final and best steps with confidence intervals.\n"
    )
    if backbone is not None and ood_results(backbone):
        text += "\n" + ood_table(backbone)
    return text


def ood_table(backbone: str) -> str:
    """Table 2's rows of a backbone (a training run's report evaluates no out-of-distribution
    task: `seal-report --table2` does, for evaluated checkpoints)."""
    return "Out of distribution, the paper's Table 2 (`seal-report --table2` evaluates it):\n\n" + (
        table2({}, [backbone])
    )


def _figure(title: str, png: Path, text: str = "") -> str:
    return f"## {title}\n\n![{title}]({png.name})\n\n{text}"


def _rate_pct(rate) -> float:
    return math.nan if rate is None else float(rate) * 100


def validation_sections(
    run_dir: Path, run: RunData, label: str, split: Path | None, out_dir: Path
) -> list[str]:
    """The paper table and the pass-rate figure with the per-step table."""
    summaries = summarize(run.validation)
    rule = recorded_best_rule(run_config(run_dir), run_dir)
    best = best_step(summaries, rule)
    if split is None:
        run.notes.append("task ids not checked against a split (--no-split-check)")
    elif split.exists():
        expected = load_split_ids(split, "eval")
        subset = validation_subset(run_dir)
        if subset and all(
            is_chosen_subset(records, expected, subset) for records in run.validation.values()
        ):
            run.notes.append(
                f"validated on {subset} of the split's {len(expected)} held-out tasks "
                "(trainer.data.max_val_tasks): rates not comparable with the paper's"
            )
        for warning in split_warnings(run.validation, expected, subset):
            run.notes.append(warning + " (rates not comparable with the paper's)")
    else:
        run.notes.append(f"split file `{split}` not found: task ids not checked")
    sections = []
    if best is None:
        run.notes.append(f"no validation step has {rule.metric} ({rule.name} rule): no paper table")
    else:
        best_summary = next(summary for summary in summaries if summary.step == best)
        model, _ = run_model(run_dir, run.validation[best])
        matched = paper_row(run_dir, run.validation[best])
        near = row_match(run_dir, run.validation[best])
        sections.append(
            "## Best validation step against the paper\n\n"
            + paper_table(best_summary, label, model, matched, rule, near)
        )
    steps = [summary.step for summary in summaries]
    rates = {c: [_rate_pct(s.by_category[c].rate) for s in summaries] for c in CATEGORIES}
    average = [_rate_pct(summary.average) for summary in summaries]
    png = plots.plot_pass_rates(steps, rates, average, best, out_dir / "pass_rate.png")
    table = render_markdown(summaries, rule)
    sections.append(_figure("Validation pass rate per category", png, table))
    return sections


def tag_sections(run: RunData, out_dir: Path) -> list[str]:
    panels = []
    if run.validation:
        panels.append(("Validation", *validation_tag_shares(run.validation)))
    steps, shares = training_tag_shares(run.metrics)
    if steps:
        panels.append(("Training rollouts", steps, shares))
    if not panels:
        return []
    png = plots.plot_tag_shares(panels, out_dir / "failure_tags.png")
    return [_figure("Failure-tag distribution", png)]


def training_sections(run: RunData, out_dir: Path) -> list[str]:
    """Training curves, then the dynamic tag weights and A-Patch's scales (its panel only
    for the steps it was on: off, it scales nothing)."""
    sections = []
    panels = training_panels(run.metrics)
    if panels:
        png = plots.plot_training_curves(panels, out_dir / "training.png")
        sections.append(_figure("Training curves", png))
    weights = {
        tag: metrics_log.series(run.metrics, metrics_log.tag_weight_key(tag))
        for tag in metrics_log.names_under(run.metrics, metrics_log.TAG_WEIGHT_PREFIX)
    }
    mean_scale = metrics_log.series(run.metrics, metrics_log.APATCH_MEAN_SCALE)
    scaled_frac = metrics_log.series(run.metrics, metrics_log.APATCH_SCALED_FRAC)
    mean_scale, scaled_frac = (curve if curve[0] else None for curve in (mean_scale, scaled_frac))
    on, reported = apatch_steps(run.metrics)
    apatch_off = reported > 0 and on == 0
    if weights or mean_scale or scaled_frac:
        png = plots.plot_weights_and_scale(
            weights, mean_scale, scaled_frac, out_dir / "tag_weights.png", apatch_off
        )
        text = ""
        if apatch_off:
            text = (
                "A-Patch was off in every step (`apatch/active` 0): no advantage was scaled. "
                "The capability state still computed the dynamic weights drawn here; they "
                "were not applied.\n"
            )
        elif on < reported:
            text = f"A-Patch scaled advantages in {on} of {reported} steps (off in the others).\n"
        sections.append(_figure("Dynamic tag weights and A-Patch", png, text))
    else:
        run.notes.append("metrics.jsonl has no tag weights or A-Patch scales: figure skipped")
    return sections


def settings_section(run_dir: Path, run: RunData) -> list[str]:
    """What the run trained with, SEAL's parts on or off: from its config.yaml, else from
    its metrics (A-Patch active per step, each layer's share of the training episodes)."""
    config = run_config(run_dir)
    rows = []
    if config is not None and isinstance(config.get("trainer"), dict):
        trainer = config["trainer"]
        apatch = trainer.get("apatch", {})
        source = f" ({apatch.get('weight_source')} weights)" if apatch.get("enable") else ""
        rows.append(["A-Patch (advantage reweighting)", _on(apatch.get("enable")) + source])
        for layer, on in trainer.get("interface", {}).items():
            if isinstance(on, bool):
                rows.append([f"layer: {layer}", _on(on)])
        push = trainer.get("rollout", {}).get("push_profile")
        rows.append(["failure profile pushed to the service (closed loop)", _on(push)])
        where = f"`{CONFIG_FILENAME}`"
    elif run.metrics:
        on, reported = apatch_steps(run.metrics)
        if reported:
            rows.append(["A-Patch (advantage reweighting)", f"on in {on} of {reported} steps"])
        for layer in metrics_log.names_under(run.metrics, metrics_log.LAYER_PREFIX):
            _, shares = metrics_log.series(run.metrics, metrics_log.LAYER_PREFIX + layer)
            mean = sum(shares) / len(shares)
            rows.append([f"layer: {layer}", "off" if mean == 0 else f"on ({mean:.0%} of episodes)"])
        where = f"`{metrics_log.METRICS_FILENAME}`"
    if not rows:
        return []
    return [
        f"## What the run trained with\n\nFrom {where}. Off, a part changes nothing: no scale, "
        "no layer.\n\n" + markdown_table(["part", "setting"], rows)
    ]


def _on(value) -> str:
    return {True: "on", False: "off"}.get(value, "not set")


def label_sections(run: RunData) -> list[str]:
    """The distribution of the paper's trajectory labels (Table 5) over the failed
    episodes, per validation step and per training step."""
    parts = []
    if run.validation:
        parts.append("Validation (failed tasks, each label's share of them and count):\n\n")
        parts.append(V.validation_label_table(run.validation))
    training = V.training_label_table(run.metrics)
    if training:
        parts.append("\nTraining rollouts (each label's share of the step's failed episodes):\n\n")
        parts.append(training)
    if not parts:
        return []
    intro = (
        "Each failed episode gets one of the paper's labels, from its failing turn, by the "
        "paper's priority (docs/diagnosis_labels.md): invalid_tool_call > argument_mismatch > "
        "state_mismatch > recovery_failure > missing_tool_call > response_mismatch; "
        "`unlabelled`: the service ended the episode, or the failing turn's check raised. "
        "A-Patch and the figures above use the turn tags.\n\n"
    )
    return ["## Failure labels (the paper's Table 5)\n\n" + intro + "".join(parts)]


GUIDELINE_KEYS = ("name", "trainer.interface.guidelines", "trainer.interface.max_guidelines")
"""The config keys a guideline run and its control may differ in."""


def interface_sections(run: RunData, run_dir: Path, control: Path | None) -> list[str]:
    """The interface state of each training step and, when guidelines were shown, the
    recurrence of the failures they target: measured against `control` (a matched run
    without guidelines) or, without one, described and said to be descriptive only."""
    if not run.interfaces:
        if run.metrics:
            run.notes.append("no `interface/step_*.json`: interface state per step skipped")
        return []
    sections = [
        "## Training-time interface per step (the paper's Appendix C.4)\n\n"
        "What each step's training episodes were shown (validation never gets a layer), the "
        "failure profile the service held when they were created, and the step's own profile "
        "(which chooses the next step's guidelines).\n\n" + V.interface_table(run.interfaces)
    ]
    if not R.first_shown(run.interfaces):
        return sections
    title = "## Guidelines and the failures they target\n\n"
    if control is not None:
        return [*sections, title + measured_recurrence(run, run_dir, control)]
    recurrence = V.guideline_recurrence(run.interfaces, run.metrics)
    sections.append(
        title + "**Descriptive only**, not a measure of the guidelines' effect: each "
        "guideline with the first step its episodes showed it, and its tag's mean share of the "
        "diagnosed training turns before that step and from it on. The turns measured are "
        "those of the episodes that carry the guideline; the tag was chosen for being frequent, "
        "so it tends to fall anyway (regression to the mean); training lowers failures with or "
        "without a guideline (no control); shares of all turns sum to one. `seal-report RUN "
        "--control RUN_WITHOUT_GUIDELINES` measures it on validation episodes against a "
        "matched control.\n\n" + V.recurrence_table(recurrence)
    )
    return sections


def measured_recurrence(run: RunData, run_dir: Path, control: Path) -> str:
    """The guideline tags' rates per eligible turn on validation, run against control."""
    control_validation = read_val_dir(validation_dir(control))
    rows = R.guideline_recurrence(run.interfaces, run.validation, control_validation)
    text = (
        f"Measured against the control run `{control}` (trained alike, without guidelines), on "
        "the validation steps both have: validation episodes carry no layer, so both runs are "
        "scored on the plain benchmark. Each guideline's tag: its rate per eligible turn "
        "(`spurious_tool_call` on turns whose ground truth calls no tool, the other failure "
        "tags on turns whose ground truth calls tools), in the run and in the control, and the "
        "difference with a 95% paired bootstrap interval over tasks (seal/report/recurrence.py). "
        "A difference whose interval holds 0 is no evidence that the guideline changed the "
        "failure's rate. One run per side: the interval resamples tasks only, so it leaves out "
        "seed-to-seed variation (another seed of either run, the same config, could move the "
        "difference by more than the interval says); runs of several seeds per side, compared "
        "with `seal-report --compare`, measure it.\n\n"
    )
    configs = {"run": run_config(run_dir), "control": run_config(control)}
    if None in configs.values():
        text += "Not checked that the control is matched: a run has no `config.yaml`.\n\n"
    else:
        other = [k for k in differing_keys(configs) if k not in GUIDELINE_KEYS]
        if other:
            text += (
                f"**Warning:** the control is not matched: its config also differs in "
                f"{', '.join(f'`{k}`' for k in other)}.\n\n"
            )
    if not rows:
        return text + "No validation step of both runs to measure on.\n"
    return text + R.recurrence_table(rows)


def capability_sections(capability: Capability, out_dir: Path) -> list[str]:
    table = capability.category_tag
    categories = [c for c in CATEGORIES if c in table] + sorted(set(table) - set(CATEGORIES))
    tags = plots.ordered_tags(sorted({tag for cells in table.values() for tag in cells}))
    png = plots.plot_capability(
        categories, tags, table, capability.source, out_dir / "capability.png"
    )
    text = (
        f"From the {capability.source}. Left: each failure tag's share of the category's "
        "diagnosed turns; right: the mean reward of the episodes those turns belong to "
        "(n: turns).\n"
    )
    return [_figure("Capability state", png, text)]


def write_report(
    run_dir: Path,
    out_dir: Path | None = None,
    val_dir: Path | None = None,
    label: str | None = None,
    split: Path | None = DEFAULT_SPLIT,
    control: Path | None = None,
) -> Path:
    """Write the PNGs and ``report.md`` to `out_dir` (default RUN_DIR/report); return the
    page. `split`: the split file whose "eval" ids each step is checked against (None: no
    check); `control`: a matched run without guidelines, against which the guidelines'
    failures are measured (seal.report.recurrence)."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir else run_dir / REPORT_DIRNAME
    label = label or run_dir.resolve().name
    run = load_run(run_dir, Path(val_dir) if val_dir else run_dir / "validation")

    sections = settings_section(run_dir, run)
    if run.validation:
        sections += validation_sections(run_dir, run, label, split, out_dir)
    sections += tag_sections(run, out_dir)
    sections += label_sections(run)
    sections += interface_sections(run, run_dir, control)
    if run.metrics:
        sections += training_sections(run, out_dir)
    if run.capability is not None:
        sections += capability_sections(run.capability, out_dir)

    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = f"# Run report: {label}\n\nRun directory `{run_dir}`, generated {generated}.\n"
    if run.notes:
        header += "\nNotes:\n\n" + "".join(f"- {note}\n" for note in run.notes)
    page = out_dir / REPORT_FILENAME
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("\n".join([header, *sections]), encoding="utf-8")
    return page
