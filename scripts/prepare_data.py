"""Build the paper's train/eval parquet files from bfcl-eval's shipped data.

    python scripts/prepare_data.py [--split data/seal_split.json] [--out-dir data]

Writes `bfcl_train.parquet` and `bfcl_eval.parquet` (400 rows each, in the split file's
order), readable by verl's `RLHFDataset` and by the local trainer, and the 4-row
`smoke_{train,eval}.parquet` of `exp/verl_cpu_smoke.yaml`. Deterministic: the same inputs
give byte-identical files. The columns: docs/development.md, "Commands and scripts".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from seal.bfcl.tasks import load_task

SMOKE_TASKS = {
    "train": [
        "multi_turn_base_105",
        "multi_turn_miss_func_146",
        "multi_turn_miss_param_142",
        "multi_turn_long_context_146",
    ],
    "eval": [
        "multi_turn_base_116",
        "multi_turn_miss_func_116",
        "multi_turn_miss_param_116",
        "multi_turn_long_context_116",
    ],
}
"""One task per category per split with the shortest first prompt (2280-2466 tokens in
the Qwen2.5 format; BFCL's reach 6282): verl's CPU smoke run spends its time on the
151,936-wide output layer over every token, so its length sets the run's cost."""
AGENT_NAME = "seal_bfcl"
ABILITY = "bfcl_multi_turn"
REPO_ROOT = Path(__file__).resolve().parent.parent


def row(task_id: str, index: int, split: str) -> dict:
    task = load_task(task_id)
    first_user = next(m for m in task.questions[0] if m["role"] == "user")
    return {
        "data_source": task.category,
        "prompt": [{"role": "user", "content": first_user["content"]}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(task.ground_truth)},
        "extra_info": {
            "index": index,
            "task_id": task_id,
            "category": task.category,
            "split": split,
            "num_turns": task.num_turns,
        },
        "agent_name": AGENT_NAME,
    }


def write_split(task_ids: list[str], split: str, path: Path) -> None:
    table = pa.Table.from_pylist([row(tid, i, split) for i, tid in enumerate(task_ids)])
    pq.write_table(table, path, compression="zstd")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--split",
        type=Path,
        default=REPO_ROOT / "data/seal_split.json",
        help="split file with 'train' and 'eval' id lists (default: data/seal_split.json)",
    )
    p.add_argument(
        "--out-dir",
        type=Path,
        default=REPO_ROOT / "data",
        help="where the parquet files go (default: data/)",
    )
    args = p.parse_args(argv)
    split = json.loads(args.split.read_text())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train", "eval"):
        ids = split[name]
        if len(set(ids)) != len(ids):
            raise SystemExit(f"error: the {name} split in {args.split} repeats task ids")
        path = args.out_dir / f"bfcl_{name}.parquet"
        write_split(ids, name, path)
        print(f"wrote {path} ({len(ids)} tasks)")
        if not set(SMOKE_TASKS[name]) <= set(ids):
            raise SystemExit(f"error: the smoke tasks of {name} are not in its split")
        smoke = args.out_dir / f"smoke_{name}.parquet"
        write_split(SMOKE_TASKS[name], name, smoke)
        print(f"wrote {smoke} ({len(SMOKE_TASKS[name])} tasks)")


if __name__ == "__main__":
    main()
