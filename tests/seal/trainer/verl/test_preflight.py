"""The preflight of a verl run (seal/trainer/verl/preflight.py): each check is a function of
facts, so every blocker is shown here with the facts of a machine that has it (an old
driver, too few GPUs or CPUs, a full disk, a worker that cannot reach the service, a node
that does not share the run directory, a model whose chat template the tool format does not
know, a node without the model's files), next to the facts of one that passes. The paper's
configs are checked with the facts of a 4 x H100 node. The CPU smoke run (tests/seal/trainer/verl/test_cpu_smoke.py) runs them all against
a real Ray and service, and must pass them, as every verl run does before it starts."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest
from conftest import shipped_tokenizer
from tiny_models import qwen25_7b_config

pytest.importorskip("verl")

from huggingface_hub import constants as hf_constants  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

import launcher  # noqa: E402
from seal.formats.registry import get_format  # noqa: E402
from seal.trainer.verl.memory_estimate import RunShape  # noqa: E402
from seal.trainer.verl.node_facts import (  # noqa: E402
    OK,
    Gpu,
    ModelNotLocal,
    NodeFacts,
    local_model_dir,
    model_presence,
    this_node_facts,
)
from seal.trainer.verl.preflight import (  # noqa: E402
    BLOCKER,
    WARN,
    ModelShape,
    check_chat_template,
    check_cpus,
    check_disk,
    check_driver,
    check_gpus,
    check_memory,
    check_model_files,
    check_service,
    check_shared_fs,
    check_tracking,
    checkpoint_bytes,
    kept_checkpoints,
)
from seal.trainer.verl.verl_config import compose_verl_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
GIB = 1024**3
H100 = Gpu("NVIDIA H100 80GB HBM3", 79.6, "580.65.06")
QWEN25_7B = qwen25_7b_config()


def node(name="gpu0", cpus=32.0, gpus=(H100,) * 4, **facts) -> NodeFacts:
    env = facts.pop("env", {"WANDB_MODE": "offline", "WANDB_API_KEY": None})
    return NodeFacts(name, cpus, list(gpus), env=env, **facts)


@pytest.fixture(scope="module")
def seal_run(tmp_path_factory) -> RunShape:
    run_cfg = launcher.compose(ROOT / "exp/SEAL.yaml", [])
    config = compose_verl_config(run_cfg, "http://127.0.0.1:1", tmp_path_factory.mktemp("seal"))
    return RunShape.from_config(config)


def test_the_paper_recipe_fits_a_4_gpu_h100_node(seal_run):
    shape = ModelShape.from_hf_config(QWEN25_7B)
    assert 7.5e9 < shape.params < 7.7e9  # Qwen2.5-7B: 7.62B
    checks = check_memory(shape, [node()], seal_run)
    assert [c.status for c in checks] == [OK, OK, WARN], checks
    # 64 episodes per replica of up to 16384 tokens are more than the KV cache holds at
    # once: vLLM queues them (a warning), but one full-length episode fits many times.
    assert "64 run at once per replica" in checks[2].detail
    assert check_gpus([node()], seal_run).status == OK
    assert check_driver([node()], seal_run).status == OK
    assert check_cpus([node(cpus=16)], seal_run).status == OK  # 12 + 2 units + 1, +1


def test_an_old_driver_is_a_blocker(seal_run):
    old = node(gpus=[Gpu("NVIDIA A100-SXM4-80GB", 79.2, "535.104.05")] * 4)
    check = check_driver([node("gpu0"), old], seal_run)
    assert check.status == BLOCKER
    assert "driver >= 580" in check.detail and "535.104.05" in check.detail
    assert check_driver([node(gpus=[])], seal_run).status == BLOCKER  # no driver at all


def test_too_few_gpus_is_a_blocker(seal_run):
    check = check_gpus([node(gpus=[H100] * 2)], seal_run)
    assert check.status == BLOCKER and "needs 1 node(s) with 4 GPUs" in check.detail


def test_too_few_cpus_is_a_blocker(seal_run):
    # verl's defaults (8 storage units) on a 4-GPU node ask 21 CPUs; the mapping asks 15.
    check = check_cpus([node(cpus=8)], seal_run)
    assert check.status == BLOCKER and "Ray would wait forever" in check.detail
    assert "verl reserves 15" in check.detail


def test_too_little_disk_is_a_blocker(seal_run):
    shape = ModelShape.from_hf_config(QWEN25_7B)
    size = checkpoint_bytes(shape.params, export_hf=True)
    assert 95 * GIB < size < 105 * GIB  # fp32 shards + Adam + bf16 HF weights: 107 GB
    kept = kept_checkpoints(keep_only_best=True, total_steps=72, save_freq=10)
    assert kept == 3 and kept_checkpoints(False, 72, 10) == 8
    check = check_disk(200 * GIB, kept * size, Path("/scratch"), kept)
    assert check.status == BLOCKER and "for 3 checkpoints" in check.detail
    assert check_disk(400 * GIB, kept * size, Path("/scratch"), kept).status == OK


def test_memory_that_cannot_fit_is_a_blocker(seal_run):
    shape = ModelShape.from_hf_config(QWEN25_7B)
    small = [node(gpus=[Gpu("NVIDIA A10", 22.0, "580.65.06")] * 4)]
    training, rollout, kv = check_memory(shape, small, seal_run)
    assert training.status == BLOCKER and rollout.status == BLOCKER
    assert kv.status == BLOCKER and "not even one fits" in kv.detail


def test_a_service_a_worker_cannot_reach_is_a_blocker():
    nodes = [node("head"), node("worker", service="unreachable: connection refused")]
    check = check_service(nodes, "http://10.0.0.1:8082")
    assert check.status == BLOCKER
    assert "worker: unreachable" in check.detail and "head" not in check.detail.split(":")[2]
    tokenless = node("worker", service="$SEAL_ENV_TOKEN is not set in the worker")
    assert check_service([tokenless], "http://x").status == BLOCKER
    assert check_service([node("head")], "http://x").status == OK


def test_no_shared_filesystem_is_a_blocker():
    nodes = [node("head"), node("worker", sees_run_dir=False)]
    check = check_shared_fs(nodes, Path("/home/me/seal/outputs/SEAL"))
    assert check.status == BLOCKER and check.detail.startswith("worker cannot read")
    assert "shared filesystem at the same path" in check.detail


def test_tracking_not_reaching_workers_is_a_blocker():
    nodes = [node("head"), node("worker", env={"WANDB_MODE": None})]
    assert check_tracking(nodes, "offline").status == BLOCKER
    assert check_tracking([node("head")], "offline").status == OK
    assert check_tracking([node("head")], "online").status == BLOCKER  # no key


def test_an_unknown_chat_template_is_a_blocker(tokenizer):
    qwen, llama = get_format("qwen2.5"), get_format("bfcl_prompt")
    assert check_chat_template(tokenizer, qwen).status == OK
    # Qwen's tokenizer with a Llama-layout format: <|eot_id|> is not one of its tokens.
    check = check_chat_template(tokenizer, llama)
    assert check.status == BLOCKER and "<|eot_id|>" in check.detail
    # A model whose template closes turns differently (Llama 3's eot, with the token known).
    other = shipped_tokenizer()
    other.add_special_tokens({"additional_special_tokens": ["<|eot_id|>"]})
    other.chat_template = (
        "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
        "{{ m.content }}<|eot_id|>{% endfor %}"
    )
    check = check_chat_template(other, qwen)
    assert check.status == BLOCKER and check.detail.startswith("unknown chat template")
    other.chat_template = None  # a base model's tokenizer
    check = check_chat_template(other, qwen)
    assert check.status == BLOCKER and "has none" in check.detail


LLAMA31_8B = LlamaConfig(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
    tie_word_embeddings=False,
)  # fmt: skip
"""ToolACE-2-8B's shape (Llama 3.1 8B's config.json)."""


@pytest.fixture(scope="module")
def toolace_run(tmp_path_factory) -> RunShape:
    run_cfg = launcher.compose(ROOT / "exp/SEAL_toolace2_8b.yaml", [])
    config = compose_verl_config(run_cfg, "http://127.0.0.1:1", tmp_path_factory.mktemp("ta"))
    return RunShape.from_config(config)


@pytest.mark.parametrize("which", ["seal", "toolace"])
def test_the_paper_configs_memory_rows_count_every_term_and_say_their_margin(
    which, seal_run, toolace_run
):
    run, hf = (seal_run, QWEN25_7B) if which == "seal" else (toolace_run, LLAMA31_8B)
    training, rollout, kv = check_memory(ModelShape.from_hf_config(hf), [node()], run)
    assert [training.status, rollout.status] == [OK, OK]
    # The terms a desk audit found missing: CUDA contexts, NCCL, FSDP's root unit.
    assert "2 CUDA contexts and NCCL (3.0)" in training.detail
    assert "FSDP's root unit whole" in training.detail
    assert "its CUDA context and NCCL (2.0)" in rollout.detail
    # Held against a share of the card, not all of it; the margin said in GiB.
    assert "of 71.6 (90% of 79.6): margin +" in training.detail
    assert "of 75.6 (95% of 79.6): margin +" in rollout.detail
    # The rollout phase as the audit estimated it (~71 GiB for SEAL.yaml, worse for 8B).
    need = float(rollout.detail.split()[0].lstrip("~"))
    assert 70 < need < 75, rollout.detail
    assert "largest verl.gpu_memory_utilization that fits: 0.6" in rollout.detail
    assert "episodes of max_model_len 16384" in kv.detail


def test_a_rollout_over_the_card_names_the_utilization_that_fits(seal_run):
    shape = ModelShape.from_hf_config(QWEN25_7B)
    greedy = dataclasses.replace(seal_run, gpu_memory_utilization=0.8)
    _, rollout, _ = check_memory(shape, [node()], greedy)
    assert rollout.status == BLOCKER and "margin -" in rollout.detail
    assert "verl.gpu_memory_utilization=0.65 fits" in rollout.detail


def test_sdpa_adds_its_mask(seal_run):
    shape = ModelShape.from_hf_config(QWEN25_7B)
    flash, _, _ = check_memory(shape, [node()], dataclasses.replace(seal_run, remove_padding=True))
    sdpa, _, _ = check_memory(shape, [node()], dataclasses.replace(seal_run, remove_padding=False))
    assert "sdpa's mask (0.8)" in sdpa.detail and "sdpa" not in flash.detail


def test_a_model_missing_on_a_node_is_a_blocker():
    why = "Qwen/Qwen2.5-7B-Instruct is not in this node's Hugging Face cache (/home/x/hub)"
    check = check_model_files([node("head"), node("worker", model=why)], "Qwen/Qwen2.5-7B-Instruct")
    assert check.status == BLOCKER and check.detail.startswith(f"worker: {why}")
    assert "hf download Qwen/Qwen2.5-7B-Instruct` on every node" in check.detail
    assert "HF_HOME on the shared filesystem" in check.detail
    assert check_model_files([node("head")], "Qwen/Qwen2.5-7B-Instruct").status == OK


def test_the_model_is_looked_for_on_disk_only(tmp_path, monkeypatch):
    """No name lookup, no download: a model not on the disk is reported at once (the hub's
    retries without a network made the preflight take minutes)."""
    looked_up = []

    def no_network(*args, **kwargs):
        looked_up.append(args[0])
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    with pytest.raises(ModelNotLocal, match="not in this node's Hugging Face cache"):
        local_model_dir("Qwen/Qwen2.5-7B-Instruct")
    folder = tmp_path / "model"
    QWEN25_7B.save_pretrained(folder)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotLocal, match="lacks model-00002-of-00002.safetensors"):
        local_model_dir(str(folder))  # a download cut short
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"")
    assert local_model_dir(str(folder)) == folder
    assert (
        model_presence(str(tmp_path / "nowhere"))
        == f"{tmp_path / 'nowhere'} is not a folder on this node"
    )
    assert looked_up == []


def test_a_one_node_preflight_probes_in_its_own_process_with_the_workers_environment(
    tmp_path, monkeypatch
):
    """`launcher.py --preflight` on one node starts no Ray: the probe runs here, and sees
    the variables Ray's runtime environment would give the workers, not the launcher's."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("SEAL_ENV_TOKEN", raising=False)
    folder = tmp_path / "model"
    QWEN25_7B.save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"")
    workers = {"SEAL_ENV_TOKEN": "t", "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    [facts] = this_node_facts("http://127.0.0.1:9", tmp_path, str(folder), workers, cpus=16)
    assert facts.cpus == 16 and facts.sees_run_dir and facts.model == OK
    assert facts.env["WANDB_MODE"] == "offline"
    assert facts.service.startswith("unreachable")  # with the token: it tried the request
    assert check_tracking([facts], "offline").status == OK
    assert list(tmp_path.glob(".preflight_*")) == []  # the marker file is gone


@pytest.mark.usefixtures("no_token_from_the_environment")
@pytest.mark.parametrize("flags", [["--preflight"], []], ids=["preflight", "plain_start"])
def test_a_start_the_preflight_refuses_leaves_no_run_directory(
    tmp_path, monkeypatch, capsys, flags
):
    """`launcher.py --conf exp/SEAL.yaml [--preflight]` refused by the preflight (here: the
    model is not on this node, whatever its GPUs) removes the run directory it made: its
    lock, the service's log, the verl config, the attempt's record and data order."""
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    out = tmp_path / "outputs"
    args = ["--conf", str(ROOT / "exp/SEAL.yaml"), *flags, "--", f"output_dir={out}"]
    assert launcher.main(args) == 1
    assert "hf download Qwen/Qwen2.5-7B-Instruct" in capsys.readouterr().out  # the table's
    assert not (out / "SEAL").exists(), sorted(map(str, (out / "SEAL").rglob("*")))
