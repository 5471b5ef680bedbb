"""The capability state: what the agent can and cannot do yet, learned from its rollouts.

The part of SEAL both halves read (the name `tocf` is the original release's): each
trajectory's diagnosis tags are counted here, per run and per epoch window; the trainer
derives A-Patch's dynamic tag weights from the window (`update_weights`), the service's
guidelines come from its failure profile (`failure_profile`, the release's selection).
What it counts, the weight update and the profile's JSON contract: docs/design.md,
"The capability state". Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from seal.atomic_file import StateFileError, read_json, write_json_atomic
from seal.bfcl.tags import EXCLUDED_TAGS, FAILURE_TAGS, PASS
from seal.tocf.weights import BASE_TAG_WEIGHTS

STATE_FILENAME = "capability_state.json"
STATE_FORMAT_VERSION = 1


@dataclass
class CapabilityConfig:
    """Dynamic tag weights and the failure profile (the run config's
    `trainer.capability`). Defaults are the paper's values."""

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
    """Starting weight and target baseline per tag; also A-Patch's weights when its
    `weight_source` is static. Default `weights.BASE_TAG_WEIGHTS`."""
    fixed_tags: list[str] = field(default_factory=lambda: [PASS])
    """Tags that keep their base weight whatever the statistics say. Default ["pass"]."""
    profile_min_share: float = 0.10
    """A failure tag enters the profile when its share of the window's failing turns is at
    least this. Default 0.10."""
    profile_min_count: int = 8
    """... and it was seen at least this many times. Default 8."""
    profile_max_mean_reward: float = 0.6
    """... and its trajectories' mean reward is below this (still unsolved). Default 0.6."""
    profile_top_k: int = 3
    """Tags in the profile at most (most pressing first). Default 3."""


# --- tallies --------------------------------------------------------------------------


def turn_position(turn_index: int, num_turns: int) -> str:
    """Thirds of the episode (early, middle, late), the key of the per-position tallies: the
    first turn is early and, from two turns up, the last is late."""
    if not 0 <= turn_index < num_turns:
        raise ValueError(f"turn {turn_index} outside an episode of {num_turns} turns")
    span = num_turns - 1
    if 3 * turn_index < span or span == 0:
        return "early"
    if 3 * turn_index > 2 * span:
        return "late"
    return "middle"


@dataclass
class Tally:
    """How many observations, how many of them came from a successful trajectory, and
    the sum of their trajectories' rewards."""

    count: int = 0
    passes: int = 0
    reward_sum: float = 0.0

    def add(self, success: bool, reward: float) -> None:
        self.count += 1
        self.passes += int(success)
        self.reward_sum += float(reward)

    @property
    def pass_rate(self) -> float:
        return self.passes / self.count if self.count else 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.count if self.count else 0.0

    def summary(self) -> dict:
        return {
            "count": self.count,
            "passes": self.passes,
            "pass_rate": self.pass_rate,
            "mean_reward": self.mean_reward,
        }


def _tally_in(table: dict, *keys: str) -> Tally:
    for key in keys[:-1]:
        table = table.setdefault(key, {})
    return table.setdefault(keys[-1], Tally())


@dataclass
class TallyTables:
    """Trajectory-level tables (category, task) count one entry per trajectory; tag-level
    tables count one entry per ground-truth turn, carrying its trajectory's outcome."""

    by_category: dict[str, Tally] = field(default_factory=dict)
    by_task: dict[str, Tally] = field(default_factory=dict)
    by_tag: dict[str, Tally] = field(default_factory=dict)
    by_category_tag: dict[str, dict[str, Tally]] = field(default_factory=dict)
    by_position_tag: dict[str, dict[str, Tally]] = field(default_factory=dict)

    def add(
        self, category: str, task_id: str, tags: list[str], success: bool, reward: float
    ) -> None:
        _tally_in(self.by_category, category).add(success, reward)
        _tally_in(self.by_task, task_id).add(success, reward)
        for turn, tag in enumerate(tags):
            _tally_in(self.by_tag, tag).add(success, reward)
            _tally_in(self.by_category_tag, category, tag).add(success, reward)
            position = turn_position(turn, len(tags))
            _tally_in(self.by_position_tag, position, tag).add(success, reward)

    @property
    def num_trajectories(self) -> int:
        return sum(t.count for t in self.by_category.values())

    @property
    def num_turns(self) -> int:
        return sum(t.count for t in self.by_tag.values())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TallyTables:
        flat = {
            name: {k: Tally(**v) for k, v in data[name].items()}
            for name in ("by_category", "by_task", "by_tag")
        }
        nested = {
            name: {
                outer: {k: Tally(**v) for k, v in inner.items()}
                for outer, inner in data[name].items()
            }
            for name in ("by_category_tag", "by_position_tag")
        }
        return cls(**flat, **nested)


# --- the weight rule and the profile --------------------------------------------------


def target_tag_weight(
    base: float,
    share: float,
    mean_reward: float,
    count: int,
    *,
    alpha: float,
    count_saturation: int,
    min_weight: float,
    max_weight: float,
) -> float:
    """Base weight raised by prevalence x stagnation x confidence, then clamped."""
    confidence = min(1.0, count / count_saturation)
    raised = base * (1.0 + alpha * share * (1.0 - mean_reward) * confidence)
    return min(max_weight, max(min_weight, raised))


def ema_step(weight: float, target: float, beta: float) -> float:
    """One exponential-moving-average step of `weight` toward `target`."""
    return (1.0 - beta) * weight + beta * target


def build_failure_profile(
    by_tag: dict[str, Tally],
    *,
    step: int,
    epoch: int,
    min_share: float,
    min_count: int,
    max_mean_reward: float,
    top_k: int,
) -> dict:
    num_turns = sum(t.count for t in by_tag.values())
    # The paper's selection (the original release's environment): a tag's prevalence among
    # the failing turns (pass and correct abstention left out), most pressing first, where
    # pressure = prevalence x (1 - mean reward).
    failing = sum(by_tag[t].count for t in FAILURE_TAGS if t in by_tag)
    entries = []
    if not failing:
        return {"step": step, "epoch": epoch, "num_turns": num_turns, "tags": entries}
    for tag in FAILURE_TAGS:
        tally = by_tag.get(tag)
        if tally is None or tally.count < min_count:
            continue
        share = tally.count / failing
        if share >= min_share and tally.mean_reward < max_mean_reward:
            entries.append(
                {"tag": tag, "share": share, "count": tally.count, "mean_reward": tally.mean_reward}
            )
    entries.sort(key=lambda e: (-e["share"] * (1.0 - e["mean_reward"]), e["tag"]))
    return {"step": step, "epoch": epoch, "num_turns": num_turns, "tags": entries[:top_k]}


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
        by_tag = self.window.by_tag
        num_turns = sum(t.count for tag, t in by_tag.items() if tag not in EXCLUDED_TAGS)
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
        min_share: float | None = None,
        min_count: int | None = None,
        max_mean_reward: float | None = None,
        top_k: int | None = None,
    ) -> dict:
        """Prevalent, unsolved failure tags of the current window (format in the module
        docstring); the thresholds default to the config's `profile_*`."""
        cfg = self.config
        return build_failure_profile(
            self.window.by_tag,
            step=self.step,
            epoch=self.epoch,
            min_share=cfg.profile_min_share if min_share is None else min_share,
            min_count=cfg.profile_min_count if min_count is None else min_count,
            max_mean_reward=cfg.profile_max_mean_reward
            if max_mean_reward is None
            else max_mean_reward,
            top_k=cfg.profile_top_k if top_k is None else top_k,
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
            config = CapabilityConfig(**data["config"])
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
        """The state saved in `path`; a damaged or foreign file is a `StateFileError`
        that names it."""
        data = read_json(path, "capability state")
        try:
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            return cls.from_dict(data, config)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise StateFileError(
                f"{path}: not a capability state this version reads "
                f"({type(error).__name__}: {error})"
            ) from None


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
