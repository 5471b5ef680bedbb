"""The statistics of `seal-report --compare`: plain functions of score arrays.

- one run per arm, per-task outcomes 0/1: the exact McNemar test and the paired percentile
  bootstrap over tasks (`mcnemar_exact`, `bootstrap_means`);
- several runs per arm (or per-task rates): the pooled estimate over seeds and tasks
  (`pooled_score`, `pooled_difference`): a crossed seeds x tasks random-effects variance,
  Satterthwaite's degrees of freedom, Student's t;
- Holm's adjustment across the rows of one comparison (`holm`).

docs/comparing_runs.md derives each formula; tests check them by hand and against scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np

CONFIDENCE = 0.95


# --- one run per arm ---------------------------------------------------------------------


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value of `gained` tasks only the run passed against
    `lost` ones only the baseline passed: 2 x P(X <= min) for X ~ Binomial(gained + lost,
    1/2), at most 1; 1 when no task is discordant."""
    n = gained + lost
    if n == 0:
        return 1.0
    # Exact integers: the tail of 400 discordant tasks is far below float's resolution.
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def smallest_mcnemar_p(tasks: int) -> float:
    """The smallest p-value the exact McNemar test can give on `tasks` paired tasks (every
    one gained): 2 / 2^tasks, at most 1."""
    return mcnemar_exact(tasks, 0)


def tasks_for_a_test(alpha: float = 1 - CONFIDENCE) -> int:
    """The fewest paired tasks on which the exact McNemar test can reach p < alpha."""
    tasks = 1
    while smallest_mcnemar_p(tasks) >= alpha:
        tasks += 1
    return tasks


def bootstrap_means(differences: np.ndarray, resamples: int, seed: int, k: int) -> np.ndarray:
    """`resamples` means of `differences` resampled with replacement, drawn from
    default_rng([seed, k]) as scipy.stats.bootstrap draws them."""
    rng = np.random.default_rng([seed, k])
    n = len(differences)
    return differences[rng.integers(0, n, (resamples, n))].mean(axis=-1)


def percentile_interval(means: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    return float(np.percentile(means, alpha * 100)), float(np.percentile(means, (1 - alpha) * 100))


# --- Student's t ---------------------------------------------------------------------------
# scipy is not a dependency of the package (it is of the tests, which check these against
# scipy.stats.t); mpmath is (bfcl-eval's checker needs it) and has the incomplete beta.
# mpmath's precision is global and BFCL's MathAPI sets it per call (to as few as 2 digits),
# so every use here names its own.
_DIGITS = 15  # mpmath's default, a float's precision: findroot's tolerance follows it


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for T ~ Student's t with `df` degrees of freedom (df may be fractional):
    the regularized incomplete beta I_{df / (df + t^2)}(df / 2, 1 / 2)."""
    if math.isinf(df):
        return math.erfc(abs(t) / math.sqrt(2))
    x = df / (df + t * t)
    with mpmath.workdps(_DIGITS):
        return float(mpmath.betainc(df / 2, 0.5, 0, x, regularized=True))


def t_quantile(confidence: float, df: float) -> float:
    """The t with P(|T| <= t) = confidence (the two-sided critical value)."""
    alpha = 1 - confidence
    if math.isinf(df):
        with mpmath.workdps(_DIGITS):
            return float(mpmath.sqrt(2) * mpmath.erfinv(confidence))
    # p(t) falls from 1 at t = 0; bracket the root, then bisect (to float resolution).
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > alpha:
        low, high = high, high * 2
    with mpmath.workdps(_DIGITS):
        root = mpmath.findroot(
            lambda t: t_two_sided_p(float(t), df) - alpha, (low, high), solver="anderson"
        )
    return float(root)


# --- several runs per arm: the pooled estimate over seeds and tasks --------------------------


@dataclass(frozen=True)
class Stratum:
    """One category's scores in a pooled estimate: `weight` (its share of the estimate: 1
    for a category, 1/4 each for the paper's average) and per arm a runs x tasks array of
    per-task scores (0/1, or a rate when a task was sampled several times). The tasks
    (columns) are the same, in the same order, for every arm."""

    weight: float
    scores: tuple[np.ndarray, ...]
    name: str = ""
    """What the stratum is (a category), for the reader."""


@dataclass(frozen=True)
class Term:
    """One mean square of the variance and its coefficient: variance = sum(coef * value)."""

    coef: float
    value: float
    df: float


@dataclass(frozen=True)
class Pooled:
    """An estimate (a score or a difference, fractions of 1) with its standard error,
    Satterthwaite degrees of freedom, interval and t-test p-value (nan where undefined).
    The interval is cut to the values the estimate can take (`SCORE_RANGE`,
    `DIFFERENCE_RANGE`): with few runs or tasks the t interval reaches past them."""

    estimate: float
    se: float
    df: float
    low: float
    high: float
    p_value: float
    seeds_in_variance: bool
    """False when an arm has one run: the seed-to-seed variation is not in the variance."""


def _seed_terms(strata: Sequence[Stratum], arm: int, tasks_fixed: bool) -> list[Term]:
    """The arm's between-run variance of its weighted score, less the residual it double
    counts with the task term (unless tasks are fixed: then there is no task term); []
    with one run or where the seed component estimates at or below 0 (truncated at 0: it
    then adds neither variance nor degrees of freedom)."""
    runs = strata[0].scores[arm].shape[0]
    if runs < 2:
        return []
    per_run = sum(s.weight * s.scores[arm].mean(axis=1) for s in strata)
    terms = [Term(1 / runs, float(np.var(per_run, ddof=1)), runs - 1)]
    if tasks_fixed:
        return terms
    for s in strata:
        y = s.scores[arm]
        tasks = y.shape[1]
        if tasks < 2:
            continue  # no residual to separate; the task term is undefined anyway
        residual = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
        ms_e = float((residual**2).sum()) / ((runs - 1) * (tasks - 1))
        terms.append(Term(-(s.weight**2) / (runs * tasks), ms_e, (runs - 1) * (tasks - 1)))
    if sum(t.coef * t.value for t in terms) <= 0:
        return []  # the seed variance component estimates at or below 0: taken as 0
    return terms


def _task_terms(strata: Sequence[Stratum], per_task) -> list[Term]:
    """Per stratum, the variance over tasks of `per_task(stratum)` (a task's mean over
    runs, or its difference between arms) over the stratum's task count; nan terms where a
    stratum has one task (its task variance cannot be estimated)."""
    terms = []
    for s in strata:
        values = per_task(s)
        tasks = len(values)
        value = float(np.var(values, ddof=1)) if tasks > 1 else math.nan
        terms.append(Term(s.weight**2 / tasks, value, tasks - 1))
    return terms


SCORE_RANGE = (0.0, 1.0)
DIFFERENCE_RANGE = (-1.0, 1.0)
"""What a score (a pass rate) and a difference of two can be. The true value lies in it, so
an interval cut to it covers the true value exactly as often as the uncut one."""


def _pooled(
    estimate: float,
    terms: list[Term],
    seeds_in: bool,
    confidence: float,
    feasible: tuple[float, float],
) -> Pooled:
    variance = sum(t.coef * t.value for t in terms)
    if math.isnan(variance):
        return Pooled(estimate, math.nan, math.nan, math.nan, math.nan, math.nan, seeds_in)
    parts = sum((t.coef * t.value) ** 2 / t.df for t in terms if t.value)
    if variance <= 0 or parts == 0:
        # No variation estimated (e.g. every run and task alike): no interval, no t-test.
        return Pooled(estimate, 0.0, math.nan, math.nan, math.nan, math.nan, seeds_in)
    se = math.sqrt(variance)
    df = variance**2 / parts  # Satterthwaite
    half = t_quantile(confidence, df) * se
    p = t_two_sided_p(estimate / se, df)
    low, high = max(feasible[0], estimate - half), min(feasible[1], estimate + half)
    return Pooled(estimate, se, df, low, high, p, seeds_in)


def _estimate(strata: Sequence[Stratum], arm: int) -> float:
    return float(sum(s.weight * s.scores[arm].mean() for s in strata))


def pooled_score(
    strata: Sequence[Stratum], tasks_fixed: bool = False, confidence: float = CONFIDENCE
) -> Pooled:
    """One arm's score (each stratum's `scores` holds one array) with its standard error
    over seeds and tasks (over seeds only when `tasks_fixed`); the p-value tests 0."""
    seeds_in = strata[0].scores[0].shape[0] > 1
    terms = _seed_terms(strata, 0, tasks_fixed)
    if tasks_fixed and not seeds_in:
        terms = [Term(1.0, math.nan, 1)]  # one run: its run-to-run spread unknown
    if not tasks_fixed:
        terms += _task_terms(strata, lambda s: s.scores[0].mean(axis=0))
    return _pooled(_estimate(strata, 0), terms, seeds_in, confidence, SCORE_RANGE)


def pooled_difference(
    strata: Sequence[Stratum], tasks_fixed: bool = False, confidence: float = CONFIDENCE
) -> Pooled:
    """Arm 0's score minus arm 1's (each stratum's `scores` holds two arrays, tasks paired,
    runs independent), with its interval and the two-sided t-test of no difference.

    Variance: each arm's seed component (between-run variance of its score less the
    residual it double counts) over its runs, plus the variance over tasks of the paired
    per-task differences over the task count; with `tasks_fixed`, the between-run
    variances alone (Welch's test on the runs' scores)."""
    seeds_in = all(strata[0].scores[a].shape[0] > 1 for a in (0, 1))
    terms = _seed_terms(strata, 0, tasks_fixed) + _seed_terms(strata, 1, tasks_fixed)
    if tasks_fixed and not seeds_in:
        terms = [Term(1.0, math.nan, 1)]  # an arm of one run: its run-to-run spread unknown
    if not tasks_fixed:
        terms += _task_terms(strata, lambda s: s.scores[0].mean(axis=0) - s.scores[1].mean(axis=0))
    estimate = _estimate(strata, 0) - _estimate(strata, 1)
    return _pooled(estimate, terms, seeds_in, confidence, DIFFERENCE_RANGE)


# --- several rows ------------------------------------------------------------------------


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (nan entries are not tests:
    left out of the family and returned as nan). The k-th smallest of m becomes
    max over j <= k of min(1, (m - j + 1) p_(j))."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(tested)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for j, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - j) * p))
        adjusted[i] = running
    return adjusted
