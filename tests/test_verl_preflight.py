"""The preflight of a verl run (seal/trainer/verl/preflight.py): each check is a function of
facts, so every blocker is shown here with the facts of a machine that has it (an old
driver, too few GPUs or CPUs, a full disk, a worker that cannot reach the service, a node
that does not share the run directory, a model whose chat template the tool format does not
know), next to the facts of one that passes. The paper's configs are checked with the facts
of a 4 x H100 node. The CPU smoke run (tests/test_verl_cpu_smoke.py) runs them all against
a real Ray and service, and must pass them, as every verl run does before it starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import qwen25_7b_config, shipped_tokenizer

pytest.importorskip("verl")


import launcher  # noqa: E402
from seal.formats.registry import get_format  # noqa: E402
from seal.trainer.verl.config import compose_verl_config  # noqa: E402
from seal.trainer.verl.node_facts import OK, Gpu, NodeFacts  # noqa: E402
from seal.trainer.verl.preflight import (  # noqa: E402
    BLOCKER,
    WARN,
    ModelShape,
    RunShape,
    check_chat_template,
    check_cpus,
    check_disk,
    check_driver,
    check_gpus,
    check_memory,
    check_service,
    check_shared_fs,
    check_tracking,
    checkpoint_bytes,
    kept_checkpoints,
)

ROOT = Path(__file__).resolve().parent.parent
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
