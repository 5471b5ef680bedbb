"""Preflight of a verl run: what would make it fail, found in seconds instead of after
minutes of worker start-up (or after gigabytes of downloads, or hours into training).

`launcher.py --conf X --preflight` runs only this; every verl run runs it first
(`verl.preflight`, default on) and stops on a blocker. One table, one row per check:

| check | what it compares |
|---|---|
| GPUs | GPUs each node shows (nvidia-smi) vs `verl.n_gpus_per_node` on `verl.nnodes` nodes |
| driver | the NVIDIA driver on every node vs 580 (CUDA 13: torch 2.11, vLLM 0.24) |
| memory: training / rollout / KV cache | a per-GPU estimate for the model and config (below) vs each GPU's memory |
| disk | the checkpoints the retention policy keeps vs the free space where they go |
| model and chat template | the model's config and tokenizer load; its chat template closes an assistant turn with the tool format's end-of-turn token, which is one token |
| Ray CPUs | what verl reserves (config.py: 3 per GPU, TransferQueue) vs the cluster's CPUs |
| service from workers | a Ray task on every node reaches the environment service with the token it got |
| shared filesystem | every node reads a file the launcher just wrote in the run directory |
| tracking | every node's WANDB_MODE (and key, online) is the run's |

Each check is a small function of facts (`NodeFacts`, `ModelShape`, byte counts), so the
tests inject a node with an old driver, a full disk or no token; node_facts.py gets the
facts with one Ray task per node (the same Ray, and so the same runtime environment, the run
uses: seal/trainer/verl/ray_init.py).

The memory estimate (bf16 compute, fp32 master weights, AdamW; an estimate to catch what
cannot fit, not a measurement): training keeps 16 bytes per parameter (weights, gradients,
two Adam moments) sharded over all GPUs, less what is offloaded, plus the logits of one
micro-batch (4 bytes per token per vocabulary entry) and the activations (with gradient
checkpointing, each layer's input; without, ~10 tensors per layer); the rollout phase keeps
the actor's weights and optimizer on the GPU (12 bytes per parameter, sharded) while vLLM
takes `gpu_memory_utilization` of the GPU for its weights (2 bytes per parameter / TP), a
fixed overhead and the KV cache, whose capacity in tokens is compared with one episode at the
context limit (vLLM refuses to start below that) and with the episodes one replica serves
at once (below that, it queues them).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from seal.trainer.verl.config import CPUS_PER_GPU, reserved_cpus
from seal.trainer.verl.node_facts import (
    OK,
    NodeFacts,
    first_line,
    free_bytes,
    gather_node_facts,
)

WARN, BLOCKER, SKIP = "warn", "BLOCKER", "skip"
MIN_DRIVER = 580
"""CUDA 13.0's minimum Linux driver (install.sh checks it too)."""
GIB = 1024**3
VLLM_OVERHEAD_GIB = 2.5
"""vLLM's non-KV memory besides the weights (profiling activations, CUDA graphs)."""
TRAINING_HEADROOM = 0.95
"""Share of a GPU's memory the training phase may fill (allocator fragmentation, CUDA context)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate needs from a model's Hugging Face config."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int

    @classmethod
    def from_hf_config(cls, c) -> ModelShape:
        c = getattr(c, "text_config", None) or c
        heads = c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        h, inter, layers, vocab = (
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers,
            c.vocab_size,
        )
        attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
        per_layer = attention + 3 * h * inter + 2 * h
        embeddings = vocab * h * (1 if getattr(c, "tie_word_embeddings", False) else 2)
        return cls(
            params=embeddings + layers * per_layer + h,
            layers=layers,
            hidden=h,
            intermediate=inter,
            kv_heads=kv_heads,
            head_dim=head_dim,
            vocab=vocab,
            max_positions=getattr(c, "max_position_embeddings", 0) or 0,
        )

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of every layer in bf16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


@dataclass(frozen=True)
class RunShape:
    """What the checks need from the run's verl config."""

    device: str
    n_gpus_per_node: int
    nnodes: int
    tensor_parallel: int
    gpu_memory_utilization: float
    max_model_len: int
    episodes_per_step: int
    update_tokens: int
    logprob_tokens: int
    gradient_checkpointing: bool
    param_offload: bool
    optimizer_offload: bool
    storage_units: int
    rollout_replicas: int
    """Standalone rollout replicas (their own CPU bundles): the CPU test backend's one."""

    @classmethod
    def from_config(cls, config) -> RunShape:
        arr, tr = config.actor_rollout_ref, config.trainer
        context = config.seal.trainer.limits.max_context_tokens
        actor, rollout = arr.actor, arr.rollout
        update = actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else context
        logprob = (
            rollout.log_prob_max_token_len_per_gpu if rollout.log_prob_use_dynamic_bsz else context
        )
        return cls(
            device=tr.device,
            n_gpus_per_node=tr.n_gpus_per_node,
            nnodes=tr.nnodes,
            tensor_parallel=rollout.tensor_model_parallel_size,
            gpu_memory_utilization=rollout.gpu_memory_utilization,
            max_model_len=rollout.max_model_len,
            episodes_per_step=config.data.train_batch_size * rollout.n,
            update_tokens=update,
            logprob_tokens=logprob,
            gradient_checkpointing=arr.model.enable_gradient_checkpointing,
            param_offload=actor.fsdp_config.param_offload,
            optimizer_offload=actor.fsdp_config.optimizer_offload,
            storage_units=config.transfer_queue.backend.SimpleStorage.num_data_storage_units,
            rollout_replicas=0 if tr.device != "cpu" else 1,
        )

    @property
    def n_gpus(self) -> int:
        return self.n_gpus_per_node * self.nnodes


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


def memory_estimate(model: ModelShape, run: RunShape, gpu_gib: float) -> dict[str, float]:
    """GiB per GPU of the training and rollout phases, and the KV cache's capacity in tokens
    (see the module docstring for the model)."""
    p = model.params
    state = (
        4 * (not run.param_offload) + 4 + 8 * (not run.optimizer_offload)
    )  # weights, grads, Adam
    resident = 4 * (not run.param_offload) + 8 * (not run.optimizer_offload)  # between steps
    logits = max(run.update_tokens, run.logprob_tokens) * model.vocab * 4
    per_layer = 2 * model.hidden * 2  # bf16 input of each layer, kept for the recompute
    layer_full = (20 * model.hidden + 4 * model.intermediate) * 2
    activations = run.update_tokens * (
        model.layers * per_layer + layer_full
        if run.gradient_checkpointing
        else model.layers * layer_full
    )
    weights_vllm = 2 * p / run.tensor_parallel
    vllm = run.gpu_memory_utilization * gpu_gib * GIB
    kv = vllm - weights_vllm - VLLM_OVERHEAD_GIB * GIB
    return {
        "training_gib": (state * p / run.n_gpus + logits + activations) / GIB,
        "rollout_gib": (resident * p / run.n_gpus + vllm) / GIB,
        "vllm_weights_gib": weights_vllm / GIB,
        "kv_tokens": max(0.0, kv / model.kv_bytes_per_token),
    }


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
    rows = []
    status = OK if e["training_gib"] <= TRAINING_HEADROOM * gib else BLOCKER
    rows.append(
        Check(
            names[0],
            status,
            f"~{e['training_gib']:.1f} of {gib:.1f} GiB per GPU ({model.params / 1e9:.2f}B "
            f"parameters over {run.n_gpus} GPUs, micro-batches of {run.update_tokens}/"
            f"{run.logprob_tokens} tokens, gradient checkpointing "
            f"{'on' if run.gradient_checkpointing else 'off'})",
        )
    )
    status = OK if e["rollout_gib"] <= gib else BLOCKER
    rows.append(
        Check(
            names[1],
            status,
            f"~{e['rollout_gib']:.1f} of {gib:.1f} GiB per GPU: the actor's weights and "
            f"optimizer beside vLLM's {run.gpu_memory_utilization:.0%} "
            "(lower verl.gpu_memory_utilization or offload if over)",
        )
    )
    per_replica = math.ceil(run.episodes_per_step / max(1, run.n_gpus // run.tensor_parallel))
    wanted = per_replica * run.max_model_len
    tokens = e["kv_tokens"]
    detail = (
        f"~{tokens / 1000:.0f}k tokens per replica after {e['vllm_weights_gib']:.1f} GiB of "
        f"weights; one episode takes up to {run.max_model_len} (max_model_len), "
        f"{per_replica} run at once per replica"
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


def model_checks(config, tool_format) -> tuple[ModelShape | None, Check]:
    """Load the model's config and tokenizer from the path verl gets, and check the tool
    format against the tokenizer's chat template."""
    from transformers import AutoConfig, AutoTokenizer

    model = config.actor_rollout_ref.model
    path = model.get("tokenizer_path") or model.path
    try:
        hf_config = AutoConfig.from_pretrained(
            model.path, trust_remote_code=model.trust_remote_code
        )
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model.trust_remote_code)
    except Exception as error:  # noqa: BLE001 - any load failure is the finding
        return None, Check(
            "model and chat template", BLOCKER, f"{model.path} does not load: {first_line(error)}"
        )
    return ModelShape.from_hf_config(hf_config), check_chat_template(tokenizer, tool_format)


def run_preflight(run_cfg, config, run_dir: Path) -> list[Check]:
    """Every check of the module docstring, against the running Ray (ray_init.start_ray)."""
    from omegaconf import OmegaConf

    t = OmegaConf.to_object(run_cfg.trainer)
    run = RunShape.from_config(config)
    all_nodes = gather_node_facts(config.seal.env_url, run_dir)
    nodes = [n for n in all_nodes if not n.error]  # what the probes saw
    shape, template = model_checks(config, t.model.resolved_tool_format())
    seen = [
        check_gpus(nodes, run),
        check_driver(nodes, run),
        *check_memory(shape, nodes, run),
        check_service(nodes, config.seal.env_url),
        check_shared_fs(nodes, Path(run_dir).absolute()),
        check_tracking(nodes, t.logging.wandb),
    ]
    if not nodes:  # no row may pass on no evidence
        seen = [Check(c.name, SKIP, "no node answered the probe") for c in seen]
    others = [template, check_cpus(all_nodes, run)]
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


def render(checks: list[Check]) -> str:
    """The table, as rich draws it (plain text when the output is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="preflight", show_lines=False)
    for column in ("check", "status", "detail"):
        table.add_column(column, overflow="fold")
    colours = {OK: "green", WARN: "yellow", BLOCKER: "bold red", SKIP: "dim"}
    for c in checks:
        table.add_row(c.name, f"[{colours[c.status]}]{c.status}[/]", c.detail)
    console = Console(width=max(120, shutil.get_terminal_size().columns), record=True)
    with console.capture() as capture:
        console.print(table)
    return capture.get()


def blockers(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == BLOCKER]


class PreflightFailed(RuntimeError):
    """A preflight check found a blocker: the run would fail."""
