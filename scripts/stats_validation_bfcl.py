"""Summarise BFCL validation records: per-category pass rates per step, best step marked.

Reads a directory of step_<step>.jsonl validation records (see seal/runs/records.py) and
prints one row per step in the paper's format. Warnings about task ids that differ from the
expected split go to stderr, so the table on stdout stays machine-readable.

    python scripts/stats_validation_bfcl.py --val-dir outputs/run/validation --format csv
"""

import argparse
import sys
from pathlib import Path

from seal.eval.summary import RENDERERS, load_split_ids, split_mismatch, summarize
from seal.runs.records import read_val_dir

DEFAULT_SPLIT = Path(__file__).resolve().parent.parent / "data" / "seal_split.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--val-dir",
        required=True,
        type=Path,
        help="directory of validation records, one step_<step>.jsonl file per step",
    )
    parser.add_argument(
        "--split",
        type=Path,
        default=DEFAULT_SPLIT,
        help="JSON split file whose task ids each step is checked against (default: %(default)s)",
    )
    parser.add_argument(
        "--split-key",
        default="eval",
        help="which list of the split file to expect, e.g. eval or train (default: %(default)s)",
    )
    parser.add_argument(
        "--no-split-check",
        action="store_true",
        help="do not compare task ids with the split (e.g. for a validation on a subset)",
    )
    parser.add_argument(
        "--format",
        choices=sorted(RENDERERS),
        default="markdown",
        help="output table format; json gives numbers instead of text cells (default: %(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        steps = read_val_dir(args.val_dir)
        expected_ids = None if args.no_split_check else load_split_ids(args.split, args.split_key)
    except (OSError, ValueError) as error:  # malformed records and split files are ValueErrors
        print(f"error: {error}", file=sys.stderr)
        return 1
    if not steps:
        print(f"error: no step_*.jsonl files in {args.val_dir}", file=sys.stderr)
        return 1

    if expected_ids is not None:
        for step, records in steps.items():
            warning = split_mismatch(step, records, expected_ids)
            if warning:
                print(f"warning: {warning}", file=sys.stderr)
    sys.stdout.write(RENDERERS[args.format](summarize(steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
