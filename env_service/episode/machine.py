"""One episode's state machine: the walk through the task's user turns, its counters, its
caps, and the three parts of a step (`begin_step`, the calls run in the engine's pool,
`finish_step`). A kind of task with rules of its own extends it (BFCL V4's agentic
tasks: env_service/agentic/agentic_episode.py). Details: docs/design.md, "The episode
contract"."""

from __future__ import annotations

import asyncio
import time

from env_service import interface_layers, release_texts
from env_service.episode import prompts
from env_service.episode.admission import EpisodeView, StepPlan, admit
from env_service.episode.answering import answer
from env_service.episode.evaluation import multi_turn_evaluation
from env_service.episode.records import (
    Counters,
    EpisodeCaps,
    EpisodeFinishedError,
    StepOutcome,
)
from env_service.execution import RunResult
from env_service.service_config import ServiceConfig
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.diagnosis import TOOL_ERROR, Diagnosis
from seal.bfcl.tasks import load_task
from seal.service_contract import EpisodeSettings


class EpisodeMachine:
    system_from_task = False
    """The system sections are the task's own system message
    (service_contract.EpisodeCreated.system_from_task), not the service's instructions."""

    def __init__(
        self,
        task_id: str,
        settings: EpisodeSettings,
        profile: dict | None = None,
        caps: EpisodeCaps | None = None,
    ):
        """An episode of the shipped task `task_id` (seal.bfcl.tasks.load_task: its
        prompts are rendered once per task id and settings)."""
        self.task = task = load_task(task_id)
        self.settings = settings
        self.layers = settings.effective_interface
        self.texts = interface_layers.TEXTS[settings.prompt]
        """The texts this episode's prompt is written in (the paper's or the rich prompt's)."""
        self.caps = caps or EpisodeCaps.of(ServiceConfig())
        self.lock = asyncio.Lock()
        """Held by the engine's async paths for a step or an evaluation: one at a time."""
        self.aborted: str | None = None
        self.ended_on_malformed_call = False
        self.release_text = release_texts.DEFAULT[settings.prompt]
        """The text the release protocol speaks for this episode (env_service/release_texts.py);
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
        """`last_used`: any request about it (the TTL's clock)."""
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
        self.system: list[str] | None = self._first_system()
        """The system prompt's sections: the prompt's instructions, then the layers'
        sections. None while the episode's kind completes it (its create then waits)."""
        self.tools = prompts.first_tools(
            task_id, settings.prompt, self.layers.schema_cues, self.layers.type_hints
        )
        """Docs of the tools available from turn 0, as the model sees them."""
        self.first_messages = self.turn_messages(0)

    # --- prompt ------------------------------------------------------------------------

    def _first_system(self) -> list[str] | None:
        return [*self.texts.instructions, *self._extra_sections()]

    def _extra_sections(self) -> list[str]:
        return prompts.extra_sections(self.texts, self.layers, self.guidelines)

    @property
    def interface(self) -> dict:
        """The layers on and the guidelines shown (service_contract.EpisodeInterface)."""
        return prompts.interface(self.layers, self.guidelines)

    def turn_messages(self, turn: int) -> list[dict]:
        """The user messages that open `turn` (observation messages, as data)."""
        return prompts.turn_messages(self.task, turn, self.texts, self.layers)

    def speak(self, release_text: str) -> None:
        """Speak `release_text` (a key of release_texts.RELEASE_TEXTS) on the release protocol,
        before the episode's first step."""
        known = release_texts.RELEASE_TEXTS
        if release_text not in known:
            raise ValueError(f"unknown release text {release_text!r}; known: {list(known)}")
        self.release_text = release_text

    @property
    def initial_messages(self) -> list[dict]:
        """The first messages as text (the release protocol): the system message with the
        tool signatures, then the first question."""
        name, cues, hints = self.settings.prompt, self.layers.schema_cues, self.layers.type_hints
        system = prompts.release_system_prompt(
            self.task.task_id, self.release_text, name, cues, hints, tuple(self.system)
        )
        return [{"role": "system", "content": system}, *self.release_messages(self.first_messages)]

    def release_messages(self, observation: list[dict]) -> list[dict]:
        """Observation messages as the release protocol's text."""
        return release_texts.RELEASE_TEXTS[self.release_text].messages(observation)

    # --- stepping ----------------------------------------------------------------------

    def executed_calls(self) -> list[ToolCall]:
        """Every call that ran, in order (what rebuilds the episode's backends)."""
        return [call for turn in self.model_turns for step in turn for call in step]

    def begin_step(
        self,
        content: str,
        calls: list[ToolCall | CallParseError],
        more: int = 0,
        by_client: bool = True,
    ) -> StepPlan:
        """Count the step and admit its calls (env_service/episode/admission.py: `calls`
        and `more` as `admit` takes them): every call that may not run is answered and
        counted; the others are to run, in order."""
        if self.terminated:
            raise EpisodeFinishedError(f"episode of {self.task.task_id} has already ended")
        self.counters.steps += 1
        view = EpisodeView(
            self.settings,
            self.layers,
            self.caps,
            self._available,
            self._held_back,
            self.tools,
            self.counters.tool_calls,
            self.call_chars,
        )
        plan = admit(view, calls, more, by_client)
        for kind, n in plan.invalid:
            self._count_invalid(kind, n)
        return plan

    def finish_step(self, plan: StepPlan, run: RunResult | None) -> StepOutcome:
        """Answer the calls that ran (`run`: their results) and advance the episode."""
        run = run or RunResult([])
        if plan.ends_episode:
            self.ended_on_malformed_call = self.terminated = True
            messages = []
        else:
            messages = self._next_turn() if plan.ends_turn else self._answer(plan, run)
        if not self.terminated and self._limited_steps() >= self.settings.limits.max_generations:
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

    def _limited_steps(self) -> int:
        """The steps `limits.max_generations` counts: all of the episode's."""
        return self.counters.steps

    def _answer(self, plan: StepPlan, run: RunResult) -> list[dict]:
        answers = answer(plan, run, self.settings, self.layers, self.caps, self.tools)
        self.call_chars += answers.call_chars
        self.counters.tool_calls += len(answers.executed)
        for kind in answers.signals:
            if kind == TOOL_ERROR:
                self.counters.tool_errors += 1
                self._signal(TOOL_ERROR)
            else:
                self._count_invalid(kind)
        if answers.executed:
            self.model_turns[self.turn].append(answers.executed)
        if answers.aborted is not None:
            self.aborted = answers.aborted
            self.terminated = True
        return answers.messages

    def _next_turn(self) -> list[dict]:
        self.turn += 1
        if self.turn >= self.task.num_turns:
            self.terminated = True
            return []
        self._available.update({d["name"]: d for d in self.task.held_out.get(self.turn, [])})
        return self.turn_messages(self.turn)

    def _signal(self, kind: str) -> None:
        signals = self.turn_signals[self.turn]
        signals[kind] = signals.get(kind, 0) + 1

    def _count_invalid(self, kind: str, n: int = 1) -> None:
        """`n` invalid calls of `kind`, one signal of it in this turn."""
        self.counters.invalid_calls += n
        self.counters.invalid_by_kind[kind] = self.counters.invalid_by_kind.get(kind, 0) + n
        self._signal(kind)

    # --- verification ------------------------------------------------------------------

    @property
    def evaluated(self) -> bool:
        """The final evaluation is known (the episode ended and was verified)."""
        return self._evaluation is not None

    def evaluation(self) -> dict:
        """The final evaluation, once `evaluated` (verified by the engine's pool)."""
        return self.evaluation_for(*self._evaluation)

    def evaluation_for(self, diagnosis: Diagnosis | None, aborted: str | None = None) -> dict:
        """The full evaluation given a verification made by the engine's pool, or None with
        `aborted` (EVALUATION_TIME_BUDGET) when it could not finish. Cached once the episode
        has ended."""
        if self.terminated and self._evaluation is None:
            self._evaluation = (diagnosis, aborted)
        return multi_turn_evaluation(self, diagnosis, aborted)
