"""A BFCL V4 agentic episode: the multi-turn state machine (env_service/episode/) with
bfcl-eval's rules for these tasks: the task's own system message (a memory task's shows
the memory its backend loaded), steps counted per turn, the last message without a call
kept as the answer, a search backend that gave up ending the episode, and the evaluation
of that answer (a prerequisite conversation's: not scored, its memory saved first)."""

from __future__ import annotations

import time

from env_service.episode import EpisodeMachine
from env_service.episode.admission import StepPlan
from env_service.episode.evaluation import evaluation
from env_service.execution import RunResult
from seal.bfcl.agentic import web_search
from seal.bfcl.agentic.tasks import AgenticTask, check_answer
from seal.bfcl.calls import CallParseError, ToolCall


class AgenticEpisode(EpisodeMachine):
    system_from_task = True
    task: AgenticTask

    def __init__(self, *args, **kwargs):
        self.answer: str | None = None
        """The last message that made no tool call (the question's answer)."""
        self.turn_steps = 0
        """Steps in the current turn (bfcl-eval's force-quit counts them)."""
        self._memory_saved_at: int | None = None
        super().__init__(*args, **kwargs)
        self.last_step = self.created_at
        """Its create or last step (a memory scenario's lease)."""

    # --- prompt ------------------------------------------------------------------------

    def _first_system(self) -> list[str] | None:
        """The task's own system message, then the layers' sections; None for a memory
        task until it knows its memory (`set_memory_context`)."""
        return None if self.task.is_memory else self._task_system(None)

    def _task_system(self, memory_content: str | None) -> list[str]:
        head = self.task.system_prompt(memory_content)
        return ([head] if head else []) + self._extra_sections()

    def set_memory_context(self, memory_content: str) -> None:
        """The memory the episode's backend loaded, as its dump for the prompt."""
        self.system = self._task_system(memory_content)

    # --- stepping ----------------------------------------------------------------------

    def begin_step(
        self,
        content: str,
        calls: list[ToolCall | CallParseError],
        more: int = 0,
        by_client: bool = True,
    ) -> StepPlan:
        plan = super().begin_step(content, calls, more, by_client)
        self.turn_steps += 1
        self.last_step = time.monotonic()
        if plan.ends_turn:
            self.answer = content
        return plan

    def _limited_steps(self) -> int:
        """bfcl-eval counts an agentic task's steps per turn (its force-quit)."""
        return self.turn_steps

    def _answer(self, plan: StepPlan, run: RunResult) -> list[dict]:
        messages = super()._answer(plan, run)
        if self.aborted is None and any(web_search.is_unavailable(r) for r in run.results):
            # The search backend gave up: not the model's doing (seal/bfcl/agentic/web_search.py).
            self.aborted = web_search.ABORTED
            self.terminated = True
        return messages

    def _next_turn(self) -> list[dict]:
        self.turn_steps = 0
        return super()._next_turn()

    # --- evaluation --------------------------------------------------------------------

    def needs_memory_save(self) -> bool:
        """A prerequisite conversation whose memory, as it stands, is not saved yet
        (not one the service aborted: its backends' state is unknown)."""
        saved = self._memory_saved_at == self.counters.steps
        return self.task.is_prereq and not self.aborted and not saved

    def memory_saved(self) -> None:
        self._memory_saved_at = self.counters.steps

    def agentic_evaluation(self) -> dict:
        """bfcl-eval's verdict on the final answer (a prerequisite conversation: not
        scored)."""
        task = self.task
        if task.is_prereq:
            accuracy, tags, notes = 0, [], []
        else:
            answer = self.answer if self.terminated and not self.truncated else None
            verdict = check_answer(task, answer)
            accuracy, tags, notes = verdict.accuracy, [verdict.tag], [verdict.note]
        if self.aborted:
            accuracy = 0
        # The paper's Table 5 labels are BFCL V3's: no label.
        base = evaluation(
            self, accuracy, float(accuracy), float(accuracy), tags, notes, None, self.aborted
        )
        return {**base, "scored": not task.is_prereq, "answer": self.answer}
