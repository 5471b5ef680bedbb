"""Runs as processes: two runs of one name (the second is refused,
naming the first's pid, before it writes anything), two runs of different names (each
its own service; stopping one leaves the other's), and the launcher killed with SIGTERM
or kill -9 (its service stops too, so no later run finds it).

Each run is `launcher.main` in a process of its own with a job, `hold`, that reports the
service URL and waits to be stopped."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from seal import commands
from seal.rollout.env_client import TOKEN_ENV, is_healthy

REPO = Path(__file__).resolve().parents[3]


DRIVER = """
import sys, time
sys.path.insert(0, {repo!r})
import launcher

def hold(cfg, url, run_dir, split_file):
    print("ARGV", *sys.argv, flush=True)  # what wandb's metadata would copy
    print("HOLDING", url, flush=True)
    time.sleep(600)

launcher.JOBS["hold"] = "__main__:hold"
sys.exit(launcher.main(sys.argv[1:]))
"""


def as_a_foreground_job() -> None:
    """Popen's preexec_fn: Ctrl-C's signal at its default in the launcher, as in a shell's
    foreground job, even when this suite itself runs in the background (`pytest &`), where
    SIGINT is ignored and the ignoring is inherited: Python then never turns it into
    KeyboardInterrupt, and the launcher would sleep through the tests' Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """One launcher process; its output lines are collected as they come."""

    def __init__(self, tmp_path: Path, name: str, *overrides: str):
        driver = tmp_path / "driver.py"
        driver.write_text(DRIVER.format(repo=str(REPO)))
        args = ["--conf", str(REPO / "exp/replay_demo.yaml"), f"output_dir={tmp_path}",
                f"name={name}", "job=hold", *overrides]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(driver), *args], cwd=REPO, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_a_foreground_job,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # end of output

    def wait_for(self, prefix: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            self.output.append(line)
            if line.startswith(prefix):
                return line.strip()
            if line == "":
                break
        pytest.fail(f"no line {prefix!r} from the launcher; its output:\n{''.join(self.output)}")

    def holding(self) -> tuple[str, int]:
        """(service URL, service pid) once the job runs."""
        started = self.wait_for("[launcher] environment service started at ")
        pid = int(started.split("(pid ")[1].split(",")[0])
        url = self.wait_for("HOLDING ").split()[1]
        return url, pid

    def finish(self, timeout: float = 60) -> str:
        self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=5)) != "":
            self.output.append(line)
        return "".join(self.output)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def process_gone(pid: int) -> bool:
    """Exited (or a zombie nobody reaped yet: the service's parent was killed)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture
def runs():
    started: list[Run] = []
    yield started
    for run in started:
        run.kill()


def test_a_second_run_of_the_same_name_is_refused_and_kill_9_stops_the_first_service(
    tmp_path, runs
):
    first = Run(tmp_path, "same")
    runs.append(first)
    url, service_pid = first.holding()
    run_dir = tmp_path / "same"
    config = (run_dir / "config.yaml").read_bytes()

    second = Run(tmp_path, "same", "trainer.rollout.n=7")
    runs.append(second)
    output = second.finish()
    assert second.proc.returncode == 1, output
    assert "RunDirInUse" in output and f"pid {first.proc.pid}" in output, output
    assert "environment service started" not in output, "started a service before refusing"
    assert (run_dir / "config.yaml").read_bytes() == config, "overwrote the first run's config"

    os.kill(first.proc.pid, signal.SIGKILL)  # no clean-up of its own runs
    first.proc.wait()
    wait_until(lambda: process_gone(service_pid), 15, "the service outlived its launcher")
    assert not is_healthy(url)
    third = Run(tmp_path, "same")  # the dead run's lock went with it
    runs.append(third)
    assert third.holding()[0] != url


def files_holding(run_dir: Path, secret: str) -> list[str]:
    return [
        str(path.relative_to(run_dir))
        for path in sorted(run_dir.rglob("*"))
        if path.is_file() and secret.encode() in path.read_bytes()
    ]


def test_a_token_on_the_command_line_is_in_no_file_the_run_writes(tmp_path, runs):
    """`-- service.token=X` landed in attempts/NNN/record.json and in RUN_DIR/.lock (mode
    0644, kept after the run); config.yaml masked it. Also looked at: the lock's refusal
    message, the process's own argv (wandb's metadata copies it), the service's log."""
    token = "tok-" + os.urandom(16).hex()
    first = Run(tmp_path, "secret", f"service.token={token}")
    runs.append(first)
    first.holding()
    argv = next(line for line in first.output if line.startswith("ARGV "))
    assert token not in argv and "service.token=***" in argv, argv
    run_dir = tmp_path / "secret"
    lock = run_dir / ".lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert f"pid {first.proc.pid}" in lock.read_text()
    assert files_holding(run_dir, token) == []
    record = json.loads((run_dir / "attempts/001/record.json").read_text())
    assert record["command"]["overrides"][-1] == "service.token=***"

    second = Run(tmp_path, "secret")
    runs.append(second)
    refusal = second.finish()
    assert "RunDirInUse" in refusal and token not in refusal, refusal

    first.proc.send_signal(signal.SIGTERM)
    first.finish()
    assert lock.exists() and stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert (run_dir / "env_service.log").stat().st_size > 0
    assert files_holding(run_dir, token) == []


def test_runs_of_different_names_have_their_own_services(tmp_path, runs):
    a, b = Run(tmp_path, "a"), Run(tmp_path, "b")
    runs += [a, b]
    url_a, pid_a = a.holding()
    url_b, pid_b = b.holding()
    assert url_a != url_b and pid_a != pid_b

    a.proc.send_signal(signal.SIGTERM)
    output = a.finish()
    assert a.proc.returncode == 143, output
    assert "terminated (SIGTERM)" in output
    wait_until(lambda: process_gone(pid_a), 15, "SIGTERM left the service running")
    assert is_healthy(url_b), "stopping one run stopped the other's service"

    b.proc.send_signal(signal.SIGINT)
    assert b.finish() and b.proc.returncode == 130
    wait_until(lambda: process_gone(pid_b), 15, "Ctrl-C left the service running")


IMPORTS_DRIVER = """
import sys
sys.path.insert(0, {repo!r})
import launcher
code = launcher.main(sys.argv[1:])
print("IMPORTED", "seal.trainer.local" in sys.modules, "transformers" in sys.modules)
sys.exit(code)
"""


def test_a_second_training_run_is_refused_before_the_trainers_imports(tmp_path):
    """The run's lock comes before the job's imports (torch's trainer, transformers): a
    second run of the same name is refused at once, not after a minute of imports."""
    from seal.runs.lock import lock_run_dir

    driver = tmp_path / "driver.py"
    driver.write_text(IMPORTS_DRIVER.format(repo=str(REPO)))
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    with lock_run_dir(tmp_path / "same"):  # the first run, in this process
        done = subprocess.run(
            [sys.executable, str(driver), "--", f"output_dir={tmp_path}", "name=same"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 1 and "RunDirInUse" in done.stderr, done.stderr
    assert "IMPORTED False False" in done.stdout, done.stdout


PLAYING_DRIVER = """
import asyncio, sys
sys.path.insert(0, {repo!r})
import launcher
from seal.rollout.driver import play_batch
from seal.rollout.env_client import EnvClient

async def rollouts(url):
    async with EnvClient(url) as env:
        async def play(task_id):  # an open episode waiting for a (slow) model
            async with env.episode(task_id):
                await asyncio.sleep(3600)

        print("PLAYING", flush=True)
        await play_batch(play, ["multi_turn_long_context_0"] * 16, max_failed_share=0.05,
                         what="sample", progress=False)

def play(cfg, url, run, split_file):  # a training job's rollout, as the trainer plays it
    asyncio.run(rollouts(url))

launcher.JOBS["local"] = "__main__:play"
sys.exit(launcher.main(sys.argv[1:]))
"""


def test_ctrl_c_to_the_process_group_prints_the_resume_command_and_no_tracebacks(tmp_path):
    """Ctrl-C at a terminal signals the whole foreground process group: the launcher and
    (before) its service, which died under the job's requests, so the job's client printed
    a screen of connection errors. Now the launcher alone gets it, stops the job, then the
    service, and says how to resume."""
    driver = tmp_path / "driver.py"
    driver.write_text(PLAYING_DRIVER.format(repo=str(REPO)))
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc = subprocess.Popen(
        [sys.executable, "-u", str(driver), "--", f"output_dir={tmp_path}", "name=run"],
        cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a shell's foreground job
        preexec_fn=as_a_foreground_job,
    )  # fmt: skip
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("PLAYING"):
                break
        assert lines and lines[-1].startswith("PLAYING"), "".join(lines)
        started = next(line for line in lines if "environment service started" in line)
        service_pid = int(started.split("(pid ")[1].split(",")[0])
        time.sleep(2)  # episodes in flight
        os.killpg(proc.pid, signal.SIGINT)
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(proc.stdout.read()), daemon=True)
        reader.start()
        reader.join(timeout=60)  # a launcher deaf to Ctrl-C fails here, not hangs the suite
        assert not reader.is_alive(), "the launcher still runs 60 s after Ctrl-C:\n" + "".join(
            lines
        )
        output = "".join(lines) + rest[0]
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    with contextlib.chdir(REPO):  # the launcher's working directory
        hint = commands.resume(tmp_path / "run")
    assert f"resume with: {hint}" in output, output
    for noise in ("Traceback", "ClientConnectorError", "Cannot connect"):
        assert noise not in output, output
    wait_until(lambda: process_gone(service_pid), 15, "Ctrl-C left the service running")
