"""`seal-report`: a run's reports from its records (docs/evaluation.md, docs/comparing_runs.md).

    seal-report RUN_DIR [--val-dir DIR] [--out-dir DIR] [--label NAME] [--control RUN]
    seal-report RUN_DIR --table {markdown,csv,json} [--val-dir DIR] [--no-split-check]
    seal-report --compare [RUN ...] [--arm NAME RUN [RUN ...]] ... [--baseline ARM]
    seal-report --table2 RUN [RUN ...] [--out-dir DIR]

In order: a run's page and PNGs (run_page.py); its pass rates alone on stdout, split warnings
on stderr (summary.py); arms compared (compare.py); the paper's Table 2 (ood.py). Exit status
1 when there is nothing to report or a file is malformed. `python -m seal.report.cli`: same.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seal import commands
from seal.report import compare, compare_runs
from seal.report.run_data import EmptyRunError
from seal.report.run_source import (
    DEFAULT_SPLIT,
    REPORT_DIRNAME,
    recorded_best_rule,
    run_config,
    validation_subset,
)
from seal.report.summary import (
    RENDERERS,
    UNRECORDED_RULE,
    load_split_ids,
    split_warnings,
    summarize,
)
from seal.runs.records import read_val_dir
from seal.trainer_config import BestRule


def print_table(
    val_dir: Path, fmt: str, split: Path | None, subset: int = 0, rule: BestRule = UNRECORDED_RULE
) -> None:
    """The per-category pass rates of each validation step on stdout, in `fmt` (a key of
    seal.report.summary.RENDERERS), the best step by `rule` starred; steps whose task ids
    differ from the split's "eval" ids are named on stderr, once per difference, but for
    the run's chosen subset of `subset` tasks (`split` None: not checked)."""
    steps = read_val_dir(val_dir) if val_dir.is_dir() else {}
    if not steps:
        raise EmptyRunError(f"no step_*.jsonl files in {val_dir}")
    if split is not None:
        for warning in split_warnings(steps, load_split_ids(split, "eval"), subset):
            print(f"warning: {warning}", file=sys.stderr)
    sys.stdout.write(RENDERERS[fmt](summarize(steps), rule))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="seal-report",
        description="Plots and a Markdown report of a SEAL run directory.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=commands.examples(
            "seal-report",
            ("outputs/seal_tiny", "one run's report and plots, in outputs/seal_tiny/report/"),
            ("outputs/seal_tiny --table markdown", "its pass rates per category, printed"),
            (
                "--compare outputs/grpo_tiny outputs/seal_tiny outputs/eval/seal_tiny "
                "--baseline outputs/grpo_tiny",
                "runs and an evaluation task by task against a baseline "
                "(outputs/grpo_tiny/report/compare/)",
            ),
        ),
    )
    parser.add_argument(
        "run_dir",
        type=Path,
        nargs="?",
        help="the run directory (validation/, metrics.jsonl, tocf/, capability_state.json)",
    )
    parser.add_argument(
        "--compare",
        nargs="*",
        metavar="RUN",
        help="compare runs instead: training run directories, endpoint evaluations "
        "(seal-eval --out-dir) or directories of step_*.jsonl, each an arm of one run; "
        "RUN@STEP scores a run at that step (default: its final and its best step)",
    )
    parser.add_argument(
        "--arm",
        nargs="+",
        action="append",
        metavar=("NAME", "RUN"),
        help="with --compare: an arm of several runs (its seeds), named NAME; repeat per arm",
    )
    parser.add_argument(
        "--select",
        choices=(compare_runs.TEST, compare_runs.HELDOUT),
        default=compare_runs.TEST,
        help="with --compare: where each run's best step is chosen: on the tasks it is scored "
        "on (test, flagged as such) or on a held-out half of each category's tasks, the row "
        "then scored on the other half (default: %(default)s)",
    )
    parser.add_argument(
        "--tasks",
        choices=("sampled", "fixed"),
        default="sampled",
        help="with --compare: the tasks as a sample (intervals over seeds and tasks) or fixed "
        "(over seeds only: a claim about these tasks, e.g. the learning check's) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--table2",
        nargs="+",
        metavar="RUN",
        help="the paper's Table 2 (out of distribution) instead: BFCL V4 agentic from each "
        "RUN's records (seal-eval --split agentic; RUN@STEP picks a step), "
        "tau2-bench from the results files in RUN/tau2/; the paper's rows beside them",
    )
    parser.add_argument(
        "--table",
        choices=sorted(RENDERERS),
        help="print the per-category pass rates of each validation step in this format "
        "instead (json: numbers rather than text cells); writes nothing",
    )
    parser.add_argument(
        "--baseline",
        metavar="RUN",
        help="with --compare: the arm (its name, or a plain RUN) the others are compared "
        "with (default: the first)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=compare.RESAMPLES,
        help="with --compare: bootstrap resamples (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="with --compare: bootstrap seed (default: 0)"
    )
    parser.add_argument(
        "--val-dir",
        type=Path,
        help="validation records to use instead of RUN_DIR/validation "
        "(e.g. outputs/replay_demo/validation/drop_call)",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="where the page and PNGs go (default: RUN_DIR/report; with --compare: "
        "BASELINE/report/compare; with --table2: the first RUN's report/)",
    )
    parser.add_argument(
        "--label", help="name of the run in titles and the paper table (default: RUN_DIR's name)"
    )
    parser.add_argument(
        "--control",
        type=Path,
        metavar="RUN",
        help="a run trained like RUN_DIR but without guidelines: the failures RUN_DIR's "
        "guidelines target are measured against it on validation (default: described only)",
    )
    parser.add_argument(
        "--split",
        type=Path,
        default=DEFAULT_SPLIT,
        help="split file whose 'eval' ids each validation step is checked against; "
        "differences are noted on the page (with --table: on stderr) (default: %(default)s)",
    )
    parser.add_argument(
        "--no-split-check",
        action="store_true",
        help="do not check task ids against the split (e.g. a validation on a subset)",
    )
    args = parser.parse_args(argv)
    # --table reads only validation records, so --val-dir can stand for the run directory.
    run = args.run_dir if args.run_dir is not None or not args.table else args.val_dir
    if args.arm and args.compare is None:
        args.compare = []
    if sum(x is not None for x in (run, args.compare, args.table2)) != 1:
        parser.error("give a run directory, --compare RUN [RUN ...] or --table2 RUN [RUN ...]")
    if args.compare is not None and not args.compare and not args.arm:
        parser.error("--compare needs runs: RUN ... or --arm NAME RUN ...")
    for arm in args.arm or []:
        if len(arm) < 2:
            parser.error(f"--arm {arm[0]} names no run: --arm NAME RUN [RUN ...]")
    if args.table and run is None:
        parser.error("--table goes with a run directory or --val-dir")
    if args.no_split_check:
        args.split = None
    if args.baseline and args.compare is None:
        parser.error("--baseline goes with --compare")
    if args.control and run is None:
        parser.error("--control goes with a run directory")
    return args


def compare_arms_of(args: argparse.Namespace) -> tuple[list[tuple[str, list[str]]], str | None]:
    """(arms as (name, [RUN spec, ...]), the baseline arm's name) of the command line: each
    plain RUN is an arm of one run named by its directory (by the spec where two share a
    name); a --baseline that names no arm and is no RUN given is added first as one."""
    arms = [(arm[0], arm[1:]) for arm in args.arm or []]
    specs = list(args.compare)
    baseline = args.baseline
    if baseline is not None and baseline not in {n for n, _ in arms} | set(specs):
        specs.insert(0, baseline)
    names = [compare_runs.parse_spec(spec)[0].resolve().name for spec in specs]
    if len(set(names)) != len(names):
        names = specs
    if baseline in specs:
        baseline = names[specs.index(baseline)]
    return [*((n, [s]) for n, s in zip(names, specs, strict=True)), *arms], baseline


def compare_main(args: argparse.Namespace) -> Path:
    from seal.report import compare_page  # (matplotlib: once there is something to draw)

    arms, baseline = compare_arms_of(args)
    comparison = compare.compare_arms(
        arms, baseline, args.select, args.tasks == "fixed", args.resamples, args.seed
    )
    for warning in comparison.warnings:  # (the page opens with them too)
        print(f"warning: {warning}", file=sys.stderr)
    first = comparison.arms[comparison.baseline][0]
    out_dir = args.out_dir or first.path / REPORT_DIRNAME / "compare"
    return compare_page.write_comparison(comparison, out_dir, args.resamples, args.seed)


def missing_paths(args: argparse.Namespace) -> list[Path]:
    """The runs, records and control the command names (RUN@STEP: RUN) that do not exist:
    said as such, before any of them is read (or a report folder made under one)."""
    given = [args.run_dir, args.val_dir, args.control, *(args.compare or []), *(args.table2 or [])]
    given += [run for arm in args.arm or [] for run in arm[1:]]
    paths = [compare_runs.parse_spec(str(p))[0] for p in given if p is not None]
    return [p for p in dict.fromkeys(paths) if not p.exists()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if missing := missing_paths(args):
        print(f"error: {', '.join(map(str, missing))}: no such directory", file=sys.stderr)
        return 1
    try:
        if args.table:
            subset = validation_subset(args.run_dir) if args.run_dir else 0
            rule = (
                recorded_best_rule(run_config(args.run_dir), args.run_dir)
                if args.run_dir
                else UNRECORDED_RULE
            )
            val_dir = args.val_dir or args.run_dir / "validation"
            print_table(val_dir, args.table, args.split, subset, rule)
            return 0
        if args.compare is not None:
            page = compare_main(args)
        elif args.table2:
            from seal.report.ood import write_table2

            first = Path(str(args.table2[0]).partition("@")[0])
            page = write_table2(args.table2, args.out_dir or first / REPORT_DIRNAME)
            print(page.read_text())
        else:
            from seal.report.run_page import write_report  # (matplotlib)

            page = write_report(
                args.run_dir, args.out_dir, args.val_dir, args.label, args.split, args.control
            )
    except (OSError, ValueError, EmptyRunError) as error:  # malformed files are ValueErrors
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"report written to {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
