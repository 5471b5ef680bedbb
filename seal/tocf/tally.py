"""Pass counts and reward sums, keyed by category, tag, turn position and task.

`Tally` is one counter; `TallyTables` is the set of tables the capability state keeps
twice (the whole run and the current epoch's window). Plain dicts of plain numbers, so a
table round-trips through JSON unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from seal.tocf.tags import turn_position


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
