"""scripts/learning_check_seeds.py: the per-seed table and the between-run statistics."""

from __future__ import annotations

import json

import pytest
from scripts_loader import load_script

seeds = load_script("learning_check_seeds")


def write_curve(path, evals: dict[int, float]):
    path.parent.mkdir(parents=True)
    curve = [{"step": s, "eval_success": v} for s, v in evals.items()]
    curve.insert(1, {"step": 1, "train_success": 0.5})  # train-only rows are skipped
    path.write_text(json.dumps({"curve": curve}))
    return path


def test_table_and_change(tmp_path, capsys):
    a = write_curve(tmp_path / "s0/curve.json", {0: 0.1, 4: 0.2, 8: 0.3})
    b = write_curve(tmp_path / "s1/curve.json", {0: 0.1, 4: 0.1, 8: 0.0})
    assert seeds.eval_curve(a) == {0: 0.1, 4: 0.2, 8: 0.3}
    seeds.print_group("off", {"s0": seeds.eval_curve(a), "s1": seeds.eval_curve(b)})
    out = capsys.readouterr().out
    assert "| 8 | 0.300 | 0.000 | 0.150 ± 0.150 |" in out
    assert "change +0.050 ± 0.150; rose in 1/2 runs" in out


def test_mean_and_se():
    mean, se = seeds.mean_and_se([0.2, 0.4])
    assert mean == pytest.approx(0.3) and se == pytest.approx(0.1)
