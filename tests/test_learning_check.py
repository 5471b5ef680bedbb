"""seal.learning_check's `seeds` command: the per-seed table and the between-run
statistics; its command line."""

from __future__ import annotations

import json

import pytest

from seal import learning_check as lc
from seal.runs.metrics_log import read_metrics


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


def test_run_command_warms_up_then_trains_from_the_warmed_policy(tmp_path):
    """The whole `run` at its smallest: 1 task, 2 warm-up steps, 1 GRPO step."""
    out = tmp_path / "out"
    args = ["run", "--k", "1", "--steps", "1", "--n", "2", "--warmup-max-steps", "2",
            "--warmup-check-every", "1", "--warmup-check-nll", "1e9",
            "--warmup-check-samples", "1", "--eval-samples", "1", "--out-dir", str(out)]  # fmt: skip
    assert lc.main(args) == 0
    result = json.loads((out / "curve.json").read_text())
    warm = result["warmup"]["history"]
    assert [w["step"] for w in warm] == [1, 2] and warm[1]["nll"] < warm[0]["nll"]
    assert [r["step"] for r in result["curve"]] == [0, 1]
    assert all("eval_success" in r for r in result["curve"])  # the last step is evaluated
    # GRPO starts from the warmed-up weights: its KL reference is them, not the random
    # model the warm-up changed, so the first update's KL is nil.
    assert result["curve"][1]["kl"] == 0.0
    assert (out / "warm_policy.pt").exists() and (out / "curve.png").stat().st_size > 0
    assert [r["step"] for r in read_metrics(out / "run")] == [1]
