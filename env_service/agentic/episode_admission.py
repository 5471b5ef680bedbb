"""Admission of BFCL V4 agentic episodes: a create the service cannot run right is refused
(409, naming what to run or configure first), as bfcl-eval's inference loop orders them:
a memory task waits for its scenario's prerequisite conversations and needs the snapshot
folder (seal/bfcl/agentic/memory.py); a web-search task needs a SerpAPI key; either needs its
optional dependencies (seal/bfcl/agentic/tasks.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from env_service.episode import EpisodeMachine
from env_service.errors import ConflictError
from seal.bfcl.agentic import memory, web_search
from seal.bfcl.agentic.tasks import AgenticTask, missing_dependency

log = logging.getLogger("env_service")


def admit_agentic(
    task: AgenticTask,
    episodes: Mapping[str, EpisodeMachine],
    lease_s: float,
    expire: Callable[[str], None],
) -> None:
    """Refuse an agentic episode this service cannot run right (ConflictError); then a
    memory episode's files are read by `memory_start`. `episodes`: the live ones;
    `expire` ends one that held its scenario past `lease_s`."""
    if (why := missing_dependency(task)) is not None:
        raise ConflictError(why)
    if task.is_memory:
        _check_scenario_lease(task, episodes, lease_s, expire)
        try:
            snapshots = memory.snapshots()
        except memory.MemoryNotConfiguredError as e:
            raise ConflictError(str(e)) from None
        if (refusal := snapshots.refusal(task)) is not None:
            raise ConflictError(refusal)
    elif (why := web_search.missing_key()) is not None:
        raise ConflictError(why)


async def memory_start(task: AgenticTask) -> Path | None:
    """The version of the memory an admitted memory episode starts from (seal.bfcl.agentic.memory),
    read in a thread: the event loop serves every other client meanwhile. A file that
    cannot be used is a ConflictError naming it."""
    try:
        return await asyncio.to_thread(memory.snapshots().start, task)
    except memory.SnapshotDamagedError as e:
        raise ConflictError(str(e)) from None


def _check_scenario_lease(
    task: AgenticTask,
    episodes: Mapping[str, EpisodeMachine],
    lease: float,
    expire: Callable[[str], None],
) -> None:
    """Refuse a memory episode while a prerequisite conversation of its scenario is in
    progress (its memory is not saved yet), naming it; one silent for longer than the
    lease (its create and each of its steps renew it; status requests do not) loses it: it
    is expired (closed, as by the TTL), and this create goes ahead."""
    now = time.monotonic()
    for other_id, ep in list(episodes.items()):
        other = ep.task
        if not isinstance(other, AgenticTask) or not other.is_prereq or other.chain != task.chain:
            continue
        idle = now - ep.last_step
        if idle > lease:
            log.warning(
                "env_service: episode %r (%s) held its scenario silent for %.0f s, past "
                "the lease of %.0f s: expired",
                other_id, other.task_id, idle, lease,
            )  # fmt: skip
            expire(other_id)
            continue
        raise ConflictError(
            f"{other.task_id}, a prerequisite conversation of {task.task_id}'s scenario, "
            f"is in progress in episode {other_id!r} (its memory is not saved yet; last "
            f"step {idle:.0f} s ago): it holds the scenario until it ends, or until it is "
            f"silent for {lease:.0f} s"
        )
