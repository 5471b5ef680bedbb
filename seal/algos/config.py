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
    loss_agg_mode: str = "token-mean"
    """How token losses become one number, one of `AGG_MODES`. Default "token-mean": the
    release's recipe sets it (the paper does not name one; docs/paper_configs.md)."""
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

    def __post_init__(self):
        if self.loss_agg_mode not in AGG_MODES:
            raise ValueError(
                f"loss_agg_mode must be one of {AGG_MODES}, not {self.loss_agg_mode!r}"
            )
        if self.kl_loss_type not in KL_TYPES:
            raise ValueError(f"kl_loss_type must be one of {KL_TYPES}, not {self.kl_loss_type!r}")
        if self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must exceed 1, got {self.clip_ratio_c}")
