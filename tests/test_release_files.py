"""The citation and the changelog agree with the package's version (CHANGELOG.md: how
versions and tags are kept)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def package_version() -> str:
    pyproject = (REPO / "pyproject.toml").read_text()
    return re.search(r'(?m)^version = "([^"]+)"', pyproject).group(1)


def test_citation_names_the_paper_and_this_version():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["version"] == package_version()
    paper = citation["preferred-citation"]
    assert paper["title"] == "SEAL: Synergistic Co-Evolution of Agents and Learning Environments"
    assert paper["identifiers"][0]["value"] == "arXiv:2605.24426"
    assert citation["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()[:300]


def test_the_changelog_has_this_version_and_an_unreleased_section():
    headings = [line for line in (REPO / "CHANGELOG.md").read_text().splitlines()
                if line.startswith("## ")]  # fmt: skip
    assert "## Unreleased" in headings and f"## {package_version()}" in headings
