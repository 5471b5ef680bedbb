"""Where the trainer's per-step metrics go: metrics.jsonl (read by the report), the
console, and Weights & Biases when it is installed and not disabled (offline without a
key, so a run never needs credentials)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from seal.runs.metrics_log import MetricsWriter


class MetricsLogger:
    def __init__(self, run_dir: Path, cfg, resume_step: int | None = None):
        self.jsonl = MetricsWriter(run_dir, resume_step=resume_step)
        self.wandb_run = None
        mode = cfg.logging.wandb
        if mode != "disabled":
            try:
                import wandb
            except ImportError:
                raise RuntimeError(
                    f"logging.wandb={mode!r} but wandb is not installed; "
                    "pip install wandb, or set logging.wandb=disabled"
                ) from None
            if mode == "online" and not os.environ.get("WANDB_API_KEY"):
                mode = "offline"
            self.wandb_run = wandb.init(
                project=cfg.logging.project, dir=str(run_dir), mode=mode, config=_plain(cfg),
                name=run_dir.name, resume="allow",
            )  # fmt: skip

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self.jsonl.write(step, metrics)
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)

    def close(self) -> None:
        self.jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def _plain(cfg) -> dict:
    try:
        return asdict(cfg)
    except TypeError:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(cfg, resolve=True)
