"""Per-step training metrics: an append-only JSON Lines log in the run directory.

``RUN_DIR/metrics.jsonl`` holds one JSON object per training step, in ascending step order:
``{"step": 12, "train/reward_mean": 0.31, "loss/policy": -0.02, ...}``, flat names, numbers,
``null`` for a non-finite value. Both trainers write it through ``MetricsWriter`` (a resume
drops the rows past its checkpoint; optionally mirrored to one wandb run per run
directory), and the metric names are made here and nowhere else. The format, resume and
wandb rules: docs/runs.md, "What each run records".
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Integral, Real
from pathlib import Path

from seal.atomic_file import write_text_atomic
from seal.bfcl.tasks import CATEGORIES

METRICS_FILENAME = "metrics.jsonl"
STEP = "step"

REWARD_MEAN = "train/reward_mean"
"""Mean reward of the step's rollouts (all samples of all groups)."""
ACCURACY = "train/accuracy"
"""Share of the step's rollouts the official checker passed."""
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
(seal.bfcl.tags.PAPER_LABELS; they sum to 1 with `UNLABELLED`); absent when none failed."""
UNLABELLED = "unlabelled"
"""The label-share name of failed episodes without a label (the service ended them, or the
failing turn's check raised: seal.bfcl.diagnosis.paper_label)."""
TAG_WEIGHT_PREFIX = "tocf/weight/"
"""+ tag: the live dynamic tag weight after the step's update (`CapabilityState.metrics`)."""
APATCH_ACTIVE = "apatch/active"
"""1 when A-Patch scaled the step's advantages, 0 when it was off (`apatch.enable` false, or
its warm-up) (`apply_apatch`)."""
APATCH_MEAN_SCALE = "apatch/mean_scale"
"""Mean factor A-Patch multiplied the step's samples' advantages by, 1 for a sample it left
unchanged (a zero advantage: its group's rewards were equal) (`apply_apatch`); only while
active."""
APATCH_SCALED_FRAC = "apatch/scaled_frac"
"""Share of the step's samples whose advantages A-Patch changed (`scaled_count` / samples);
only while active."""
LAYER_PREFIX = "layer/"
"""+ observation layer (seal.runs.interface_log.LAYERS): the share of the step's training
episodes that had it on (`layer_metrics`); 0 when off."""
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
PEAK_GPU_ROLLOUT_GB = "perf/rollout_peak_gpu_gb"
"""Peak GPU memory the step's rollout held (GB, torch's allocator; the local trainer on
CUDA only): the policy, its KV cache and generation buffers."""
PEAK_GPU_UPDATE_GB = "perf/update_peak_gpu_gb"
"""Peak GPU memory from the end of the rollout to the end of the update (GB, local trainer
on CUDA only): the log-prob passes, activations, gradients and optimizer state."""
GENERATIONS_MEAN = "train/generations_mean"
"""Model generations per episode, mean over the step's rollouts (local trainer)."""
RESPONSE_TOKENS_MEAN = "train/response_tokens_mean"
"""Tokens of the response (generations and observations) per episode, mean (local
trainer)."""
TRAINED_RESPONSE_TOKENS_MEAN = "train/trained_response_tokens_mean"
"""The same after the training cut (`trainer.loss.trained_response_tokens`): what the
update sees, mean (local trainer)."""
PROMPT_TOKENS_MEAN = "train/prompt_tokens_mean"
"""Tokens of the first prompt per episode, mean (local trainer): the training layers
(guidelines above all) show here, their text is in the prompt."""
VAL_AVERAGE = "val/average"
"""Validation pass rate averaged over the categories (the default best metric)."""
VAL_OVERALL = "val/overall"
"""Validation tasks passed / validated."""
VAL_PREFIX = "val/"
"""+ category: the validation pass rate of that category."""
VAL_PAPER_LABEL_PREFIX = "val/paper_label/"
"""+ label: as `train/paper_label/`, over the validation's failed episodes."""


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


def layer_metrics(interface_row: Mapping) -> dict[str, float]:
    """`layer/<name>` of a step from its interface record (seal.runs.interface_log)."""
    episodes = interface_row["episodes"]
    return {
        LAYER_PREFIX + name: (count / episodes if episodes else 0.0)
        for name, count in interface_row["layers"].items()
    }


def tag_weight_key(tag: str) -> str:
    return TAG_WEIGHT_PREFIX + tag


def tag_fractions(sample_tags: Iterable[Sequence[str]]) -> dict[str, float]:
    """`train/tag_frac/<tag>` of a step from each rollout's turn tags."""
    counts = Counter(tag for tags in sample_tags for tag in tags)
    total = sum(counts.values())
    return {tag_frac_key(tag): count / total for tag, count in sorted(counts.items())}


def outcome_metrics(samples: Sequence) -> dict[str, float]:
    """Reward, accuracy overall and per category, tag fractions of a training batch, and
    the paper's label distribution over its failed samples; each sample has `reward`,
    `accuracy`, `category`, `failure_tags` and `paper_label` (seal.trainer.reweight)."""
    metrics = {
        REWARD_MEAN: sum(s.reward for s in samples) / len(samples),
        ACCURACY: sum(s.accuracy for s in samples) / len(samples),
    }
    for category in sorted({s.category for s in samples}):
        group = [s for s in samples if s.category == category]
        metrics[accuracy_key(category)] = sum(s.accuracy for s in group) / len(group)
    metrics |= tag_fractions(s.failure_tags for s in samples)
    failed = [s.paper_label for s in samples if not s.accuracy]
    if failed:
        metrics |= label_fractions(failed)
    return metrics


def episode_metrics(samples: Sequence, trained: Sequence) -> dict[str, float]:
    """Sizes of the local trainer's episodes (seal.rollout.driver.EpisodeSample) and of
    what it trained of them (`trained`: the same after the training cut)."""
    n = len(samples)
    return {
        GENERATIONS_MEAN: sum(s.num_generations for s in samples) / n,
        RESPONSE_TOKENS_MEAN: sum(len(s.response_ids) for s in samples) / n,
        TRAINED_RESPONSE_TOKENS_MEAN: sum(len(s.response_ids) for s in trained) / n,
        PROMPT_TOKENS_MEAN: sum(len(s.prompt_ids) for s in samples) / n,
    }


def validation_metrics(records: Sequence) -> dict[str, float]:
    """A validation's logged metrics from its records (seal.runs.records): `val/<category>`
    pass rates, `val/average` (the paper's mean of the categories; a validation subset
    averages the categories it covers), `val/overall` (passed / validated) and the paper's
    label distribution over the failed episodes."""
    rates = {}
    for category in CATEGORIES:
        scores = [record.score for record in records if record.data_source == category]
        if scores:
            rates[VAL_PREFIX + category] = Fraction(sum(scores), len(scores))
    metrics = {key: float(rate) for key, rate in rates.items()}
    # Averaged exactly, so equal averages are equal floats whatever the order of the rates:
    # the best step's tie rule (the later step) then agrees with the report's.
    metrics[VAL_AVERAGE] = float(sum(rates.values(), Fraction(0)) / len(rates))
    metrics[VAL_OVERALL] = sum(record.score for record in records) / len(records)
    failed = [record.paper_label for record in records if not record.score]
    if failed:
        metrics |= label_fractions(failed, VAL_PAPER_LABEL_PREFIX)
    return metrics


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


@dataclass(frozen=True)
class WandbSettings:
    """Where the rows also go in Weights & Biases (the local trainer's `trainer.logging`)."""

    mode: str
    """offline | online (offline when $WANDB_API_KEY is unset) | disabled."""
    project: str
    config: dict = field(default_factory=dict)
    """The run's settings, shown beside its curves."""


WANDB_ID_FILENAME = "wandb_run_id.txt"


def wandb_run_id(run_dir: str | Path) -> str:
    """The wandb run id of the run in `run_dir`: made at its first start, then read."""
    path = Path(run_dir) / WANDB_ID_FILENAME
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    run_id = secrets.token_hex(8)  # wandb's ids: letters and digits, at most 64
    write_text_atomic(path, run_id)
    return run_id


def _open_wandb(run_dir: Path, settings: WandbSettings):
    """The wandb run of `run_dir`: created at the first start, resumed after."""
    try:
        import wandb
    except ImportError:
        raise RuntimeError(
            f"logging.wandb={settings.mode!r} but wandb is not installed; "
            "pip install wandb, or set logging.wandb=disabled"
        ) from None
    mode = settings.mode
    if mode == "online" and not os.environ.get("WANDB_API_KEY"):
        mode = "offline"  # a run never needs credentials; `wandb sync` uploads it later
    return wandb.init(
        project=settings.project, dir=str(run_dir), mode=mode, config=settings.config,
        name=run_dir.name, id=wandb_run_id(run_dir), resume="allow",
    )  # fmt: skip


class MetricsWriter:
    """Appends one row per training step to ``RUN_DIR/metrics.jsonl`` (and to wandb with
    `wandb` settings whose mode is not "disabled"); see the module doc."""

    def __init__(
        self,
        run_dir: str | Path,
        resume_step: int | None = None,
        wandb: WandbSettings | None = None,
    ):
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
        self.wandb_run = None
        if wandb is not None and wandb.mode != "disabled":
            self.wandb_run = _open_wandb(self.path.parent, wandb)
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
        if self.wandb_run is not None:
            self.wandb_run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._file.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
