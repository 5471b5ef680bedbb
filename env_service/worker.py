"""One worker process: the backends of the episodes placed on it, and their work.

The service's process forks a few of these (env_service/workers.py); each holds the
`Backends` of its episodes and runs, on request, a step's calls (env_service/execution.py)
or a verification (seal.bfcl.diagnosis.diagnose_steps), one call at a time, always of
the pending job that has run the least so far (least attained service): a step of a few
cheap calls, or a short episode's verification, goes ahead of a message of 2,945 `grep`
calls and waits for at most the one call running when it arrives, not 5 s. (Taking
the jobs in turn, one call each, was not enough: under that flood, a well-behaved
client's median request took 50 ms instead of 6, every call of its steps and of its
verification waiting for one `grep` of 10 ms.) Before each call it writes the job and the time into
shared memory (`slot`), so the service can see a call that does not return and kill
this process (its episodes are then rebuilt elsewhere by replaying their calls).

Messages are pickled tuples, each framed by its length (8 bytes); this is the service's
own pipe, never a client's:

    ("open", episode_id, task_id, calls_to_replay)     no answer
    ("close", episode_id)                              no answer
    ("run", request, episode_id, calls)                (request, "ok", RunResult)
    ("diagnose", request, task_id, model_turns)        (request, "ok", Diagnosis or
                                                        "evaluation_time_budget")
    ("memory", request, episode_id, "context"|"save")  (request, "ok", the memory's prompt
                                                        dump, or None once saved): BFCL V4
                                                        memory tasks
and (request, "error", text) for a request that failed (a bug: no such episode here).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import socket
import time
from collections.abc import Generator
from dataclasses import dataclass

from env_service.execution import EVALUATION_TIME_BUDGET, StepBudget, run_calls
from seal.bfcl.backends import Backends
from seal.bfcl.diagnosis import diagnose_steps
from seal.bfcl.tasks import load_task

IDLE = -1.0
"""slot[0] while no call runs."""
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
class _Job:
    request: int
    steps: Generator
    limit_s: float | None
    """A verification's time budget (a step's own is kept by run_calls)."""
    seconds: float = 0.0
    """Time it has run so far: the job that has run least goes next."""


def _detach(parent_pid: int, close_fds: list[int], niceness: int) -> None:
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
    os.nice(niceness)  # ServiceConfig.worker_niceness: why
    for fd in close_fds:  # other workers' pipes: their end-of-file must not wait for us
        with contextlib.suppress(OSError):
            os.close(fd)


def serve(
    sock: socket.socket,
    slot,
    budget: StepBudget,
    max_evaluation_seconds: float,
    parent_pid: int,
    close_fds: list[int],
    niceness: int,
) -> None:
    """The worker's loop; returns when the service closes its end."""
    _detach(parent_pid, close_fds, niceness)
    episodes: dict[str, Backends | str] = {}  # a str: why its backends could not load
    jobs: list[_Job] = []  # a few at a time: a scan for the least run is cheap
    while True:
        # Take every waiting message (block for one when there is nothing to do).
        while not jobs or select.select([sock], [], [], 0)[0]:
            message = receive(sock)
            if message is None:
                return
            kind = message[0]
            if kind == "open":
                _, episode_id, task_id, replay = message
                try:
                    backends = Backends(load_task(task_id))
                except Exception as e:  # noqa: BLE001 - e.g. an unreadable memory snapshot
                    # Its requests are answered with this; raising would kill the worker,
                    # and its replacement would open the episode again, and die again.
                    episodes[episode_id] = f"{task_id}: its backends could not load: {e}"
                    continue
                for call in replay:  # rebuild an episode whose worker was replaced
                    backends.call(call)
                episodes[episode_id] = backends
            elif kind == "close":
                episodes.pop(message[1], None)
            elif kind == "run":
                _, request, episode_id, calls = message
                backends = episodes.get(episode_id)
                if not isinstance(backends, Backends):
                    send(sock, (request, "error", _missing(episode_id, backends)))
                else:
                    jobs.append(_Job(request, run_calls(backends, calls, budget), None))
            elif kind == "memory":  # quick: answered now, between calls
                _, request, episode_id, op = message
                backends = episodes.get(episode_id)
                try:
                    if not isinstance(backends, Backends):
                        raise RuntimeError(_missing(episode_id, backends))
                    value = backends.memory_context() if op == "context" else backends.save_memory()
                except Exception as e:  # noqa: BLE001 - answered as the service's error
                    send(sock, (request, "error", f"{type(e).__name__}: {e}"))
                else:
                    send(sock, (request, "ok", value))
            elif kind == "diagnose":
                _, request, task_id, model_turns = message
                steps = diagnose_steps(load_task(task_id), model_turns)
                jobs.append(_Job(request, steps, max_evaluation_seconds))
        job = min(jobs, key=_attained)
        slot[1] = time.monotonic()
        slot[0] = float(job.request)
        started = time.perf_counter()
        try:
            next(job.steps)
        except StopIteration as done:
            jobs.remove(job)
            send(sock, (job.request, "ok", done.value))
            continue
        except Exception as e:  # noqa: BLE001 - a bug: the service answers it, the worker goes on
            jobs.remove(job)
            send(sock, (job.request, "error", f"{type(e).__name__}: {e}"))
            continue
        finally:
            slot[0] = IDLE
            job.seconds += time.perf_counter() - started
        if job.limit_s is not None and job.seconds > job.limit_s:
            jobs.remove(job)
            job.steps.close()
            send(sock, (job.request, "ok", EVALUATION_TIME_BUDGET))


def _missing(episode_id: str, entry: str | None) -> str:
    return entry or f"episode {episode_id!r} is not on this worker"


def _attained(job: _Job) -> float:
    return job.seconds
