"""A resume keeps the experiment: the command line may change only what cannot change it.

A resumed run continues the config its last attempt recorded (`recorded_config`:
`attempts/<latest>/config.yaml`, or `config.yaml` for a run older than attempts). The
config a resume composes (`launcher.py --resume RUN_DIR -- key=value ...`, or `--conf` and
overrides as at the start) is compared with it key by key; the keys of `RESUME_SAFE` may
differ (how long the run goes on, where it logs, where the service is), any other
difference is refused with the list of keys, recorded and new values
(`ResumeConfigChanged`), unless the launcher is told `--accept-config-change`: then the
run goes on with the new values and the attempt's record lists them
(seal/runs/run_record.py). docs/runs.md says why each safe key is safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from seal.runs.run_record import ATTEMPTS_DIR, CONFIG_FILENAME, latest_attempt

RESUME_SAFE: dict[str, str] = {
    "name": "the run's directory, which the resume names",
    "output_dir": "the same (a run directory moved elsewhere resumes there)",
    "trainer.total_steps": "how long the run goes on, not what a step does",
    "trainer.total_epochs": "the same",
    "trainer.checkpoint.resume": "the resume itself",
    "trainer.checkpoint.allow_data_order_change": "the data order's own check "
    "(data_order.json) answers for it",
    "trainer.checkpoint.save_freq": "when checkpoints are written",
    "trainer.checkpoint.keep_only_best": "which checkpoints are kept",
    "trainer.logging": "where the metrics also go (wandb)",
    "trainer.model.device": "which device of the machine runs the model (cuda:0, cuda:1)",
    "service": "where the environment service runs and how the client waits for it; the "
    "episodes it serves are set by `trainer`",
    "verl.env_url": "the address Ray's workers reach the service at",
    "verl.preflight": "the checks before the start",
    "verl.dump_advantages": "a debugging dump of what verl trained on",
    "verl.param_offload": "where FSDP keeps parameters between uses (memory, not values)",
    "verl.optimizer_offload": "where FSDP keeps the optimizer state (the same)",
}
"""Keys (or sections: every key under them) a resume may change without
`--accept-config-change`, each with why it cannot change the experiment."""

ACCEPT_FLAG = "--accept-config-change"
DATA_ORDER_KEYS = (
    "trainer.data.train_file",
    "trainer.data.max_train_tasks",
    "trainer.data.train_batch_size",
    "trainer.data.seed",
)
"""What fixes the data order: `trainer.checkpoint.allow_data_order_change` lets a resume
change them (seal/runs/data_order.py checks and records the change)."""


@dataclass(frozen=True)
class Change:
    key: str
    recorded: object
    now: object

    def __str__(self) -> str:
        return f"{self.key}: {self.recorded!r} (recorded) -> {self.now!r} (now)"


class ResumeConfigChanged(ValueError):
    """A resume's config differs from the run's recorded one in keys that change the
    experiment."""


def is_resume_safe(key: str) -> bool:
    return any(key == safe or key.startswith(safe + ".") for safe in RESUME_SAFE)


def recorded_config(run_dir: Path) -> Path | None:
    """The config the run's last attempt ran with; None when the run has none."""
    attempt = latest_attempt(run_dir)
    for path in ([attempt / CONFIG_FILENAME] if attempt else []) + [run_dir / CONFIG_FILENAME]:
        if path.exists():
            return path
    return None


def _leaves(node: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Dotted key -> value of every leaf (dicts descend; lists are values)."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


def config_changes(recorded, now) -> list[Change]:
    """Every leaf whose value differs between two composed run configs."""
    old = dict(_leaves(OmegaConf.to_container(recorded, resolve=True)))
    new = dict(_leaves(OmegaConf.to_container(now, resolve=True)))
    return [
        Change(key, old.get(key), new.get(key))
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def check_resume(recorded, now, recorded_path: Path, accept: bool) -> list[Change]:
    """The changes of `now` (the resume's composed config) from `recorded` (the run's, as
    composed from `recorded_path`) that are let through, to be recorded: all with `accept`,
    the data-order keys with `trainer.checkpoint.allow_data_order_change`; raises
    `ResumeConfigChanged` naming the others."""
    changes = [c for c in config_changes(recorded, now) if not is_resume_safe(c.key)]
    allowed = DATA_ORDER_KEYS if now.trainer.checkpoint.allow_data_order_change else ()
    refused = [c for c in changes if c.key not in allowed]
    if refused and not accept:
        run_dir = recorded_path.parent
        if run_dir.parent.name == ATTEMPTS_DIR:
            run_dir = run_dir.parent.parent
        listed = "\n  ".join(map(str, refused))
        raise ResumeConfigChanged(
            f"this resume's config differs from the run's recorded one ({recorded_path}) in "
            f"keys that change the experiment:\n  {listed}\n"
            f"Resume the run as recorded with `python launcher.py --resume {run_dir}` (with "
            "`-- key=value` for the keys a resume may change: the steps, checkpointing, "
            "logging, the service; seal/launch/resume.py lists them), or add "
            f"{ACCEPT_FLAG} to go on with these values (the attempt's record lists them)"
        )
    return changes
