"""Validation records: schema checks, file naming, atomic writes, strict reading."""

import json
import os

import pytest
from pydantic import ValidationError

from seal.runs.records import (
    RecordFormatError,
    ValidationRecord,
    read_step_file,
    read_val_dir,
    step_file_name,
    write_step,
)


def make_record(task_id="multi_turn_base_4", step=10, **fields):
    values = {
        "task_id": task_id,
        "data_source": task_id.rsplit("_", 1)[0],
        "score": 1,
        "reward": 1.0,
        "step": step,
        "input": "List the files.",
        "output": '<tool_call>{"name": "ls"}</tool_call> ünïcode',
        "failure_tags": ["pass", "correct_abstention"],
        "turns": 3,
    }
    values.update(fields)
    return ValidationRecord(**values)


def test_step_file_name_is_zero_padded_and_grows_past_six_digits():
    assert step_file_name(0) == "step_000000.jsonl"
    assert step_file_name(10) == "step_000010.jsonl"
    assert step_file_name(1234567) == "step_1234567.jsonl"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"data_source": "multi_turn_miss_func"}, "does not match task id"),
        ({"data_source": "multi_turn_composite"}, "does not match task id"),
        (
            {"task_id": "multi_turn_composite_3", "data_source": "multi_turn_composite"},
            "unknown BFCL task id",
        ),
        ({"score": 2}, "score"),
        ({"step": -1}, "step"),
        ({"progress": 1.5}, "progress"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_record_rejects_invalid_fields(fields, message):
    with pytest.raises(ValidationError, match=message):
        make_record(**fields)


def test_write_then_read_round_trips_records_in_step_order(tmp_path):
    step_10 = [
        make_record("multi_turn_base_4", 10, progress=0.5, extra={"tool_errors": 2}),
        make_record("multi_turn_miss_func_4", 10, score=0, reward=0.0),
    ]
    step_0 = [make_record("multi_turn_long_context_9", 0)]
    path = write_step(tmp_path, 10, step_10)
    write_step(tmp_path, 0, step_0)

    assert path == tmp_path / "step_000010.jsonl"
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
    steps = read_val_dir(tmp_path)
    assert list(steps) == [0, 10]
    assert steps[0] == step_0
    assert steps[10] == step_10
    assert steps[10][0].extra == {"tool_errors": 2}


def test_write_step_refuses_records_of_another_step(tmp_path):
    with pytest.raises(ValueError, match="has step 0, expected 10"):
        write_step(tmp_path, 10, [make_record(step=0)])
    assert list(tmp_path.iterdir()) == []


def test_write_step_replaces_an_existing_step_only_when_asked(tmp_path):
    write_step(tmp_path, 10, [make_record(score=0, reward=0.0)])
    with pytest.raises(FileExistsError, match="step_000010.jsonl"):
        write_step(tmp_path, 10, [make_record()])
    write_step(tmp_path, 10, [make_record()], overwrite=True)
    assert read_val_dir(tmp_path)[10][0].score == 1


def test_failed_write_leaves_no_file_and_keeps_the_old_step(tmp_path, monkeypatch):
    def failing_fsync(fd):
        raise OSError("disk full")

    write_step(tmp_path, 10, [make_record("multi_turn_base_1")])
    old_content = (tmp_path / "step_000010.jsonl").read_bytes()
    monkeypatch.setattr(os, "fsync", failing_fsync)

    with pytest.raises(OSError, match="disk full"):
        write_step(tmp_path, 20, [make_record("multi_turn_base_2", 20)])
    with pytest.raises(OSError, match="disk full"):
        write_step(tmp_path, 10, [make_record("multi_turn_base_3")], overwrite=True)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000010.jsonl"]
    assert (tmp_path / "step_000010.jsonl").read_bytes() == old_content


def test_reader_ignores_leftover_temporary_files(tmp_path):
    write_step(tmp_path, 10, [make_record()])
    (tmp_path / ".step_000020.jsonl.abc.tmp").write_text('{"half a rec', encoding="utf-8")
    assert list(read_val_dir(tmp_path)) == [10]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        (b'{"task_id": "multi_turn_base_5", "score"', "Invalid JSON"),
        (b'{"task_id": "multi_turn_base_5"}', "data_source: Field required"),
        (b"", "empty line"),
        (b'"\xff\xfe"', "invalid unicode"),
        (make_record(step=20).model_dump_json().encode(), "does not match the file's step 10"),
    ],
)
def test_malformed_line_is_an_error_naming_file_and_line(tmp_path, bad_line, message):
    path = write_step(tmp_path, 10, [make_record()])
    with path.open("ab") as step_file:
        step_file.write(bad_line + b"\n")
        step_file.write(make_record("multi_turn_base_6").model_dump_json().encode() + b"\n")

    with pytest.raises(RecordFormatError, match=message) as error:
        read_val_dir(tmp_path)
    assert f"{path}:2:" in str(error.value)


def test_step_file_with_a_bad_name_is_an_error(tmp_path):
    (tmp_path / "step_final.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(RecordFormatError, match="step_final.jsonl: file name"):
        read_val_dir(tmp_path)


def test_two_files_for_one_step_are_an_error(tmp_path):
    write_step(tmp_path, 10, [make_record()])
    line = json.dumps(make_record().model_dump())
    (tmp_path / "step_10.jsonl").write_text(line + "\n", encoding="utf-8")
    with pytest.raises(RecordFormatError, match="a second file for step 10"):
        read_val_dir(tmp_path)


def test_missing_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_val_dir(tmp_path / "nowhere")


def test_read_step_file_reads_an_empty_step(tmp_path):
    path = write_step(tmp_path, 0, [])
    assert read_step_file(path) == []
