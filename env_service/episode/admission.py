"""Admission of one assistant message's calls: which may run, and the answer to each that
may not (malformed, unknown or unavailable tool, bad arguments, over a cap).

`admit` is a pure function of the message and the episode's state; the episode applies
the plan it returns (counts its rejections) and runs its calls. The rules, the paper's
among them: docs/design.md, "The episode contract".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from env_service import interface_layers
from env_service.episode.records import EpisodeCaps, env_message, tool_message
from seal.bfcl import paper_calls
from seal.bfcl.calls import (
    ArgumentsTooDeep,
    CallParseError,
    ToolCall,
    argument_size,
    check_call,
    first,
)
from seal.service_contract import EpisodeSettings, InterfaceSettings


@dataclass
class StepPlan:
    """A message's calls after admission: what to answer, and what to run."""

    answers: list[dict | int]
    """Per call, in order: its tool message, or its index in `to_run`."""
    to_run: list[ToolCall]
    sizes: list[int]
    """argument_size of each call in `to_run`."""
    ends_turn: bool
    """The message has no calls: it ends the user turn."""
    ends_episode: bool = False
    """The message has a malformed call and the settings end the episode on one."""
    checked: frozenset[int] = frozenset()
    """Indices in `to_run` of calls already counted as invalid (the paper's rules run them
    anyway, for the backend's own error): their error is not counted again."""
    invalid: list[tuple[str, int]] = field(default_factory=list)
    """The invalid calls to count, in order: (kind, how many), each one signal of its kind
    in the turn (diagnosis.paper_label reads them)."""


@dataclass(slots=True)
class EpisodeView:
    """What admission reads of the episode."""

    settings: EpisodeSettings
    layers: InterfaceSettings
    """settings.effective_interface (a property that may build one: read once)."""
    caps: EpisodeCaps
    available: Mapping[str, dict]
    """The tools the model may call in this turn, by name."""
    held_back: frozenset[str]
    """Tools a later turn reveals."""
    tools: list[dict]
    """The docs of the first turn's tools, as the model sees them."""
    tool_calls: int
    """Calls run so far."""
    call_chars: int
    """argument_size of the calls run so far, summed."""


def admit(
    episode: EpisodeView, calls: list[ToolCall | CallParseError], more: int, by_client: bool
) -> StepPlan:
    """The plan for one message: its tool calls ([] ends the user turn) and how many
    follow them unread (answered as over the cap), as the client parsed them (the native
    API: `by_client`) or the service in the episode's release text (the release protocol:
    env_service/release_texts.py). Under the paper's prompt, its rules
    (seal.bfcl.paper_calls): one malformed block or unavailable tool answers the whole
    message with one error, and calls with argument names that do not fit run for the
    backend's own error. With `end_on_malformed_call`, a malformed call ends the episode
    instead."""
    caps, settings = episode.caps, episode.settings
    recovery = episode.layers.recovery_feedback
    invalid: list[tuple[str, int]] = []

    def reject(kind: str, message: str, hint: str | None = None) -> str:
        invalid.append((kind, 1))
        return interface_layers.with_hint(message, hint or kind) if recovery else message

    # A Qwen2.5 parse error is answered with the Qwen2.5 syntax; a client's with a
    # hint in no format's syntax (its error says what it expected).
    parse_hint = "parse_any_format" if by_client else "parse"
    paper = settings.prompt == "paper"
    calls, cut = first(calls, caps.max_calls_per_step)
    more += cut
    if not calls:
        return StepPlan([], [], [], ends_turn=True)
    errors = [c for c in calls if isinstance(c, CallParseError)]
    if errors and settings.end_on_malformed_call:
        invalid += [("parse", 1)] * len(errors)
        return StepPlan([], [], [], ends_turn=False, ends_episode=True, invalid=invalid)
    if paper and (refusal := _paper_refusal(episode, calls, invalid)):
        return StepPlan([refusal], [], [], ends_turn=False, invalid=invalid)
    answers: list[dict | int] = []
    checked: set[int] = set()
    to_run: list[ToolCall] = []
    sizes: list[int] = []
    calls_left = caps.max_calls_per_episode - episode.tool_calls
    chars_left = caps.max_episode_call_chars - episode.call_chars
    for item in calls:
        if isinstance(item, CallParseError):
            message = f"Error: could not parse tool call: {item.reason}"
            answers.append(tool_message(None, reject("parse", message, hint=parse_hint)))
            continue
        rejection = check_call(item, episode.available, episode.held_back)
        if rejection is not None and paper:
            invalid.append((rejection.kind, 1))  # it runs: the backend's error answers
            checked.add(len(to_run))
        elif rejection is not None:
            message = reject(rejection.kind, f"Error: {rejection.message}")
            answers.append(tool_message(item.name, message))
            continue
        try:
            size = len(item.name) + argument_size(item.kwargs)
        except ArgumentsTooDeep as e:
            message = f"Error: could not parse tool call: 'arguments' are {e}"
            answers.append(tool_message(item.name, reject("parse", message, parse_hint)))
            continue
        refusal = None
        if len(to_run) >= calls_left:
            limit = caps.max_calls_per_episode
            refusal = f"an episode may make at most {limit} tool calls"
        elif size > chars_left:
            limit = caps.max_episode_call_chars
            refusal = f"the arguments of an episode's calls may hold at most {limit} characters"
        if refusal is not None:
            message = reject("episode_limit", f"Error: not run: {refusal}")
            answers.append(tool_message(item.name, message))
            continue
        chars_left -= size
        answers.append(len(to_run))
        to_run.append(item)
        sizes.append(size)
    if more:
        why = f"a message may make at most {caps.max_calls_per_step} tool calls"
        refused = tool_message(None, reject("call_limit", f"Error: not run: {why}"))
        invalid[-1] = ("call_limit", more)  # one answer, repeated: one signal
        answers.extend([refused] * more)
    return StepPlan(
        answers, to_run, sizes, ends_turn=False, checked=frozenset(checked), invalid=invalid
    )


def _paper_refusal(
    episode: EpisodeView, calls: list[ToolCall | CallParseError], invalid: list[tuple[str, int]]
) -> dict | None:
    """The paper's one answer to a message none of whose calls may run, or None."""
    errors = [c for c in calls if isinstance(c, CallParseError)]
    if errors:
        invalid += [("parse", 1)] * len(errors)
        message = paper_calls.parse_error_message(errors)
        if episode.layers.recovery_feedback:
            message = interface_layers.paper_parse_hint(message, [d["name"] for d in episode.tools])
        return env_message(message)
    message = paper_calls.admission_error(calls, set(episode.available))
    if message is None:
        return None
    first = next(c for c in calls if c.name not in episode.available)
    kind = "unavailable_tool" if first.name in episode.held_back else "unknown_tool"
    invalid.append((kind, 1))
    return env_message(message)
