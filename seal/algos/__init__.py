"""The GRPO objective in plain torch (no verl): group-relative advantages (advantage.py), the
actor loss (loss.py), and their config sections, which import no torch (grpo_config.py)."""
