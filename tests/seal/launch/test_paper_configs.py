"""The paper's runs as exp/ configs: the headline run is the paper's active configuration,
and every other row differs from its partner in exactly the component the paper names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seal.service_contract import InterfaceSettings
from seal.trainer_config import TrainerConfig

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402


def composed(name: str) -> dict:
    return OmegaConf.to_container(launcher.compose(REPO / f"exp/{name}.yaml", []), resolve=True)


def flat(node: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in node.items():
        if isinstance(value, dict) and value and key != "base_weights":
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def difference(name: str, partner: str) -> dict:
    """key -> (partner's value, this config's value), the run's `name` left out."""
    mine, theirs = flat(composed(name)), flat(composed(partner))
    return {
        key: (theirs.get(key), mine.get(key))
        for key in sorted(mine.keys() | theirs.keys())
        if key != "name" and mine.get(key) != theirs.get(key)
    }


def test_the_headline_run_has_the_papers_active_interface():
    """Appendix D: the base prompt plus the schema cues; A-Patch with the dynamic
    weights; the failure profile pushed every step."""
    trainer = OmegaConf.to_object(launcher.compose(REPO / "exp/SEAL.yaml", []).trainer)
    assert trainer.interface == InterfaceSettings(schema_cues=True)
    assert not (
        trainer.interface.recovery_feedback
        or trainer.interface.guidelines
        or trainer.interface.type_hints
    )
    assert trainer.apatch.enable and trainer.apatch.weight_source == "dynamic"
    assert trainer.rollout.push_profile
    assert trainer.reward.partial_credit_cap == 0.0  # the binary verifier reward
    # Those are the trainer section's defaults: the paper's values live in one place.
    assert trainer.interface == TrainerConfig().interface


ABLATIONS = {
    # Table 3, each against the headline run; as the release's bfcl_seal_0{1,2,3} configs.
    "SEAL_no_env_adaptation": {"trainer.interface.schema_cues": (True, False)},
    "SEAL_no_reweighting": {"trainer.apatch.enable": (True, False)},
    "SEAL_no_closed_loop": {"trainer.apatch.weight_source": ("dynamic", "static")},
    # Beyond the paper: its two optional interface components on.
    "SEAL_full_interface": {
        "trainer.interface.recovery_feedback": (False, True),
        "trainer.interface.guidelines": (False, True),
    },
}


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_differs_from_the_headline_run_in_its_component_only(name):
    assert difference(name, "SEAL") == ABLATIONS[name]


VANILLA = {
    "trainer.apatch.enable": (True, False),
    "trainer.interface.schema_cues": (True, False),
    "trainer.rollout.push_profile": (True, False),
}


@pytest.mark.parametrize(
    ("vanilla", "seal"),
    [
        ("GRPO", "SEAL"),
        ("GRPO_qwen2.5_3b", "SEAL_qwen2.5_3b"),
        ("GRPO_toolace2_8b", "SEAL_toolace2_8b"),
        ("GRPO_qwen3.5_4b", "SEAL_qwen3.5_4b"),  # the release's current recipe, not a row
    ],
)
def test_each_vanilla_run_is_its_seal_run_without_seals_halves(vanilla, seal):
    """Table 1's controlled comparison: the same backbone, format and budget."""
    assert difference(vanilla, seal) == VANILLA
