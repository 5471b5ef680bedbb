"""The guideline-recurrence measure (seal.report.recurrence, `seal-report RUN --control`) on a
constructed run and control whose validation tags are known: the rate per eligible turn, the
paired interval (checked against scipy's bootstrap), and the page with and without a
control."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from seal.report import recurrence as R
from seal.report.run_page import write_report
from seal.runs.interface_log import write_interface
from seal.runs.records import ValidationRecord, read_val_dir, write_step

REPO = Path(__file__).resolve().parents[3]
TASKS = [
    t for t in json.loads((REPO / "data/seal_split.json").read_text())["eval"]
    if t.startswith("multi_turn_base_")
][:20]  # fmt: skip
NO_LAYERS = {"schema_cues": 0, "type_hints": 0, "recovery_feedback": 0, "guidelines": 0}
GUIDELINE = {"tag": "spurious_tool_call", "text": "Do not call a tool when none is needed."}
FIRST_SHOWN = 5
# Per validation step, the tasks (positions in TASKS) whose turn without ground-truth calls
# got a spurious call. Step 10: both runs fell alike (training does it with or without a
# guideline); step 20: the guideline run fell further (2 of the control's 8).
RUN = {0: set(range(10)), 10: {0, 1, 2, 3}, 20: {0, 1}}
CONTROL = {0: set(range(10)), 10: {0, 1, 2, 3}, 20: set(range(8))}


def write_validation(folder: Path, spurious: dict[int, set[int]]) -> Path:
    """Three turns per task: a calling turn (failed on odd tasks), the empty-ground-truth
    turn, and a calling turn the model passed: a share of all turns would dilute the rate."""
    for step, hit in spurious.items():
        records = [
            ValidationRecord(
                task_id=t,
                data_source="multi_turn_base",
                score=0,
                reward=0.0,
                step=step,
                input="",
                output="",
                turns=3,
                failure_tags=[
                    "state_mismatch" if k % 2 else "pass",
                    "spurious_tool_call" if k in hit else "correct_abstention",
                    "pass",
                ],
            )  # fmt: skip
            for k, t in enumerate(TASKS)
        ]
        write_step(folder / "validation", step, records)
    return folder


def guideline_run(tmp_path: Path) -> tuple[Path, Path]:
    run = write_validation(tmp_path / "guidelines", RUN)
    for step in range(1, 21):
        shown = [{**GUIDELINE, "episodes": 4}] if step >= FIRST_SHOWN else []
        layers = {**NO_LAYERS, "schema_cues": 4, "guidelines": 4 if shown else 0}
        write_interface(run, {"step": step, "episodes": 4, "layers": layers, "shown": shown,
                              "served_profile": None, "failure_profile": {"tags": []}})  # fmt: skip
    return run, write_validation(tmp_path / "control", CONTROL)


def test_the_rate_per_eligible_turn_against_the_control_is_the_constructed_one(tmp_path):
    run, control = guideline_run(tmp_path)
    from seal.runs.interface_log import read_interfaces

    rows = R.guideline_recurrence(
        read_interfaces(run), read_val_dir(run / "validation"),
        read_val_dir(control / "validation"), resamples=2000, seed=3,
    )  # fmt: skip
    # From the last step before the guideline (0) on; only the 20 empty-ground-truth turns
    # are eligible, not the 60 turns.
    assert [(r.step, r.run_hits, r.run_turns, r.control_hits, r.control_turns) for r in rows] == [
        (0, 10, 20, 10, 20),
        (10, 4, 20, 4, 20),
        (20, 2, 20, 8, 20),
    ]
    assert [r.difference for r in rows] == pytest.approx([0.0, 0.0, -0.3])
    # Step 10: the same tasks failed in both runs: every resample differs by 0.
    assert (rows[1].low, rows[1].high) == (0.0, 0.0)
    # Step 20: one eligible turn per task, so the rate difference is the mean of the
    # per-task differences: scipy's percentile bootstrap under the same generator.
    diffs = np.array([int(k in RUN[20]) - int(k in CONTROL[20]) for k in range(len(TASKS))])
    order = np.argsort(TASKS)  # the module pairs the tasks in id order
    expected = stats.bootstrap(
        (diffs[order].astype(float),), np.mean, n_resamples=2000, method="percentile",
        rng=np.random.default_rng([3, 0]),
    ).confidence_interval  # fmt: skip
    assert (rows[2].low, rows[2].high) == pytest.approx((expected.low, expected.high), abs=1e-12)
    assert rows[2].high < 0


def test_eligible_turns_per_tag():
    assert R.eligible_tags("spurious_tool_call") == {"spurious_tool_call", "correct_abstention"}
    assert "pass" in R.eligible_tags("state_mismatch")
    assert "correct_abstention" not in R.eligible_tags("empty_turn_model_response")
    assert R.eligible_tags("checker_error") is None and R.eligible_tags("pass") is None


def section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_report_measures_against_a_control_or_says_it_only_describes(tmp_path):
    run, control = guideline_run(tmp_path)
    described = section(
        write_report(run, split=None).read_text(), "Guidelines and the failures they target"
    )
    assert "**Descriptive only**" in described and "regression to the mean" in described
    measured = section(
        write_report(run, split=None, control=control).read_text(),
        "Guidelines and the failures they target",
    )
    assert "Measured against the control run" in measured
    # One run per side: the page says the interval leaves out seed-to-seed variation.
    assert "One run per side" in measured and "seed-to-seed variation" in measured
    assert (
        "| spurious_tool_call | 5 | 0 (before) | 20 | 0.500 (10/20) | 0.500 (10/20) | +0.000 |"
        in measured
    )
    assert "| spurious_tool_call | 5 | 20 | 20 | 0.100 (2/20) | 0.400 (8/20) | -0.300 |" in measured
    assert "Not checked that the control is matched" in measured  # no config.yaml
    sys.path.insert(0, str(REPO))
    import launcher

    base = ["job=local", "trainer.interface.guidelines=true"]
    OmegaConf.save(launcher.compose(REPO / "exp/SEAL.yaml", base), run / "config.yaml")
    OmegaConf.save(launcher.compose(REPO / "exp/GRPO.yaml", ["job=local"]), control / "config.yaml")
    measured = section(
        write_report(run, split=None, control=control).read_text(),
        "Guidelines and the failures they target",
    )
    assert "**Warning:** the control is not matched" in measured
    assert (
        "`trainer.apatch.enable`" in measured and "`trainer.interface.guidelines`" not in measured
    )
