"""Validation records: the on-disk format shared by the trainers, the evaluator and the reports.

One record describes one validated task at one validation step. A validation directory holds
one JSONL file per step, named ``step_<step, zero-padded to 6 digits>.jsonl`` (step 10 ->
``step_000010.jsonl``), one record per line. The padding keeps ``ls`` in step order; the reader
takes the step from the number, so steps past 999999 still load.

Writers produce a whole step at once and atomically (temporary file in the same directory, then
rename), so a reader never sees half a step. The reader refuses anything malformed and names the
file and line, never skipping a line: a silently dropped task would change the pass rates.
"""

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from seal.atomic_file import write_text_atomic
from seal.bfcl.multi_turn import UnknownTaskError
from seal.bfcl.tasks import category_of

STEP_FILE_GLOB = "step_*.jsonl"
_STEP_FILE_NAME = re.compile(r"step_(\d+)\.jsonl")


def step_file_name(step: int) -> str:
    """The file name that holds the records of one validation step."""
    return f"step_{step:06d}.jsonl"


class ValidationRecord(BaseModel):
    """One task validated at one step."""

    # Unknown keys are an error rather than dropped: a misspelt field would otherwise vanish.
    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(description="BFCL task id, e.g. 'multi_turn_base_4'.")
    data_source: str = Field(
        description="BFCL category (seal.bfcl.tasks.CATEGORIES), the id's prefix."
    )
    score: int = Field(ge=0, le=1, description="Episode accuracy by the official checker.")
    reward: float = Field(description="Reward given to the trajectory.")
    step: int = Field(ge=0, description="Training step at which validation ran (0: before).")
    input: str = Field(description="The prompt text the model saw first.")
    output: str = Field(description="The trajectory text: model turns, tool results, user turns.")
    failure_tags: list[str] = Field(description="Diagnosis, one tag per ground-truth turn.")
    paper_label: str | None = Field(
        default=None,
        description="A failed episode's label in the paper's Table 5 (seal.bfcl.tags."
        "PAPER_LABELS); None when passed, or when the failure says nothing about the model.",
    )
    turns: int = Field(ge=0, description="Number of model generations in the episode.")
    progress: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Passed turns / scorable turns, if computed."
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Anything else a writer wants to keep (JSON values)."
    )

    @model_validator(mode="after")
    def _category_matches_task_id(self) -> "ValidationRecord":
        try:
            category = category_of(self.task_id)
        except UnknownTaskError as error:
            raise ValueError(str(error)) from None  # pydantic reports only ValueErrors
        # A swapped or stale data_source would count the task in the wrong column.
        if category != self.data_source:
            raise ValueError(
                f"data_source {self.data_source!r} does not match task id {self.task_id!r}"
            )
        return self


def evaluation_record(
    evaluation: Mapping[str, Any], step: int, *, input: str, output: str, turns: int
) -> ValidationRecord:
    """The record of one validated episode from the service's evaluation of it (its keys
    task_id, category, accuracy, reward, failure_tags, paper_label, progress:
    seal.service_contract.Evaluation), the episode's text and its number of replies. Every
    writer builds its records here."""
    return ValidationRecord(
        task_id=evaluation["task_id"],
        data_source=evaluation["category"],
        score=evaluation["accuracy"],
        reward=evaluation["reward"],
        step=step,
        input=input,
        output=output,
        failure_tags=evaluation["failure_tags"],
        paper_label=evaluation["paper_label"],
        turns=turns,
        progress=evaluation["progress"],
    )


class RecordFormatError(ValueError):
    """A validation file that cannot be read as records; the message names file and line."""


def write_step(
    val_dir: str | Path, step: int, records: Iterable[ValidationRecord], overwrite: bool = False
) -> Path:
    """Write all records of one validation step to ``val_dir`` atomically; return the file.

    Every record must carry ``step``. An existing file for the step is an error unless
    ``overwrite`` (e.g. re-validating the same checkpoint after a resume).
    """
    val_dir = Path(val_dir)
    val_dir.mkdir(parents=True, exist_ok=True)
    path = val_dir / step_file_name(step)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")

    lines = []
    for record in records:
        if record.step != step:
            raise ValueError(f"record {record.task_id!r} has step {record.step}, expected {step}")
        lines.append(record.model_dump_json() + "\n")

    return write_text_atomic(path, "".join(lines))


def _describe(error: ValidationError) -> str:
    # Without the offending input: a record's output can be tens of thousands of characters.
    return "; ".join(
        f"{'.'.join(map(str, problem['loc'])) or 'record'}: {problem['msg']}"
        for problem in error.errors(include_url=False, include_input=False)
    )


def _step_of_file(path: Path) -> int:
    match = _STEP_FILE_NAME.fullmatch(path.name)
    if match is None:
        raise RecordFormatError(f"{path}: file name is not step_<number>.jsonl")
    return int(match.group(1))


def read_step_file(path: str | Path) -> list[ValidationRecord]:
    """Read one step file; raise RecordFormatError naming the file and line on any bad line."""
    path = Path(path)
    file_step = _step_of_file(path)
    records = []
    # Bytes, so that invalid UTF-8 is reported with its line like any other bad line.
    with path.open("rb") as lines:
        for line_number, line in enumerate(lines, start=1):
            where = f"{path}:{line_number}"
            if not line.strip():
                raise RecordFormatError(f"{where}: empty line")
            try:
                record = ValidationRecord.model_validate_json(line)
            except ValidationError as error:
                raise RecordFormatError(f"{where}: {_describe(error)}") from error
            if record.step != file_step:
                raise RecordFormatError(
                    f"{where}: record step {record.step} does not match the file's step {file_step}"
                )
            records.append(record)
    return records


def read_val_dir(val_dir: str | Path) -> dict[int, list[ValidationRecord]]:
    """Read every step file in ``val_dir``: records per step, in ascending step order."""
    val_dir = Path(val_dir)
    if not val_dir.is_dir():
        raise FileNotFoundError(f"validation directory {val_dir} does not exist")
    steps: dict[int, list[ValidationRecord]] = {}
    for path in val_dir.glob(STEP_FILE_GLOB):
        step = _step_of_file(path)
        if step in steps:
            # step_10.jsonl and step_000010.jsonl would otherwise merge or shadow each other.
            raise RecordFormatError(f"{path}: a second file for step {step} in {val_dir}")
        steps[step] = read_step_file(path)
    return dict(sorted(steps.items()))
