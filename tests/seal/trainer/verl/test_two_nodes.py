"""The README's multi-node steps, followed on one machine: two Ray nodes started with the
venv's `ray` (a head and a worker node, each its own raylet, ports and temporary directory)
from a shell that has neither the service's token nor a tracking mode, then the launcher
with RAY_ADDRESS runs the CPU smoke config on that cluster to step 1. The token and
WANDB_MODE reach the workers only through the launcher (Ray's runtime environment): the
preflight's probe on each node reaches the service with the token it got and sees the
run's WANDB_MODE, and the episodes of step 1, played by workers of that cluster, were
served.

Slow (~4 minutes: two Ray nodes, verl's workers, one training step); it runs after
tests/seal/trainer/verl/test_cpu_smoke.py has finished its runs (module order), so two verl runs never
overlap.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import free_port

pytest.importorskip("verl")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
RAY = Path(sys.executable).parent / "ray"
SECRETS = ("SEAL_ENV_TOKEN", "WANDB_MODE", "WANDB_API_KEY", "RAY_ADDRESS")
RAY_NODE_ENV = {
    # As the README starts nodes: Ray 2.60 authenticates them with its token (a node or
    # driver without RAY_AUTH_MODE=token sends none).
    "RAY_AUTH_MODE": "token",
    # On a loaded 2-core machine the dashboard agent can take longer to start than the
    # raylet waits for it by default, and the raylet then exits.
    "RAY_agent_register_timeout_ms": "120000",
}


def ray_node(head_port: int, temp_dir: Path, head: bool, log: Path) -> subprocess.Popen:
    """`ray start --block` for one node, in its own process group (stopping that group stops
    exactly this node's processes, nobody else's Ray). Each node declares 8 CPU slots and one
    logical GPU (the CPU backend places its actor on one and its rollout replica on the
    other)."""
    ports = [free_port() for _ in range(6)]
    args = [
        str(RAY), "start", "--block", "--disable-usage-stats", "--num-cpus", "8",
        "--num-gpus", "1",
        "--node-manager-port", str(ports[0]), "--object-manager-port", str(ports[1]),
        "--dashboard-agent-grpc-port", str(ports[2]), "--dashboard-agent-listen-port", str(ports[3]),
        "--metrics-export-port", str(ports[4]), "--runtime-env-agent-port", str(ports[5]),
    ]  # fmt: skip
    if head:
        args += ["--head", "--port", str(head_port), "--include-dashboard", "false",
                 "--ray-client-server-port", str(free_port()), "--temp-dir", str(temp_dir)]  # fmt: skip
    else:
        args += ["--address", f"{node_ip()}:{head_port}"]
    env = {k: v for k, v in os.environ.items() if k not in SECRETS} | RAY_NODE_ENV
    with log.open("w") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def node_ip() -> str:
    """This machine's address as Ray picks it for its nodes (the GCS listens there)."""
    from ray.util import get_node_ip_address

    return get_node_ip_address()


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def alive_nodes(address: str) -> int:
    code = (
        f"import ray; ray.init(address={address!r}, logging_level='ERROR');"
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k not in SECRETS} | RAY_NODE_ENV,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return 0
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0


def preflight_rows(out: str) -> dict[str, tuple[str, str]]:
    """The preflight table's rows: check -> (status, detail), wrapped lines joined."""
    rows: dict[str, tuple[str, str]] = {}
    name = None
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]] if line.startswith("│ ") else []
        if len(cells) != 3:
            continue
        if cells[0]:
            name = cells[0]
            rows[name] = (cells[1], cells[2])
        elif name:
            rows[name] = (rows[name][0], f"{rows[name][1]} {cells[2]}")
    return rows


def test_cpu_smoke_on_two_ray_nodes_gets_token_and_tracking_from_the_launcher(tmp_path):
    head_port = free_port()
    address = f"{node_ip()}:{head_port}"
    # Ray's socket paths must stay under 107 bytes: a short temporary directory.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray2n_", dir="/tmp"))
    head = ray_node(head_port, ray_tmp, head=True, log=tmp_path / "head.log")
    nodes = [head]
    try:
        deadline = time.monotonic() + 180
        while head.poll() is None and alive_nodes(address) < 1:
            assert time.monotonic() < deadline, "the head node did not start"
            time.sleep(2)
        assert head.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
        nodes.append(ray_node(head_port, ray_tmp, head=False, log=tmp_path / "worker.log"))
        while nodes[1].poll() is None and alive_nodes(address) < 2:
            assert time.monotonic() < deadline + 180, "the worker node did not join"
            time.sleep(2)
        assert nodes[1].poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        service_port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in SECRETS}
        env |= {"RAY_ADDRESS": address, "RAY_AUTH_MODE": "token"}  # the README's shell
        run = subprocess.run(
            [sys.executable, "launcher.py", "--conf", "exp/verl_cpu_smoke.yaml", "--",
             f"output_dir={tmp_path / 'out'}", "name=two_nodes", "trainer.total_steps=1",
             "trainer.validation.before_train=false", "trainer.validation.test_freq=0",
             "trainer.checkpoint.save_freq=0", "service.host=0.0.0.0",
             f"service.port={service_port}", f"verl.env_url=http://127.0.0.1:{service_port}",
             "trainer.logging.wandb=offline"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
    finally:
        for proc in reversed(nodes):
            stop(proc)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "[verl] joined the cluster: 2 node(s)" in out
    given = "SEAL_ENV_TOKEN, WANDB_DIR, WANDB_MODE, WANDB_RESUME, WANDB_RUN_ID"  # resumable
    assert f"the workers get {given} through Ray's runtime" in out
    rows = preflight_rows(out)
    assert (
        rows["service from workers"][0] == "ok"
        and "on 2 node(s)" in rows["service from workers"][1]
    )
    assert rows["tracking"] == ("ok", "WANDB_MODE=offline on 2 node(s)")
    assert rows["shared filesystem"][0] == "ok" and "on 2 node(s)" in rows["shared filesystem"][1]
    metrics = [json.loads(line) for line in (tmp_path / "out/two_nodes/metrics.jsonl").open()]
    step1 = next(m for m in metrics if m["step"] == 1)
    assert any(k.startswith("apatch/") for k in step1)  # the SEAL hooks ran on served episodes
