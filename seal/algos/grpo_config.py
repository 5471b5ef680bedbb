"""The GRPO objective's two config sections, `trainer.advantage` and `trainer.loss`.

Apart from the torch code that reads them (advantage.py, loss.py) so that composing a run
config (the launcher, `--explain`, a refused resume) imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GRPOConfig:
    """Advantage estimation. Defaults are the paper's values."""

    norm_by_std: bool = True
    """Divide by the group's standard deviation (GRPO); False keeps r - mean (Dr. GRPO). Default True."""
    epsilon: float = 1e-6
    """Added to the standard deviation so equal rewards do not divide by zero. Default 1e-6."""


AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_TYPES = ("low_var_kl", "kl", "mse")


@dataclass
class PolicyLossConfig:
    """Actor loss. Defaults are the paper's values."""

    clip_ratio_low: float = 0.2
    """rho is clipped below at 1 - clip_ratio_low. Default 0.2."""
    clip_ratio_high: float = 0.2
    """rho is clipped above at 1 + clip_ratio_high. Default 0.2."""
    clip_ratio_c: float = 10.0
    """Dual-clip bound: a negative-advantage token's loss never exceeds -A * c. Default 10."""
    loss_agg_mode: str = "seq-mean-token-mean"
    """How token losses become one number, one of `AGG_MODES`. Default
    "seq-mean-token-mean" (each sample's mean over its tokens, averaged over the
    mini-batch's samples): what the release's actor computes. Its config says token-mean,
    but its actor takes that mean over a micro-batch of one sample and divides each by the
    number of micro-batches, so every episode weighs the same, however long
    (docs/paper_configs.md). "token-mean" (one mean over all the mini-batch's tokens,
    verl's default) is beyond the paper: a long episode then weighs in proportion to its
    generated tokens."""
    use_kl_loss: bool = True
    """Add the KL to the reference policy to the loss; the trainers then build the frozen
    reference (`needs_reference`). Default True."""
    kl_loss_coef: float = 0.001
    """Weight of the KL term. Default 0.001. At 0 the KL is still computed and logged,
    as verl does; use_kl_loss=false drops the reference."""
    kl_loss_type: str = "low_var_kl"
    """KL estimator, one of `KL_TYPES`. Default "low_var_kl" (Schulman's k3)."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus. Default 0."""
    trained_response_tokens: int = 4096
    """Each training sample's response (everything after the first prompt: replies, tool
    results, later questions) is cut to its first N tokens, as the release counts them,
    before the update: the tokens after the cut get no gradient and count in no mean. 4096:
    the release's (its response length, which also bounds each generation). 0 (beyond the
    paper) trains the whole response, up to `limits.max_context_tokens`: the later turns of
    long episodes, which the release never trains, get a gradient too. Both trainers
    (seal/trainer/response_cut.py)."""

    def __post_init__(self):
        if self.loss_agg_mode not in AGG_MODES:
            raise ValueError(
                f"loss_agg_mode must be one of {AGG_MODES}, not {self.loss_agg_mode!r}"
            )
        if self.kl_loss_type not in KL_TYPES:
            raise ValueError(f"kl_loss_type must be one of {KL_TYPES}, not {self.kl_loss_type!r}")
        if self.trained_response_tokens < 0:
            raise ValueError(
                f"trained_response_tokens must be >= 0 (0: no cut), not {self.trained_response_tokens}"
            )
        if self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must exceed 1, got {self.clip_ratio_c}")
