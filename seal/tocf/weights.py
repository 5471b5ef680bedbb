"""The dynamic tag-weight rule (DESIGN.md section 6), as two pure functions.

A tag that is frequent, unsolved and seen often enough to trust gets a target above its
base weight; the live weight moves a fraction `beta` toward that target every step:

    target = clamp(base * (1 + alpha * share * (1 - mean_reward) * min(1, count / saturation)),
                   min_weight, max_weight)
    weight = (1 - beta) * weight + beta * target

`share` is the tag's fraction of all diagnosed turns in the current window and
`mean_reward` the mean reward of the trajectories those turns belong to.
"""


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
