"""Per-category summary: cells, averages, best step, split warnings, output formats, and
`seal-report --table`, its command line."""

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from seal.bfcl.tasks import CATEGORIES, category_of
from seal.report import cli
from seal.report.summary import (
    best_step,
    load_split_ids,
    render_csv,
    render_json,
    render_markdown,
    split_mismatch,
    summarize,
    table_rows,
)
from seal.runs.records import ValidationRecord, write_step
from seal.trainer_config import BEST_RULES

AVERAGE, RELEASE = BEST_RULES["average"], BEST_RULES["release"]

REPO = Path(__file__).resolve().parents[3]
# The paper's SEAL row for Qwen2.5-7B-Instruct, as passed/total per category.
SEAL_7B_COUNTS = {
    "multi_turn_base": (58, 100),
    "multi_turn_miss_func": (36, 100),
    "multi_turn_miss_param": (34, 100),
    "multi_turn_long_context": (33, 100),
}


def record(task_id, step, score):
    return ValidationRecord(
        task_id=task_id,
        data_source=task_id.rsplit("_", 1)[0],
        score=score,
        reward=float(score),
        step=step,
        input="prompt",
        output="trajectory",
        failure_tags=["pass" if score else "state_mismatch"],
        turns=1,
    )


def step_records(step, counts):
    """Records with ids <category>_0.. and the first `passed` of each category accurate."""
    return [
        record(f"{category}_{k}", step, int(k < passed))
        for category, (passed, total) in counts.items()
        for k in range(total)
    ]


def counts_with_rates(*passed_per_category, total=100):
    return {c: (p, total) for c, p in zip(CATEGORIES, passed_per_category, strict=True)}


def test_cells_overall_and_average_in_paper_format():
    [row] = table_rows(summarize({10: step_records(10, SEAL_7B_COUNTS)}))
    assert row == {
        "step": "10",
        "multi_turn_base": "58.00 (58/100)",
        "multi_turn_miss_func": "36.00 (36/100)",
        "multi_turn_miss_param": "34.00 (34/100)",
        "multi_turn_long_context": "33.00 (33/100)",
        "overall": "40.25 (161/400)",
        "average": "40.25",
        "best": "*",
    }


def test_average_is_the_mean_of_categories_not_the_overall_rate():
    counts = {
        "multi_turn_base": (1, 1),
        "multi_turn_miss_func": (0, 3),
        "multi_turn_miss_param": (0, 3),
        "multi_turn_long_context": (0, 3),
    }
    [row] = table_rows(summarize({0: step_records(0, counts)}))
    assert row["overall"] == "10.00 (1/10)"
    assert row["average"] == "25.00"


def test_step_missing_a_category_has_no_average_and_cannot_be_best():
    partial = {"multi_turn_base": (9, 10)}
    steps = {
        0: step_records(0, counts_with_rates(1, 1, 1, 1, total=10)),
        10: step_records(10, partial),
    }
    rows = table_rows(summarize(steps))
    assert rows[1]["multi_turn_miss_func"] == "n/a (0/0)"
    assert rows[1]["average"] == "n/a"
    assert [row["best"] for row in rows] == ["*", ""]


def test_best_step_has_the_highest_average_and_ties_go_to_the_later_step():
    """A flat run's best step is its last of the equal ones, not the untrained step 0
    (issue 32: two short flat runs compared their identical step 0)."""
    steps = {
        step: step_records(step, counts_with_rates(*rates))
        for step, rates in [(0, (1, 1, 1, 1)), (10, (3, 3, 3, 3)), (20, (6, 2, 2, 2))]
    }
    steps[30] = step_records(30, counts_with_rates(2, 2, 2, 2))
    summaries = summarize(steps)
    assert best_step(summaries, AVERAGE) == 20
    assert [row["best"] for row in table_rows(summaries)] == ["", "", "*", ""]
    flat = {step: step_records(step, counts_with_rates(1, 1, 1, 1)) for step in (0, 10, 20)}
    assert best_step(summarize(flat), AVERAGE) == 20


def test_tie_is_exact_even_where_float_sums_differ():
    # In floats, (0 + .07 + .07 + .21) / 4 < (.21 + .07 + .07 + 0) / 4: a float average
    # would pick the later step 20 over the equal step 10 for the wrong reason, and step
    # 10 when they are swapped.
    steps = {
        10: step_records(10, counts_with_rates(21, 7, 7, 0)),
        20: step_records(20, counts_with_rates(0, 7, 7, 21)),
    }
    assert best_step(summarize(steps), AVERAGE) == 20


def test_best_step_is_none_without_a_complete_step():
    assert best_step(summarize({0: step_records(0, {"multi_turn_base": (1, 2)})}), AVERAGE) is None
    assert (
        best_step(summarize({0: step_records(0, {"multi_turn_miss_func": (1, 2)})}), RELEASE)
        is None
    )


def test_the_release_rule_ranks_by_multi_turn_base_alone_and_keeps_the_earlier_step():
    """The original release keeps the checkpoint of its alphabetically first validation key
    (multi_turn_base's accuracy), replaced only by a strictly higher one; the same run's
    best by the average is another step."""
    steps = {
        step: step_records(step, counts_with_rates(*rates))
        for step, rates in [(0, (1, 1, 1, 1)), (10, (5, 1, 1, 1)), (20, (5, 4, 4, 4))]
    }
    steps[30] = step_records(30, counts_with_rates(4, 5, 5, 5))
    summaries = summarize(steps)
    assert best_step(summaries, RELEASE) == 10  # 5 at steps 10 and 20: the earlier
    assert best_step(summaries, AVERAGE) == 30
    assert [row["best"] for row in table_rows(summaries, RELEASE)] == ["", "*", "", ""]
    assert [r["best"] for r in json.loads(render_json(summaries, RELEASE))] == [0, 1, 0, 0]
    assert [r["best"] for r in json.loads(render_json(summaries))] == [0, 0, 0, 1]  # none recorded


def test_split_mismatch_is_none_when_ids_match_in_any_order():
    records = step_records(10, counts_with_rates(1, 1, 1, 1, total=2))
    expected = [r.task_id for r in reversed(records)]
    assert split_mismatch(10, records, expected) is None


def test_split_mismatch_names_missing_ids():
    records = step_records(10, {"multi_turn_base": (1, 2)})
    expected = [f"multi_turn_base_{k}" for k in range(6)]
    assert split_mismatch(10, records, expected) == (
        "step 10: task ids differ from the expected split: "
        "4 missing (e.g. multi_turn_base_2, multi_turn_base_3, multi_turn_base_4, ...)"
    )


def test_split_mismatch_names_extra_ids():
    records = step_records(10, {"multi_turn_base": (1, 3)})
    expected = ["multi_turn_base_0", "multi_turn_base_1"]
    assert split_mismatch(10, records, expected) == (
        "step 10: task ids differ from the expected split: 1 extra (e.g. multi_turn_base_2)"
    )


def test_split_mismatch_names_duplicated_ids_with_counts():
    records = step_records(10, {"multi_turn_base": (1, 2)})
    records += [record("multi_turn_base_1", 10, 0), record("multi_turn_base_1", 10, 1)]
    expected = ["multi_turn_base_0", "multi_turn_base_1"]
    assert split_mismatch(10, records, expected) == (
        "step 10: task ids differ from the expected split: 1 duplicated (e.g. multi_turn_base_1 x3)"
    )


def test_split_mismatch_reports_all_problems_together():
    records = [record("multi_turn_base_7", 0, 1), record("multi_turn_base_7", 0, 1)]
    message = split_mismatch(0, records, ["multi_turn_base_1"])
    assert "1 missing (e.g. multi_turn_base_1)" in message
    assert "1 extra (e.g. multi_turn_base_7)" in message
    assert "1 duplicated (e.g. multi_turn_base_7 x2)" in message


def test_the_repository_split_has_100_eval_ids_per_category():
    eval_ids = load_split_ids(REPO / "data" / "seal_split.json", "eval")
    assert len(eval_ids) == len(set(eval_ids)) == 400
    for category in CATEGORIES:
        assert sum(task_id.rsplit("_", 1)[0] == category for task_id in eval_ids) == 100


def test_unknown_split_key_is_an_error(tmp_path):
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"eval": ["multi_turn_base_0"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="no list of task ids under 'test'"):
        load_split_ids(split, "test")


@pytest.fixture
def two_steps():
    return summarize(
        {
            0: step_records(0, counts_with_rates(22, 14, 10, 10)),
            10: step_records(10, SEAL_7B_COUNTS),
        }
    )


def test_markdown_is_a_pipe_table_with_one_row_per_step(two_steps):
    """Issue 42: the end-of-run and seal-eval tables gave fractions under `multi_turn_*`
    heads beside the report page's paper table in percent; every Markdown table of pass
    rates now has the paper's heads, in its order, in percent."""
    lines = render_markdown(two_steps).splitlines()
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert cells[0] == ["step", "avg", "base", "miss_func", "miss_param", "long_ctx",
                        "overall", "best"]  # fmt: skip
    assert all(set(cell) == {"-"} for cell in cells[1])
    assert cells[2][:2] == ["0", "14.00"] and cells[2][-1] == ""
    assert cells[3][:3] == ["10", "40.25", "58.00 (58/100)"]
    assert cells[3][-2:] == ["40.25 (161/400)", "*"]
    assert len({len(line) for line in lines}) == 1  # columns are aligned


def test_csv_cells_are_numbers(two_steps):
    """Every cell parses as a number (a spreadsheet or pandas reads rates, not text like
    "0.4025 (161/400)"): a rate, its passed and total counts, the average, best as 1/0."""
    rows = list(csv.DictReader(io.StringIO(render_csv(two_steps))))
    for row in rows:
        for cell in row.values():
            float(cell)  # raises on text
    assert float(rows[1]["overall"]) == 0.4025
    assert (rows[1]["overall_passed"], rows[1]["overall_total"]) == ("161", "400")
    assert (rows[1]["multi_turn_base_passed"], rows[1]["multi_turn_base_total"]) == ("58", "100")
    assert float(rows[1]["average"]) == 0.4025 and [r["best"] for r in rows] == ["0", "1"]


def test_json_gives_numbers(two_steps):
    rows = json.loads(render_json(two_steps))
    assert [row["step"] for row in rows] == [0, 10]
    assert rows[1]["multi_turn_base"] == {"passed": 58, "total": 100, "rate": 0.58}
    assert rows[1]["overall"] == {"passed": 161, "total": 400, "rate": 0.4025}
    assert rows[0]["average"] == pytest.approx(0.14)
    assert [row["best"] for row in rows] == [False, True]


def run_table(capsys, *args) -> SimpleNamespace:
    """`seal-report --table` in this process (`main` is the console script's function; the
    script's own wiring is tests/seal/report/test_report.py::test_module_runs_as_a_command):
    its exit status, stdout and stderr apart."""
    capsys.readouterr()
    try:
        returncode = cli.main(list(args))
    except SystemExit as exit_:  # argparse's refusals
        returncode = exit_.code
    out, err = capsys.readouterr()
    return SimpleNamespace(returncode=returncode, stdout=out, stderr=err)


def test_report_table_prints_the_table_and_warns_on_stderr(tmp_path, capsys):
    val_dir = tmp_path / "val"
    split = tmp_path / "split.json"
    records = step_records(10, counts_with_rates(1, 1, 0, 0, total=2))
    split.write_text(json.dumps({"eval": [r.task_id for r in records[1:]]}), encoding="utf-8")
    write_step(val_dir, 10, records)

    result = run_table(capsys, "--val-dir", str(val_dir), "--split", str(split), "--table", "csv")
    assert result.returncode == 0, result.stderr
    [row] = list(csv.DictReader(io.StringIO(result.stdout)))
    assert row["multi_turn_base"] == "0.5" and row["average"] == "0.25"
    assert result.stderr == (
        "warning: step 10: task ids differ from the expected split: "
        "1 extra (e.g. multi_turn_base_0)\n"
    )


def test_the_split_warning_comes_once_and_not_for_a_run_s_chosen_subset(tmp_path, capsys):
    """Two steps on the same 8 of the 400 held-out tasks: one warning, not one per step;
    and none when the run's config chose those 8 (`trainer.data.max_val_tasks`, as
    exp/cpu_default.yaml does): every default run used to warn "392 missing" per step."""
    from omegaconf import OmegaConf

    split = load_split_ids(REPO / "data/seal_split.json", "eval")
    chosen = [t for c in CATEGORIES for t in [i for i in split if category_of(i) == c][:2]]
    run = tmp_path / "run"
    for step in (0, 3):
        write_step(run / "validation", step, [_record(t, step) for t in chosen])
    result = run_table(capsys, str(run), "--table", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("warning") == 1 and result.stderr.startswith(
        "warning: steps 0, 3: task ids differ from the expected split: 392 missing"
    ), result.stderr

    OmegaConf.save({"job": "local", "trainer": {"data": {"max_val_tasks": 8}}}, run / "config.yaml")
    result = run_table(capsys, str(run), "--table", "csv")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    duplicated = [_record(t, 5) for t in chosen[:7] + chosen[:1]]
    write_step(run / "validation", 5, duplicated)
    result = run_table(capsys, str(run), "--table", "csv")  # not the chosen subset: warned
    assert "step 5: task ids differ" in result.stderr and "steps 0" not in result.stderr


def _record(task_id: str, step: int) -> ValidationRecord:
    return ValidationRecord(
        task_id=task_id, data_source=category_of(task_id), score=0, reward=0.0, step=step,
        input="", output="", failure_tags=["pass"], turns=1,
    )  # fmt: skip


def test_report_table_fails_naming_the_malformed_file_and_line(tmp_path, capsys):
    (tmp_path / "step_000000.jsonl").write_text("not json\n", encoding="utf-8")
    result = run_table(
        capsys, "--val-dir", str(tmp_path), "--no-split-check", "--table", "markdown"
    )
    assert result.returncode == 1
    assert f"{tmp_path / 'step_000000.jsonl'}:1:" in result.stderr
    assert result.stdout == ""


def test_report_table_fails_on_an_empty_directory(tmp_path, capsys):
    result = run_table(capsys, "--val-dir", str(tmp_path), "--table", "json")
    assert result.returncode == 1
    assert "no step_*.jsonl files" in result.stderr


def test_report_table_reads_the_run_directory_and_needs_one(tmp_path, capsys):
    write_step(tmp_path / "validation", 3, step_records(3, counts_with_rates(1, 0, 0, 0, total=1)))
    result = run_table(capsys, str(tmp_path), "--table", "json", "--no-split-check")
    assert result.returncode == 0, result.stderr
    assert [row["step"] for row in json.loads(result.stdout)] == [3]
    assert not (tmp_path / "report").exists()  # --table writes nothing
    result = run_table(capsys, "--table", "json", "--compare", str(tmp_path))
    assert result.returncode == 2 and "--table goes with a run directory" in result.stderr


def test_the_trainer_s_best_step_is_the_report_s(tmp_path):
    """The trainer's best step (the end-of-run note, `seal-export --step best`,
    `keep_only_best`) is the step the report stars, ties and float sums included: a flat
    run and the two orders of the float-unequal tie above."""
    from seal.runs.metrics_log import validation_metrics
    from seal.trainer.seal_hooks import SealHooks
    from seal.trainer_config import TrainerConfig

    runs = [
        {step: counts_with_rates(1, 1, 1, 1) for step in (0, 10, 20)},
        {10: counts_with_rates(21, 7, 7, 0), 20: counts_with_rates(0, 7, 7, 21)},
        {10: counts_with_rates(0, 7, 7, 21), 20: counts_with_rates(21, 7, 7, 0)},
        {0: counts_with_rates(1, 1, 1, 1), 10: counts_with_rates(6, 2, 2, 2)}
        | {20: counts_with_rates(2, 2, 2, 2)},
        {0: counts_with_rates(1, 1, 1, 1), 10: counts_with_rates(5, 1, 1, 1)}
        | {20: counts_with_rates(5, 4, 4, 4)},
    ]
    found = {}
    for name, rule in BEST_RULES.items():
        cfg = TrainerConfig()
        cfg.checkpoint.best_rule = name
        for k, counts in enumerate(runs):
            steps = {step: step_records(step, c) for step, c in counts.items()}
            trainer = SealHooks(tmp_path / name / str(k), cfg, "http://127.0.0.1:1")
            for step in sorted(steps):
                trainer.validated(step, validation_metrics(steps[step]))
            assert trainer.best["step"] == best_step(summarize(steps), rule), (name, counts)
            assert (trainer.best["rule"], trainer.best["metric"]) == (name, rule.metric)
            found[name, k] = trainer.best["step"]
    assert [found["average", k] for k in range(5)] == [20, 20, 20, 10, 20]
    assert [found["release", k] for k in range(5)] == [0, 10, 20, 10, 10]


def test_the_report_stars_the_best_step_by_the_run_s_recorded_rule(tmp_path, capsys):
    """A paper config records the release's rule, this project's own configs the average;
    `seal-report` stars the step each trainer kept."""
    import sys

    from omegaconf import OmegaConf

    sys.path.insert(0, str(REPO))
    from launcher import compose

    counts = {0: (1, 1, 1, 1), 10: (5, 1, 1, 1), 20: (5, 4, 4, 4)}
    for conf, best in (("SEAL", 10), ("cpu_default", 20)):
        run = tmp_path / conf
        for step, rates in counts.items():
            write_step(run / "validation", step, step_records(step, counts_with_rates(*rates)))
        OmegaConf.save(compose(REPO / f"exp/{conf}.yaml", ["job=local"]), run / "config.yaml")
        result = run_table(capsys, str(run), "--table", "json", "--no-split-check")
        assert [r["step"] for r in json.loads(result.stdout) if r["best"]] == [best], conf
