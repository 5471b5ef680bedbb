"""Where a run's validation records are, and which of the paper's rows the run reproduces.

Reads a training run's directory (``validation/``, ``config.yaml`` as the launcher saves
it) or an endpoint evaluation's output directory (``seal-eval --out-dir``:
``validation/`` whose records name the model in ``extra["model"]``), or a bare directory
of ``step_*.jsonl`` files. Used by ``seal-report`` for one run and for ``--compare``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from seal.renamed_keys import rename_old_keys
from seal.report.paper import PaperResult, matching_result
from seal.report.paper_match import RowMatch, match_row
from seal.report.summary import UNRECORDED_RULE
from seal.runs.records import STEP_FILE_GLOB, ValidationRecord
from seal.trainer_config import BEST_RULES, TRAINING_JOBS, BestRule

CONFIG_FILENAME = "config.yaml"
REPORT_DIRNAME = "report"
"""Where `seal-report` writes a run's page: RUN/report/."""
DEFAULT_SPLIT = Path(__file__).resolve().parents[2] / "data" / "seal_split.json"
"""The paper's split, whose "eval" ids a run's validation steps are checked against."""


def validation_dir(run: Path) -> Path:
    """RUN/validation, or RUN itself when it holds the step files; else an error."""
    if (run / "validation").is_dir():
        return run / "validation"
    if any(run.glob(STEP_FILE_GLOB)):
        return run
    raise FileNotFoundError(f"{run}: no validation records (validation/step_*.jsonl)")


def run_config(run: Path) -> dict | None:
    """The run's saved config (RUN/config.yaml) as plain data, or None without one; keys
    renamed since it was recorded read by their new names (seal/renamed_keys.py)."""
    config = run / CONFIG_FILENAME
    if not config.exists():
        return None
    cfg = OmegaConf.to_container(OmegaConf.load(config))
    if not isinstance(cfg, dict):
        raise ValueError(f"{config}: not a mapping of config keys")
    return rename_old_keys(cfg)


def run_model(run: Path, records: list[ValidationRecord]) -> tuple[str | None, dict | None]:
    """(model, trainer section) of a training run's saved config; for an endpoint
    evaluation (no config) the model its records name and None (an untrained model)."""
    cfg = run_config(run)
    if cfg is not None and cfg.get("job") in TRAINING_JOBS:
        return cfg["trainer"]["model"]["path"], cfg["trainer"]
    models = {record.extra.get("model") for record in records} - {None}
    return (models.pop() if len(models) == 1 else None), None


def validation_subset(run: Path) -> int:
    """How many validation tasks a training run asked for (`trainer.data.max_val_tasks`;
    0: all of them, or not a training run)."""
    config = run / CONFIG_FILENAME
    if not config.exists():
        return 0
    return OmegaConf.select(OmegaConf.load(config), "trainer.data.max_val_tasks", default=0) or 0


def row_match(run: Path, records: list[ValidationRecord]) -> RowMatch | None:
    """A training run's row by its model and switches, with the row-defining keys in which
    it differs from the row's config (seal.report.paper_match); None for another model or
    method, or an evaluation of an untrained model."""
    model, trainer = run_model(run, records)
    if model is None or trainer is None:
        return None
    return match_row(run_config(run), model)


def paper_row(run: Path, records: list[ValidationRecord]) -> PaperResult | None:
    """The paper's row this run reproduces: for an evaluation of an untrained model its
    backbone's row; for a training run the row its model and switches name, when it
    equals the row's config in every row-defining key; else None."""
    model, trainer = run_model(run, records)
    if model is None:
        return None
    if trainer is None:
        return matching_result(model, None)
    match = match_row(run_config(run), model)
    return match and match.reproduced


def recorded_best_rule(config: dict | None, where: Path) -> BestRule:
    """The best-step rule a run's saved config records (`trainer.checkpoint.best_rule`);
    `UNRECORDED_RULE` for records without a training config, or one from before the key
    (its trainer chose by `best_metric`, whose only value then was `val/average`)."""
    if config is None or config.get("job") not in TRAINING_JOBS:
        return UNRECORDED_RULE
    checkpoint = config["trainer"].get("checkpoint", {})
    if "best_rule" in checkpoint:
        return BEST_RULES[checkpoint["best_rule"]]
    metric = checkpoint.get("best_metric", UNRECORDED_RULE.metric)
    if metric != UNRECORDED_RULE.metric:
        raise ValueError(f"{where}: its best step was chosen by {metric!r}, no rule of this report")
    return UNRECORDED_RULE
