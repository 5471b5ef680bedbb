"""The committed train/eval parquet files: contents, determinism, and verl can read them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from seal.bfcl.tasks import load_task

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"


@pytest.fixture(scope="module")
def split() -> dict:
    return json.loads((DATA / "seal_split.json").read_text())


@pytest.mark.parametrize("name", ["train", "eval"])
def test_rows_follow_the_split(name, split):
    rows = pq.read_table(DATA / f"bfcl_{name}.parquet").to_pylist()
    assert [r["extra_info"]["task_id"] for r in rows] == split[name]
    assert [r["extra_info"]["index"] for r in rows] == list(range(400))
    for row in rows[::37]:
        task = load_task(row["extra_info"]["task_id"])
        assert row["data_source"] == row["extra_info"]["category"] == task.category
        assert row["agent_name"] == "seal_bfcl"
        assert row["prompt"][0]["content"] == task.questions[0][0]["content"]
        assert json.loads(row["reward_model"]["ground_truth"]) == task.ground_truth
        assert row["extra_info"]["num_turns"] == task.num_turns


def test_splits_are_disjoint_and_balanced(split):
    assert not set(split["train"]) & set(split["eval"])
    for name in ("train", "eval"):
        categories = [tid.rsplit("_", 1)[0] for tid in split[name]]
        assert sorted(set(categories.count(c) for c in categories)) == [100]


def test_regeneration_is_byte_identical(tmp_path):
    from scripts_loader import load_script

    prepare = load_script("prepare_data")
    prepare.main(["--out-dir", str(tmp_path)])
    for name in ("bfcl_train", "bfcl_eval", "smoke_train", "smoke_eval"):
        fresh = (tmp_path / f"{name}.parquet").read_bytes()
        assert fresh == (DATA / f"{name}.parquet").read_bytes(), (
            f"{name} differs: rerun scripts/prepare_data.py"
        )


def test_smoke_files_hold_one_task_per_category_of_their_split(split):
    for name in ("train", "eval"):
        rows = pq.read_table(DATA / f"smoke_{name}.parquet").to_pylist()
        ids = [r["extra_info"]["task_id"] for r in rows]
        assert set(ids) <= set(split[name])
        assert sorted(r["data_source"] for r in rows) == sorted(
            {tid.rsplit("_", 1)[0] for tid in split[name]}
        )


def test_verl_rlhf_dataset_reads_the_files(tokenizer):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 8192,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": "/tmp/verl-cache-test",
        }
    )
    dataset = RLHFDataset(str(DATA / "bfcl_eval.parquet"), tokenizer, config)
    assert len(dataset) == 400
    item = dataset[5]
    assert item["agent_name"] == "seal_bfcl"
    assert item["raw_prompt"][0]["role"] == "user"
    assert item["extra_info"]["task_id"].startswith("multi_turn_")
    assert item["index"] == 5
