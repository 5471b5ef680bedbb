"""Answering a step's calls once they ran: one tool message per call (its result, with
the recovery hint when on, or why it did not run), and what the run did to the episode."""

from __future__ import annotations

from dataclasses import dataclass, field

from env_service import interface_layers
from env_service.episode.admission import StepPlan
from env_service.episode.records import EpisodeCaps, tool_message
from env_service.execution import REBUILD_TIME_BUDGET, REPLY_LIMIT, STEP_TIME_BUDGET, RunResult
from seal.bfcl.backends import is_tool_error
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import TOOL_ERROR
from seal.service_contract import EpisodeSettings, InterfaceSettings


@dataclass
class Answers:
    messages: list[dict] = field(default_factory=list)
    executed: list[ToolCall] = field(default_factory=list)
    """The calls that ran, in order."""
    call_chars: int = 0
    """Their argument_size, summed."""
    signals: list[str] = field(default_factory=list)
    """In order, TOOL_ERROR for each call that failed in the backend (less those admission
    counted as invalid), REPLY_LIMIT for each call not run for the reply's size (an invalid
    call)."""
    aborted: str | None = None
    """Why the run ends the episode as a failure, or None."""


def answer(
    plan: StepPlan,
    run: RunResult,
    settings: EpisodeSettings,
    layers: InterfaceSettings,
    caps: EpisodeCaps,
    tools: list[dict],
) -> Answers:
    """The answers to `plan`'s calls given `run` (their results); `layers`: the settings'
    effective_interface; `tools`: the first turn's docs as the model sees them (the paper's
    hints name them)."""
    out = Answers()
    paper_hints = layers.recovery_feedback and settings.prompt == "paper"
    # `position`: the call's place in its message (the paper's hints name it by that).
    for position, item in enumerate(plan.answers, start=1):
        if isinstance(item, dict):
            out.messages.append(item)
            continue
        call = plan.to_run[item]
        if item >= len(run.results):
            out.messages.append(tool_message(call.name, _not_run(run, caps, layers, out)))
            continue
        result = run.results[item]
        out.executed.append(call)
        out.call_chars += plan.sizes[item]
        hint = None
        if is_tool_error(result) and item not in plan.checked:
            out.signals.append(TOOL_ERROR)
        if paper_hints:
            hint = interface_layers.paper_tool_hint(result, call.name, position, tools)
        elif layers.recovery_feedback and is_tool_error(result):
            result = interface_layers.with_hint(result, "tool_error")
        out.messages.append(tool_message(call.name, result, hint))
    if run.stopped in (STEP_TIME_BUDGET, REBUILD_TIME_BUDGET):
        out.aborted = run.stopped
    return out


def _not_run(run: RunResult, caps: EpisodeCaps, layers: InterfaceSettings, out: Answers) -> str:
    if run.stopped == REPLY_LIMIT:
        limit = caps.budget.max_reply_chars
        why = f"the reply to this message reached the service's limit of {limit} characters"
        out.signals.append(REPLY_LIMIT)
        message = f"Error: not run: {why}"
        return (
            interface_layers.with_hint(message, REPLY_LIMIT)
            if layers.recovery_feedback
            else message
        )
    if run.stopped == REBUILD_TIME_BUDGET:
        budget = caps.max_evaluation_seconds
        return (
            "Error: not run: the process holding this episode's tools was replaced and "
            f"their state could not be rebuilt within the service's time budget of {budget} s, "
            "so the episode has ended"
        )
    budget = caps.budget.max_seconds
    if run.lost:
        return (
            f"Error: not finished: the step ran over the service's time budget of {budget} s "
            "(a call did not return; the process running it was replaced), so the episode "
            "has ended"
        )
    return f"Error: not run: the step ran over the service's time budget of {budget} s, so the episode has ended"
