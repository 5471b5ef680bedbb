"""The import contracts of pyproject.toml hold (docs/design.md, "Layout and dependencies"):
every room on its floor, no circles, seal.trainer.verl apart, the core without verl and ray;
and every module lives in a room of the drawing (scripts/import_drawing.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from importlinter.cli import lint_imports
from scripts_loader import load_script

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_import_contracts_are_kept(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert "0 broken" in report, report
    assert status == 0, report


def test_every_module_lives_in_a_room_with_no_arrow_back_up_and_no_circle():
    drawing = load_script("import_drawing").draw(PYPROJECT)
    assert drawing.missing == [], "rooms the contract names and the tree lacks"
    assert drawing.unhoused == [], "modules no floor holds: name their package in `floors`"
    assert drawing.back_arrows == []
    assert (drawing.room_circles, drawing.module_circles) == ([], [])


def test_composing_a_run_config_imports_no_torch():
    """The launcher's refusals, `--explain` and every run's start compose the config
    before any trainer: with the config sections apart from the torch code
    (seal/algos/config.py, seal/tocf/apatch_config.py) that costs no torch import (~2 s)."""
    code = (
        "import sys, launcher; launcher.compose(launcher.DEFAULT_CONF, []); "
        "print(sorted(m for m in sys.modules if m in ('torch', 'transformers')))"
    )
    root = PYPROJECT.parent
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
