"""Every run-config key is documented where it is defined, and every exp/*.yaml loads."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seal.launch.config_docs import describe, field_docs, render, undocumented
from seal.launch.run_config import RunConfig

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402

EXP_FILES = sorted((REPO / "exp").glob("*.yaml"))


def test_every_key_of_the_run_config_is_documented():
    assert undocumented(RunConfig) == []


def leaf_keys(node, prefix=""):
    """Dotted keys a YAML file sets (dict values descend, everything else is a leaf)."""
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


@pytest.mark.parametrize("path", EXP_FILES, ids=lambda p: p.name)
def test_each_experiment_config_loads_and_sets_only_documented_keys(path):
    launcher.compose(path, [])  # unknown keys and bad values fail here
    documented = {key for key, _, doc in describe(RunConfig) if doc}
    sections = {key.rsplit(".", 1)[0] for key in documented}
    raw = OmegaConf.to_container(OmegaConf.load(path))
    for key in leaf_keys(raw):
        # A dict-valued leaf (e.g. capability.base_weights) is one documented key.
        assert key in documented or key in sections, f"{path.name}: {key} is undocumented"


@dataclass
class Inner:
    """A section."""

    documented: int = 1
    """Says what it is."""
    bare: int = 2


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    plain: str = "x"


def test_the_check_fails_on_an_undocumented_field():
    assert field_docs(Inner) == {"documented": "Says what it is."}
    assert undocumented(Inner) == ["bare"]
    assert undocumented(Outer, "run.") == ["run.inner.bare", "run.plain"]


def test_the_reference_names_each_key_with_its_default():
    text = render(RunConfig)
    assert "trainer.limits.max_generations = 20\n" in text
    assert "trainer.capability.beta = 0.25\n" in text
    assert "(undocumented)" not in text
