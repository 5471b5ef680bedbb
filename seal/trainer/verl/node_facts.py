"""What a verl run's preflight learns from the cluster: one Ray task on every node reports
what that node's workers see (GPUs and driver, the model's files, the environment service
with the token the worker got, the tracking variables, the run directory), and the free
disk where the checkpoints go. preflight.py turns these facts into checks; its tests build
them by hand. Nothing here touches the network but the request to the service: a model
is looked for on the node's disk only (a hub that cannot be reached costs minutes of
retries, and a run must not start downloading 15 GB on each node)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from seal.trainer.model_files import ModelNotLocal, local_model_dir
from seal.trainer.preflight_rows import OK

PROBE_TIMEOUT_S = 120.0
"""A node whose probe has not answered by then is reported as failed."""


@dataclass
class Gpu:
    name: str
    memory_gib: float
    driver: str


@dataclass
class NodeFacts:
    """One Ray node as a task running on it sees it."""

    node: str
    """Host name and IP."""
    cpus: float
    """Ray's CPU resource of the node."""
    gpus: list[Gpu] = field(default_factory=list)
    """What nvidia-smi lists on the node (empty: no driver)."""
    service: str = OK
    """OK, or why the environment service did not answer the node's request with its token."""
    env: dict[str, str | None] = field(default_factory=dict)
    """WANDB_MODE as the node's workers have it, and whether WANDB_API_KEY is set."""
    sees_run_dir: bool = True
    """Whether the node read the launcher's fresh file in the run directory."""
    model: str = OK
    """OK, or why the model's files are not complete on the node's disk (`local_model_dir`)."""
    error: str = ""
    """Why the probe itself failed on the node (then the other fields are unknown)."""


def nvidia_gpus() -> list[Gpu]:
    """nvidia-smi's view of this machine (empty without a driver)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, memory_mib, driver = (part.strip() for part in line.split(","))
        gpus.append(Gpu(name, float(memory_mib) / 1024, driver))
    return gpus


def model_presence(path: str) -> str:
    """OK, or why the model is not complete on this node (ModelNotLocal's message)."""
    try:
        local_model_dir(path)
    except ModelNotLocal as error:
        return str(error)
    return OK


def probe_node(
    env_url: str, marker: str, nonce: str, model_path: str, env: dict[str, str] | None = None
) -> dict:
    """Run on one node by a Ray task: what that node's workers see (`env`: variables the
    workers would have on top of this process's, for a probe run outside Ray)."""
    from seal.http import HttpError, RetryPolicy, request_once
    from seal.rollout.env_client import TOKEN_ENV, auth_headers

    environ = {**os.environ, **(env or {})}
    token = environ.get(TOKEN_ENV)
    if not token:
        service = f"${TOKEN_ENV} is not set in the worker"
    else:
        try:
            reply = request_once(
                env_url, "GET", "/v1/whoami", "the preflight",
                policy=RetryPolicy(attempts=2, timeout_s=10.0, stall_warning_s=0),
                headers=auth_headers(token),
            )  # fmt: skip
            service = OK if reply.status == 200 else f"HTTP {reply.status} with the worker's token"
        except HttpError as error:
            service = f"unreachable: {error}"
    try:
        sees = Path(marker).read_text() == nonce
    except OSError:
        sees = False
    return {
        "node": f"{socket.gethostname()} ({_node_ip()})",
        "gpus": [vars(g) for g in nvidia_gpus()],
        "service": service,
        "env": {
            "WANDB_MODE": environ.get("WANDB_MODE"),
            "WANDB_API_KEY": "set" if environ.get("WANDB_API_KEY") else None,
        },
        "sees_run_dir": sees,
        "model": model_presence(model_path),
        "python": sys.executable,
    }


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def _facts(seen: dict, cpus: float) -> NodeFacts:
    return NodeFacts(
        node=seen["node"],
        cpus=cpus,
        gpus=[Gpu(**g) for g in seen["gpus"]],
        service=seen["service"],
        env=seen["env"],
        sees_run_dir=seen["sees_run_dir"],
        model=seen["model"],
    )


@contextmanager
def _marker(run_dir: Path):
    """A fresh file in the run directory and its content, removed after."""
    marker = Path(run_dir).absolute() / f".preflight_{uuid.uuid4().hex}"
    nonce = uuid.uuid4().hex
    marker.write_text(nonce)
    try:
        yield str(marker), nonce
    finally:
        marker.unlink(missing_ok=True)


def gather_node_facts(env_url: str, run_dir: Path, model_path: str) -> list[NodeFacts]:
    """One probe task on every alive node of the running Ray (num_cpus=0: it runs even on a
    node whose CPUs are all reserved)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(probe_node)
    with _marker(run_dir) as (marker, nonce):
        nodes = [n for n in ray.nodes() if n["Alive"]]
        tasks = [
            probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(env_url, marker, nonce, model_path)
            for n in nodes
        ]
        facts = []
        for node, task in zip(nodes, tasks, strict=True):
            cpus = node["Resources"].get("CPU", 0.0)
            try:
                seen = ray.get(task, timeout=PROBE_TIMEOUT_S)
            except Exception as error:  # noqa: BLE001 - a probe that fails is the finding
                facts.append(NodeFacts(node["NodeManagerAddress"], cpus, error=first_line(error)))
                continue
            facts.append(_facts(seen, cpus))
        return facts


def this_node_facts(
    env_url: str, run_dir: Path, model_path: str, env: dict[str, str], cpus: float
) -> list[NodeFacts]:
    """The probe run in this process, on the one node of a run that starts its own Ray:
    `env` is what Ray's runtime environment would give its workers (ray_init.worker_env),
    `cpus` the CPUs that Ray would get."""
    with _marker(run_dir) as (marker, nonce):
        return [_facts(probe_node(env_url, marker, nonce, model_path, env), cpus)]


def first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]


def free_bytes(path: Path) -> tuple[int, Path]:
    """Free space where `path` is (or will be: its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free, path
