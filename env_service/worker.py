"""One worker process: the backends of the episodes placed on it, and their work.

It runs steps' calls, verifications and rebuilds one call at a time, least-run job first,
so a cheap step never waits behind a flood of costly calls, and each episode's within its
share of the CPU (env_service/cpu_share.py); it writes each call and a
heartbeat (from a thread of its own) into shared memory, so the service can find a call
that does not return or a stopped process and replace it. The scheduling, the heartbeat
and the pipe's messages: docs/service.md, "One worker's work".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from env_service.cpu_share import CpuShares
from env_service.execution import (
    EVALUATION_TIME_BUDGET,
    REBUILD_TIME_BUDGET,
    StepBudget,
    run_calls,
)
from env_service.release_texts import parse_job
from seal.bfcl.backends import Backends
from seal.bfcl.diagnosis import diagnose_steps
from seal.bfcl.multi_turn import BfclTask
from seal.bfcl.tasks import load_task

BuildBackends = Callable[[BfclTask], Backends]
"""What builds an episode's backends from its task: `Backends`, or its kind's own (sent to
a worker by name, so a class or a module-level function, or a partial of one)."""

IDLE = -1.0
"""slot[0] while no call runs."""
SLOT_SIZE = 3
"""slot: [the request whose call runs, or IDLE; when that call started; last heartbeat]
(time.monotonic(), which is the same clock in every process)."""
HEARTBEAT_S = 0.25
"""A worker's heartbeat thread writes the time this often."""
_HEADER = 8
_PR_SET_PDEATHSIG = 1


def send(sock: socket.socket, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(len(data).to_bytes(_HEADER, "big") + data)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(buf)


def receive(sock: socket.socket) -> object | None:
    """The next message, or None when the service has gone."""
    head = _recv_exactly(sock, _HEADER)
    if head is None:
        return None
    body = _recv_exactly(sock, int.from_bytes(head, "big"))
    return None if body is None else pickle.loads(body)


@dataclass
class Job:
    """One request's work: a generator that runs one call per step (execution.run_calls,
    diagnosis.diagnose_steps, a replay, a task kind's question), within its time budget."""

    request: int
    steps: Generator
    limit_s: float | None = None
    """A verification's or a rebuild's time budget (a step's own is kept by run_calls)."""
    over_budget: str | None = None
    """What answers the job when it runs past `limit_s`."""
    seconds: float = 0.0
    """Time it has run so far: the job that has run least goes next."""
    arrived: float = field(default_factory=time.monotonic)
    """When the worker got it: the time it was not running is how long it was held."""
    episode_id: str | None = None
    """A rebuild's episode."""
    owner: str | None = None
    """The episode whose CPU share its calls spend (env_service/cpu_share.py); None: work
    of the service's own (reading a message, a task kind's question), which never waits."""
    answer: object = None
    """Its answer, once `advance` has returned True."""
    over: bool = False
    """It ran past `limit_s` (its answer is `over_budget`)."""

    def advance(self) -> bool:
        """Run the job's next call; True once it is over (finished, or past its budget).
        A bug in the job raises."""
        started = time.perf_counter()
        try:
            next(self.steps)
        except StopIteration as done:
            self.answer = done.value
            return True
        finally:
            self.seconds += time.perf_counter() - started
        if self.limit_s is not None and self.seconds > self.limit_s:
            self.steps.close()
            self.answer, self.over = self.over_budget, True
            return True
        return False


def load_backends(task_id: str, build: BuildBackends = Backends) -> Backends | str:
    """The backends of a new episode, built by `build` (its kind's: a picklable callable
    of the task), or why they could not load (e.g. an unreadable file): its requests are
    answered with this; raising would kill the worker, and its replacement would open the
    episode again, and die again."""
    try:
        return build(load_task(task_id))
    except Exception as e:  # noqa: BLE001 - answered, see above
        return f"{task_id}: its backends could not load: {e}"


def ask_job(backends: Backends | str | None, episode_id: str, question: Callable) -> Generator:
    """`question(backends)` (WorkerPool.ask) as a job of one step."""
    if not isinstance(backends, Backends):
        raise RuntimeError(missing(episode_id, backends))
    return question(backends)
    yield  # a generator: run as a job, answered by its return value


def _replay(backends: Backends, calls: list) -> Generator[None, None, bool]:
    for call in calls:
        backends.call(call)
        yield
    return True


def lower_priority(pid: int, niceness: int) -> None:
    """Run process `pid` `niceness` steps below this one's CPU priority. The parent sets
    it right after the fork, not the child when it gets to run, so a service that says it
    is ready has its workers at their priority (a child setting its own raced the check)."""
    os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + niceness))


def detach(parent_pid: int, close_fds: list[int], own_fd: int) -> None:
    # The service's signal handlers came with the fork: Ctrl-C is the service's to handle
    # (it stops its workers), SIGTERM ends a worker at once, and uvicorn's wake-up fd is
    # not ours to write to.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    # Die with the service, even killed with -9 (Linux): a worker outliving it would keep
    # its port bound.
    # (Not Linux: no prctl; the service still kills its workers when it stops.)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)
    for fd in close_fds:  # other workers' pipes: their end-of-file must not wait for us
        with contextlib.suppress(OSError):
            os.close(fd)
    _close_inherited_sockets(own_fd)


def _close_inherited_sockets(own_fd: int) -> None:
    """Close every socket the fork copied from the service but this worker's own pipe:
    its listening socket and its client connections. A worker forked to replace another
    while clients are connected held a copy of each of their connections, so a
    connection the service then closed (an idle keep-alive, a refused one) stayed open
    for the client, which sent its next request into it and waited for ever (measured:
    scripts/bench_env_adversarial.py's 64 clients all stuck after a replacement)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc (not Linux): the sockets stay; workers die with the service
        return
    for fd in fds:
        if fd == own_fd:
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)


def _beat(slot) -> None:
    while True:
        slot[2] = time.monotonic()
        time.sleep(HEARTBEAT_S)


def serve(
    sock: socket.socket,
    slot,
    budget: StepBudget,
    max_evaluation_seconds: float,
    parent_pid: int,
    close_fds: list[int],
    shares: CpuShares,
) -> None:
    """The worker's loop; returns when the service closes its end."""
    detach(parent_pid, close_fds, sock.fileno())
    threading.Thread(target=_beat, args=(slot,), name="heartbeat", daemon=True).start()
    episodes: dict[str, Backends | str] = {}  # a str: why its backends could not load
    jobs: list[Job] = []  # a few at a time: a scan for the least run is cheap
    rebuilding: dict[str, Job] = {}
    held: dict[str, list[Job]] = {}  # runs of an episode being rebuilt, in order
    # Episodes whose rebuild ran over its budget: a run the service sent before it read that
    # answer is answered as the held ones were, not as an unknown episode (a 500).
    overrun: set[str] = set()
    while True:
        # Take every waiting message; then, with no job that may run a call, block for the
        # next message, or until the first job held back for its episode's CPU share may.
        chosen = None
        while chosen is None:
            if not _readable(sock, 0):
                chosen, wait_s = _next_job(jobs, shares)
                if chosen is not None or (wait_s is not None and not _readable(sock, wait_s)):
                    continue
            message = receive(sock)
            if message is None:
                return
            kind = message[0]
            if kind == "open":
                _, episode_id, task_id, build = message
                episodes[episode_id] = load_backends(task_id, build)
            elif kind == "rebuild":
                _, request, episode_id, task_id, build, calls = message
                overrun.discard(episode_id)
                backends = episodes[episode_id] = load_backends(task_id, build)
                if not isinstance(backends, Backends):
                    send(sock, (request, "ok", True))  # rebuilt as far as it can be
                    continue
                job = Job(
                    request,
                    _replay(backends, calls),
                    max_evaluation_seconds,
                    REBUILD_TIME_BUDGET,
                    episode_id=episode_id,
                    owner=episode_id,
                )
                rebuilding[episode_id] = job
                jobs.append(job)
            elif kind == "close":
                episode_id = message[1]
                episodes.pop(episode_id, None)
                overrun.discard(episode_id)
                shares.forget(episode_id)
                job = rebuilding.pop(episode_id, None)
                if job is not None:
                    jobs.remove(job)
                    send(sock, (job.request, "ok", None))
                for run in held.pop(episode_id, []):
                    send(sock, (run.request, "error", f"episode {episode_id!r} was closed"))
            elif kind == "run":
                _, request, episode_id, calls = message
                backends = episodes.get(episode_id)
                if episode_id in overrun:
                    send(sock, (request, "ok", REBUILD_TIME_BUDGET))
                    continue
                if not isinstance(backends, Backends):
                    send(sock, (request, "error", missing(episode_id, backends)))
                    continue
                job = Job(request, run_calls(backends, calls, budget), owner=episode_id)
                if episode_id in rebuilding:
                    held.setdefault(episode_id, []).append(job)
                else:
                    jobs.append(job)
            elif kind == "ask":  # quick: its job runs next (after a rebuild of its episode)
                _, request, episode_id, question = message
                job = Job(request, ask_job(episodes.get(episode_id), episode_id, question))
                if episode_id in rebuilding:
                    held.setdefault(episode_id, []).append(job)
                else:
                    jobs.append(job)
            elif kind == "parse":
                _, request, release_text, content, limit = message
                jobs.append(Job(request, parse_job(release_text, content, limit)))
            elif kind == "diagnose":
                _, request, episode_id, task_id, model_turns = message
                steps = diagnose_steps(load_task(task_id), model_turns)
                limit_s, over_budget = max_evaluation_seconds, EVALUATION_TIME_BUDGET
                jobs.append(Job(request, steps, limit_s, over_budget, owner=episode_id))
        job = chosen
        slot[1] = time.monotonic()
        slot[0] = float(job.request)
        ran_s = job.seconds
        try:
            over = job.advance()
        except Exception as e:  # noqa: BLE001 - a bug: the service answers it, the worker goes on
            jobs.remove(job)
            if job.episode_id is not None:  # a rebuild: its episode is gone from here
                episodes.pop(job.episode_id, None)
            _finished(sock, job, bug_text(e), rebuilding, held, jobs, "error")
            continue
        finally:
            slot[0] = IDLE
            shares.charge(job.owner, job.seconds - ran_s)
        if over:
            jobs.remove(job)
            if job.over and job.episode_id is not None:
                episodes.pop(job.episode_id, None)
                overrun.add(job.episode_id)
            _finished(sock, job, job.answer, rebuilding, held, jobs)


def _finished(
    sock, job: Job, value, rebuilding: dict, held: dict, jobs: list, status: str = "ok"
) -> None:
    """Answer a finished job; a rebuild's end releases the steps that waited for it (to
    run, or answered as its episode's were)."""
    send(sock, (job.request, status, value))
    if job.episode_id is None:
        return
    del rebuilding[job.episode_id]
    for run in held.pop(job.episode_id, []):
        if status == "ok" and value is True:
            jobs.append(run)  # rebuilt: its steps run now, in order
        else:
            run.steps.close()
            answer = REBUILD_TIME_BUDGET if status == "ok" else value
            send(sock, (run.request, status, answer))


def missing(episode_id: str, entry: str | None) -> str:
    """Why an episode's request cannot run here (its backends did not load, or it is not
    here)."""
    return entry or f"episode {episode_id!r} is not on this worker"


def bug_text(e: Exception) -> str:
    """A failed request's answer: the error the service raises as a WorkerError."""
    return f"{type(e).__name__}: {e}"


def _attained(job: Job) -> float:
    return job.seconds


def _next_job(jobs: list[Job], shares: CpuShares) -> tuple[Job | None, float | None]:
    """The least-run job that may run a call now, within its episode's CPU share; else
    None, and the seconds until one may (None: there are no jobs). One pass, one clock
    read: it runs before every call."""
    now = time.monotonic()
    best, first_s = None, None
    for job in jobs:
        turn_s = shares.wait_s(job.owner, now - job.arrived - job.seconds, now)
        if turn_s > 0:
            first_s = turn_s if first_s is None else min(first_s, turn_s)
        elif best is None or _attained(job) < _attained(best):
            best = job
    return best, first_s


def _readable(sock: socket.socket, timeout_s: float | None) -> bool:
    return bool(select.select([sock], [], [], timeout_s)[0])
