"""Running one step's tool calls within the step's budgets, wherever the backends live.

`run_calls` is a generator that runs one call per `next()`: a worker process
(env_service/worker.py) interleaves the steps and verifications of all its episodes one
call at a time, so one costly message delays another episode's step by at most one call
of its own, never by the whole message; without workers (env_service/in_process.py)
the same job runs to its end in the service's process. The budgets: `StepBudget`.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass

from seal.bfcl.backends import Backends
from seal.bfcl.calls import ToolCall

REPLY_LIMIT = "reply_limit"
STEP_TIME_BUDGET = "step_time_budget"
"""`aborted` of an episode whose step ran over its time budget."""
EVALUATION_TIME_BUDGET = "evaluation_time_budget"
"""`aborted` of an evaluation whose verification ran over its time budget."""
REBUILD_TIME_BUDGET = "rebuild_time_budget"
"""`aborted` of an episode whose worker process was replaced and whose calls, replayed on
the new one, ran over the time budget of a verification (the same replay)."""


@dataclass(frozen=True)
class StepBudget:
    """A step's budgets, from ServiceConfig: each result is cut to `max_result_chars` (with
    a marker saying so); once a step's results reach `max_reply_chars`, its remaining calls
    are not run; once its calls have run for `max_seconds` (their own time, not time spent
    waiting for other episodes' calls), the step stops and its episode ends
    (`step_time_budget`)."""

    max_result_chars: int
    max_reply_chars: int
    max_seconds: float


@dataclass(frozen=True)
class RunResult:
    results: list[str]
    """The results of the calls that ran: the first len(results) of the step's calls."""
    stopped: str | None = None
    """Why the rest did not run: REPLY_LIMIT, STEP_TIME_BUDGET, REBUILD_TIME_BUDGET (the
    episode's backends are gone), or None (all ran)."""
    seconds: float = 0.0
    """Time the calls ran."""
    lost: bool = False
    """The process running the calls was killed (a call did not return within the time
    budget): which of them ran, and their results, are unknown."""


def clip(result: str, max_chars: int) -> str:
    if len(result) <= max_chars:
        return result
    return (
        f"{result[:max_chars]}... [clipped by the service: {len(result)} characters, "
        f"limit {max_chars}]"
    )


class StepTally:
    """A step's results as its calls answer, and whether the step must stop (its
    budgets, module docstring); shared by every place that runs a step's calls."""

    def __init__(self, budget: StepBudget, calls: int):
        self.budget, self.calls = budget, calls
        self.results: list[str] = []
        self.reply_chars, self.seconds = 0, 0.0

    def add(self, result: str, seconds: float) -> str | None:
        """Record one call's result (clipped) and time; why the step stops now, or None."""
        result = clip(result, self.budget.max_result_chars)
        self.results.append(result)
        self.reply_chars += len(result)
        self.seconds += seconds
        if self.seconds > self.budget.max_seconds:
            return STEP_TIME_BUDGET
        if self.reply_chars >= self.budget.max_reply_chars and len(self.results) < self.calls:
            return REPLY_LIMIT
        return None

    def result(self, stopped: str | None = None) -> RunResult:
        return RunResult(self.results, stopped, self.seconds)


def run_calls(
    backends: Backends, calls: list[ToolCall], budget: StepBudget
) -> Generator[None, None, RunResult]:
    """Run `calls` in order, yielding after each; returns what ran and why it stopped."""
    tally = StepTally(budget, len(calls))
    for call in calls:
        started = time.perf_counter()
        result = backends.call(call)
        if stopped := tally.add(result, time.perf_counter() - started):
            return tally.result(stopped)
        yield
    return tally.result()
