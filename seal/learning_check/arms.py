"""The learning check's two arms and what each switches (a module of its own: the command
line names them without importing the trainer)."""

SEAL_ARM, GRPO_ARM = "seal", "grpo"
ARMS = {
    SEAL_ARM: {"apatch": True, "schema_cues": True, "push_profile": True},
    GRPO_ARM: {"apatch": False, "schema_cues": False, "push_profile": False},
}
"""What each arm switches: A-Patch, the schema-cue layer, the failure profile pushed."""
