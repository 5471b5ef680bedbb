"""The original release's capability-state file: recognised, checked, and turned into a
failure profile by the release's guideline selection.

The release's trainer persists `window_tags` / `total_tags` (tag -> {count, reward_sum}) and
per category `window_category_tags` / `total_category_tags` ("category::tag" -> the same).
The service reads one only when its operator names it at start (`--capability-state`, read
by profile_source.py), never because a request says so; the release protocol's
`diagnostic_evolution` thresholds then select guidelines as the release did
(release_protocol/params.py). Pure functions, shared by the engine and the release protocol;
errors are ValueErrors (the caller names the file).
"""

from __future__ import annotations

from typing import Any

from env_service.interface_layers import PAPER_GUIDELINES
from seal.bfcl import tags as T

TAG_TABLES = ("window_tags", "total_tags")
CATEGORY_TABLES = ("window_category_tags", "total_category_tags")

# Tags the release never turns into guidelines.
_NO_GUIDELINE = {T.CHECKER_ERROR, T.GT_ERROR, T.PASS, T.CORRECT_ABSTENTION, "unknown"}

DEFAULT_PREVALENCE = 0.10
DEFAULT_REWARD = 0.6
DEFAULT_MIN_COUNT = 8


def is_release_state(data: object) -> bool:
    """Whether parsed JSON is the release's capability state (not this project's)."""
    return isinstance(data, dict) and bool(set(TAG_TABLES) & data.keys())


def check_release_state(data: dict) -> None:
    """Every table a selection may read holds {tag: {count, reward_sum or reward_mean}}
    with numbers; raises ValueError naming the first entry that does not."""
    for table in (*TAG_TABLES, *CATEGORY_TABLES):
        entries = data.get(table) or {}
        if not isinstance(entries, dict):
            raise ValueError(f"{table} is a {type(entries).__name__}, not an object")
        for tag, stats in entries.items():
            _number(stats, "count", f"{table}[{tag!r}]")
            if "reward_sum" in stats:
                _number(stats, "reward_sum", f"{table}[{tag!r}]")
            else:
                _number(stats, "reward_mean", f"{table}[{tag!r}]")


def release_profile(
    data: dict,
    category: str | None,
    *,
    prevalence_threshold: float = DEFAULT_PREVALENCE,
    reward_threshold: float = DEFAULT_REWARD,
    min_tag_count: float = DEFAULT_MIN_COUNT,
    category_tags: bool = False,
) -> dict:
    """The failure profile the release's guideline selection makes from its state
    (`data`, already checked): prevalent, unsolved failure tags, most pressing first."""
    source = data.get("window_tags") or data.get("total_tags") or {}
    if category_tags and category is not None:
        by_category = data.get("window_category_tags") or data.get("total_category_tags") or {}
        mine = {
            key.split("::", 1)[1]: stats
            for key, stats in by_category.items()
            if "::" in key and key.split("::", 1)[0] == category
        }
        source = mine or source
    counts = {tag: stats["count"] for tag, stats in source.items()}
    total = sum(n for tag, n in counts.items() if tag not in _NO_GUIDELINE)
    entries = []
    for tag, stats in source.items():
        count = counts[tag]
        if (
            tag in _NO_GUIDELINE
            or tag not in PAPER_GUIDELINES
            or count < min_tag_count
            or not total
        ):
            continue
        share = count / total
        mean = _mean_reward(stats, count)
        if share < prevalence_threshold or mean >= reward_threshold:
            continue
        entries.append({"tag": tag, "share": share, "count": count, "mean_reward": mean})
    # The release orders by pressure: prevalence times how unsolved the tag is.
    entries.sort(key=lambda e: (-e["share"] * (1.0 - e["mean_reward"]), e["tag"]))
    return {"tags": entries}


def _number(stats: Any, key: str, where: str) -> None:
    value = stats.get(key) if isinstance(stats, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{where} has no numeric {key!r}: {stats!r:.200}")


def _mean_reward(stats: dict, count: float) -> float:
    # The release persists reward_sum but reads reward_mean, which its file never holds, so
    # there every tag counts as unsolved (mean 0). The mean is computed here instead.
    if "reward_sum" in stats:
        return stats["reward_sum"] / count if count else 0.0
    return stats["reward_mean"]
