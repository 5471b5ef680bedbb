"""SEAL's hooks around a trainer's GRPO step and the run state they keep, as one object.

The local and the verl trainer each run their own rollouts, GRPO advantages and actor
update; around them SEAL does the same in both, here: the capability state (opened,
restored, saved with checkpoints), its epoch windows, the reweighting of a step's
advantages (A-Patch), the failure profile pushed to the service, and the one record of
the best validated step. Each method: docs/design.md, "The paper's recipe".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from seal.atomic_file import StateFileError, read_json, write_json_atomic
from seal.rollout.env_client import EnvClientSettings, push_profile
from seal.runs.metrics_log import layer_metrics, outcome_metrics
from seal.tocf.state import STATE_FILENAME, CapabilityState, open_capability_state
from seal.tocf.summary import write_epoch_summary
from seal.trainer.reweight import SampleOutcome, observe_and_reweight, record_interface
from seal.trainer_config import BEST_RULES, TrainerConfig

BEST_FILE = "seal_best.json"
"""The best validated step so far and its metric (`SealHooks.best`), in each checkpoint."""


class SealHooks:
    """What SEAL adds around each trainer's own GRPO step (module docstring)."""

    def __init__(
        self,
        run_dir: Path,
        cfg: TrainerConfig,
        env_url: str,
        client: EnvClientSettings | None = None,
        token: str | None = None,
    ):
        """`token`: the service's bearer token (None: $SEAL_ENV_TOKEN, set by the launcher)."""
        self.run_dir, self.cfg = Path(run_dir), cfg
        self.env_url, self.client, self.token = env_url, client or EnvClientSettings(), token
        self.capability: CapabilityState | None = None
        """Opened by `start` or `restore`."""
        self.capability_path = self.run_dir / STATE_FILENAME
        self.served_profile: dict | None = None
        """The failure profile last pushed to the service (None: never pushed)."""
        self.rule = BEST_RULES[cfg.checkpoint.best_rule]
        self.best: dict = {
            "step": None, "rule": self.rule.name, "metric": self.rule.metric, "value": None
        }  # fmt: skip
        """The best validated step so far by the run's rule (`trainer.checkpoint.best_rule`)
        and its `metric`'s value."""

    # --- the capability state ----------------------------------------------------------

    def start(self) -> None:
        """A fresh run's capability state; refused if the run directory holds one."""
        self.capability, self.capability_path = open_capability_state(
            self.run_dir, self.cfg.capability, resume=False
        )

    def save(self, checkpoint: Path) -> None:
        """Write the capability state and the best step so far into `checkpoint` (a folder)."""
        self.capability.save(checkpoint / STATE_FILENAME)
        write_json_atomic(checkpoint / BEST_FILE, self.best)

    def restore(self, checkpoint: Path) -> None:
        """The capability state and the best step so far of the checkpoint in `checkpoint`
        (a folder, written by `save`)."""
        # The checkpoint's state is the one to continue from: the run directory's copy is
        # saved every step, so it may be ahead of the checkpoint (or damaged).
        self.capability = CapabilityState.load(checkpoint / STATE_FILENAME, self.cfg.capability)
        self.capability.save(self.capability_path)
        best = read_json(checkpoint / BEST_FILE, "best validated step")
        if isinstance(best, dict) and "rule" not in best and best.get("metric") == "val/average":
            best["rule"] = "average"  # written before the rule was a key: the only one then
        if not isinstance(best, dict) or set(best) != set(self.best):
            raise StateFileError(
                f"{checkpoint / BEST_FILE}: expected an object with keys {sorted(self.best)}, "
                f"got {best!r:.200}"
            )
        if best["rule"] != self.rule.name:
            raise StateFileError(
                f"{checkpoint / BEST_FILE}: its best step was chosen by the {best['rule']} "
                f"rule, this run's trainer.checkpoint.best_rule is {self.rule.name}"
            )
        self.best = best

    def begin_epoch(self, epoch: int) -> None:
        """Open `epoch`'s window, summarising the previous epoch's first."""
        if epoch > self.capability.epoch:
            self.finish()
        self.capability.start_epoch(epoch)

    def finish(self) -> None:
        """The summary of the current epoch's window (tocf/epoch_N.json)."""
        write_epoch_summary(self.capability, self.run_dir / "tocf")

    # --- the step ------------------------------------------------------------------------

    def reweight(
        self,
        samples: Sequence[SampleOutcome],
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        step: int,
        epoch: int,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The capability state observes the samples and moves the dynamic tag weights;
        A-Patch scales each sample's advantages by the weights of its tags. Returns the
        patched advantages and the step's SEAL, outcome and layer metrics; the step's
        interface state is recorded beside its failure profiles."""
        patched, metrics = observe_and_reweight(
            self.capability, samples, advantages, response_mask, self.cfg.apatch,
            step=step, epoch=epoch,
        )  # fmt: skip
        row = record_interface(self.run_dir, step, samples, self.served_profile, self.capability)
        return patched, metrics | outcome_metrics(samples) | layer_metrics(row)

    def close_loop(self) -> None:
        """After the step: save the capability state; the service's guidelines follow the
        current failure profile (`trainer.rollout.push_profile`)."""
        self.capability.save(self.capability_path)
        if self.cfg.rollout.push_profile:
            self.push_profile()

    def push_profile(self) -> None:
        """Send the capability state's failure profile to the service."""
        profile = self.capability.failure_profile()
        push_profile(self.env_url, profile, self.token, self.client)
        self.served_profile = profile

    # --- validation ----------------------------------------------------------------------

    def validated(self, step: int, metrics: dict[str, float]) -> bool:
        """Take a validation's metrics: True when `step` is the best so far (`best`) by the
        run's rule (its tie rule included), as the run's report stars it
        (seal/report/summary.py)."""
        key = self.rule.metric
        if key not in metrics:
            raise KeyError(
                f"the best-step rule {self.rule.name!r} needs {key!r}, which this "
                f"validation lacks: {sorted(metrics)}"
            )
        print(
            f"[seal] validation at step {step}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        )
        if not self.rule.improves(metrics[key], self.best["value"]):
            return False
        self.best |= {"step": step, "value": metrics[key]}
        return True
