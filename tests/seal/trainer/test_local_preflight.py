"""The local trainer's preflight (seal/trainer/local_preflight.py, gpu_memory.py): a model and a
`trainer` section that cannot fit the one GPU are refused from the model's config, before
any weight loads, naming what would fit. The GPU is injected (no CUDA here)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from omegaconf import OmegaConf
from tiny_models import qwen25_7b_config
from transformers import Qwen2Config

import launcher
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.trainer import local_preflight
from seal.trainer.gpu_memory import LocalShape, ModelShape
from seal.trainer.local import LocalTrainer
from seal.trainer.model import tiny_qwen2_config
from seal.trainer.preflight_rows import BLOCKER, OK, SKIP, WARN, PreflightFailed

QWEN25_7B = qwen25_7b_config()
H100 = ("NVIDIA H100 80GB HBM3", 79.6)


def seal_trainer(**overrides):
    """exp/SEAL.yaml's `trainer` section (bf16, KL reference, 16k context), typed."""
    cfg = launcher.compose(REPO_ROOT / "exp/SEAL.yaml", [f"{k}={v}" for k, v in overrides.items()])
    return OmegaConf.to_object(cfg.trainer)


def test_a_7b_local_run_does_not_fit_one_80gb_gpu_and_says_what_would():
    shape, run = ModelShape.from_hf_config(QWEN25_7B), LocalShape.from_trainer(seal_trainer())
    # fp32 master weights, gradients, AdamW, the bf16 compute copy and the bf16 reference.
    assert run.weight_bytes() == 20
    update, rollout = local_preflight.check_local_memory(shape, run, H100[1])
    assert update.status == BLOCKER and "margin -" in update.detail
    assert "a model of up to ~2.8B parameters of this shape" in update.detail
    assert local_preflight.VERL_ON_ONE_GPU in update.detail
    # Not one generation's KV cache fits beside 7.6B x 20 bytes: a blocker, not a warning.
    assert rollout.status == BLOCKER and "not one generation" in rollout.detail


def test_a_small_model_fits_and_a_wide_generation_batch_is_named():
    run = LocalShape.from_trainer(seal_trainer())
    tiny = ModelShape.from_hf_config(tiny_qwen2_config(seal_trainer().model))
    rows = local_preflight.check_local_memory(tiny, run, H100[1])
    assert [r.status for r in rows] == [OK, OK]
    assert all("margin +" in r.detail for r in rows)
    # Qwen2.5-1.5B's shape: the weights fit, 128 generations at 16k tokens do not.
    small = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                        num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                        tie_word_embeddings=True)  # fmt: skip
    wide = LocalShape.from_trainer(seal_trainer(**{"trainer.rollout.max_batch_size": 128}))
    update, rollout = local_preflight.check_local_memory(
        ModelShape.from_hf_config(small), wide, H100[1]
    )
    assert update.status == OK
    assert rollout.status == WARN and "trainer.rollout.max_batch_size=" in rollout.detail


def test_the_trainer_refuses_a_7b_model_on_an_80gb_gpu_before_loading_it(
    tmp_path, monkeypatch, capsys
):
    """The model folder holds only config.json: had the trainer got to loading weights,
    it would fail there instead, with another error."""
    model_dir = tmp_path / "qwen2.5-7b-config-only"
    QWEN25_7B.save_pretrained(model_dir)
    (model_dir / "model.safetensors").write_bytes(b"")  # present for the files check
    monkeypatch.setattr(local_preflight, "cuda_card", lambda device: H100)
    t = seal_trainer(**{
        "trainer.model.path": str(model_dir), "trainer.model.device": "cuda",
        "trainer.model.tokenizer": str(SHIPPED_TOKENIZER),
        "trainer.data.max_train_tasks": 2, "trainer.data.max_val_tasks": 1,
    })  # fmt: skip
    (tmp_path / "run").mkdir()
    with pytest.raises(PreflightFailed, match="memory: local update, memory: local rollout"):
        LocalTrainer(t, "http://127.0.0.1:1", tmp_path / "run")
    assert "a model of up to" in capsys.readouterr().out  # the table was printed


def test_on_the_cpu_only_the_models_files_are_checked(tmp_path):
    model_dir = tmp_path / "model"
    QWEN25_7B.save_pretrained(model_dir)
    (model_dir / "model.safetensors").write_bytes(b"")
    t = seal_trainer(**{"trainer.model.device": "cpu", "trainer.model.path": str(model_dir)})
    rows = local_preflight.local_checks(t)
    assert [(r.name, r.status) for r in rows] == [
        ("model files", OK),
        ("memory: local update", SKIP),
        ("memory: local rollout", SKIP),
    ]


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """A Hugging Face cache with nothing in it (this machine's may hold models)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_model_not_on_disk_is_a_blocker_naming_the_download_command(empty_hub_cache):
    rows = local_preflight.local_checks(seal_trainer(**{"trainer.model.device": "cpu"}))
    files = rows[0]
    assert files.name == "model files" and files.status == BLOCKER, rows
    assert "Qwen/Qwen2.5-7B-Instruct is not in this node's Hugging Face cache" in files.detail
    assert "hf download Qwen/Qwen2.5-7B-Instruct`" in files.detail
    assert [r.status for r in rows[1:]] == [SKIP, SKIP]


def test_a_local_run_of_a_model_not_on_disk_is_refused_before_its_run_directory(tmp_path):
    """The launcher looks for the model before it makes the run directory or starts the
    service, and never asks the hub (here a dead address: transformers would retry it)."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    env.pop("HF_HUB_OFFLINE", None)
    args = ["--conf", str(REPO_ROOT / "exp/SEAL.yaml"), "--", "job=local", "name=try",
            f"output_dir={tmp_path / 'out'}"]  # fmt: skip
    done = subprocess.run([sys.executable, str(REPO_ROOT / "launcher.py"), *args],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "model files: Qwen/Qwen2.5-7B-Instruct is not in" in done.stderr, done.stderr
    assert "hf download Qwen/Qwen2.5-7B-Instruct`" in done.stderr
    assert not (tmp_path / "out" / "try").exists()
    assert "environment service" not in done.stdout


def test_the_readmes_one_gpu_line_fits_one_80gb_gpu():
    """README's single-GPU command: the recipe on a model the local trainer's estimate
    fits on one 80 GB card (Qwen2.5-1.5B's shape), not the 7B it refuses."""
    text = (REPO_ROOT / "README.md").read_text()
    lines = text[text.index("## The paper's runs") :].split("```")[1].replace("\\\n", " ")
    line = next(line for line in lines.splitlines() if "job=local" in line)
    overrides = line.split("#")[0].split(" -- ")[1].split()
    t = seal_trainer(**dict(o.split("=", 1) for o in overrides))
    assert t.model.path == "Qwen/Qwen2.5-1.5B-Instruct", line
    assert f"hf download {t.model.path}" in lines, "the line before it downloads the model"
    small = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                        num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                        tie_word_embeddings=True)  # fmt: skip
    rows = local_preflight.check_local_memory(
        ModelShape.from_hf_config(small), LocalShape.from_trainer(t), H100[1]
    )
    assert [r.status for r in rows] == [OK, OK], rows


def test_preflight_runs_for_training_jobs_only():
    assert launcher.job_function("local", preflight=True) is local_preflight.run_local_preflight
    with pytest.raises(ValueError, match="checks training runs"):
        launcher.job_function("replay", preflight=True)
