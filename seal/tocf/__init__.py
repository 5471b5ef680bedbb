"""Capability state, dynamic tag weights, failure profile and A-Patch.

Importing this package stays light (no torch): the environment service uses the tag
names and the failure profile. A-Patch, the one torch user, is imported from
`seal.tocf.apatch`.
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
