"""`seal-report --compare` with several runs per arm: the pooled interval over seeds and tasks
and Holm's adjustment against hand-computed cases and scipy, its coverage on simulated runs,
and the page of two arms of three runs each (the per-seed table, final and best rows, the
Holm column), with sampled tasks as the learning check writes them."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from seal.bfcl.tasks import CATEGORIES
from seal.report import cli
from seal.report import compare as C
from seal.report import compare_runs as R
from seal.report import stats as S
from seal.runs.records import ValidationRecord, write_step

# --- Holm ----------------------------------------------------------------------------------


def test_holm_against_a_hand_computed_family():
    # Sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised
    # to the running maximum 0.06. The nan entry is no test: not in the family (m = 4).
    found = S.holm([0.01, 0.04, math.nan, 0.03, 0.005])
    assert found[:2] == pytest.approx([0.03, 0.06]) and math.isnan(found[2])
    assert found[3:] == pytest.approx([0.06, 0.02])
    # Capped at 1; ties keep their order; one test is its own adjustment.
    assert S.holm([0.4, 0.4, 0.9]) == pytest.approx([1.0, 1.0, 1.0])
    assert S.holm([0.2, 0.01]) == pytest.approx([0.2, 0.02])
    assert S.holm([0.03]) == [0.03] and S.holm([]) == []


# --- Student's t without scipy -------------------------------------------------------------


@pytest.mark.parametrize("df", [1, 2, 2.316, 7.5, 30, 400, math.inf])
def test_t_distribution_equals_scipys(df):
    for t in (0.0, 0.3, 1.96, 4.0, 25.0):
        assert S.t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-15)
    assert S.t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_t_distribution_keeps_its_precision_after_bfcl_s_math_api_lowered_mpmath_s():
    """mpmath's precision is global; BFCL's MathAPI sets it on each call, so a process that
    ran a math task (a trainer, the test suite) must still get the t-test right."""
    import mpmath
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api import MathAPI

    before = mpmath.mp.dps
    try:
        MathAPI().logarithm(value=8.0, base=2.0, precision=2)
        assert mpmath.mp.dps == 2  # the state every other test in the process would meet
        assert S.t_two_sided_p(1.96, 7.5) == pytest.approx(2 * stats.t.sf(1.96, 7.5), rel=1e-9)
        assert S.t_quantile(0.95, 30) == pytest.approx(stats.t.ppf(0.975, 30), rel=1e-9)
    finally:
        mpmath.mp.dps = before


# --- the pooled estimate -------------------------------------------------------------------

# Arm A: 3 runs x 4 tasks, arm B: 2 runs x 4 tasks (one category).
A = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=float)
B = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=float)


def test_pooled_difference_against_a_hand_computed_case():
    """By hand (fractions):
    A: run means 3/4, 1/4, 1/2 (variance 1/16); task means 1, 2/3, 1/3, 0; residual mean
       square (y - run mean - task mean + 1/2)^2 summed / (2 x 3) = 5/36; seed component
       1/16 / 3 - 5/36 / (3 x 4) = 1/108.
    B: run means 1/4, 0 (variance 1/32); task means 1/2, 0, 0, 0; residual 1/8; seed
       component 1/32 / 2 - 1/8 / (2 x 4) = 0: adds nothing.
    Paired task differences 1/2, 2/3, 1/3, 0: variance 35/432, over 4 tasks.
    Difference 1/2 - 1/8 = 3/8; variance 1/108 + 35/1728 = 17/576; Satterthwaite
    df = (17/576)^2 / ((1/48)^2 / 2 + (5/432)^2 / 6 + (35/1728)^2 / 3) = 2601/1123."""
    found = S.pooled_difference([S.Stratum(1.0, (A, B))])
    variance, df = Fraction(17, 576), Fraction(2601, 1123)
    assert found.estimate == pytest.approx(3 / 8)
    assert found.se == pytest.approx(math.sqrt(variance))
    assert found.df == pytest.approx(float(df))
    half = stats.t.ppf(0.975, float(df)) * math.sqrt(variance)
    # (3/8 + half is 1.025, past what a difference of pass rates can be: cut at 1.)
    assert (found.low, found.high) == pytest.approx((3 / 8 - half, min(1.0, 3 / 8 + half)))
    t = 3 / 8 / math.sqrt(variance)
    assert found.p_value == pytest.approx(2 * stats.t.sf(t, float(df)))
    assert found.seeds_in_variance
    # Arm A's own score: 1/2, variance 1/108 + var(1, 2/3, 1/3, 0) / 4 = 1/108 + 5/108.
    score = S.pooled_score([S.Stratum(1.0, (A,))])
    assert (score.estimate, score.se) == pytest.approx((0.5, math.sqrt(6 / 108)))


def test_one_run_per_arm_is_the_paired_t_test_over_tasks():
    rng = np.random.default_rng(0)
    ours, theirs = rng.random((1, 30)), rng.random((1, 30))  # e.g. sampled success rates
    found = S.pooled_difference([S.Stratum(1.0, (ours, theirs))])
    expected = stats.ttest_rel(ours[0], theirs[0])
    low, high = expected.confidence_interval(0.95)
    assert found.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    assert (found.low, found.high) == pytest.approx((low, high), rel=1e-9)
    assert not found.seeds_in_variance


def test_runs_alike_on_every_task_give_welchs_test_over_the_runs():
    """Each run scores the same on all its tasks: no task variation, no residual, so the
    pooled test is Welch's t-test on the runs' scores (and so is `tasks_fixed` always)."""
    ours = np.repeat([[0.2], [0.5], [0.4]], 6, axis=1)
    theirs = np.repeat([[0.1], [0.15], [0.0], [0.2]], 6, axis=1)
    expected = stats.ttest_ind(ours[:, 0], theirs[:, 0], equal_var=False)
    low, high = expected.confidence_interval(0.95)
    for fixed in (False, True):
        found = S.pooled_difference([S.Stratum(1.0, (ours, theirs))], tasks_fixed=fixed)
        assert found.p_value == pytest.approx(expected.pvalue, rel=1e-9)
        assert (found.low, found.high) == pytest.approx((low, high), rel=1e-9)
    rng = np.random.default_rng(1)
    ours, theirs = rng.random((3, 5)), rng.random((3, 5))
    found = S.pooled_difference([S.Stratum(1.0, (ours, theirs))], tasks_fixed=True)
    welch = stats.ttest_ind(ours.mean(axis=1), theirs.mean(axis=1), equal_var=False)
    assert found.p_value == pytest.approx(welch.pvalue, rel=1e-9)


def test_what_cannot_be_estimated_is_nan_not_a_number_that_looks_right():
    one_task = S.pooled_difference([S.Stratum(1.0, (A[:, :1], B[:, :1]))])
    assert math.isnan(one_task.se) and math.isnan(one_task.p_value) and math.isnan(one_task.low)
    fixed_one_run = S.pooled_difference([S.Stratum(1.0, (A[:1], B))], tasks_fixed=True)
    assert math.isnan(fixed_one_run.se)
    alike = S.pooled_difference([S.Stratum(1.0, (np.ones((2, 4)), np.zeros((2, 4))))])
    assert (alike.estimate, alike.se) == (1.0, 0.0)
    # No variation estimated: no interval and no t-test, rather than [1, 1] and p = 0.
    assert math.isnan(alike.low) and math.isnan(alike.high) and math.isnan(alike.p_value)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_the_pooled_interval_covers_a_known_difference_95_times_in_100():
    """Simulated arms of 3 runs on 4 categories of 25 tasks, 0/1 outcomes from a crossed
    model (a seed effect per run, shared by its tasks; a difficulty per task; an arm
    effect per task): the 95% interval of the average's difference holds the population
    difference in about 95% of 300 comparisons. The same interval with the runs averaged
    first (the seed variation left out, as an interval over tasks alone) falls short."""
    rng = np.random.default_rng(7)
    difficulty_sd, gain_mean, gain_sd, seed_sd = 1.5, 0.3, 0.5, 0.6
    draws = 1_000_000
    difficulty, gain = rng.normal(0, difficulty_sd, draws), rng.normal(gain_mean, gain_sd, draws)
    seed = rng.normal(0, seed_sd, draws)
    truth = float(sigmoid(difficulty + gain + seed).mean() - sigmoid(difficulty + seed).mean())
    covered = covered_tasks_only = 0
    trials = 300
    for _ in range(trials):
        seeds = rng.normal(0, seed_sd, (2, 3, 1))  # per arm and run
        strata = []
        for _ in CATEGORIES:
            difficulty = rng.normal(0, difficulty_sd, 25)
            gain = rng.normal(gain_mean, gain_sd, 25)
            probs = (sigmoid(difficulty + seeds[0]), sigmoid(difficulty + gain + seeds[1]))
            base, arm = ((rng.random(p.shape) < p).astype(float) for p in probs)
            strata.append(S.Stratum(0.25, (arm, base)))
        found = S.pooled_difference(strata)
        covered += found.low <= truth <= found.high
        averaged = [
            S.Stratum(s.weight, tuple(a.mean(axis=0, keepdims=True) for a in s.scores))
            for s in strata
        ]
        tasks_only = S.pooled_difference(averaged)
        covered_tasks_only += tasks_only.low <= truth <= tasks_only.high
    assert 0.91 <= covered / trials <= 0.99
    assert covered_tasks_only / trials < 0.85


# --- the page of two arms of three runs ----------------------------------------------------

TASKS = ["multi_turn_base_100", "multi_turn_base_104", "multi_turn_miss_func_100",
         "multi_turn_miss_param_100"]  # fmt: skip
SAMPLES = 4


def sampled_run(folder, successes: dict[int, list[int]]):
    """A run evaluated as the learning check does: per step, SAMPLES episodes of each task,
    numbered in `extra["sample"]`; `successes[step][k]`: how many of task k's passed."""
    for step, passed in successes.items():
        records = [
            ValidationRecord(
                task_id=task_id,
                data_source=task_id.rsplit("_", 1)[0],
                score=int(i < n),
                reward=float(i < n),
                step=step,
                input="",
                output="",
                failure_tags=["pass"],
                turns=1,
                extra={"sample": i},
            )  # fmt: skip
            for task_id, n in zip(TASKS, passed, strict=True)
            for i in range(SAMPLES)
        ]
        write_step(folder / "validation", step, records)
    return folder


# Per arm, three seeds: successes per task (of 4) at steps 0, 2, 4. The SEAL runs peak at
# step 2; ties (seal_1: steps 2 and 4 equal) go to the later step.
GRPO = {
    "grpo_0": {0: [1, 1, 0, 0], 2: [1, 2, 0, 0], 4: [2, 1, 0, 1]},
    "grpo_1": {0: [1, 1, 0, 0], 2: [0, 1, 0, 0], 4: [1, 1, 1, 0]},
    "grpo_2": {0: [1, 1, 0, 0], 2: [2, 1, 1, 0], 4: [1, 2, 0, 0]},
}
SEAL = {
    "seal_0": {0: [1, 1, 0, 0], 2: [4, 3, 1, 1], 4: [3, 2, 1, 1]},
    "seal_1": {0: [1, 1, 0, 0], 2: [3, 3, 1, 0], 4: [3, 3, 0, 1]},
    "seal_2": {0: [1, 1, 0, 0], 2: [3, 4, 2, 1], 4: [2, 3, 1, 1]},
}


def arms(tmp_path):
    grpo = [str(sampled_run(tmp_path / name, runs)) for name, runs in GRPO.items()]
    seal = [str(sampled_run(tmp_path / name, runs)) for name, runs in SEAL.items()]
    return grpo, seal


def test_two_arms_of_three_runs_on_the_command_line(tmp_path):
    grpo, seal = arms(tmp_path)
    out = tmp_path / "cmp"
    argv = ["--compare", "--arm", "GRPO", *grpo, "--arm", "SEAL", *seal, "--out-dir", str(out)]
    assert cli.main(argv) == 0
    page = (out / "compare.md").read_text()
    numbers = json.loads((out / "compare.json").read_text())
    runs = {r["label"]: r for arm in numbers["arms"] for r in arm["runs"]}
    assert {label: (r["final_step"], r["best_step"]) for label, r in runs.items()} == {
        "grpo_0": (4, 4), "grpo_1": (4, 4), "grpo_2": (4, 2),
        "seal_0": (4, 2), "seal_1": (4, 4), "seal_2": (4, 2),
    }  # fmt: skip
    assert all(r["best_by"] == R.ALL_TASKS for r in runs.values())  # no long_context task
    # The per-seed table: each run at its final and best step, ± its s.e. over its tasks.
    # seal_0 at step 2: 9 of 16 episodes; task rates 1, .75, .25, .25 (s.d. 0.375, / 2).
    assert "| SEAL | seal_0 | 2 (best, by all tasks) |" in page
    assert "56.25 ± 18.75 |" in page.split("| SEAL | seal_0 | 2 (best")[1].splitlines()[0]
    # The arms' final rows: GRPO 4, 3, 3 of 16 per run -> 20.83; SEAL 7, 7, 7 -> 43.75.
    grpo_final = next(
        s for s in numbers["scores"]
        if (s["arm"], s["run"], s["selection"], s["column"]) == ("GRPO", None, "final", R.ALL_TASKS)
    )  # fmt: skip
    assert (grpo_final["runs"], grpo_final["tasks"]) == (3, 4)
    assert grpo_final["pct"] == pytest.approx(1000 / 48)
    rows = {(d["selection"], d["column"]): d for d in numbers["differences"]}
    final = rows["final", R.ALL_TASKS]
    assert final["difference_pct"] == pytest.approx(43.75 - 1000 / 48)
    assert final["method"] == C.POOLED_T and final["gained"] is None
    # The row's numbers are the pooled estimate of the same score matrices.
    expected = S.pooled_difference(
        [S.Stratum(1.0, tuple(np.array([[n / SAMPLES for n in runs[4]] for runs in arm.values()])
                              for arm in (SEAL, GRPO)))]
    )  # fmt: skip
    assert final["se_pct"] == pytest.approx(expected.se * 100)
    assert (final["low_pct"], final["high_pct"]) == pytest.approx(
        (expected.low * 100, expected.high * 100)
    )
    # Holm across every row with a test. None in the one-task categories; none at the
    # final step's base either: its two tasks' differences are equal (1/3) and the seed
    # components estimate at 0, so no variation is estimated.
    tested = [d for d in numbers["differences"] if d["p_value"] is not None]
    assert {(d["selection"], d["column"]) for d in numbers["differences"]} - {
        (d["selection"], d["column"]) for d in tested
    } == {
        ("final", "multi_turn_base"),
        *((s, c) for s in R.SELECTIONS for c in ("multi_turn_miss_func", "multi_turn_miss_param")),
    }
    assert [d["holm_p"] for d in tested] == pytest.approx(S.holm([d["p_value"] for d in tested]))
    assert "| Holm p |" in page and "best step (selected on the test set: optimistic)" in page
    assert any(
        "too few tasks" in w and "multi_turn_base (2 tasks)" in w for w in numbers["warnings"]
    )
    assert not any("an arm of one run" in note for note in numbers["notes"])


def write_seeds(run: str, **seeds: int) -> None:
    """A learning-check-like config.yaml holding these seeds (dotted keys)."""
    config: dict = {}
    for dotted, value in seeds.items():
        *path, last = dotted.split("__")
        node = config
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    OmegaConf.save(OmegaConf.create(config), f"{run}/config.yaml")


def test_two_runs_of_an_arm_with_the_same_seeds_are_warned_of(tmp_path, capsys):
    """Issue 42: two runs of one seed were taken as two seeds without a word."""
    grpo, seal = arms(tmp_path)
    for k, run in enumerate(grpo):
        write_seeds(run, trainer__data__seed=k, trainer__rollout__seed=k)
    for run in seal:  # seal_1 and seal_2 are one seed twice
        seed = 0 if run.endswith("seal_0") else 1
        write_seeds(run, trainer__data__seed=seed, trainer__rollout__seed=seed)
    out = tmp_path / "cmp"
    argv = ["--compare", "--arm", "GRPO", *grpo, "--arm", "SEAL", *seal, "--out-dir", str(out)]
    assert cli.main(argv) == 0
    warnings = json.loads((out / "compare.json").read_text())["warnings"]
    same = [w for w in warnings if "the same seeds" in w]
    assert same == [
        "arm SEAL: runs seal_1, seal_2 have the same seeds (trainer.data.seed=1, "
        "trainer.rollout.seed=1), so they are not independent seeds: the arm's standard "
        "error and intervals, which count its runs as samples of the seed-to-seed "
        "variation, are too narrow"
    ]
    assert f"warning: {same[0]}" in capsys.readouterr().err
    assert f"**Warning:** {same[0]}" in (out / "compare.md").read_text()


def test_the_best_step_chosen_on_a_held_out_half_is_scored_on_the_other(tmp_path):
    """On the first half of each category's tasks (in id order) step 10 is best, on the
    other half step 20: held out, the best step is 10 and it is scored on the other half."""
    ids = {c: [f"{c}_{k}" for k in range(1, 5)] for c in CATEGORIES}  # ids sort as written

    def records(step, passed_positions):
        return [
            ValidationRecord(
                task_id=t,
                data_source=c,
                score=int(k in passed_positions),
                reward=0.0,
                step=step,
                input="",
                output="",
                failure_tags=["pass"],
                turns=1,
            )  # fmt: skip
            for c, tasks in ids.items()
            for k, t in enumerate(sorted(tasks))
        ]

    run = tmp_path / "run"
    write_step(run / "validation", 10, records(10, {0, 2}))  # the selection half's tasks
    write_step(run / "validation", 20, records(20, {1, 3, 2}))  # the report half's, and one
    other = tmp_path / "other"
    write_step(other / "validation", 10, records(10, set()))
    arms = [("base", [str(other)]), ("run", [str(run)])]
    test_set = C.compare_arms(arms)
    assert test_set.arms["run"][0].chosen == {R.FINAL: 20, R.BEST: 20}
    heldout = C.compare_arms(arms, select=R.HELDOUT)
    assert heldout.arms["run"][0].chosen == {R.FINAL: 20, R.BEST: 10}
    assert len(heldout.tasks[R.BEST]) == 8 and len(heldout.tasks[R.FINAL]) == 16
    best = next(d for d in heldout.differences if (d.selection, d.column) == (R.BEST, R.AVERAGE))
    assert best.arm_pct == 0.0  # step 10 passed none of the report half
    assert best.tasks == 8
    with pytest.raises(ValueError, match="at least 2 tasks per category"):
        R.heldout_halves({"multi_turn_base_1", "multi_turn_base_2", "multi_turn_miss_func_1"})
