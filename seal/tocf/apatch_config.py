"""A-Patch's config section, `trainer.apatch` (the code is apatch.py).

Apart from the torch code so that composing a run config imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

APPLY_TO_CHOICES = ("all", "positive", "negative")
WEIGHT_SOURCES = ("dynamic", "static")


@dataclass
class APatchConfig:
    """A-Patch options (the run config's `trainer.apatch`). Defaults are the paper's values."""

    enable: bool = True
    """Scale advantages at all; False leaves them untouched (vanilla GRPO). Default True."""
    weight_source: str = "dynamic"
    """"dynamic": the capability state's live weights; "static": its base weights
    (`trainer.capability.base_weights`), which never move. Default "dynamic"."""
    min_scale: float = 0.5
    """Lower clamp of a sample's scale. Default 0.5."""
    max_scale: float = 2.0
    """Upper clamp of a sample's scale. Default 2.0."""
    apply_to: str = "all"
    """Which advantages to scale: "all", "positive" or "negative" ones. Default "all"."""
    warmup_steps: int = 0
    """Trainer steps before A-Patch starts (the weights are still tracked). Default 0."""
    renormalize: bool = False
    """Divide the scales by their mean over the samples they touch, so that the average
    multiplier is 1 and A-Patch only redistributes the step size; scales may then leave
    [min_scale, max_scale]. Default False. (Was `budget`, still read with a warning:
    seal/renamed_keys.py.)"""

    def __post_init__(self):
        if self.apply_to not in APPLY_TO_CHOICES:
            raise ValueError(f"apply_to must be one of {APPLY_TO_CHOICES}, not {self.apply_to!r}")
        if self.weight_source not in WEIGHT_SOURCES:
            raise ValueError(
                f"weight_source must be one of {WEIGHT_SOURCES}, not {self.weight_source!r}"
            )
        if not 0 < self.min_scale <= self.max_scale:
            raise ValueError(
                f"need 0 < min_scale <= max_scale, got {self.min_scale}, {self.max_scale}"
            )
