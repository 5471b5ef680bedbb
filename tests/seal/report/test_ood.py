"""Table 2 (out of distribution): BFCL V4 scores from validation records as bfcl-eval's
leaderboard summarises them, tau2-bench's pass^1 from its results files (both its
formats), and `seal-report --table2` laying out our rows beside the paper's
(seal.report.paper's Table 2 accessor)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seal.bfcl.agentic.tasks import agentic_task_ids
from seal.report import ood
from seal.report.cli import main as seal_report
from seal.report.paper import QWEN_7B, SEAL, UNTRAINED, ood_result
from seal.runs.records import ValidationRecord, write_step

# Passes per category (7/100 and 6/100 web search; 18, 18, 19 of 155 memory questions).
PASSED = {
    "web_search_base": 7,
    "web_search_no_snippet": 6,
    "memory_kv": 18,
    "memory_vector": 18,
    "memory_rec_sum": 19,
}


def records(passed: dict[str, int], model: str = "Qwen/Qwen2.5-7B-Instruct") -> list:
    out = []
    for category, n in passed.items():
        for k, task_id in enumerate(agentic_task_ids(category)):
            out.append(
                ValidationRecord(
                    task_id=task_id, data_source=category, score=int(k < n), reward=0.0,
                    step=0, input="", output="", failure_tags=["pass"], turns=1,
                    extra={"model": model},
                )
            )  # fmt: skip
    return out


def test_bfcl_v4_columns_are_bfcl_evals_unweighted_means():
    scores, notes = ood.bfcl_v4_scores(records(PASSED))
    assert scores["web_search"] == pytest.approx((7 + 6) / 2)
    memory = 100 * (18 + 18 + 19) / 3 / 155
    assert scores["memory"] == pytest.approx(memory)
    assert scores["average"] == pytest.approx((6.5 + memory) / 2)
    assert "memory_kv 18/155" in notes and "web_search_base 7/100" in notes


def test_a_bfcl_v4_column_with_a_category_missing_stays_empty():
    partial = {k: v for k, v in PASSED.items() if k != "memory_vector"}
    scores, notes = ood.bfcl_v4_scores(records(partial))
    assert scores["memory"] is None and scores["average"] is None
    assert scores["web_search"] == pytest.approx(6.5)
    assert "memory_vector not evaluated" in notes


def tau2_results(domain: str, rewards: dict[str, list[float]], infra: int = 0) -> dict:
    """A results file as tau2-bench writes it (its Results model, the fields read here)."""
    sims = [
        {"id": f"{task}-{trial}", "task_id": task, "trial": trial,
         "termination_reason": "user_stop", "reward_info": {"reward": reward}}
        for task, per_trial in rewards.items() for trial, reward in enumerate(per_trial)
    ]  # fmt: skip
    sims += [
        {"id": f"x{k}", "task_id": "9", "trial": 0, "termination_reason": "infrastructure_error",
         "reward_info": None}
        for k in range(infra)
    ]  # fmt: skip
    info = {"environment_info": {"domain_name": domain, "policy": "..."}, "num_trials": 2}
    return {"timestamp": "2026-11-25", "info": info, "tasks": [], "simulations": sims}


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_tau2_pass1_is_the_mean_over_tasks_of_their_trials_success_share(tmp_path):
    # Task a: both trials 1; b: one of two; c: none (0.4 is no success): (1 + 0.5 + 0) / 3.
    rewards = {"a": [1.0, 1.0], "b": [1.0, 0.0], "c": [0.4, 0.0]}
    file = write(tmp_path / "retail" / "results.json", tau2_results("retail", rewards, infra=2))
    domain, pass1, tasks, sims = ood.read_tau2_results(file)
    assert (domain, float(pass1), tasks, sims) == ("retail", 0.5, 3, 6)  # infra errors left out


def test_tau2_results_in_its_folder_format_are_read(tmp_path):
    data = tau2_results("airline", {"a": [1.0], "b": [0.0]})
    run = tmp_path / "airline_run"
    write(run / "results.json", {**data, "simulations": []})
    for sim in data["simulations"]:
        write(run / "simulations" / f"{sim['id']}.json", sim)
    assert ood.tau2_scores(tmp_path)[0]["airline"] == pytest.approx(50.0)


def test_tau2_average_needs_all_three_domains_and_a_domain_twice_is_an_error(tmp_path):
    write(tmp_path / "r.json", tau2_results("retail", {"a": [1.0], "b": [0.0]}))
    write(tmp_path / "a.json", tau2_results("airline", {"a": [1.0]}))
    scores, notes = ood.tau2_scores(tmp_path)
    assert (scores["retail"], scores["airline"], scores["telecom"]) == (50.0, 100.0, None)
    assert scores["average"] is None and "telecom not evaluated" in notes
    write(tmp_path / "t.json", tau2_results("telecom", {"a": [0.0], "b": [1.0], "c": [1.0]}))
    assert ood.tau2_scores(tmp_path)[0]["average"] == pytest.approx((50 + 100 + 200 / 3) / 3)
    write(tmp_path / "again.json", tau2_results("retail", {"a": [1.0]}))
    with pytest.raises(ood.Tau2FormatError, match="retail twice"):
        ood.tau2_scores(tmp_path)


def test_a_file_that_is_not_tau2_results_is_named(tmp_path):
    bad = write(tmp_path / "x.json", {"simulations": []})
    with pytest.raises(ood.Tau2FormatError, match=str(bad)):
        ood.read_tau2_results(bad)


def test_seal_report_table2_sets_our_rows_beside_the_papers(tmp_path, capsys):
    run = tmp_path / "qwen7b-seal"
    write_step(run / "validation", 0, records(PASSED))
    write(run / "tau2" / "retail.json", tau2_results("retail", {"a": [1.0], "b": [0.0]}))
    write(run / "tau2" / "airline.json", tau2_results("airline", {"a": [1.0], "b": [1.0]}))
    write(run / "tau2" / "telecom.json", tau2_results("telecom", {"a": [0.0], "b": [0.0]}))
    assert seal_report(["--table2", str(run)]) == 0
    page = (run / "report" / "table2.md").read_text()
    assert page.split("\n", 2)[2] in capsys.readouterr().out
    lines = page.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    assert header == (
        "| model | BFCL V4 avg | web search | memory | tau2 avg | retail | airline | telecom |"
    )
    memory = 100 * 55 / 3 / 155
    ours = next(line for line in lines if line.startswith("| qwen7b-seal"))
    assert ours == (
        f"| qwen7b-seal | {(6.5 + memory) / 2:.2f} | 6.50 | {memory:.2f} | 50.00 | 50.00 | "
        "100.00 | 0.00 |"
    )
    # The paper's rows of the run's backbone (its model is Qwen2.5-7B-Instruct), as printed.
    for method in (UNTRAINED, SEAL):
        paper = ood_result(QWEN_7B, method)
        row = next(line for line in lines if line.startswith(f"| paper: {paper.label} |"))
        assert f"| {paper.bfcl_v4['web_search']:.2f} | {paper.bfcl_v4['memory']:.2f} |" in row
        assert row.endswith(f"| {paper.tau2['telecom']:.2f} |")
    assert "- qwen7b-seal: step 0; web_search_base 7/100" in page


def test_seal_report_table2_leaves_unevaluated_parts_empty(tmp_path):
    run = tmp_path / "only-memory"
    write_step(run / "validation", 0, records({"memory_kv": 3}))
    assert seal_report(["--table2", str(run)]) == 0
    row = next(
        line
        for line in (run / "report" / "table2.md").read_text().splitlines()
        if line.startswith("| only-memory")
    )
    assert row == "| only-memory | – | – | – | – | – | – | – |"
