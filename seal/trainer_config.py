"""The `trainer` section of a run config: every key with its default and meaning.

Both backends (the single-process trainer and verl) read this one section, so a key
means the same on both. Defaults are the paper's recipe (docs/design.md, "The paper's
recipe") where it has one; `exp/*.yaml` overrides them. Merged by the launcher as an
OmegaConf structured config, so unknown keys are errors. Each section's class lives
beside the code that uses it; the sections only the trainers need are defined here. Which
class is which section, and why no config module imports torch: docs/design.md, "The
run config's `trainer` section".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seal.algos.grpo_config import GRPOConfig, PolicyLossConfig
from seal.bfcl.tasks import CATEGORIES
from seal.formats.base import ToolFormat
from seal.formats.registry import AUTO, FORMATS, resolve
from seal.service_contract import (
    EpisodeLimits,
    EpisodeSettings,
    InterfaceSettings,
    RewardSettings,
)
from seal.tocf.apatch_config import APatchConfig
from seal.tocf.state import CapabilityConfig

TRAINING_JOBS = ("local", "verl")
"""The launcher's jobs that train and checkpoint with this section (others, e.g. `replay`,
score scripted policies)."""


@dataclass
class TinyModelSettings:
    """A random model built from config with the shipped tokenizer, no download, for CPU
    debugging: a Qwen2 (`tiny-qwen2`) or a Qwen3.5 (`tiny-qwen3.5`, Gated DeltaNet and
    full-attention layers, seal/trainer/model.py). Its vocabulary (151,936) dominates the
    cost, not its depth."""

    hidden_size: int = 64
    """Width of the residual stream."""
    num_hidden_layers: int = 2
    """Decoder layers."""
    num_attention_heads: int = 4
    """Query heads (hidden_size must divide by it)."""
    num_key_value_heads: int = 2
    """Key/value heads (grouped-query attention; num_attention_heads must divide by it)."""
    intermediate_size: int = 128
    """Width of each MLP."""
    vocab_size: int = 151936
    """Output ids: Qwen2.5's padded 151,936 (every tokenizer id is valid), or the
    tokenizer's own 151,665, as exp/verl_cpu_vllm_smoke.yaml has it (verl's vLLM rollout
    masks the ids past the tokenizer, its actor does not)."""
    seed: int = 0
    """Seed of the random initial weights."""
    full_attention_interval: int = 4
    """tiny-qwen3.5: every Nth layer is full attention, the others Gated DeltaNet (Qwen3.5's
    3:1); num_hidden_layers must be at least N."""
    linear_num_key_heads: int = 2
    """tiny-qwen3.5: Gated DeltaNet query/key heads (head width: hidden_size /
    num_attention_heads, as the attention layers')."""
    linear_num_value_heads: int = 4
    """tiny-qwen3.5: Gated DeltaNet value heads (a multiple of linear_num_key_heads)."""


@dataclass
class ModelSettings:
    path: str = "Qwen/Qwen2.5-7B-Instruct"
    """Hugging Face name or local path of the policy; `tiny-qwen2` or `tiny-qwen3.5` builds
    the random model described by `tiny` instead (nothing is downloaded)."""
    tokenizer: str = ""
    """Tokenizer name or path; empty = the model's own, or the shipped Qwen2.5 tokenizer
    (seal/assets/qwen2.5-tokenizer) for `tiny-qwen2`, and for `tiny-qwen3.5` the same with
    Qwen3.5's template and its four extra tokens (seal/trainer/model.py)."""
    dtype: str = "bfloat16"
    """Compute dtype: float32 | bfloat16 | float16. The local trainer keeps float32 master
    weights and optimizer state whatever this says, and generates and runs the update's
    passes on a copy in this dtype (seal/trainer/precision.py), as verl's mixed precision
    does; its KL reference is held in it. float32 on CPU (bf16 matmuls are slow there);
    float16 has no loss scaling here (small gradients underflow): prefer bfloat16."""
    device: str = "auto"
    """auto (cuda if available, else cpu) | cpu | cuda | cuda:N."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about 30% slower)."""
    tool_format: str = AUTO
    """How the model sees episodes and writes tool calls (seal/formats/registry.py):
    bfcl_qwen_fc (the paper's Qwen2.5 prompt, byte for byte the original release's) |
    toolace_official_prompt (the paper's ToolACE-2-Llama-3.1-8B prompt, the release's) |
    qwen2.5 (this project's richer Qwen2.5 prompt, beyond the paper) | qwen3 (Qwen3
    instruct) | llama3.1 (Llama 3.1 JSON calls) | bfcl_prompt (BFCL's prompt mode:
    Python-style call lists, as ToolACE-2-8B is ranked) | bfcl_qwen_fc_qwen3.5 (the
    paper's prompt in Qwen3.5's template, as the release's current recipe runs it) |
    qwen3.5 (Qwen3.5's own XML calls, beyond the paper) | auto: by `path`, bfcl_qwen_fc for
    Qwen2.5 models and tiny-qwen2, bfcl_qwen_fc_qwen3.5 for Qwen3.5 models and
    tiny-qwen3.5, toolace_official_prompt for ToolACE-2-Llama-3.1-8B, else the format
    bfcl-eval ranks the model in (an unknown name is an error). The format also picks the
    service's texts (EpisodeSettings.prompt) and whether a malformed call ends an episode
    (EpisodeSettings.end_on_malformed_call: the ToolACE prompt's rule)."""
    tiny: TinyModelSettings = field(default_factory=TinyModelSettings)

    def __post_init__(self):
        if self.tool_format != AUTO and self.tool_format not in FORMATS:
            raise ValueError(
                f"tool_format must be auto or one of {', '.join(FORMATS)}, not {self.tool_format!r}"
            )

    def resolved_tool_format(self) -> ToolFormat:
        """The format this model uses (`auto` resolved by `path`)."""
        return resolve(self.tool_format, self.path)


@dataclass
class DataSettings:
    train_file: str = "data/bfcl_train.parquet"
    """The 400 training tasks (scripts/prepare_data.py builds it from the paper's split)."""
    val_file: str = "data/bfcl_eval.parquet"
    """The 400 held-out tasks validation runs on."""
    train_batch_size: int = 32
    """Tasks per training step (each rolled out `rollout.n` times)."""
    max_train_tasks: int = 0
    """Use only the first N training tasks (0 = all 400); for debugging."""
    max_val_tasks: int = 0
    """Validate on the first N eval tasks (0 = all 400)."""
    seed: int = 1
    """Seed of the training tasks' order (`order`). 1: the original release's, which its
    configs leave to its code's default (`data_config.get("seed", 1)`)."""
    order: str = "release"
    """How the training tasks are ordered in each epoch (seal/runs/data_order.py; both
    trainers take the same batches): release (the original release's order: the tasks
    shuffled once by its task mixture, Python's random.Random(42), then per epoch a
    torch.randperm from one generator seeded with `seed`, which its sampler draws twice per
    epoch, using the first) | shuffle_per_epoch (this project's: each epoch's order is
    Python's random.Random(seed * 1_000_003 + epoch).shuffle of the data file's order)."""

    def __post_init__(self):
        if self.order not in DATA_ORDERS:
            raise ValueError(
                f"data.order must be one of {', '.join(DATA_ORDERS)}, not {self.order!r}"
            )


DATA_ORDERS = ("release", "shuffle_per_epoch")
"""The values of `trainer.data.order`."""


@dataclass
class RolloutSettings:
    """How training episodes are sampled (their limits are `trainer.limits`)."""

    n: int = 8
    """Samples per task: the GRPO group size."""
    temperature: float = 1.0
    """Sampling temperature of training rollouts (validation: `validation.temperature`)."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 keeps the whole distribution."""
    seed: int = 0
    """Seed of the sampling of training rollouts. The local trainer seeds torch's and
    Python's generators with it before a fresh run's first rollout (a resume continues the
    random state its checkpoint saved); verl gives it to the rollout engine
    (`actor_rollout_ref.rollout.seed`, vLLM's sampling seed). Recorded with each attempt
    (seal/runs/run_record.py)."""
    max_batch_size: int = 64
    """Generations the Hugging Face generator batches together (local trainer only)."""
    push_profile: bool = True
    """Push the capability state's failure profile to the service after every step, so
    the guideline layer (when on) follows the policy. The paper's "closed-loop update" is
    the dynamic tag weights (`apatch.weight_source`), which do not depend on this."""
    max_failed_share: float = 0.05
    """Episodes of a step (or a validation) that may fail after one retry each: they are
    left out and counted (`train/failed_episodes`, `val/failed_episodes`). More than this
    share stops the run with the errors (local trainer; in verl a failed episode fails
    its group, which verl drops)."""


def paper_interface() -> InterfaceSettings:
    """The training interface of the paper's headline run (its Appendix D, "Active
    configuration", and the release's SEAL.yaml): the schema cues alone. Recovery
    feedback and guidelines are the paper's optional components, off here
    (exp/SEAL_full_interface.yaml turns them on)."""
    return InterfaceSettings(schema_cues=True)


@dataclass
class OptimSettings:
    lr: float = 1e-6
    """AdamW learning rate, constant."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this."""
    mini_batch_size: int = 8
    """Tasks per optimizer step (x `rollout.n` samples): 32/8 = 4 updates per step."""
    micro_batch_size: int = 1
    """Samples per forward/backward pass; gradients accumulate over a mini-batch."""
    logprob_chunk_tokens: int = 1024
    """Positions whose vocabulary logits are materialised at once (bounds memory)."""


@dataclass
class ValidationSettings:
    test_freq: int = 10
    """Validate every N steps (and at step 0 and the last step)."""
    before_train: bool = True
    """Validate the initial model (step 0)."""
    temperature: float = 0.0
    """Greedy, as the paper; n = 1, the training interface off (validate mode)."""


@dataclass
class CheckpointSettings:
    save_freq: int = 10
    """Save every N steps (and at the end); 0 = only at the end."""
    best_rule: str = "release"
    """Which validation step is the best (the checkpoint kept and exported, the step the
    report stars; `BEST_RULES`): release (the original release's: the highest pass rate of
    multi_turn_base, its alphabetically first validation key, the earlier step on a tie) |
    average (this project's: the highest mean of the four categories, the later step on a
    tie). Recorded in each checkpoint's seal_best.json and the run's config."""
    keep_only_best: bool = True
    """Keep only the best and the latest checkpoint (which resume needs), deleting the
    others: a verl checkpoint of a 7B model (weights, optimizer, Hugging Face export) is
    about 107 GB. false keeps every checkpoint."""
    resume: bool = False
    """Continue the run in `run_dir` from its latest checkpoint (explicit, never implied).
    A fresh run refuses a directory holding an earlier run's state (seal/runs/run_dir_checks.py)."""
    allow_data_order_change: bool = False
    """Resume although the data-order settings (training tasks, `data.train_batch_size`,
    `data.seed`) differ from the interrupted run's; without it such a resume is refused,
    since the remaining steps would see other batches than the uninterrupted run."""

    def __post_init__(self):
        if self.best_rule not in BEST_RULES:
            raise ValueError(
                f"checkpoint.best_rule must be one of {', '.join(BEST_RULES)}, "
                f"not {self.best_rule!r}"
            )


@dataclass(frozen=True)
class BestRule:
    """How a run's best validation step is chosen: the highest value of one validation
    metric (seal.runs.metrics_log.validation_metrics), ties going to the earlier or the
    later step. Both trainers and the reports apply it (`improves`, `best_of`)."""

    name: str
    category: str | None
    """The category whose pass rate counts; None: the mean of the four categories."""
    later_on_tie: bool

    @property
    def metric(self) -> str:
        """The validation metric it maximises."""
        return "val/average" if self.category is None else f"val/{self.category}"

    def describe(self) -> str:
        what = "the mean of the four categories" if self.category is None else self.category
        tie = "the later" if self.later_on_tie else "the earlier"
        return f"the highest {what} ({self.name} rule; {tie} step on a tie)"

    def improves(self, value, best) -> bool:
        """Whether a later step scoring `value` replaces the best so far, `best` (None: none)."""
        return best is None or value > best or (self.later_on_tie and value == best)

    def best_of(self, values: dict[int, object]) -> int | None:
        """The best step of {step: value} (None values: steps without the metric); None
        when no step has one."""
        best_step, best = None, None
        for step in sorted(values):
            if values[step] is not None and self.improves(values[step], best):
                best_step, best = step, values[step]
        return best_step


BEST_RULES = {
    # The release keeps the checkpoint of the first validation key in sorted order (its
    # `_select_best_checkpoint_metric`), replaced only by a strictly higher score.
    "release": BestRule("release", min(CATEGORIES), later_on_tie=False),
    # A flat run is then scored where it ended, not at its untrained step 0.
    "average": BestRule("average", None, later_on_tie=True),
}
"""The values of `trainer.checkpoint.best_rule`."""


@dataclass
class LoggingSettings:
    wandb: str = "offline"
    """offline | online | disabled. Online needs WANDB_API_KEY; offline needs nothing."""
    project: str = "seal-repro"
    """wandb project name."""


@dataclass
class TrainerConfig:
    total_epochs: int = 6
    """Passes over the training tasks (6 x 400 / 32 = 72 steps in the paper)."""
    total_steps: int = 0
    """Stop after this many steps (0 = total_epochs over the training tasks)."""
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    """Episode limits of training and validation episodes (the service applies
    `max_generations` too)."""
    interface: InterfaceSettings = field(default_factory=paper_interface)
    """The interface training episodes are shown (schema cues, type hints, recovery
    feedback, guidelines); validation never gets it. Default: the paper's active
    interface, schema cues only (`paper_interface`). Was `evolution`, still read with a
    warning (seal/renamed_keys.py)."""
    reward: RewardSettings = field(default_factory=RewardSettings)
    advantage: GRPOConfig = field(default_factory=GRPOConfig)
    apatch: APatchConfig = field(default_factory=APatchConfig)
    capability: CapabilityConfig = field(default_factory=CapabilityConfig)
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    optim: OptimSettings = field(default_factory=OptimSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)

    def episode_settings(self, mode: str) -> EpisodeSettings:
        """What the service is asked for: `sample` episodes get the training interface,
        `validate` episodes are the plain benchmark; both share the limits and reward."""
        interface = self.interface if mode == "sample" else InterfaceSettings()
        fmt = self.model.resolved_tool_format()
        return EpisodeSettings(
            mode=mode,
            prompt=fmt.prompt,
            end_on_malformed_call=fmt.end_on_malformed_call,
            interface=interface,
            limits=self.limits,
            reward=self.reward,
        )
