"""The import contracts of pyproject.toml hold (docs/design.md, "Layout and dependencies"):
every room on its floor, no circles, seal.trainer.verl apart, the core without verl and ray;
and every module lives in a room of the drawing (scripts/import_drawing.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
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
    assert {inside.container for inside in drawing.insides} == {"seal.bfcl", "env_service"}
    assert [inside.back_arrows for inside in drawing.insides] == [[], []]


def test_composing_a_run_config_imports_no_torch():
    """The launcher's refusals, `--explain` and every run's start compose the config
    before any trainer: with the config sections apart from the torch code
    (seal/algos/grpo_config.py, seal/tocf/apatch_config.py) that costs no torch import (~2 s)."""
    code = (
        "import sys, launcher; launcher.compose(launcher.DEFAULT_CONF, []); "
        "print(sorted(m for m in sys.modules if m in ('torch', 'transformers')))"
    )
    root = PYPROJECT.parent
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


HEAVY = ("torch", "transformers", "matplotlib")
"""Seconds each to import on a quiet machine, tens on a loaded one (issue 42)."""


@pytest.mark.parametrize(
    "module",
    ["seal.eval.score_endpoint", "seal.learning_check.cli", "seal.report.cli", "seal.runs.export"],
)
def test_a_console_script_s_module_imports_nothing_heavy(module):
    """`--help` and the refusals answer in about a second: what a command needs torch,
    transformers or matplotlib for is imported by the code that does it
    (scripts/bench_startup.py times the commands)."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m in {HEAVY!r}))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PYPROJECT.parent, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    assert out.strip() == "[]", f"{module} imports {out.strip()}"


def test_seal_export_refuses_an_existing_directory_before_importing_transformers(tmp_path):
    step = tmp_path / "run" / "checkpoints" / "step_000001"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"not read before the refusal")
    (step / "seal_best.json").write_text('{"step": 1}')
    (step.parent / "latest").write_text('{"step": 1, "path": "step_000001"}')
    (tmp_path / "exists").mkdir()
    code = (
        "import sys; from seal.runs.export import main; "
        f"code = main([{str(tmp_path / 'run')!r}, {str(tmp_path / 'exists')!r}]); "
        "print(code, 'transformers' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PYPROJECT.parent, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert "exists: export into a new directory" in done.stderr, done.stderr
    assert done.stdout.split() == ["1", "False"], done.stdout
