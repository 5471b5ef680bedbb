"""Per-step training metrics: an append-only JSON Lines log in the run directory.

``RUN_DIR/metrics.jsonl`` holds one JSON object per training step, in ascending step order:
``{"step": 12, "train/reward_mean": 0.31, "loss/policy": -0.02, ...}``. Keys other than
``step`` are flat metric names (slash-separated groups, no nesting), values are numbers; a
non-finite value (a NaN loss) is written as ``null``, which plots show as a gap, because
``NaN`` is not JSON and other readers (jq, pandas) would choke on it.

The trainer opens the log with ``MetricsWriter(run_dir)`` for a new run and
``MetricsWriter(run_dir, resume_step=N)`` when it resumes from the checkpoint of step N:
rows of steps after N were written by the run that crashed after its last checkpoint and
are about to be produced again, so they are dropped (the file is rewritten atomically
first). Each row is flushed and synced as it is written; a line cut short by a crash has no
final newline, and both the reader and a resume ignore such a last line.

The key names below are the ones ``seal.eval.report`` plots. ``CapabilityState.metrics()``
(``tocf/...``) and ``apply_apatch`` (``apatch/...``) already produce some of them, so a
trainer can pass those dicts straight to ``MetricsWriter.write``.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path

from seal.atomic_file import write_text_atomic

METRICS_FILENAME = "metrics.jsonl"
STEP = "step"

REWARD_MEAN = "train/reward_mean"
"""Mean reward of the step's rollouts (all samples of all groups)."""
FAILED_EPISODES = "train/failed_episodes"
"""Episodes of the step that failed twice (service or generator errors) and were left out;
more than `trainer.rollout.max_failed_share` of them stops the run."""
VAL_FAILED_EPISODES = "val/failed_episodes"
"""The same for a validation."""
ACCURACY_PREFIX = "train/accuracy/"
"""+ category: share of the step's rollouts of that category the official checker passed."""
TAG_FRAC_PREFIX = "train/tag_frac/"
"""+ tag: share of the step's diagnosed turns carrying the tag (they sum to 1; `tag_fractions`)."""
PAPER_LABEL_PREFIX = "train/paper_label/"
"""+ label: share of the step's failed rollouts carrying that label of the paper's Table 5
(seal.tocf.tags.PAPER_LABELS; they sum to 1 with `UNLABELLED`); absent when none failed."""
UNLABELLED = "unlabelled"
"""The label-share name of failed episodes without a label (the service ended them, or the
failing turn's check raised: seal.bfcl.diagnosis.paper_label)."""
TAG_WEIGHT_PREFIX = "tocf/weight/"
"""+ tag: the live dynamic tag weight after the step's update (`CapabilityState.metrics`)."""
APATCH_MEAN_SCALE = "apatch/mean_scale"
"""Mean A-Patch advantage scale over the step's samples (`apply_apatch`)."""
APATCH_SCALED_FRAC = "apatch/scaled_frac"
"""Share of the step's samples whose advantages A-Patch changed (`scaled_count` / samples)."""
# The loss keys are verl's own names (seal.algos.loss keeps them), so that runs of the local
# trainer and of verl compare key for key.
LOSS_POLICY = "actor/pg_loss"
"""Clipped policy-gradient loss, averaged over the step's mini-batches."""
LOSS_KL = "actor/kl_loss"
"""KL loss to the reference policy (low_var_kl), averaged over the step's mini-batches."""
TIME_ROLLOUT_S = "time/rollout_s"
"""Seconds spent rolling out the step's episodes (generation and environment)."""
TIME_UPDATE_S = "time/update_s"
"""Seconds from the end of the rollout to the end of the policy update."""


def accuracy_key(category: str) -> str:
    return ACCURACY_PREFIX + category


def tag_frac_key(tag: str) -> str:
    return TAG_FRAC_PREFIX + tag


def paper_label_key(label: str | None, prefix: str = PAPER_LABEL_PREFIX) -> str:
    return prefix + (label or UNLABELLED)


def label_fractions(
    labels: Iterable[str | None], prefix: str = PAPER_LABEL_PREFIX
) -> dict[str, float]:
    """`<prefix><label>` shares of the failed episodes' labels (None: `UNLABELLED`)."""
    counts = Counter(label or UNLABELLED for label in labels)
    total = sum(counts.values())
    return {prefix + label: count / total for label, count in sorted(counts.items())}


def tag_weight_key(tag: str) -> str:
    return TAG_WEIGHT_PREFIX + tag


def tag_fractions(sample_tags: Iterable[Sequence[str]]) -> dict[str, float]:
    """`train/tag_frac/<tag>` of a step from each rollout's turn tags."""
    counts = Counter(tag for tags in sample_tags for tag in tags)
    total = sum(counts.values())
    return {tag_frac_key(tag): count / total for tag, count in sorted(counts.items())}


class MetricsFormatError(ValueError):
    """A metrics log that cannot be read; the message names the file and line."""


def _complete_lines(path: Path) -> list[tuple[int, bytes]]:
    """Numbered lines of the file, without a last line that a crash cut short."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    # Whatever follows the last newline is either nothing or an unfinished write.
    return list(enumerate(lines[:-1], start=1))


def read_metrics(path: str | Path) -> list[dict[str, float | None]]:
    """The rows of a metrics log (a file, or a run directory holding ``metrics.jsonl``)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILENAME
    rows: list[dict[str, float | None]] = []
    for line_number, line in _complete_lines(path):
        where = f"{path}:{line_number}"
        try:
            row = json.loads(line)
        except ValueError as error:
            raise MetricsFormatError(f"{where}: not JSON ({error})") from None
        if not isinstance(row, dict) or not isinstance(row.get(STEP), int):
            raise MetricsFormatError(f"{where}: expected an object with an integer 'step'")
        if rows and row[STEP] <= rows[-1][STEP]:
            raise MetricsFormatError(
                f"{where}: step {row[STEP]} does not follow step {rows[-1][STEP]}"
            )
        rows.append(row)
    return rows


def series(rows: Sequence[Mapping], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of one metric, over the rows that have it (null becomes NaN)."""
    steps, values = [], []
    for row in rows:
        if key in row:
            steps.append(row[STEP])
            values.append(math.nan if row[key] is None else float(row[key]))
    return steps, values


def names_under(rows: Sequence[Mapping], prefix: str) -> list[str]:
    """The names that follow `prefix` in any row's keys, e.g. the tags of `tocf/weight/`."""
    return sorted({key[len(prefix) :] for row in rows for key in row if key.startswith(prefix)})


def _json_value(key: str, value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"metric {key!r} must be a number, not {type(value).__name__}")
    if isinstance(value, Integral):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else None


class MetricsWriter:
    """Appends one row per training step to ``RUN_DIR/metrics.jsonl``; see the module doc."""

    def __init__(self, run_dir: str | Path, resume_step: int | None = None):
        self.path = Path(run_dir) / METRICS_FILENAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.last_step: int | None = None
        if resume_step is None:
            if self.path.exists() and self.path.stat().st_size:
                raise FileExistsError(
                    f"{self.path} holds the metrics of an earlier run: resume it with "
                    "resume_step or start the run in a new directory"
                )
        elif self.path.exists():
            self._truncate_after(resume_step)
        self._file = self.path.open("a", encoding="utf-8")

    def _truncate_after(self, resume_step: int) -> None:
        kept = [row for row in read_metrics(self.path) if row[STEP] <= resume_step]
        if kept:
            self.last_step = kept[-1][STEP]
        # Rewritten atomically: a crash now must not lose the rows kept.
        write_text_atomic(self.path, "".join(json.dumps(row) + "\n" for row in kept))

    def write(self, step: int, metrics: Mapping[str, object]) -> None:
        """Append the row of `step`, which must come after every step already logged."""
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"step {step} logged after step {self.last_step}")
        if STEP in metrics:
            raise ValueError(f"'{STEP}' is the row's key, not a metric name")
        row = {STEP: int(step), **{key: _json_value(key, v) for key, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        # One fsync per training step (minutes apart) costs nothing and survives a power cut.
        os.fsync(self._file.fileno())
        self.last_step = step

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
