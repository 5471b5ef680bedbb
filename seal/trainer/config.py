"""The single-process trainer's configuration: every key with its default and meaning.

Defaults are the paper's recipe (DESIGN.md section 6) where it has one; `exp/*.yaml`
overrides them (the CPU default shrinks the model, batch and limits). Merged by the
launcher as an OmegaConf structured config, so unknown keys are errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import OmegaConf

from seal.rollout.driver import EpisodeLimits


@dataclass
class TinyModelSettings:
    """A random Qwen2 built from config with the shipped tokenizer: no download, for CPU
    debugging. Its vocabulary (151,936) dominates the cost, not its depth."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    seed: int = 0


@dataclass
class ModelSettings:
    path: str = "Qwen/Qwen2.5-7B-Instruct"
    """Hugging Face name or local path of the policy; `tiny-qwen2` builds the random model
    described by `tiny` instead (nothing is downloaded)."""
    tokenizer: str = ""
    """Tokenizer name or path; empty = the model's own, or the shipped Qwen2.5 tokenizer
    (seal/assets/qwen2.5-tokenizer) for `tiny-qwen2`."""
    dtype: str = "bfloat16"
    """float32 | bfloat16 | float16. Use float32 on CPU."""
    device: str = "auto"
    """auto (cuda if available, else cpu) | cpu | cuda | cuda:N."""
    gradient_checkpointing: bool = False
    tiny: TinyModelSettings = field(default_factory=TinyModelSettings)


@dataclass
class DataSettings:
    train_file: str = "data/bfcl_train.parquet"
    val_file: str = "data/bfcl_eval.parquet"
    train_batch_size: int = 32
    """Tasks per training step (each rolled out `rollout.n` times)."""
    max_train_tasks: int = 0
    """Use only the first N training tasks (0 = all 400); for debugging."""
    max_val_tasks: int = 0
    """Validate on the first N eval tasks (0 = all 400)."""
    seed: int = 0
    """Seed of the per-epoch shuffle of the training tasks."""


@dataclass
class RolloutSettings:
    n: int = 8
    """Samples per task: the GRPO group size."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_generations: int = 20
    """Model generations per episode before it is cut off."""
    max_new_tokens: int = 4096
    """Tokens per generation."""
    max_context_tokens: int = 16384
    """Prompt + response tokens of a whole episode."""
    max_observation_tokens: int = 4096
    """Tool responses longer than this are clipped."""
    max_batch_size: int = 64
    """Generations batched together by the Hugging Face generator."""
    observation_lite: bool = True
    """Schema cues in training episodes (the paper's headline environment layer)."""
    recovery_feedback: bool = False
    """Recovery hints on invalid calls and tool errors in training episodes."""
    diagnostic_guidelines: bool = True
    """Guidelines from the failure profile in training episodes (closed loop)."""
    push_profile: bool = True
    """Push the capability state's failure profile to the service after every step."""

    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(
            max_generations=self.max_generations,
            max_context_tokens=self.max_context_tokens,
            max_new_tokens=self.max_new_tokens,
            max_observation_tokens=self.max_observation_tokens,
        )

    def env_params(self, mode: str) -> dict:
        """The service's create params: `sample` episodes get the training layers,
        `validate` episodes are the plain benchmark."""
        if mode == "validate":
            return {"rollout_mode": "validate"}
        return {
            "rollout_mode": mode,
            "observation_lite": self.observation_lite,
            "recovery_feedback": self.recovery_feedback,
            "diagnostic_guidelines": self.diagnostic_guidelines,
        }


@dataclass
class OptimSettings:
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    mini_batch_size: int = 8
    """Tasks per optimizer step (x `rollout.n` samples): 32/8 = 4 updates per step."""
    micro_batch_size: int = 1
    """Samples per forward/backward pass; gradients accumulate over a mini-batch."""
    logprob_chunk_tokens: int = 1024
    """Positions whose vocabulary logits are materialised at once (bounds memory)."""


@dataclass
class LossSettings:
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 10.0
    """Dual-clip constant for negative advantages."""
    loss_agg_mode: str = "seq-mean-token-mean"
    kl_loss_coef: float = 0.001
    """KL loss against the reference policy (0 disables it and the reference model)."""
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    norm_adv_by_std: bool = True
    """GRPO: divide by the group's std (False: subtract the mean only)."""


@dataclass
class APatchSettings:
    enable: bool = True
    """Reweight advantages by the diagnosis tags (off: vanilla GRPO)."""
    weight_source: str = "dynamic"
    """dynamic (capability state's EMA weights) | static (the base weights)."""
    min_scale: float = 0.5
    max_scale: float = 2.0
    apply_to: str = "all"
    """all | positive | negative advantages."""
    warmup_steps: int = 0
    budget: bool = False
    """Renormalise the mean scale of the touched samples to 1."""


@dataclass
class ValidationSettings:
    test_freq: int = 10
    """Validate every N steps (and at step 0 and the last step)."""
    before_train: bool = True
    temperature: float = 0.0
    """Greedy, as the paper; n = 1, evolution off (validate mode)."""


@dataclass
class CheckpointSettings:
    save_freq: int = 10
    """Save every N steps (and at the end); 0 = only at the end."""
    best_metric: str = "val/average"
    """Validation metric that picks the best checkpoint (mean of the four categories)."""
    keep_only_best: bool = False
    """Delete checkpoints other than the best and the latest (which resume needs)."""
    resume: bool = False
    """Continue the run in `run_dir` from its latest checkpoint (explicit, never implied)."""


@dataclass
class LoggingSettings:
    wandb: str = "offline"
    """offline | online | disabled. Online needs WANDB_API_KEY; offline needs nothing."""
    project: str = "seal-repro"


@dataclass
class TrainerConfig:
    total_epochs: int = 6
    total_steps: int = 0
    """Stop after this many steps (0 = total_epochs over the training tasks)."""
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    loss: LossSettings = field(default_factory=LossSettings)
    apatch: APatchSettings = field(default_factory=APatchSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)


@dataclass
class VerlSealSection:
    """The `seal` section of a verl config: what verl's own keys cannot hold. The launcher
    writes it from the run config (seal/trainer/verl/config.py); the agent loop and the
    SEAL trainer read it with `from_config`. Unknown keys are errors."""

    env_url: str = "http://127.0.0.1:8082"
    """The environment service every agent-loop worker and the trainer talk to."""
    run_dir: str = "outputs/verl_run"
    """Validation records (validation/), capability state, tocf summaries, best checkpoint."""
    env_timeout_s: float = 60.0
    """Per-request timeout of the environment client."""
    max_env_connections: int = 256
    """Connections per agent-loop worker to the service."""
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    """Episode limits and training layers. `n`, `temperature` and `top_p` are copied into
    verl's own rollout keys, which are the ones verl uses; `max_batch_size` is unused."""
    apatch: APatchSettings = field(default_factory=APatchSettings)
    best_metric: str = "val/average"
    """Validation metric that picks the best checkpoint (hard-linked to checkpoints/best)."""

    @classmethod
    def from_config(cls, config) -> VerlSealSection:
        """The typed section of a verl DictConfig (defaults if it has none)."""
        section = config.get("seal") if config is not None else None
        merged = OmegaConf.merge(OmegaConf.structured(cls), section or {})
        return OmegaConf.to_object(merged)
