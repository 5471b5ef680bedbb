"""SEAL-repro: GRPO training of tool-use agents on BFCL multi-turn with failure tags that
evolve the environment and reweight advantages (docs/design.md, "Layout and dependencies")."""
