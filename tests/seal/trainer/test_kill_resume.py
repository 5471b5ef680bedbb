"""A run killed and resumed ends as the uninterrupted run of the same seed.

Two launcher runs of the local trainer on the tiny random Qwen2 (nothing downloaded),
3 steps of 2 tasks x 2 samples, a checkpoint after every step: one runs through; the
other is killed after its first checkpoint, its service by kill -9 and then the trainer
(the launcher process) by kill -9, and is resumed by a third launcher with
`trainer.checkpoint.resume=true`, which starts a fresh service. Both must end with the
same capability state, hence the same failure profile, and their steps must have seen
the same prompts (`train/prompt_tokens_mean`: the guidelines the profile puts in the
system prompt are in it), which needs the resumed trainer to push the profile to the
fresh service before its first step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seal.rollout.env_client import TOKEN_ENV
from seal.runs.metrics_log import read_metrics
from seal.tocf.state import STATE_FILENAME, CapabilityState

REPO = Path(__file__).resolve().parents[3]
TINY_RUN = [
    "trainer.total_steps=3",
    "trainer.data.train_batch_size=2",
    "trainer.data.max_train_tasks=4",  # 2 steps per epoch: step 3 opens a new epoch
    "trainer.data.max_val_tasks=1",
    "trainer.rollout.n=2",
    "trainer.limits.max_generations=2",
    "trainer.limits.max_new_tokens=6",
    "trainer.optim.mini_batch_size=1",
    "trainer.optim.micro_batch_size=2",
    "trainer.validation.before_train=false",
    "trainer.validation.test_freq=100",
    "trainer.checkpoint.save_freq=1",
    "trainer.checkpoint.keep_only_best=false",  # step 1's checkpoint is read below
]
# What the prompts and the outcomes of each step show; timings and losses differ.
COMPARED = ("train/prompt_tokens_mean", "train/reward_mean", "train/failed_episodes")


def launch(tmp_path: Path, name: str, *overrides: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    # Two runs train at once: one thread each, or they fight over the cores (alike in
    # both runs, so their numbers stay comparable).
    env["OMP_NUM_THREADS"] = "1"
    args = ["--conf", str(REPO / "exp/cpu_default.yaml"), f"output_dir={tmp_path}",
            f"name={name}", *TINY_RUN, *overrides]  # fmt: skip
    log = open(tmp_path / f"{name}.log", "a")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(
        [sys.executable, "-u", str(REPO / "launcher.py"), *args],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def finished(proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    assert proc.wait(timeout=timeout) == 0, log.read_text()[-3000:]


def service_pid(log: Path) -> int:
    for line in log.read_text().splitlines():
        if line.startswith("[launcher] environment service started at "):
            return int(line.split("(pid ")[1].split(",")[0])
    raise AssertionError(f"no service start in {log}")


def latest_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "checkpoints" / "latest").read_text())["step"]
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.slow  # three launcher runs of the tiny model: about 60 s on 2 cores
def test_a_run_killed_and_resumed_ends_as_the_uninterrupted_run(tmp_path):
    straight = launch(tmp_path, "straight")
    killed = launch(tmp_path, "killed")
    try:
        deadline = time.monotonic() + 300
        while latest_step(tmp_path / "killed") < 1:
            assert killed.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no first checkpoint"
            time.sleep(0.1)
        os.kill(service_pid(tmp_path / "killed.log"), signal.SIGKILL)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        finished(straight, tmp_path / "straight.log")
    finally:
        for proc in (straight, killed):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert latest_step(tmp_path / "killed") < 3, "the run ended before it was killed"

    resumed = launch(tmp_path, "killed", "trainer.checkpoint.resume=true")
    try:
        finished(resumed, tmp_path / "killed.log")
    finally:
        if resumed.poll() is None:
            resumed.kill()
            resumed.wait()

    want = CapabilityState.load(tmp_path / "straight" / STATE_FILENAME)
    got = CapabilityState.load(tmp_path / "killed" / STATE_FILENAME)
    assert got.to_dict() == want.to_dict()
    assert got.failure_profile() == want.failure_profile()
    assert want.run.num_trajectories == 3 * 2 * 2
    # Step 2 is the first with guidelines (the profile after step 1), so a resume that
    # does not push the profile first sees shorter prompts in its first step.
    rows = {name: read_metrics(tmp_path / name) for name in ("straight", "killed")}
    assert [r["step"] for r in rows["killed"]] == [1, 2, 3]
    for key in COMPARED:
        assert [r[key] for r in rows["killed"]] == [r[key] for r in rows["straight"]], key
    after_step_1 = CapabilityState.load(
        tmp_path / "straight/checkpoints/step_000001" / STATE_FILENAME
    )
    assert after_step_1.failure_profile()["tags"], "no guidelines in step 2: the test shows nothing"
