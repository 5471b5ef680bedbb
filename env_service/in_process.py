"""The episodes' backends in the service's own process (`ServiceConfig.workers == 0`).

`InProcessPool` has the worker pool's interface (env_service/workers.py), so the engine has
one way to open an episode, run its calls, ask its backends, verify it and close it. Each
request runs a worker's job (env_service/worker.py: the same backends, execution and
verification steps and time budgets, a bug answered as a WorkerError) to its end, on the
event loop. For tests and debugging only: a call that never returns stops the whole service
(no process to kill and replace), and each call holds up every other request while it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from env_service import worker
from env_service.execution import EVALUATION_TIME_BUDGET, RunResult, StepBudget, run_calls
from env_service.release_texts import ParsedMessage, parse_job
from env_service.worker import BuildBackends
from env_service.workers import WorkerError
from seal.bfcl.backends import Backends
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import Diagnosis, ModelTurn, diagnose_steps
from seal.bfcl.tasks import load_task


class InProcessPool:
    def __init__(self, budget: StepBudget, max_evaluation_seconds: float):
        self.budget = budget
        self.max_evaluation_seconds = max_evaluation_seconds
        self.episodes: dict[str, Backends | str] = {}
        """Each open episode's backends, or why they could not load (worker.load_backends)."""

    async def start(self) -> None:
        """Nothing to start: `open` builds each episode's backends."""

    async def stop(self) -> None:
        self.episodes.clear()

    def stats(self) -> dict:
        return {"workers": 0, "workers_replaced": 0}

    async def open(self, episode_id: str, task_id: str, build: BuildBackends = Backends):
        self.episodes[episode_id] = worker.load_backends(task_id, build)

    def close(self, episode_id: str) -> None:
        self.episodes.pop(episode_id, None)

    async def run(self, episode_id: str, calls: list[ToolCall]) -> RunResult:
        backends = self.episodes.get(episode_id)
        if not isinstance(backends, Backends):
            raise WorkerError(worker.missing(episode_id, backends))
        return _complete(worker.Job(0, run_calls(backends, calls, self.budget)))

    async def ask(self, episode_id: str, question: Callable[[Backends], object]):
        """WorkerPool.ask: `question(backends)` on the episode's backends."""
        steps = worker.ask_job(self.episodes.get(episode_id), episode_id, question)
        return _complete(worker.Job(0, steps))

    async def diagnose(
        self, episode_id: str, task_id: str, model_turns: list[ModelTurn]
    ) -> Diagnosis | str:
        """The Diagnosis, or EVALUATION_TIME_BUDGET when the verification ran too long
        (no CPU share: every request here runs to its end on the event loop)."""
        steps = diagnose_steps(load_task(task_id), model_turns)
        job = worker.Job(0, steps, self.max_evaluation_seconds, EVALUATION_TIME_BUDGET)
        return _complete(job)

    async def parse(self, release_text: str, content: str, limit: int) -> ParsedMessage:
        """WorkerPool.parse: a message's first `limit` calls in the release text `release_text`, and
        how many follow them."""
        return _complete(worker.Job(0, parse_job(release_text, content, limit)))


def _complete(job: worker.Job):
    """The job's answer, run to its end; a bug in it raises a WorkerError, as a worker
    answers it."""
    try:
        while not job.advance():
            pass
    except Exception as e:
        raise WorkerError(worker.bug_text(e)) from e
    return job.answer
