"""The failure profile: the few prevalent, unsolved failure tags the environment service
turns into diagnostic guidelines (the environment half of SEAL's closed loop).

The profile is a plain JSON-able dict, the contract between trainer and service:

    {
      "step": 12,            # last trainer step observed
      "epoch": 1,            # epoch of the window the figures come from
      "num_turns": 1024,     # diagnosed turns in that window (the share's denominator)
      "tags": [              # sorted by share, largest first; at most top_k entries
        {"tag": "state_mismatch", "share": 0.31, "count": 317, "mean_reward": 0.12},
        ...
      ]
    }

A tag is listed when it is a failure tag (`FAILURE_TAGS`), its share of the window's
turns is at least `min_share`, it was seen at least `min_count` times and the mean reward
of its trajectories is below `max_mean_reward` (still unsolved).
"""

from __future__ import annotations

from seal.tocf.tags import FAILURE_TAGS
from seal.tocf.tally import Tally


def build_failure_profile(
    by_tag: dict[str, Tally],
    *,
    step: int,
    epoch: int,
    min_share: float = 0.10,
    min_count: int = 8,
    max_mean_reward: float = 0.6,
    top_k: int = 3,
) -> dict:
    num_turns = sum(t.count for t in by_tag.values())
    entries = []
    for tag in FAILURE_TAGS:
        tally = by_tag.get(tag)
        if tally is None or tally.count < min_count:
            continue
        share = tally.count / num_turns
        if share >= min_share and tally.mean_reward < max_mean_reward:
            entries.append(
                {"tag": tag, "share": share, "count": tally.count, "mean_reward": tally.mean_reward}
            )
    entries.sort(key=lambda e: (-e["share"], e["tag"]))
    return {"step": step, "epoch": epoch, "num_turns": num_turns, "tags": entries[:top_k]}
