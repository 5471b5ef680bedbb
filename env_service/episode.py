"""One BFCL episode: the conversation state machine behind both service protocols.

An episode walks the task's user turns: a message with tool calls gets one result per call,
one without ends the turn. It speaks data (seal.rollout.protocol) to the native API and
text to the wire protocol (env_service/wire_text.py). A step is three parts, `begin_step`,
the calls run in the pool that holds the backends, `finish_step`, because the backends
live in worker processes. The walk, the step, aborted episodes and BFCL V4 agentic tasks:
docs/design.md, "The episode contract".
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field

from env_service import evolution, wire_text
from env_service.config import ServiceConfig
from env_service.execution import (
    REBUILD_TIME_BUDGET,
    REPLY_LIMIT,
    STEP_TIME_BUDGET,
    RunResult,
    StepBudget,
)
from seal.bfcl import agentic, paper_calls, web_search
from seal.bfcl import tags as T
from seal.bfcl.backends import is_tool_error
from seal.bfcl.calls import (
    ArgumentsTooDeep,
    CallParseError,
    ToolCall,
    argument_size,
    check_call,
    parse_first_tool_calls,
)
from seal.bfcl.diagnosis import TOOL_ERROR, Diagnosis, paper_label
from seal.bfcl.multi_turn import BfclTask
from seal.bfcl.tasks import load_task
from seal.rollout.protocol import EpisodeSettings


@dataclass(frozen=True)
class EpisodeCaps:
    """What one step and one episode may cost (ServiceConfig's limits)."""

    max_calls_per_step: int
    max_calls_per_episode: int
    max_episode_call_chars: int
    budget: StepBudget
    max_evaluation_seconds: float

    @classmethod
    def of(cls, config: ServiceConfig) -> EpisodeCaps:
        return cls(
            max_calls_per_step=config.max_calls_per_step,
            max_calls_per_episode=config.max_calls_per_episode,
            max_episode_call_chars=config.max_episode_call_chars,
            budget=StepBudget(
                max_result_chars=config.max_result_chars,
                max_reply_chars=config.max_step_reply_chars,
                max_seconds=config.max_step_seconds,
            ),
            max_evaluation_seconds=config.max_evaluation_seconds,
        )


@dataclass
class StepPlan:
    """A message's calls after `begin_step`: what to answer, and what to run."""

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
    aborted: str | None = None
    """Why the service ended the episode as a failure (STEP_TIME_BUDGET), or None."""


class EpisodeFinishedError(RuntimeError):
    """A step on an episode that has already ended."""


@functools.lru_cache(maxsize=4096)
def _cued_tools(task_id: str, prompt_name: str, hints: bool) -> tuple[dict, ...]:
    cue = evolution.TEXTS[prompt_name].cue
    return tuple(cue(d, hints) for d in load_task(task_id).tools)


def _first_tools(task: BfclTask, prompt_name: str, cues: bool, hints: bool) -> list[dict]:
    """The docs of the tools available from turn 0, with the cues when on (cued once per
    task and settings: 20-30 KB of docs per create)."""
    if not cues:
        return task.tools
    if task is load_task(task.task_id):
        return list(_cued_tools(task.task_id, prompt_name, hints))
    cue = evolution.TEXTS[prompt_name].cue
    return [cue(d, hints) for d in task.tools]  # a modified copy (tests)


def _render_wire_system_prompt(
    task: BfclTask, wire: str, prompt_name: str, cues: bool, hints: bool, sections: tuple[str, ...]
) -> str:
    docs = _first_tools(task, prompt_name, cues, hints)
    return wire_text.WIRE_TEXTS[wire].system(docs, sections)


@functools.lru_cache(maxsize=4096)
def _wire_system_prompt_cached(task_id: str, *settings) -> str:
    return _render_wire_system_prompt(load_task(task_id), *settings)


def _wire_system_prompt(task: BfclTask, *settings) -> str:
    """The wire protocol's system message, rendered once per task and settings (wire
    text, prompt, cues, type hints, sections): serialising 20-30 KB of tool signatures
    on every create was most of an episode's creation cost."""
    if task is load_task(task.task_id):
        return _wire_system_prompt_cached(task.task_id, *settings)
    return _render_wire_system_prompt(task, *settings)  # tests


class Episode:
    def __init__(
        self,
        task: BfclTask,
        settings: EpisodeSettings,
        profile: dict | None = None,
        caps: EpisodeCaps | None = None,
    ):
        self.task = task
        self.settings = settings
        self.layers = settings.effective_evolution
        self.texts = evolution.TEXTS[settings.prompt]
        """The texts this episode's prompt is written in (the paper's or the rich prompt's)."""
        self.caps = caps or EpisodeCaps.of(ServiceConfig())
        self.lock = asyncio.Lock()
        """Held by the engine's async paths for a step or an evaluation: one at a time."""
        self.aborted: str | None = None
        self.ended_on_malformed_call = False
        self.wire = wire_text.DEFAULT[settings.prompt]
        """The text the wire protocol speaks for this episode (env_service/wire_text.py);
        its create may ask for another (`speak`)."""
        self.call_chars = 0
        """argument_size of the calls that ran, summed."""
        self.turn = 0
        self.model_turns: list[list[list[ToolCall]]] = [[] for _ in range(task.num_turns)]
        self.counters = Counters()
        self.turn_signals: list[dict[str, int]] = [{} for _ in range(task.num_turns)]
        """Per turn, the rejections (by kind) and tool errors answered in it: what the
        paper's label of a failed episode is read from (diagnosis.paper_label)."""
        self.terminated = False
        self.truncated = False
        self.created_at = self.last_used = time.monotonic()
        self.last_outcome: StepOutcome | None = None
        """The answer to the last step, repeated for a retried step (set by the engine)."""
        self._evaluation: tuple[Diagnosis | None, str | None] | None = None
        self._held_back = frozenset(d["name"] for docs in task.held_out.values() for d in docs)
        self._available = {d["name"]: d for d in task.tools_until(0)}
        self.guidelines: list[tuple[str, str]] = (
            self.texts.guidelines_for(profile, self.layers.max_guidelines)
            if self.layers.guidelines
            else []
        )
        """(tag, text) of the guidelines this episode's system prompt carries."""
        self.agentic = task if isinstance(task, agentic.AgenticTask) else None
        """The BFCL V4 agentic task, or None (a multi-turn one)."""
        self.answer: str | None = None
        """The last message that made no tool call (an agentic question's answer)."""
        self.turn_steps = 0
        self._memory_saved_at: int | None = None
        self.system: list[str] | None = None
        """The system prompt's sections: the prompt's instructions (an agentic task: its own
        system message), then the layers' sections. None until a memory episode knows its
        memory (`set_memory_context`)."""
        if self.agentic is None:
            self.system = [*self.texts.instructions, *self._extra_sections()]
        elif not self.agentic.is_memory:
            self._agentic_system(None)
        self.tools = _first_tools(
            task, settings.prompt, self.layers.schema_cues, self.layers.type_hints
        )
        """Docs of the tools available from turn 0, as the model sees them."""
        self.first_messages = self.turn_messages(0)

    # --- prompt ------------------------------------------------------------------------

    def _agentic_system(self, memory_content: str | None) -> None:
        head = self.agentic.system_prompt(memory_content)
        self.system = ([head] if head else []) + self._extra_sections()

    def set_memory_context(self, memory_content: str) -> None:
        """The memory the episode's backend loaded, as its dump for the prompt."""
        self._agentic_system(memory_content)

    def _revealed_doc(self, doc: dict) -> dict:
        if self.layers.schema_cues and self.texts.cue_revealed:
            return self.texts.cue(doc, self.layers.type_hints)
        return doc

    def _extra_sections(self) -> list[str]:
        sections = []
        if self.layers.schema_cues:
            sections.append(self.texts.note)
        if section := self.texts.guideline_section(self.guidelines):
            sections.append(section)
        return sections

    @property
    def interface(self) -> dict:
        """The layers on and the guidelines shown (protocol.EpisodeInterface)."""
        layers = self.layers
        return {
            "schema_cues": layers.schema_cues,
            "type_hints": layers.schema_cues and layers.type_hints,
            "recovery_feedback": layers.recovery_feedback,
            "guidelines": layers.guidelines,
            "shown": [{"tag": tag, "text": text} for tag, text in self.guidelines],
        }

    def turn_messages(self, turn: int) -> list[dict]:
        """The user messages that open `turn` (observation messages, as data)."""
        revealed = self.task.held_out.get(turn)
        if revealed:
            return [
                {"role": "user", "content": "", "tools": [self._revealed_doc(d) for d in revealed]}
            ]
        return [{"role": m["role"], "content": m["content"]} for m in self.task.questions[turn]]

    def speak(self, wire: str) -> None:
        """Speak `wire` (a key of wire_text.WIRE_TEXTS) on the wire protocol, before the
        episode's first step."""
        if wire not in wire_text.WIRE_TEXTS:
            raise ValueError(f"unknown wire text {wire!r}; known: {list(wire_text.WIRE_TEXTS)}")
        self.wire = wire

    @property
    def initial_messages(self) -> list[dict]:
        """The first messages as text (the wire protocol): the system message with the
        tool signatures, then the first question."""
        name, cues, hints = self.settings.prompt, self.layers.schema_cues, self.layers.type_hints
        system = _wire_system_prompt(self.task, self.wire, name, cues, hints, tuple(self.system))
        return [{"role": "system", "content": system}, *self.wire_messages(self.first_messages)]

    def wire_messages(self, observation: list[dict]) -> list[dict]:
        """Observation messages as the wire protocol's text."""
        return wire_text.WIRE_TEXTS[self.wire].messages(observation)

    def available_tools(self) -> list[str]:
        """Names of the tools the model may call in the current turn."""
        return sorted(self._available)

    # --- stepping ----------------------------------------------------------------------

    def executed_calls(self) -> list[ToolCall]:
        """Every call that ran, in order (what rebuilds the episode's backends)."""
        return [call for turn in self.model_turns for step in turn for call in step]

    def begin_step(
        self, content: str, calls: list[ToolCall | CallParseError] | None = None
    ) -> StepPlan:
        """Count the step and answer every call that may not run (malformed, unknown or
        unavailable tool, bad arguments, over a cap); the others are to run, in order.
        `calls`: the message's tool calls as the client parsed them (the native API; []
        ends the user turn); None: parse `content` in the episode's wire text (the wire
        protocol). Under the paper's prompt, its rules (seal.bfcl.paper_calls): one
        malformed block or unavailable tool answers the whole message with one error, and
        calls with argument names that do not fit run for the backend's own error. With
        `end_on_malformed_call`, a malformed call ends the episode instead."""
        if self.terminated:
            raise EpisodeFinishedError(f"episode of {self.task.task_id} has already ended")
        self.counters.steps += 1
        self.turn_steps += 1
        caps = self.caps
        # A Qwen2.5 parse error is answered with the Qwen2.5 syntax; a client's with a
        # hint in no format's syntax (its error says what it expected).
        parse_hint = "parse" if calls is None else "parse_any_format"
        # Calls past the message's cap are answered without being read: the event loop's
        # work on a message is bounded by the cap, not by the message's 7,000 blocks.
        paper = self.settings.prompt == "paper"
        parse = wire_text.WIRE_TEXTS[self.wire].parse
        if calls is None and parse is None:
            calls, more = parse_first_tool_calls(content, caps.max_calls_per_step)
        else:
            calls = parse(content) if calls is None else calls
            calls, more = (
                calls[: caps.max_calls_per_step],
                max(0, len(calls) - caps.max_calls_per_step),
            )
        if not calls:
            self.answer = content
            return StepPlan([], [], [], ends_turn=True)
        errors = [c for c in calls if isinstance(c, CallParseError)]
        if errors and self.settings.end_on_malformed_call:
            for _ in errors:
                self._count_invalid("parse")
            return StepPlan([], [], [], ends_turn=False, ends_episode=True)
        if paper and (refusal := self._paper_refusal(calls)):
            return StepPlan([refusal], [], [], ends_turn=False)
        answers: list[dict | int] = []
        checked: set[int] = set()
        to_run: list[ToolCall] = []
        sizes: list[int] = []
        calls_left = caps.max_calls_per_episode - self.counters.tool_calls
        chars_left = caps.max_episode_call_chars - self.call_chars
        for item in calls:
            if isinstance(item, CallParseError):
                message = f"Error: could not parse tool call: {item.reason}"
                answers.append(self._tool(None, self._reject("parse", message, hint=parse_hint)))
                continue
            rejection = check_call(item, self._available, self._held_back)
            if rejection is not None and paper:
                self._count_invalid(rejection.kind)  # it runs: the backend's error answers
                checked.add(len(to_run))
            elif rejection is not None:
                message = self._reject(rejection.kind, f"Error: {rejection.message}")
                answers.append(self._tool(item.name, message))
                continue
            try:
                size = len(item.name) + argument_size(item.kwargs)
            except ArgumentsTooDeep as e:
                message = f"Error: could not parse tool call: 'arguments' are {e}"
                answers.append(self._tool(item.name, self._reject("parse", message, parse_hint)))
                continue
            refusal = None
            if len(to_run) >= calls_left:
                limit = caps.max_calls_per_episode
                refusal = f"an episode may make at most {limit} tool calls"
            elif size > chars_left:
                limit = caps.max_episode_call_chars
                refusal = f"the arguments of an episode's calls may hold at most {limit} characters"
            if refusal is not None:
                message = self._reject("episode_limit", f"Error: not run: {refusal}")
                answers.append(self._tool(item.name, message))
                continue
            chars_left -= size
            answers.append(len(to_run))
            to_run.append(item)
            sizes.append(size)
        if more:
            why = f"a message may make at most {caps.max_calls_per_step} tool calls"
            refused = self._tool(None, self._reject("call_limit", f"Error: not run: {why}"))
            self.counters.invalid_calls += more - 1
            self.counters.invalid_by_kind["call_limit"] += more - 1
            answers.extend([refused] * more)
        return StepPlan(answers, to_run, sizes, ends_turn=False, checked=frozenset(checked))

    def _paper_refusal(self, calls: list[ToolCall | CallParseError]) -> dict | None:
        """The paper's one answer to a message none of whose calls may run, or None."""
        errors = [c for c in calls if isinstance(c, CallParseError)]
        if errors:
            for _ in errors:
                self._count_invalid("parse")
            message = paper_calls.parse_error_message(errors)
            if self.layers.recovery_feedback:
                message = evolution.paper_parse_hint(message, [d["name"] for d in self.tools])
            return self._env(message)
        message = paper_calls.admission_error(calls, set(self._available))
        if message is None:
            return None
        first = next(c for c in calls if c.name not in self._available)
        self._count_invalid("unavailable_tool" if first.name in self._held_back else "unknown_tool")
        return self._env(message)

    def finish_step(self, plan: StepPlan, run: RunResult | None) -> StepOutcome:
        """Answer the calls that ran (`run`: their results) and advance the episode."""
        run = run or RunResult([])
        if plan.ends_episode:
            self.ended_on_malformed_call = self.terminated = True
            messages = []
        else:
            messages = self._next_turn() if plan.ends_turn else self._answer(plan, run)
        # bfcl-eval counts an agentic task's steps per turn (its force-quit).
        steps = self.counters.steps if self.agentic is None else self.turn_steps
        if not self.terminated and steps >= self.settings.limits.max_generations:
            self.terminated = self.truncated = True
        return StepOutcome(
            seq=self.counters.steps,
            messages=messages,
            terminated=self.terminated,
            reward=0.0,
            truncated=self.truncated,
            turn=self.turn,
            aborted=self.aborted,
        )

    def _answer(self, plan: StepPlan, run: RunResult) -> list[dict]:
        messages, executed = [], []
        # `position`: the call's place in its message (the paper's hints name it by that).
        for position, answer in enumerate(plan.answers, start=1):
            if isinstance(answer, dict):
                messages.append(answer)
                continue
            call = plan.to_run[answer]
            if answer >= len(run.results):
                messages.append(self._tool(call.name, self._not_run(run)))
                continue
            result = run.results[answer]
            executed.append(call)
            self.call_chars += plan.sizes[answer]
            self.counters.tool_calls += 1
            if self.agentic is not None and web_search.is_unavailable(result):
                # The search backend gave up: not the model's doing (seal/bfcl/web_search.py).
                self.aborted = web_search.ABORTED
                self.terminated = True
            hint = None
            if is_tool_error(result) and answer not in plan.checked:
                self.counters.tool_errors += 1
                self._signal(TOOL_ERROR)
            if self.layers.recovery_feedback and self.settings.prompt == "paper":
                hint = evolution.paper_tool_hint(result, call.name, position, self.tools)
            elif self.layers.recovery_feedback and is_tool_error(result):
                result = evolution.with_hint(result, "tool_error")
            messages.append(self._tool(call.name, result, hint))
        if executed:
            self.model_turns[self.turn].append(executed)
        if run.stopped in (STEP_TIME_BUDGET, REBUILD_TIME_BUDGET):
            self.aborted = run.stopped
            self.terminated = True
        return messages

    def _not_run(self, run: RunResult) -> str:
        if run.stopped == REPLY_LIMIT:
            limit = self.caps.budget.max_reply_chars
            why = f"the reply to this message reached the service's limit of {limit} characters"
            return self._reject(REPLY_LIMIT, f"Error: not run: {why}")
        if run.stopped == REBUILD_TIME_BUDGET:
            budget = self.caps.max_evaluation_seconds
            return (
                "Error: not run: the process holding this episode's tools was replaced and "
                f"their state could not be rebuilt within the service's time budget of {budget} s, "
                "so the episode has ended"
            )
        budget = self.caps.budget.max_seconds
        if run.lost:
            return (
                f"Error: not finished: the step ran over the service's time budget of {budget} s "
                "(a call did not return; the process running it was replaced), so the episode "
                "has ended"
            )
        return f"Error: not run: the step ran over the service's time budget of {budget} s, so the episode has ended"

    @staticmethod
    def _tool(name: str | None, content: str, hint: str | None = None) -> dict:
        return {"role": "tool", "name": name, "content": content, "hint": hint}

    @staticmethod
    def _env(content: str) -> dict:
        """The environment's own answer to a message (the paper's error message)."""
        return {"role": "env", "content": content}

    def _next_turn(self) -> list[dict]:
        self.turn += 1
        self.turn_steps = 0
        if self.turn >= self.task.num_turns:
            self.terminated = True
            return []
        self._available.update({d["name"]: d for d in self.task.held_out.get(self.turn, [])})
        return self.turn_messages(self.turn)

    def _signal(self, kind: str) -> None:
        signals = self.turn_signals[self.turn]
        signals[kind] = signals.get(kind, 0) + 1

    def _count_invalid(self, kind: str) -> None:
        self.counters.invalid_calls += 1
        self.counters.invalid_by_kind[kind] = self.counters.invalid_by_kind.get(kind, 0) + 1
        self._signal(kind)

    def _reject(self, kind: str, message: str, hint: str | None = None) -> str:
        self._count_invalid(kind)
        if not self.layers.recovery_feedback:
            return message
        return evolution.with_hint(message, hint or kind)

    # --- verification ------------------------------------------------------------------

    @property
    def evaluated(self) -> bool:
        """The final evaluation is known (the episode ended and was verified)."""
        return self._evaluation is not None

    def report(self) -> dict:
        """The final evaluation, once `evaluated` (verified by the engine's pool)."""
        return self.report_for(*self._evaluation)

    def needs_memory_save(self) -> bool:
        """A prerequisite conversation whose memory, as it stands, is not saved yet
        (not one the service aborted: its backends' state is unknown)."""
        prereq = self.agentic is not None and self.agentic.is_prereq
        return prereq and not self.aborted and self._memory_saved_at != self.counters.steps

    def memory_saved(self) -> None:
        self._memory_saved_at = self.counters.steps

    def agentic_report(self) -> dict:
        """The evaluation of an agentic task: bfcl-eval's verdict on the final answer
        (a prerequisite conversation: not scored)."""
        task, c = self.agentic, self.counters
        if task.is_prereq:
            accuracy, tags, notes = 0, [], []
        else:
            answer = self.answer if self.terminated and not self.truncated else None
            verdict = agentic.check_answer(task, answer)
            accuracy, tags, notes = verdict.accuracy, [verdict.tag], [verdict.note]
        if self.aborted:
            accuracy = 0
        return {
            "accuracy": accuracy,
            "reward": float(accuracy),
            "progress": float(accuracy),
            "failure_tags": tags,
            "tag_notes": notes,
            "paper_label": None,  # the paper's Table 5 labels are BFCL V3's
            "num_turns": task.num_turns,
            "turns_reached": min(self.turn + 1, task.num_turns),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "aborted": self.aborted,
            "ended_on_malformed_call": self.ended_on_malformed_call,
            "steps": c.steps,
            "tool_calls": c.tool_calls,
            "invalid_calls": c.invalid_calls,
            "invalid_by_kind": dict(c.invalid_by_kind),
            "tool_errors": c.tool_errors,
            "task_id": task.task_id,
            "category": task.category,
            "scored": not task.is_prereq,
            "answer": self.answer,
        }

    def report_for(self, diagnosis: Diagnosis | None, aborted: str | None = None) -> dict:
        """The full evaluation given a verification made by the engine's pool, or None with
        `aborted` (EVALUATION_TIME_BUDGET) when it could not finish. Cached once the episode
        has ended."""
        if self.terminated and self._evaluation is None:
            self._evaluation = (diagnosis, aborted)
        c = self.counters
        aborted = self.aborted or aborted
        if diagnosis is None:
            n = self.task.num_turns
            budget = self.caps.max_evaluation_seconds
            note = f"verification stopped: it ran over the service's time budget of {budget} s"
            accuracy, progress, tags, notes = 0, 0.0, [T.CHECKER_ERROR] * n, [note] * n
        else:
            accuracy, progress = diagnosis.accuracy, diagnosis.progress
            tags, notes = diagnosis.tags, diagnosis.notes
        if aborted:
            accuracy = 0  # the service ended the episode: a failure whatever ran before
        reward = 0.0 if aborted else self.settings.reward.reward(accuracy, progress)
        # An episode the service ended has no label: its failure is the service's cap.
        label = None if aborted else paper_label(tags, self.task.ground_truth, self.turn_signals)
        return {
            "accuracy": accuracy,
            "reward": reward,
            "progress": progress,
            "failure_tags": tags,
            "tag_notes": notes,
            "paper_label": label,
            "num_turns": self.task.num_turns,
            "turns_reached": min(self.turn + 1, self.task.num_turns),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "aborted": aborted,
            "ended_on_malformed_call": self.ended_on_malformed_call,
            "steps": c.steps,
            "tool_calls": c.tool_calls,
            "invalid_calls": c.invalid_calls,
            "invalid_by_kind": dict(c.invalid_by_kind),
            "tool_errors": c.tool_errors,
            "task_id": self.task.task_id,
            "category": self.task.category,
        }
