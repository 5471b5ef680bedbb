"""seal.trainer.learning_check's `seeds` command: the per-seed table and the between-run
statistics; its command line."""

from __future__ import annotations

import json

import pytest

from seal.trainer import learning_check as lc


def write_curve(path, evals: dict[int, float]):
    path.parent.mkdir(parents=True)
    curve = [{"step": s, "eval_success": v} for s, v in evals.items()]
    curve.insert(1, {"step": 1, "train_success": 0.5})  # train-only rows are skipped
    path.write_text(json.dumps({"curve": curve}))
    return path


def test_table_and_change(tmp_path, capsys):
    a = write_curve(tmp_path / "s0/curve.json", {0: 0.1, 4: 0.2, 8: 0.3})
    b = write_curve(tmp_path / "s1/curve.json", {0: 0.1, 4: 0.1, 8: 0.0})
    assert lc.eval_curve(a) == {0: 0.1, 4: 0.2, 8: 0.3}
    lc.print_group("off", {"s0": lc.eval_curve(a), "s1": lc.eval_curve(b)})
    out = capsys.readouterr().out
    assert "| 8 | 0.300 | 0.000 | 0.150 ± 0.150 |" in out
    assert "change +0.050 ± 0.150; rose in 1/2 runs" in out


def test_mean_and_se():
    mean, se = lc.mean_and_se([0.2, 0.4])
    assert mean == pytest.approx(0.3) and se == pytest.approx(0.1)


def test_seeds_command_groups_by_label_and_refuses_a_label_count_mismatch(tmp_path, capsys):
    a = write_curve(tmp_path / "s0/curve.json", {0: 0.1, 4: 0.3})
    b = write_curve(tmp_path / "s1/curve.json", {0: 0.2, 4: 0.2})
    c = write_curve(tmp_path / "s2/curve.json", {0: 0.0, 4: 0.4})
    args = ["seeds", str(a), str(b), str(c), "--label", "off", "off", "on"]
    assert lc.main(args) == 0
    out = capsys.readouterr().out
    assert "### off (2 runs)" in out and "### on (1 runs)" in out
    assert "| 4 | 0.300 | 0.200 | 0.250 ± 0.050 |" in out
    with pytest.raises(SystemExit) as exit_info:
        lc.main(["seeds", str(a), str(b), str(c), "--label", "off", "on"])
    assert exit_info.value.code == 2
    assert "2 labels for 3 files" in capsys.readouterr().err


def test_run_command_defaults_are_the_documented_ones():
    args = lc.parse_args(["run"])
    assert (args.k, args.steps, args.n, args.lr, args.guidelines) == (4, 12, 8, 1e-4, False)
    assert args.out_dir == lc.REPO_ROOT / "outputs" / "learning_check"
