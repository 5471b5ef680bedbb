"""verl's own trainer loop end to end on CPU: `launcher.py --conf exp/verl_cpu_smoke.yaml`
runs verl's run_ppo -> TaskRunnerV1 -> the SEAL trainer's fit() (the CPU backend of
seal/trainer/verl/cpu: gloo FSDP actor, Hugging Face generation replica, weight sync over
gloo) against the real environment service: initial validation, 2 training steps of
1 task x 2 samples, a checkpoint at step 2; then a resume from verl's checkpoint, whose
service is killed once step 3 is logged. The tests read what the two runs left in the
run directory and what the second printed.

Slow (a few minutes: verl's workers start twice, and every token of a BFCL prompt goes
through the 151,936-wide output layer on 2 cores); CI runs it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
from conftest import early_run, free_port

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from launcher import compose  # noqa: E402
from seal.algos.advantage import GRPOConfig, grpo_advantages  # noqa: E402
from seal.rollout.env_client import is_healthy  # noqa: E402
from seal.runs.data_order import epoch_order  # noqa: E402
from seal.runs.interface_log import read_interfaces  # noqa: E402
from seal.runs.records import read_val_dir  # noqa: E402
from seal.tocf.state import STATE_FILENAME, CapabilityState  # noqa: E402
from seal.trainer.reweight import SampleOutcome, observe_and_reweight  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
SMOKE = ROOT / "exp/verl_cpu_smoke.yaml"
NAME = "verl_cpu_smoke"


class FirstRun:
    """Run 1 (steps 1-2, a checkpoint) in the background: conftest starts it when the
    suite's collection ends, so its minutes overlap the tests before this module. Its
    output goes to a file (a pipe nobody reads would fill and stall it)."""

    def __init__(self):
        self.out = Path(tempfile.mkdtemp(prefix="verl_cpu_smoke_"))
        self.log = self.out / "first_run.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "launcher.py", "--conf", str(SMOKE), "--",
                 f"output_dir={self.out}"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip

    def wait(self) -> None:
        self.process.wait()

    def result(self, timeout: float = 1200) -> subprocess.CompletedProcess:
        returncode = self.process.wait(timeout=timeout)
        return subprocess.CompletedProcess(self.process.args, returncode, self.log.read_text(), "")

    def stop(self) -> None:
        if self.process.poll() is None:
            # SIGTERM first: the launcher then stops its service and Ray's processes,
            # which a SIGKILL would leave behind.
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.out, ignore_errors=True)


start_early_run = FirstRun  # the hook tests/conftest.py calls when collection ends


def tail(result: subprocess.CompletedProcess, lines: int = 40) -> str:
    text = result.stdout + result.stderr
    return "\n".join(line for line in text.splitlines() if "WARNING: Location" not in line)[-6000:]


def metrics_by_step(run_dir: Path) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert row["step"] not in rows, f"step {row['step']} logged twice"
        rows[row["step"]] = row
    return rows


@pytest.fixture(scope="module")
def smoke(request):
    """Run 1: steps 1-2 and a checkpoint, with the service the launcher starts. Run 2:
    resume to step 4 with a service this test starts and kills once step 3 is logged, so
    step 4's episodes find no service."""
    run = early_run(request.config, __name__)
    if run is None:  # not started by conftest (the module imported some other way)
        run = start_early_run()
        request.addfinalizer(run.stop)
    out = run.out
    run_dir = out / NAME
    first = run.result()
    assert first.returncode == 0, tail(first)
    after_first = {
        "metrics": metrics_by_step(run_dir),
        "state": json.loads((run_dir / STATE_FILENAME).read_text()),
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").iterdir()),
    }
    token = secrets.token_hex(16)
    service, url = start_service(token)
    try:
        second, seconds_after_kill = resume_and_kill_service_after_step_3(
            out, run_dir, service, url, token
        )
    finally:
        service.kill()
    return SimpleNamespace(
        run_dir=run_dir, first=first, second=second, after_first=after_first, service_url=url,
        seconds_after_kill=seconds_after_kill,
    )  # fmt: skip


def start_service(token: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    service = subprocess.Popen(
        [sys.executable, "-m", "env_service", "--port", str(port)],
        cwd=ROOT, env={**os.environ, "SEAL_ENV_TOKEN": token},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not is_healthy(url):
        assert service.poll() is None and time.monotonic() < deadline, "service did not start"
        time.sleep(0.2)
    return service, url


def resume_and_kill_service_after_step_3(out, run_dir, service, url, token):
    port = url.rsplit(":", 1)[1]
    run = subprocess.Popen(
        [sys.executable, "launcher.py", "--conf", str(SMOKE), "--", f"output_dir={out}",
         "trainer.checkpoint.resume=true", "trainer.total_steps=4",
         "service.start=false", f"service.port={port}"],
        cwd=ROOT, env={**os.environ, "SEAL_ENV_TOKEN": token}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        while 3 not in metrics_by_step(run_dir):
            if run.poll() is not None:
                pytest.fail(f"the resumed run ended before step 3:\n{run.stdout.read()[-6000:]}")
            assert time.monotonic() < deadline, "no step 3 within 15 minutes"
            time.sleep(1)
        service.kill()
        killed = time.monotonic()
        output, _ = run.communicate(timeout=600)
        return subprocess.CompletedProcess(run.args, run.returncode, output, ""), (
            time.monotonic() - killed
        )
    finally:
        run.kill()


def trained_steps(run_dir: Path) -> list[int]:
    """The steps whose advantages verl computed: 1-3, and 4 when step 4's rollout ended
    (its episodes, or some of them) before the service was killed: the kill follows step
    3's metrics row by up to the watcher's poll, and the test controls no more than that."""
    steps = sorted(int(p.stem.split("_")[1]) for p in (run_dir / "advantages").glob("step_*.json"))
    assert steps in ([1, 2, 3], [1, 2, 3, 4]), steps
    return steps


def test_each_step_logs_the_seal_metrics_and_validation_records(smoke):
    rows = metrics_by_step(smoke.run_dir)
    assert sorted(rows) == [0, 1, 2, 3]
    for step in (1, 2, 3):
        keys = set(rows[step])
        assert any(k.startswith("apatch/") for k in keys), sorted(keys)
        assert any(k.startswith("tocf/") for k in keys), sorted(keys)
        assert rows[step]["seal/step_s"] > 0
        # The paper's labels of the step's failed episodes (the random policy fails all).
        labels = {k: v for k, v in rows[step].items() if k.startswith("train/paper_label/")}
        assert sum(labels.values()) == pytest.approx(1.0), sorted(keys)
    # The interface state of each step: one task x 2 samples, the paper's layers.
    interfaces = read_interfaces(smoke.run_dir)
    steps = [(r["step"], r["episodes"]) for r in interfaces]
    assert steps[:3] == [(1, 2), (2, 2), (3, 2)]
    assert [step for step, _ in steps[3:]] == [4][: len(trained_steps(smoke.run_dir)) - 3]
    # Step 4 may hold fewer episodes (those that ended before the service was killed):
    # every episode of every step has the schema cues and no other layer, and no guideline.
    paper_layers = [
        (r["step"], {"schema_cues": r["episodes"], "type_hints": 0, "recovery_feedback": 0, "guidelines": 0}, [])
        for r in interfaces
    ]  # fmt: skip
    assert [(r["step"], r["layers"], r["shown"]) for r in interfaces] == paper_layers
    eval_ids = [r["extra_info"]["task_id"] for r in pq.read_table(ROOT / "data/smoke_eval.parquet").to_pylist()]  # fmt: skip
    records = read_val_dir(smoke.run_dir / "validation")
    assert sorted(records) == [0, 2]  # before training, and at the checkpoint step
    for step, step_records in records.items():
        assert sorted(r.task_id for r in step_records) == sorted(eval_ids), step
        assert all(r.failure_tags for r in step_records)
        assert all(r.score or r.paper_label for r in step_records)  # a label per failure
    assert "global_step_2" in smoke.after_first["checkpoints"]


def test_reports_read_the_run(smoke, tmp_path):
    stats = subprocess.run(
        [sys.executable, "-m", "seal.report.cli", str(smoke.run_dir), "--table", "markdown"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    table = [line for line in stats.stdout.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in table[2:]] == ["0", "2"]
    assert all("(0/1)" in line for line in table[2:])
    report = subprocess.run(
        [sys.executable, "-m", "seal.report.cli", str(smoke.run_dir), "--out-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    assert (tmp_path / "report.md").read_text().count("multi_turn_base") >= 1


def test_each_update_reaches_generation(smoke):
    """After every step the actor's new weights reach the replica through verl's weight
    sync (their change is non-zero there, and moves the log-probability of a fixed
    sequence), and the next rollout is generated with exactly those weights: verl's own
    comparison of the rollout's log-probs with the actor's is at float32 rounding."""
    rows = metrics_by_step(smoke.run_dir)
    for step in (1, 2, 3):
        row = rows[step]
        assert row["rollout/weight_version"] == step
        assert row["rollout/weight_update_l2"] > 1e-6
        assert row["rollout/probe_logprob_change"] > 1e-7
        assert row["training/rollout_probs_diff_valid"] == 1
        assert row["training/rollout_probs_diff_max"] < 1e-6, row
        # the change a step makes is far larger than the rollout/actor mismatch
        assert row["rollout/probe_logprob_change"] > 100 * row["training/rollout_probs_diff_max"]


def test_advantages_trained_on_equal_the_core(smoke):
    """Replaying the dumped samples of steps 1-3 through the core (GRPO per group, then
    the capability state + A-Patch, one state carried across the resume) gives the
    advantages verl trained on, and the final capability state of the run (with step 4's
    samples, as verl grouped them, when step 4 got that far before the service died)."""
    t = OmegaConf.to_object(compose(SMOKE, []).trainer)
    capability = CapabilityState(t.capability)
    steps_per_epoch = 4 // t.data.train_batch_size
    for step in trained_steps(smoke.run_dir):
        dump = json.loads((smoke.run_dir / f"advantages/step_{step:06d}.json").read_text())
        rows = dump["samples"]
        grpo = torch.tensor([[r["grpo_advantage"]] for r in rows])
        if step <= 3:  # whole steps: verl's GRPO is checked too
            assert len(rows) == t.data.train_batch_size * t.rollout.n
            assert len({r["uid"] for r in rows}) == t.data.train_batch_size  # a group per task
            rewards = torch.tensor([r["reward"] for r in rows])
            norm = GRPOConfig(norm_by_std=t.advantage.norm_by_std)
            ours = grpo_advantages(
                rewards, [r["uid"] for r in rows], torch.ones(len(rows), 1), norm
            )
            torch.testing.assert_close(ours, grpo)
        capability.start_epoch((step - 1) // steps_per_epoch)
        samples = [
            SampleOutcome(
                r["task_id"], r["category"], r["reward"], r["accuracy"], r["failure_tags"]
            )
            for r in rows
        ]
        patched, _ = observe_and_reweight(
            capability, samples, grpo, torch.ones(len(rows), 1), t.apatch,
            step=step, epoch=capability.epoch,
        )  # fmt: skip
        torch.testing.assert_close(patched[:, 0], torch.tensor([r["advantage"] for r in rows]))
        assert all(r["spread"] == 0 for r in rows)
    saved = CapabilityState.load(smoke.run_dir / STATE_FILENAME, t.capability)
    assert saved.to_dict() == capability.to_dict()


def test_resume_continues_the_run(smoke):
    """The resumed run starts at step 3 from the state saved with step 2's checkpoint,
    and its batch is the one the run's data order gives the uninterrupted run at step 3
    (verl samples through EpochOrderSampler: the local trainer's batches)."""
    first_rows = smoke.after_first["metrics"]
    assert sorted(first_rows) == [0, 1, 2]
    rows = metrics_by_step(smoke.run_dir)  # the resumed run logged step 3 only once
    assert sorted(rows) == [0, 1, 2, 3]
    assert {k: rows[2][k] for k in first_rows[2]} == first_rows[2]
    checkpoint_state = json.loads(
        (smoke.run_dir / f"checkpoints/global_step_2/{STATE_FILENAME}").read_text()
    )
    assert checkpoint_state == smoke.after_first["state"]
    train_ids = [r["extra_info"]["task_id"] for r in pq.read_table(ROOT / "data/smoke_train.parquet").to_pylist()]  # fmt: skip
    data = compose(SMOKE, []).trainer.data
    batch, steps_per_epoch = data.train_batch_size, len(train_ids) // data.train_batch_size
    for step in (1, 2, 3):
        dump = json.loads((smoke.run_dir / f"advantages/step_{step:06d}.json").read_text())
        epoch, k = divmod(step - 1, steps_per_epoch)
        order = epoch_order(train_ids, data.seed, epoch, data.order)
        expected = set(order[k * batch : (k + 1) * batch])
        assert {r["task_id"] for r in dump["samples"]} == expected, step


def test_a_service_that_dies_mid_run_stops_the_run_naming_it(smoke):
    """The service of the resumed run went away after step 3: step 4's episodes fail and
    the run ends, in bounded time, with an error that names the service."""
    assert smoke.second.returncode != 0
    expected = f"the environment service at {smoke.service_url} does not answer at step 4"
    assert expected in smoke.second.stdout, tail(smoke.second)
    assert smoke.seconds_after_kill < 300


def test_the_run_passed_the_preflight_with_the_gpu_mapping(smoke):
    """The run checked itself first, before Ray started (service with the token the
    workers get from Ray's runtime environment, shared run directory, tracking mode, Ray CPUs, disk, the
    model's chat template) and trained with the mapping GPU runs get: vLLM's context = the
    context limit, dynamic batching by token budget in the update and both log-prob passes,
    the latest and best checkpoints kept, the policy exported as Hugging Face weights."""
    log = smoke.first.stdout
    assert "[verl] preflight passed: no blocker" in log, tail(smoke.first)
    for row in ("service from workers", "shared filesystem", "tracking", "Ray CPUs", "disk"):
        line = next(line for line in log.splitlines() if line.startswith(f"│ {row}"))
        assert "│ ok" in line, line
    config = OmegaConf.load(smoke.run_dir / "verl_config.yaml")
    arr = config.actor_rollout_ref
    context = config.seal.trainer.limits.max_context_tokens
    assert arr.rollout.max_model_len == context
    assert arr.actor.use_dynamic_bsz and arr.rollout.log_prob_use_dynamic_bsz
    assert arr.actor.ppo_max_token_len_per_gpu >= context
    assert config.trainer.max_actor_ckpt_to_keep == 1


def test_checkpoints_hold_hugging_face_weights_of_the_trained_policy(smoke):
    from transformers import AutoModelForCausalLM

    exported = smoke.run_dir / "checkpoints/global_step_2/actor/huggingface"
    trained = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.bfloat16)
    # verl exports bfloat16: compare with the initial weights rounded the same way.
    initial = AutoModelForCausalLM.from_pretrained(
        smoke.run_dir / "tiny_model", dtype=torch.bfloat16
    ).state_dict()
    moved = [n for n, p in trained.state_dict().items() if not torch.equal(p, initial[n])]
    assert moved, "the exported weights are the initial ones"
    # A model directory as it is: verl's checkpoint manager saves the tokenizer beside them.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(exported)
    initial_tokenizer = AutoTokenizer.from_pretrained(smoke.run_dir / "tiny_model")
    assert len(tokenizer) == len(initial_tokenizer) and tokenizer.chat_template
