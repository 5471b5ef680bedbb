"""A run survives every interruption an operator meets, and every loss setting trains:

- A run killed before its first checkpoint (after step 0's validation wrote
  `metrics.jsonl`) restarts from step 0 when resumed, saying what it found, and keeps
  that attempt's files; a fresh start in its directory is refused saying how to resume.
- `trainer.loss.kl_loss_coef=0` with `use_kl_loss` on trains (the reference is built
  whenever the KL loss is on: `needs_reference`, as verl decides).
- A full disk while a checkpoint is written (an injected ENOSPC) fails the run naming the
  checkpoint and the complete one before it; resumed, the run ends as the uninterrupted
  one.
- kill -9 while a checkpoint is written: resumed, the run ends as the uninterrupted one.
- A resume after each state file (capability state, data order, checkpoint metadata,
  metrics, the checkpoint's tensors) is truncated or corrupted either continues exactly
  from the checkpoint or refuses naming the file; nothing is silently reset.

Training runs are subprocesses of one driver (the tiny random Qwen2, 2 steps of 1 task x
2 samples, a checkpoint after each) against one in-process service, each with one CPU
thread so that the runs compare exactly; the uninterrupted run is made once per module.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import serving

import launcher
from env_service.app import create_app
from seal import commands
from seal.algos.loss import PolicyLossConfig, needs_reference
from seal.atomic_file import StateFileError
from seal.rollout.env_client import TOKEN_ENV
from seal.runs import checkpoint as ckpt
from seal.runs.data_order import DATA_ORDER_FILENAME, DataOrderChanged
from seal.runs.metrics_log import read_metrics
from seal.runs.run_dir_checks import UNFINISHED_DIR, check_run_dir
from seal.tocf.state import STATE_FILENAME, CapabilityState
from seal.trainer.seal_hooks import BEST_FILE

REPO = Path(__file__).resolve().parents[3]

TINY = {
    "total_steps": 2,
    "model": {"path": "tiny-qwen2", "dtype": "float32", "device": "cpu"},
    "data": {"train_batch_size": 1, "max_train_tasks": 2, "max_val_tasks": 1},
    "rollout": {"n": 2},
    "limits": {"max_generations": 1, "max_new_tokens": 4, "max_context_tokens": 8192,
               "max_observation_tokens": 64},
    "optim": {"lr": 1e-3, "mini_batch_size": 1, "micro_batch_size": 2},
    "validation": {"test_freq": 100, "before_train": False},
    "checkpoint": {"save_freq": 1, "keep_only_best": False},
    # The KL loss on with a zero coefficient: the reference must still be built.
    "loss": {"use_kl_loss": True, "kl_loss_coef": 0.0},
    "logging": {"wandb": "disabled"},
}  # fmt: skip

DRIVER = """
import errno, json, os, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
import torch
from omegaconf import OmegaConf
from seal.trainer_config import TrainerConfig
from seal.trainer.local import LocalTrainer

run_dir, url, resume, fault = sys.argv[1:5]
cfg = OmegaConf.merge(
    OmegaConf.structured(TrainerConfig), json.loads({tiny!r}),
    {{"checkpoint": {{"resume": resume == "resume"}}}},
)
real_save = torch.save

def faulty_save(obj, f, *args, **kwargs):
    # Step 2's optimizer state is half written when the fault strikes.
    if "step_000002.tmp" in str(f) and str(f).endswith("optimizer.pt"):
        with open(f, "wb") as handle:
            handle.write(b"\\0" * 4096)
        if fault == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        Path(run_dir, "WRITING_CHECKPOINT").touch()  # the test kills -9 now
        time.sleep(600)
    return real_save(obj, f, *args, **kwargs)

if fault != "none":
    torch.save = faulty_save  # seal/runs/checkpoint.py calls torch.save
LocalTrainer(cfg, url, Path(run_dir)).fit()
"""


@pytest.fixture(scope="module")
def service_url():
    with serving(create_app()) as url:
        yield url


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("driver") / "driver.py"
    path.write_text(DRIVER.format(repo=str(REPO), tiny=json.dumps(TINY)))
    return path


def start(driver: Path, run_dir: Path, url: str, resume: bool = False, fault: str = "none"):
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["OMP_NUM_THREADS"] = "1"  # the same arithmetic in every run, so they compare exactly
    log = open(run_dir.parent / f"{run_dir.name}.log", "a")  # noqa: SIM115 - the child holds it
    mode = "resume" if resume else "fresh"
    return subprocess.Popen(
        [sys.executable, "-u", str(driver), str(run_dir), url, mode, fault],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def log_of(run_dir: Path) -> str:
    return (run_dir.parent / f"{run_dir.name}.log").read_text()


def finish(proc: subprocess.Popen, run_dir: Path, timeout: float = 600) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def outcome(run_dir: Path) -> dict:
    """What the run produced that must not depend on interruptions."""
    state = CapabilityState.load(run_dir / STATE_FILENAME)
    rows = read_metrics(run_dir)
    compared = ("train/prompt_tokens_mean", "train/reward_mean", "train/response_tokens_mean")
    return {
        "capability": state.to_dict(),
        "steps": [r["step"] for r in rows],
        "rows": [{k: r.get(k) for k in compared} for r in rows],
        "trainer_state": json.loads(
            (ckpt.latest_checkpoint(run_dir) / "trainer_state.json").read_text()
        )["step"],
        "best": json.loads((ckpt.latest_checkpoint(run_dir) / BEST_FILE).read_text()),
    }


@pytest.fixture(scope="module")
def uninterrupted(driver, service_url, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "uninterrupted"
    code = finish(start(driver, run_dir, service_url), run_dir)
    assert code == 0, log_of(run_dir)[-3000:]
    return run_dir


# --- the KL loss at coefficient 0 -------------------------------------------------------------


@pytest.mark.slow  # the module's uninterrupted run: about a minute on 2 cores
def test_kl_loss_coef_0_with_use_kl_loss_trains(uninterrupted):
    rows = read_metrics(uninterrupted)
    assert [r["step"] for r in rows] == [1, 2]
    # The reference was built and the KL computed (and logged, as verl logs it); it adds 0.
    assert all("actor/kl_loss" in r for r in rows)


def test_needs_reference_is_verls_rule():
    utils = pytest.importorskip("verl.trainer.ppo.utils")
    from omegaconf import OmegaConf

    for use_kl_loss in (True, False):
        for coef in (0.0, 0.001):
            ours = needs_reference(PolicyLossConfig(use_kl_loss=use_kl_loss, kl_loss_coef=coef))
            cfg = OmegaConf.create(
                {
                    "algorithm": {"use_kl_in_reward": False},
                    "actor_rollout_ref": {
                        "actor": {"use_kl_loss": use_kl_loss, "kl_loss_coef": coef}
                    },
                }
            )
            assert ours == utils.need_reference_policy(cfg), (use_kl_loss, coef)


# --- a full disk, and kill -9, while a checkpoint is written -----------------------------------


@pytest.mark.slow  # two runs of the tiny model
def test_a_full_disk_while_a_checkpoint_is_written_then_a_resume_ends_as_uninterrupted(
    driver, service_url, uninterrupted, tmp_path
):
    run_dir = tmp_path / "full_disk"
    code = finish(start(driver, run_dir, service_url, fault="enospc"), run_dir)
    log = log_of(run_dir)
    assert code != 0
    assert "CheckpointWriteError" in log and "No space left on device" in log, log[-3000:]
    assert "step_000002" in log and "step_000001" in log  # the failed one and the kept one
    assert ckpt.latest_checkpoint(run_dir).name == "step_000001"
    assert not (run_dir / "checkpoints" / "step_000002.tmp").exists()  # its space given back

    code = finish(start(driver, run_dir, service_url, resume=True), run_dir)
    assert code == 0, log_of(run_dir)[-3000:]
    assert outcome(run_dir) == outcome(uninterrupted)


@pytest.mark.slow  # two runs of the tiny model
def test_kill_9_while_a_checkpoint_is_written_then_a_resume_ends_as_uninterrupted(
    driver, service_url, uninterrupted, tmp_path
):
    run_dir = tmp_path / "killed"
    proc = start(driver, run_dir, service_url, fault="kill")
    try:
        deadline = time.monotonic() + 600
        while not (run_dir / "WRITING_CHECKPOINT").exists():
            assert proc.poll() is None, log_of(run_dir)[-3000:]
            assert time.monotonic() < deadline, "the run never reached its second checkpoint"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
    finally:
        finish(proc, run_dir)
    assert (run_dir / "checkpoints" / "step_000002.tmp" / "optimizer.pt").exists()
    assert ckpt.latest_checkpoint(run_dir).name == "step_000001"
    (run_dir / "WRITING_CHECKPOINT").unlink()

    code = finish(start(driver, run_dir, service_url, resume=True), run_dir)
    assert code == 0, log_of(run_dir)[-3000:]
    assert outcome(run_dir) == outcome(uninterrupted)


@pytest.mark.slow  # needs the module's uninterrupted run
def test_a_crash_between_a_checkpoints_rename_and_its_pointer_resumes_the_one_before(
    uninterrupted, tmp_path
):
    """kill -9 after `step_000002` is complete but before `latest` names it: the resume
    starts from step 1 (and will write step 2 again), reading nothing half made."""
    run_dir = copy_run(uninterrupted, tmp_path)
    (run_dir / "checkpoints" / ckpt.LATEST).write_text('{"step": 1, "path": "step_000001"}')
    cfg = tiny_config(resume=True)
    assert check_run_dir(run_dir, cfg, "local") == []
    assert ckpt.latest_checkpoint(run_dir).name == "step_000001"


# --- a resume after each state file is damaged -------------------------------------------------


def tiny_config(resume: bool):
    from omegaconf import OmegaConf

    from seal.trainer_config import TrainerConfig

    merged = OmegaConf.merge(
        OmegaConf.structured(TrainerConfig), TINY, {"checkpoint": {"resume": resume}}
    )
    return OmegaConf.to_object(merged)


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    """A copy to damage: small files copied, the large tensors hard-linked (a damaged file
    is always replaced, never written through the link)."""
    copy = tmp_path / "run"

    def link_or_copy(src, dst):
        if os.path.getsize(src) > 1 << 20:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(run_dir, copy, copy_function=link_or_copy)
    (copy / ".lock").unlink(missing_ok=True)
    return copy


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.unlink()  # never through a hard link
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(bytes((b * 7 + 13) % 256 for b in data[:4096]) or b"\xff")
    elif how == "wrong shape":  # valid JSON (or JSON lines) without what the file holds
        path.write_text("{}\n")
    else:
        raise ValueError(how)


CHECKPOINT = "checkpoints/step_000002"
STATE_FILES = [
    STATE_FILENAME,  # the run directory's copy; the checkpoint's is the one resumed
    f"{CHECKPOINT}/{STATE_FILENAME}",
    f"{CHECKPOINT}/trainer_state.json",
    f"{CHECKPOINT}/{BEST_FILE}",
    f"checkpoints/{ckpt.LATEST}",
    DATA_ORDER_FILENAME,
    "metrics.jsonl",
    f"{CHECKPOINT}/optimizer.pt",
    f"{CHECKPOINT}/rng.pt",
    f"{CHECKPOINT}/model.safetensors",
]


@pytest.mark.slow  # needs the module's uninterrupted run
@pytest.mark.parametrize("how", ["truncated", "garbage", "wrong shape"])
@pytest.mark.parametrize("name", STATE_FILES)
def test_a_resume_after_a_state_file_is_damaged_continues_exactly_or_names_it(
    uninterrupted, service_url, tmp_path, name, how
):
    if how == "wrong shape" and not (name.endswith(".json") or name in (
        f"checkpoints/{ckpt.LATEST}", "metrics.jsonl")):  # fmt: skip
        pytest.skip("a tensor file has no JSON shape to get wrong")
    from seal.trainer.local import LocalTrainer

    run_dir = copy_run(uninterrupted, tmp_path)
    path = run_dir / name
    damage(path, how)
    cfg = tiny_config(resume=True)
    try:
        check_run_dir(run_dir, cfg, "local")
        trainer = LocalTrainer(cfg, service_url, run_dir)
    except (StateFileError, DataOrderChanged) as refused:
        assert str(path) in str(refused), f"the refusal does not name {path}: {refused}"
        return
    # Not refused: then it continues exactly from the checkpoint, nothing reset.
    try:
        saved = ckpt.load_trainer_state(uninterrupted / CHECKPOINT)
        assert name == STATE_FILENAME, f"a damaged {name} was taken as good"
        assert trainer.state == saved and trainer.state.step == 2
        best = json.loads((uninterrupted / CHECKPOINT / BEST_FILE).read_text())
        assert trainer.seal.best == best and best["step"] is not None
        want = CapabilityState.load(uninterrupted / CHECKPOINT / STATE_FILENAME).to_dict()
        assert trainer.capability.to_dict() == want
        assert CapabilityState.load(run_dir / STATE_FILENAME).to_dict() == want  # repaired
        assert read_metrics(run_dir) == read_metrics(uninterrupted)
    finally:
        trainer._lock.release()


@pytest.mark.slow  # needs the module's uninterrupted run
def test_a_metrics_line_cut_by_a_crash_is_not_a_damage(uninterrupted, tmp_path):
    """The last row cut short (its step ran after the checkpoint) is dropped on resume."""
    run_dir = copy_run(uninterrupted, tmp_path)
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 3, "train/rew')
    assert check_run_dir(run_dir, tiny_config(resume=True), "local") == []


# --- a run killed before its first checkpoint --------------------------------------------------

KILLED_AFTER_STEP_0 = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from seal.runs import metrics_log
import launcher

write = metrics_log.MetricsWriter.write

def write_then_die(self, step, metrics):
    write(self, step, metrics)
    if step == 0:  # step 0's validation is logged: killed before any checkpoint
        os.kill(os.getpid(), signal.SIGKILL)

metrics_log.MetricsWriter.write = write_then_die
sys.exit(launcher.main(sys.argv[1:]))
"""

LAUNCHER_RUN = [
    "trainer.total_steps=1",
    "trainer.data.train_batch_size=1",
    "trainer.data.max_train_tasks=1",
    "trainer.data.max_val_tasks=1",
    "trainer.rollout.n=2",
    "trainer.limits.max_generations=1",
    "trainer.limits.max_new_tokens=4",
    "trainer.optim.mini_batch_size=1",
    "trainer.optim.micro_batch_size=2",
    "trainer.validation.before_train=true",
    "trainer.checkpoint.save_freq=1",
]


@pytest.mark.slow  # two launcher runs of the tiny model
def test_a_run_killed_before_its_first_checkpoint_restarts_from_step_0(tmp_path, capsys):
    driver = tmp_path / "killed_after_step_0.py"
    driver.write_text(KILLED_AFTER_STEP_0.format(repo=str(REPO)))
    args = ["--conf", str(REPO / "exp/cpu_default.yaml"), f"output_dir={tmp_path}", "name=run",
            *LAUNCHER_RUN]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    killed = subprocess.run(
        [sys.executable, str(driver), *args], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert [r["step"] for r in read_metrics(run_dir)] == [0]
    assert not (run_dir / "checkpoints" / ckpt.LATEST).exists()

    # A fresh start is refused, saying what was found and how to restart.
    assert launcher.main(args) == 1
    err = capsys.readouterr().err
    assert "never reached its first checkpoint" in err and "metrics.jsonl" in err
    assert f"restart it from step 0 with `{commands.resume(run_dir)}`" in err

    # Resumed, it restarts from step 0, says so, and keeps the killed attempt's files.
    resumed = subprocess.run(
        [sys.executable, str(REPO / "launcher.py"), *args, "trainer.checkpoint.resume=true"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    assert "never reached its first checkpoint" in out and "restarting it from step 0" in out
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1]
    assert ckpt.latest_checkpoint(run_dir).name == "step_000001"
    (attempt,) = (run_dir / UNFINISHED_DIR).iterdir()
    assert [r["step"] for r in read_metrics(attempt)] == [0]


def test_resume_in_a_directory_without_a_run_is_refused(tmp_path):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    with pytest.raises(FileNotFoundError, match="holds no run to resume"):
        check_run_dir(run_dir, tiny_config(resume=True), "local")
