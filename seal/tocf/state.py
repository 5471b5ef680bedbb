"""The capability state: what the agent can and cannot do yet, learned from its rollouts.

Each finished trajectory is observed once (`observe`). The state keeps pass counts and
reward sums per category, tag, (category, tag), (turn position, tag) and task, twice: for
the whole run and for the current epoch's window, which `start_epoch` resets. From the
window it derives the dynamic tag weights A-Patch uses (`update_weights`, once per trainer
step) and the failure profile the environment service turns into guidelines
(`failure_profile`, format in `seal.tocf.profile`).

The state lives in its run directory (`open_capability_state`): a new run refuses a
directory that already holds a state, and resuming one is asked for explicitly, so a
state left by an unrelated earlier run is never picked up by accident.
`load_failure_profile` computes the profile straight from a saved file; nothing here
imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from seal.tocf.atomic_json import write_json_atomic
from seal.tocf.profile import build_failure_profile
from seal.tocf.tags import BASE_TAG_WEIGHTS, EXCLUDED_TAGS, PASS
from seal.tocf.tally import TallyTables
from seal.tocf.weights import ema_step, target_tag_weight

STATE_FILENAME = "capability_state.json"
STATE_FORMAT_VERSION = 1


@dataclass
class CapabilityConfig:
    """Dynamic tag weights. Defaults are the paper's values."""

    alpha: float = 1.0
    """Gain of prevalence x stagnation x confidence on a tag's target weight. Default 1.0."""
    beta: float = 0.25
    """EMA step of the live weight toward its target, per update. Default 0.25."""
    count_saturation: int = 32
    """Window count at which a tag's statistics are fully trusted (confidence 1). Default 32."""
    min_weight: float = 0.5
    """Lower clamp of a target weight. Default 0.5."""
    max_weight: float = 2.0
    """Upper clamp of a target weight. Default 2.0."""
    base_weights: dict[str, float] = field(default_factory=lambda: dict(BASE_TAG_WEIGHTS))
    """Starting weight and target baseline per tag. Default `tags.BASE_TAG_WEIGHTS`."""
    fixed_tags: tuple[str, ...] = (PASS,)
    """Tags that keep their base weight whatever the statistics say. Default ("pass",)."""


@dataclass
class TrajectoryOutcome:
    """One finished, verified and diagnosed trajectory."""

    category: str  # BFCL category, e.g. "multi_turn_base"
    task_id: str
    reward: float
    success: bool  # the official checker passed the whole episode
    tags: list[str]  # one failure tag per ground-truth turn, in turn order
    step: int
    epoch: int


class CapabilityState:
    def __init__(self, config: CapabilityConfig | None = None):
        self.config = config or CapabilityConfig()
        self.weights: dict[str, float] = dict(self.config.base_weights)
        self.run = TallyTables()
        self.window = TallyTables()
        self.step = 0
        self.epoch = 0
        self.num_weight_updates = 0

    def start_epoch(self, epoch: int) -> None:
        """Open the window of `epoch`; calling it again for the current epoch changes nothing,
        so a resumed run may repeat it safely."""
        if epoch < self.epoch:
            raise ValueError(f"epoch {epoch} is before the state's epoch {self.epoch}")
        if epoch > self.epoch:
            self.epoch = epoch
            self.window = TallyTables()

    def observe(self, outcome: TrajectoryOutcome) -> None:
        if outcome.epoch != self.epoch:
            raise ValueError(
                f"trajectory {outcome.task_id} is from epoch {outcome.epoch}, the window is "
                f"epoch {self.epoch}: call start_epoch({outcome.epoch}) first"
            )
        for tables in (self.run, self.window):
            tables.add(
                outcome.category, outcome.task_id, outcome.tags, outcome.success, outcome.reward
            )
        self.step = max(self.step, outcome.step)

    def update_weights(self) -> dict[str, float]:
        """Move every non-fixed tag weight one EMA step toward its target from the window."""
        cfg = self.config
        num_turns = self.window.num_turns
        for tag, base in cfg.base_weights.items():
            if tag in cfg.fixed_tags or tag in EXCLUDED_TAGS:
                continue
            tally = self.window.by_tag.get(tag)
            count = tally.count if tally else 0
            target = target_tag_weight(
                base,
                share=count / num_turns if num_turns else 0.0,
                mean_reward=tally.mean_reward if tally else 0.0,
                count=count,
                alpha=cfg.alpha,
                count_saturation=cfg.count_saturation,
                min_weight=cfg.min_weight,
                max_weight=cfg.max_weight,
            )
            self.weights[tag] = ema_step(self.weights.get(tag, base), target, cfg.beta)
        self.num_weight_updates += 1
        return dict(self.weights)

    def failure_profile(
        self,
        min_share: float = 0.10,
        min_count: int = 8,
        max_mean_reward: float = 0.6,
        top_k: int = 3,
    ) -> dict:
        """Prevalent, unsolved failure tags of the current window (`seal.tocf.profile`)."""
        return build_failure_profile(
            self.window.by_tag,
            step=self.step,
            epoch=self.epoch,
            min_share=min_share,
            min_count=min_count,
            max_mean_reward=max_mean_reward,
            top_k=top_k,
        )

    def metrics(self) -> dict[str, float]:
        """Flat scalars for the logger: window pass rates, tag shares and live weights."""
        out: dict[str, float] = {}
        window = self.window
        if window.num_trajectories:
            passes = sum(t.passes for t in window.by_category.values())
            out["tocf/pass_rate/all"] = passes / window.num_trajectories
        for category, tally in window.by_category.items():
            out[f"tocf/pass_rate/{category}"] = tally.pass_rate
        for tag, tally in window.by_tag.items():
            out[f"tocf/tag_share/{tag}"] = tally.count / window.num_turns
        for tag, weight in self.weights.items():
            out[f"tocf/weight/{tag}"] = weight
        return out

    def to_dict(self) -> dict:
        return {
            "version": STATE_FORMAT_VERSION,
            "config": asdict(self.config),
            "weights": self.weights,
            "run": self.run.to_dict(),
            "window": self.window.to_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "num_weight_updates": self.num_weight_updates,
        }

    @classmethod
    def from_dict(cls, data: dict, config: CapabilityConfig | None = None) -> CapabilityState:
        """Restore a state; `config` replaces the saved one when given."""
        if data.get("version") != STATE_FORMAT_VERSION:
            raise ValueError(
                f"capability state version {data.get('version')!r}, expected {STATE_FORMAT_VERSION}"
            )
        if config is None:
            saved = dict(data["config"])
            saved["fixed_tags"] = tuple(saved["fixed_tags"])
            config = CapabilityConfig(**saved)
        state = cls(config)
        state.weights = dict(data["weights"])
        state.run = TallyTables.from_dict(data["run"])
        state.window = TallyTables.from_dict(data["window"])
        state.step = data["step"]
        state.epoch = data["epoch"]
        state.num_weight_updates = data["num_weight_updates"]
        return state

    def save(self, path: str | Path) -> Path:
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, config: CapabilityConfig | None = None) -> CapabilityState:
        with open(path) as f:
            return cls.from_dict(json.load(f), config)


def open_capability_state(
    run_dir: str | Path, config: CapabilityConfig | None = None, *, resume: bool = False
) -> tuple[CapabilityState, Path]:
    """The state of the run in `run_dir` and the file it saves to.

    A fresh run needs a directory without a state; `resume=True` needs one with a state.
    Either mismatch is an error, never a silent fresh start or a silent takeover.
    """
    path = Path(run_dir) / STATE_FILENAME
    if resume:
        if not path.exists():
            raise FileNotFoundError(f"resume asked for, but there is no capability state at {path}")
        return CapabilityState.load(path, config), path
    if path.exists():
        raise FileExistsError(
            f"{path} holds the capability state of an earlier run: resume it explicitly "
            "or start the run in a new directory"
        )
    return CapabilityState(config), path


def load_failure_profile(path: str | Path, **thresholds) -> dict:
    """The failure profile of a saved state file; `thresholds` as in `failure_profile`."""
    return CapabilityState.load(path).failure_profile(**thresholds)
