"""Preflight of a verl run: what would make it fail, found in seconds instead of after
minutes of worker start-up (or after gigabytes of downloads, or hours into training).

`launcher.py --conf X --preflight` runs only this; every verl run runs it first
(`verl.preflight`, default on) and stops on a blocker. One table, one row per check; each
check is a small function of facts gathered per node (node_facts.py) and of the run's shape
and memory estimate (memory_estimate.py), so tests inject the failures. The rows, how each
is computed and the memory estimate: docs/gpu.md, "Run, with a preflight first" and "Memory:
what the preflights estimate".
"""

from __future__ import annotations

import math
from pathlib import Path

from seal.trainer.gpu_memory import GIB, ModelShape
from seal.trainer.model_files import download_command
from seal.trainer.preflight_rows import (
    BLOCKER,
    OK,
    SKIP,
    WARN,
    Check,
    linear_attention_check,
)
from seal.trainer.verl.memory_estimate import RunShape, kv_tokens_at, memory_estimate
from seal.trainer.verl.node_facts import (
    ModelNotLocal,
    NodeFacts,
    first_line,
    free_bytes,
    gather_node_facts,
    local_model_dir,
    this_node_facts,
)
from seal.trainer.verl.verl_config import CPUS_PER_GPU, reserved_cpus

MIN_DRIVER = 580
"""CUDA 13.0's minimum Linux driver (install.sh checks it too)."""


# --- the checks: facts in, one row out ------------------------------------------------------


def check_gpus(nodes: list[NodeFacts], run: RunShape) -> Check:
    name = "GPUs"
    if run.device == "cpu":
        return Check(name, SKIP, "verl.device=cpu")
    counts = sorted((len(n.gpus) for n in nodes), reverse=True)
    enough = sum(c >= run.n_gpus_per_node for c in counts)
    seen = ", ".join(f"{n.node}: {len(n.gpus)}" for n in nodes)
    if enough < run.nnodes:
        return Check(
            name,
            BLOCKER,
            f"needs {run.nnodes} node(s) with {run.n_gpus_per_node} GPUs (verl.nnodes, "
            f"verl.n_gpus_per_node); nvidia-smi lists {seen}",
        )
    return Check(name, OK, f"{seen} (needed: {run.nnodes} x {run.n_gpus_per_node})")


def check_driver(nodes: list[NodeFacts], run: RunShape) -> Check:
    name = "driver"
    if run.device == "cpu":
        return Check(name, SKIP, "verl.device=cpu")
    drivers = {n.node: (n.gpus[0].driver if n.gpus else None) for n in nodes}
    old = {node: d for node, d in drivers.items() if d is None or int(d.split(".")[0]) < MIN_DRIVER}
    if old:
        found = ", ".join(f"{node}: {d or 'none'}" for node, d in old.items())
        return Check(
            name,
            BLOCKER,
            f"NVIDIA driver >= {MIN_DRIVER} needed (CUDA 13: torch 2.11, vLLM 0.24); found {found}",
        )
    return Check(name, OK, ", ".join(f"{node}: {d}" for node, d in drivers.items()))


def check_memory(model: ModelShape | None, nodes: list[NodeFacts], run: RunShape) -> list[Check]:
    names = ("memory: training", "memory: rollout", "memory: KV cache")
    if run.device == "cpu":
        return [Check(n, SKIP, "verl.device=cpu") for n in names]
    gpus = [g for n in nodes for g in n.gpus]
    if model is None or not gpus:
        why = "no model config" if model is None else "no GPU seen"
        return [Check(n, SKIP, why) for n in names]
    gib = min(g.memory_gib for g in gpus)
    e = memory_estimate(model, run, gib)
    training, rollout = e["training"], e["rollout"]
    rows = [
        Check(
            names[0],
            OK if training.fits else BLOCKER,
            f"{training.describe()}; {model.params / 1e9:.2f}B parameters, gradient "
            f"checkpointing {'on' if run.gradient_checkpointing else 'off'}"
            + ("" if training.fits else " (offload, more GPUs, or smaller token budgets)"),
        )
    ]
    largest = e["largest_utilization"]
    fits_at = kv_tokens_at(model, run, gib, largest) >= run.max_model_len and largest > 0
    if rollout.fits:
        advice = f"largest verl.gpu_memory_utilization that fits: {largest:.2f}"
    elif fits_at:
        advice = (
            f"verl.gpu_memory_utilization={largest:.2f} fits (KV cache ~"
            f"{kv_tokens_at(model, run, gib, largest) / 1000:.0f}k tokens)"
        )
    else:
        advice = "no gpu_memory_utilization fits with one episode's KV cache: offload or more GPUs"
    rows.append(Check(names[1], OK if rollout.fits else BLOCKER, f"{rollout.describe()}; {advice}"))
    per_replica = math.ceil(run.episodes_per_step / max(1, run.n_gpus // run.tensor_parallel))
    wanted = per_replica * run.max_model_len
    tokens = e["kv_tokens"]
    detail = (
        f"~{tokens / 1000:.0f}k tokens per replica after {e['vllm_weights_gib']:.1f} GiB of "
        f"weights: {tokens / run.max_model_len:.1f} episodes of max_model_len "
        f"{run.max_model_len}, {per_replica} run at once per replica"
    )
    if tokens < run.max_model_len:
        rows.append(
            Check(names[2], BLOCKER, detail + ": not even one fits (vLLM refuses to start)")
        )
    elif tokens < wanted:
        rows.append(
            Check(
                names[2],
                WARN,
                detail
                + f": vLLM queues them past ~{tokens / run.max_model_len:.0f} full-length ones",
            )
        )
    else:
        rows.append(Check(names[2], OK, detail))
    if model.max_positions and run.max_model_len > model.max_positions:
        rows.append(
            Check(
                "context",
                BLOCKER,
                f"max_model_len {run.max_model_len} exceeds the model's "
                f"max_position_embeddings {model.max_positions}",
            )
        )
    return rows


def checkpoint_bytes(params: int, export_hf: bool) -> int:
    """One verl checkpoint: fp32 weight shards, AdamW's two moments, bf16 Hugging Face copy."""
    return params * (4 + 8 + (2 if export_hf else 0))


def kept_checkpoints(keep_only_best: bool, total_steps: int, save_freq: int) -> int:
    """Checkpoints on disk at the peak: the latest, the best (hard links, a different step at
    worst) and the one being written before verl deletes the previous; or all of them."""
    if keep_only_best:
        return 3
    return (total_steps // save_freq if save_freq > 0 else 0) + 1


def check_disk(free_bytes: int, need_bytes: int, where: Path, kept: int) -> Check:
    name = "disk"
    detail = (
        f"{need_bytes / GIB:.1f} GiB for {kept} checkpoints of {need_bytes / kept / GIB:.1f} GiB; "
        f"{free_bytes / GIB:.1f} GiB free at {where}"
    )
    if free_bytes < need_bytes:
        return Check(name, BLOCKER, detail + " (trainer.checkpoint.keep_only_best, output_dir)")
    return Check(name, OK, detail)


PROBE_TEXT = "\u27e6SEAL preflight probe\u27e7"


def check_chat_template(tokenizer, tool_format) -> Check:
    """The tokenizer knows the tool format's end-of-turn as one token, and the model's own
    chat template closes an assistant turn with it (a model of another family, or a base
    model without a template, would be trained in a layout it does not know)."""
    from seal.rollout.turn_tokens import TurnTokenizer

    name = "model and chat template"
    eot = tool_format.end_of_turn
    try:
        TurnTokenizer(tokenizer, tool_format)
    except ValueError as error:
        return Check(name, BLOCKER, str(error))
    if not getattr(tokenizer, "chat_template", None):
        return Check(
            name,
            BLOCKER,
            f"unknown chat template: the tokenizer has none (format {tool_format.name} needs {eot!r})",
        )
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": PROBE_TEXT},
    ]
    try:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception as error:  # noqa: BLE001 - a template that cannot render is the finding
        return Check(
            name, BLOCKER, f"the chat template does not render: {type(error).__name__}: {error}"
        )
    if PROBE_TEXT + eot not in rendered:
        return Check(
            name,
            BLOCKER,
            f"unknown chat template: it does not close an assistant turn with {eot!r}, as tool "
            f"format {tool_format.name} does (set trainer.model.tool_format to the model's)",
        )
    return Check(
        name, OK, f"format {tool_format.name}: turns end with {eot!r} in the model's template"
    )


def check_cpus(nodes: list[NodeFacts], run: RunShape) -> Check:
    name = "Ray CPUs"
    reserved = reserved_cpus(run.n_gpus, run.rollout_replicas, run.storage_units)
    total = sum(n.cpus for n in nodes)
    biggest = max((n.cpus for n in nodes), default=0)
    per_node = CPUS_PER_GPU * run.n_gpus_per_node
    detail = (
        f"verl reserves {reserved} ({CPUS_PER_GPU} per GPU, {run.storage_units} TransferQueue "
        f"units, its controller) + 1 to place other actors; the cluster has {total:g} "
        f"({', '.join(f'{n.node}: {n.cpus:g}' for n in nodes)})"
    )
    if total < reserved + 1 or biggest < per_node:
        return Check(
            name,
            BLOCKER,
            detail + f"; Ray would wait forever (each GPU node needs {per_node}: start Ray with "
            "--num-cpus, logical slots may exceed the cores)",
        )
    return Check(name, OK, detail)


def check_service(nodes: list[NodeFacts], env_url: str) -> Check:
    name = "service from workers"
    failed = {n.node: n.service for n in nodes if n.service != OK}
    if failed:
        return Check(
            name,
            BLOCKER,
            f"{env_url}: "
            + "; ".join(f"{node}: {why}" for node, why in failed.items())
            + " (multi-node: service.host=0.0.0.0, verl.env_url=http://HEAD_IP:PORT)",
        )
    return Check(name, OK, f"{env_url} answers with the run's token on {len(nodes)} node(s)")


def check_shared_fs(nodes: list[NodeFacts], run_dir: Path) -> Check:
    name = "shared filesystem"
    blind = [n.node for n in nodes if not n.sees_run_dir]
    if blind:
        return Check(
            name,
            BLOCKER,
            f"{', '.join(blind)} cannot read {run_dir}: checkpoints, records and the capability "
            "state are written by whichever node Ray picks; every node needs the repository "
            "and output_dir on a shared filesystem at the same path",
        )
    return Check(name, OK, f"{run_dir} is the same directory on {len(nodes)} node(s)")


def check_tracking(nodes: list[NodeFacts], mode: str) -> Check:
    name = "tracking"
    wrong = {
        n.node: n.env.get("WANDB_MODE")
        for n in nodes
        if n.env.get("WANDB_MODE") != mode or (mode == "online" and not n.env.get("WANDB_API_KEY"))
    }
    if wrong:
        seen = ", ".join(f"{node}: WANDB_MODE={m}" for node, m in wrong.items())
        return Check(
            name, BLOCKER, f"the run logs with wandb {mode}, the workers have {seen} (or no key)"
        )
    return Check(name, OK, f"WANDB_MODE={mode} on {len(nodes)} node(s)")


def check_probes(nodes: list[NodeFacts]) -> Check | None:
    failed = [n for n in nodes if n.error]
    if not failed:
        return None
    return Check(
        "Ray workers",
        BLOCKER,
        "; ".join(f"{n.node}: {n.error}" for n in failed)
        + " (start Ray on every node with this venv's `ray`: .venv/bin/ray start ...)",
    )


# --- the whole preflight ----------------------------------------------------------------------


def check_model_files(nodes: list[NodeFacts], path: str) -> Check:
    name = "model files"
    missing = {n.node: n.model for n in nodes if n.model != OK}
    if missing:
        return Check(
            name,
            BLOCKER,
            "; ".join(f"{node}: {why}" for node, why in missing.items())
            + f". Every node loads the weights from its own disk: download them first "
            f"(`{download_command(path)}` on every node, or once with HF_HOME on the shared "
            "filesystem; docs/gpu.md)",
        )
    return Check(name, OK, f"{path}: config and weights on {len(nodes)} node(s)")


def model_checks(config, tool_format) -> tuple[ModelShape | None, Check]:
    """Load the model's config and tokenizer from this node's disk (never the network), and
    check the tool format against the tokenizer's chat template."""
    from transformers import AutoConfig, AutoTokenizer

    model = config.actor_rollout_ref.model
    name = "model and chat template"
    try:
        folder = local_model_dir(model.path)
        tokenizer_path = model.get("tokenizer_path")
        tokenizer_folder = local_model_dir(tokenizer_path) if tokenizer_path else folder
        remote = model.trust_remote_code
        hf_config = AutoConfig.from_pretrained(folder, trust_remote_code=remote)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder, trust_remote_code=remote)
    except ModelNotLocal as error:
        return None, Check(name, BLOCKER, f"not on this node: {error}")
    except Exception as error:  # noqa: BLE001 - any load failure is the finding
        return None, Check(name, BLOCKER, f"{model.path} does not load: {first_line(error)}")
    return ModelShape.from_hf_config(hf_config), check_chat_template(tokenizer, tool_format)


def run_preflight(
    run_cfg, config, run_dir: Path, probe_env: dict[str, str] | None = None
) -> list[Check]:
    """Every check of the table (docs/gpu.md), against the running Ray (ray_init.start_ray);
    with `probe_env` (the workers' environment), on this node alone, probed in this process
    (a one-node run's preflight before its Ray starts)."""
    from omegaconf import OmegaConf

    t = OmegaConf.to_object(run_cfg.trainer)
    run = RunShape.from_config(config)
    model_path = config.actor_rollout_ref.model.path
    if probe_env is None:
        all_nodes = gather_node_facts(config.seal.env_url, run_dir, model_path)
    else:
        cpus = config.ray_kwargs.ray_init.num_cpus
        all_nodes = this_node_facts(config.seal.env_url, run_dir, model_path, probe_env, cpus)
    nodes = [n for n in all_nodes if not n.error]  # what the probes saw
    shape, template = model_checks(config, t.model.resolved_tool_format())
    seen = [
        check_gpus(nodes, run),
        check_driver(nodes, run),
        *check_memory(shape, nodes, run),
        check_model_files(nodes, model_path),
        check_service(nodes, config.seal.env_url),
        check_shared_fs(nodes, Path(run_dir).absolute()),
        check_tracking(nodes, t.logging.wandb),
    ]
    if not nodes:  # no row may pass on no evidence
        seen = [Check(c.name, SKIP, "no node answered the probe") for c in seen]
    others = [template, check_cpus(all_nodes, run)]
    if shape is not None and run.device != "cpu":  # on the CPU only the torch path exists
        others += linear_attention_check(shape.linear_layers)
    if shape is not None:
        kept = kept_checkpoints(
            t.checkpoint.keep_only_best,
            config.trainer.total_training_steps or 0,
            config.trainer.save_freq,
        )
        size = checkpoint_bytes(shape.params, run_cfg.verl.export_hf_weights)
        free, where = free_bytes(Path(config.trainer.default_local_dir))
        others.insert(0, check_disk(free, kept * size, where, kept))
    probes = check_probes(all_nodes)
    return ([probes] if probes else []) + seen + others
