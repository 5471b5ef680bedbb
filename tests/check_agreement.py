"""Show that the service's verification agrees with BFCL's official checker on all tasks.

    python tests/check_agreement.py [--category multi_turn_base] [--seed 0]

For every task: the ground truth, and three corruptions of it on a randomly chosen
turn that has calls (drop one call, skip the turn, duplicate one call). Each trajectory
is scored by `seal.bfcl.diagnosis.diagnose` (calls run as data in private backends)
and by bfcl-eval's `multi_turn_checker` (fed the same calls as strings). Prints the
agreement per category and corruption and every disagreement; exits 1 on any.
Ground-truth trajectories the official checker itself fails are reported separately
as unsolvable by construction.

It lives with the tests because the official checker is a test oracle
(tests/bfcl_official.py), never part of the product; run as a file, this folder is on
its import path. tests/seal/bfcl/test_diagnosis_official_agreement.py checks a sample of the same on every test run.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

# Run as a file, this folder is sys.path[0], and its seal/ (the tests of seal, a namespace
# package to Python) would be found before the editable install's finder is asked; the
# repository root first makes `seal` the package (pyproject's pythonpath does this for pytest).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bfcl_official import bfcl_globals_left, official_accuracy
from tqdm import tqdm

from seal.bfcl import ground_truth as gt
from seal.bfcl.diagnosis import diagnose
from seal.bfcl.tasks import CATEGORIES, load_task, task_ids

CORRUPTIONS = ("ground_truth", "drop_call", "skip_turn", "duplicate_call")


def variants(task, rng: random.Random) -> dict:
    clean = gt.ground_truth_trajectory(task)
    turns_with_calls = [i for i, steps in enumerate(clean) if steps]
    turn = rng.choice(turns_with_calls)
    n_calls = len(clean[turn][0])
    return {
        "ground_truth": clean,
        "drop_call": gt.drop_call(clean, turn, rng.randrange(n_calls)),
        "skip_turn": gt.skip_turn(clean, turn),
        "duplicate_call": gt.duplicate_call(clean, turn, rng.randrange(n_calls)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--category", choices=CATEGORIES, help="only this category (default: all four)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed for choosing corrupted turns (default 0)"
    )
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    agree, total, passed = Counter(), Counter(), Counter()
    disagreements, unsolvable = [], []
    for task_id in tqdm(task_ids(args.category), desc="tasks", unit="task"):
        task = load_task(task_id)
        for kind, trajectory in variants(task, rng).items():
            ours = diagnose(task, trajectory)
            official = official_accuracy(task, gt.decoded_for_checker(trajectory))
            key = (task.category, kind)
            total[key] += 1
            passed[key] += official
            if ours.accuracy == official:
                agree[key] += 1
            else:
                disagreements.append((task_id, kind, ours.accuracy, official, ours.tags))
            if kind == "ground_truth" and not official:
                unsolvable.append(task_id)

    print(f"\n{'category':<26}{'trajectory':<16}{'agree':>12}{'official pass':>15}")
    for key in sorted(total):
        print(
            f"{key[0]:<26}{key[1]:<16}{agree[key]:>7}/{total[key]:<4}{passed[key]:>10}/{total[key]}"
        )
    n_agree, n_total = sum(agree.values()), sum(total.values())
    print(f"\nagreement: {n_agree}/{n_total} trajectories")
    print(
        f"ground truths the official checker fails (unsolvable by construction): {unsolvable or 'none'}"
    )
    for d in disagreements:
        print(f"DISAGREE {d[0]} {d[1]}: ours={d[2]} official={d[3]} tags={d[4]}")
    leftover = bfcl_globals_left()
    if leftover:
        print(f"bfcl-eval globals left behind: {leftover[:5]}")
    return 1 if disagreements or leftover else 0


if __name__ == "__main__":
    sys.exit(main())
