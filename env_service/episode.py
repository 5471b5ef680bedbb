"""One BFCL episode: the conversation state machine behind both service protocols.

An episode walks the task's user turns. Each assistant message either carries tool
calls, which are checked against the tools available at this turn and executed in the
episode's own backends (the answer is one tool result per call), or carries none,
which ends the current user turn: the next question comes back, or the episode ends
after the last turn. Verification replays what ran (see diagnosis.py) once, when first
asked for.

The episode speaks data (seal.rollout.protocol): tool docs, system-prompt sections,
observation messages, calls. The native API passes the calls its client parsed in its
model's format; the wire protocol passes Qwen2.5 text, parsed here with
seal/bfcl/calls.py, and gets Qwen2.5 text back (`initial_messages`,
seal/bfcl/prompt.py's `chat_messages`).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

from env_service import evolution
from seal.bfcl import prompt
from seal.bfcl.backends import Backends, is_tool_error
from seal.bfcl.calls import CallParseError, ToolCall, check_call, parse_tool_calls
from seal.bfcl.diagnosis import Diagnosis, diagnose
from seal.bfcl.tasks import BfclTask, load_task
from seal.rollout.protocol import EpisodeSettings


@dataclass
class Counters:
    steps: int = 0
    tool_calls: int = 0
    invalid_calls: int = 0
    """Unparseable blocks, unknown or unavailable tools, bad argument names."""
    tool_errors: int = 0
    """Calls that ran and failed in the backend (raised, or returned {"error": ...})."""
    invalid_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class StepOutcome:
    seq: int
    """The step's number in its episode (1-based)."""
    messages: list[dict]
    terminated: bool
    reward: float
    truncated: bool
    turn: int
    evaluation: dict | None = None
    """The report, on the step that ended the episode."""


class EpisodeFinishedError(RuntimeError):
    """A step on an episode that has already ended."""


@functools.lru_cache(maxsize=4096)
def _cued_tools(task_id: str, hints: bool) -> tuple[dict, ...]:
    return tuple(evolution.add_schema_cues(d, hints) for d in load_task(task_id).tools)


def _first_tools(task: BfclTask, cues: bool, hints: bool) -> list[dict]:
    """The docs of the tools available from turn 0, with the cues when on (cued once per
    task and settings: 20-30 KB of docs per create)."""
    if not cues:
        return task.tools
    if task is load_task(task.task_id):
        return list(_cued_tools(task.task_id, hints))
    return [evolution.add_schema_cues(d, hints) for d in task.tools]  # a modified copy (tests)


@functools.lru_cache(maxsize=4096)
def _wire_system_prompt_cached(
    task_id: str, cues: bool, hints: bool, sections: tuple[str, ...]
) -> str:
    return _render_wire_system_prompt(load_task(task_id), cues, hints, sections)


def _render_wire_system_prompt(
    task: BfclTask, cues: bool, hints: bool, sections: tuple[str, ...]
) -> str:
    tools = [prompt.to_tool(d) for d in _first_tools(task, cues, hints)]
    return prompt.system_content(sections, tools)


def _wire_system_prompt(task: BfclTask, cues: bool, hints: bool, sections: tuple[str, ...]) -> str:
    """The wire protocol's system message, rendered once per task and settings:
    serialising 20-30 KB of tool signatures on every create was most of an episode's
    creation cost."""
    if task is load_task(task.task_id):
        return _wire_system_prompt_cached(task.task_id, cues, hints, sections)
    return _render_wire_system_prompt(task, cues, hints, sections)  # a modified copy (tests)


class Episode:
    def __init__(self, task: BfclTask, settings: EpisodeSettings, profile: dict | None = None):
        self.task = task
        self.settings = settings
        self.layers = settings.effective_evolution
        self.backends = Backends(task)
        self.turn = 0
        self.model_turns: list[list[list[ToolCall]]] = [[] for _ in range(task.num_turns)]
        self.counters = Counters()
        self.terminated = False
        self.truncated = False
        self.created_at = self.last_used = time.monotonic()
        self.last_outcome: StepOutcome | None = None
        """The answer to the last step, repeated for a retried step (set by the engine)."""
        self._diagnosis: Diagnosis | None = None
        self._held_back = frozenset(d["name"] for docs in task.held_out.values() for d in docs)
        self._available = {d["name"]: d for d in task.tools_until(0)}
        self.system = prompt.system_sections(self._extra_sections(profile))
        """The system prompt's sections: instructions, then the layers' sections."""
        self.tools = _first_tools(task, self.layers.schema_cues, self.layers.type_hints)
        """Docs of the tools available from turn 0, as the model sees them."""
        self.first_messages = self.turn_messages(0)

    # --- prompt ------------------------------------------------------------------------

    def _doc(self, doc: dict) -> dict:
        if self.layers.schema_cues:
            return evolution.add_schema_cues(doc, type_hints=self.layers.type_hints)
        return doc

    def _extra_sections(self, profile: dict | None) -> list[str]:
        sections = []
        if self.layers.schema_cues:
            sections.append(evolution.CONSTRAINT_NOTE)
        if self.layers.guidelines:
            section = evolution.guideline_section(profile, self.layers.max_guidelines)
            if section:
                sections.append(section)
        return sections

    def turn_messages(self, turn: int) -> list[dict]:
        """The user messages that open `turn` (observation messages, as data)."""
        revealed = self.task.held_out.get(turn)
        if revealed:
            return [{"role": "user", "content": "", "tools": [self._doc(d) for d in revealed]}]
        return [{"role": m["role"], "content": m["content"]} for m in self.task.questions[turn]]

    @property
    def initial_messages(self) -> list[dict]:
        """The first messages as Qwen2.5 text (the wire protocol): the system message with
        the tool signatures, then the first question."""
        cues, hints = self.layers.schema_cues, self.layers.type_hints
        system = _wire_system_prompt(self.task, cues, hints, tuple(self.system))
        return [{"role": "system", "content": system}, *prompt.chat_messages(self.first_messages)]

    def available_tools(self) -> list[str]:
        """Names of the tools the model may call in the current turn."""
        return sorted(self._available)

    # --- stepping ----------------------------------------------------------------------

    def step(
        self, content: str, calls: list[ToolCall | CallParseError] | None = None
    ) -> StepOutcome:
        """One assistant message. `calls`: its tool calls as the client parsed them (the
        native API; [] ends the user turn); None: parse `content` as Qwen2.5 text (the
        wire protocol)."""
        if self.terminated:
            raise EpisodeFinishedError(f"episode of {self.task.task_id} has already ended")
        self.counters.steps += 1
        # A Qwen2.5 parse error is answered with the Qwen2.5 syntax; a client's with a
        # hint in no format's syntax (its error says what it expected).
        parse_hint = "parse" if calls is None else "parse_any_format"
        if calls is None:
            calls = parse_tool_calls(content)
        messages = self._run_calls(calls, parse_hint) if calls else self._next_turn()
        if not self.terminated and self.counters.steps >= self.settings.limits.max_generations:
            self.terminated = self.truncated = True
        report = self.report() if self.terminated else None
        return StepOutcome(
            seq=self.counters.steps,
            messages=messages,
            terminated=self.terminated,
            reward=report["reward"] if report else 0.0,
            truncated=self.truncated,
            turn=self.turn,
            evaluation=report,
        )

    def _next_turn(self) -> list[dict]:
        self.turn += 1
        if self.turn >= self.task.num_turns:
            self.terminated = True
            return []
        self._available.update({d["name"]: d for d in self.task.held_out.get(self.turn, [])})
        return self.turn_messages(self.turn)

    def _run_calls(self, calls: list[ToolCall | CallParseError], parse_hint: str) -> list[dict]:
        """Run the calls in order; one tool result message per call."""
        results, executed = [], []
        for item in calls:
            if isinstance(item, CallParseError):
                message = f"Error: could not parse tool call: {item.reason}"
                message = self._reject("parse", message, hint=parse_hint)
                results.append({"role": "tool", "name": None, "content": message})
                continue
            rejection = check_call(item, self._available, self._held_back)
            if rejection is not None:
                message = self._reject(rejection.kind, f"Error: {rejection.message}")
                results.append({"role": "tool", "name": item.name, "content": message})
                continue
            result = self.backends.call(item)
            executed.append(item)
            self.counters.tool_calls += 1
            if is_tool_error(result):
                self.counters.tool_errors += 1
                if self.layers.recovery_feedback:
                    result = evolution.with_hint(result, "tool_error")
            results.append({"role": "tool", "name": item.name, "content": result})
        if executed:
            self.model_turns[self.turn].append(executed)
        return results

    def _reject(self, kind: str, message: str, hint: str | None = None) -> str:
        self.counters.invalid_calls += 1
        self.counters.invalid_by_kind[kind] = self.counters.invalid_by_kind.get(kind, 0) + 1
        if not self.layers.recovery_feedback:
            return message
        return evolution.with_hint(message, hint or kind)

    # --- verification ------------------------------------------------------------------

    def diagnosis(self) -> Diagnosis:
        """Verify what has run so far; cached once the episode has ended."""
        if self._diagnosis is not None:
            return self._diagnosis
        result = diagnose(self.task, self.model_turns)
        if self.terminated:
            self._diagnosis = result
        return result

    def reward(self) -> float:
        d = self.diagnosis()
        return self.settings.reward.reward(d.accuracy, d.progress)

    def report(self) -> dict:
        """The full evaluation: accuracy, progress, one tag per turn and the counters."""
        d = self.diagnosis()
        c = self.counters
        return {
            "accuracy": d.accuracy,
            "reward": self.reward(),
            "progress": d.progress,
            "failure_tags": d.tags,
            "tag_notes": d.notes,
            "num_turns": self.task.num_turns,
            "turns_reached": min(self.turn + 1, self.task.num_turns),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "steps": c.steps,
            "tool_calls": c.tool_calls,
            "invalid_calls": c.invalid_calls,
            "invalid_by_kind": dict(c.invalid_by_kind),
            "tool_errors": c.tool_errors,
            "task_id": self.task.task_id,
            "category": self.task.category,
        }
