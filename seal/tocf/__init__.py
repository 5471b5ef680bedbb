"""Capability state, dynamic tag weights, failure profile and A-Patch.

The package keeps the name of the original release's module (`agentevolver/module/tocf`),
which never spells it out; read it as "the capability state and what it drives": pass rates
per category and failure tag across training and validation (state.py), the dynamic tag
weights and failure profile derived from them, and A-Patch (apatch.py). Importing it stays
light (no torch): the environment service uses the capability state and the failure
profile (tag names: seal/bfcl/tags.py); A-Patch, the one torch user, is `seal.tocf.apatch`.
"""

from seal.tocf.state import (
    CapabilityConfig,
    CapabilityState,
    TrajectoryOutcome,
    load_failure_profile,
    open_capability_state,
)
from seal.tocf.summary import epoch_summary, write_epoch_summary

__all__ = [
    "CapabilityConfig",
    "CapabilityState",
    "TrajectoryOutcome",
    "epoch_summary",
    "load_failure_profile",
    "open_capability_state",
    "write_epoch_summary",
]
