"""Printed hints run as pasted (seal/commands.py): the launcher as this interpreter runs it,
a console script by its file beside the interpreter, or by its bare name when PATH leads to
that same file; paths relative to the working directory when inside it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from seal import commands

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WITHOUT_VENV = "/usr/bin:/bin"
"""A shell's PATH where the venv is not activated."""


@pytest.fixture
def bare_shell(monkeypatch):
    """This process as started from a shell without the venv on PATH, in the repository."""
    monkeypatch.setenv("PATH", WITHOUT_VENV)
    monkeypatch.chdir(REPO)


def pasted(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """`command` pasted into a shell without the venv on PATH."""
    env = {**os.environ, "PATH": WITHOUT_VENV}
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_launcher_is_named_with_this_interpreter_from_the_repository(bare_shell):
    hint = commands.launcher("--explain")
    assert hint == f"{shlex.quote(os.path.relpath(sys.executable))} launcher.py --explain"
    done = pasted(hint, REPO)
    assert done.returncode == 0, done.stderr
    assert "trainer.rollout.n =" in done.stdout


def test_a_console_script_is_the_venvs_file_unless_path_leads_to_it(bare_shell, monkeypatch):
    hint = commands.script("seal-export", "--help")
    assert hint.split()[0] == os.path.relpath(BIN / "seal-export")
    assert pasted(hint, REPO).returncode == 0
    monkeypatch.setenv("PATH", f"{BIN}:{WITHOUT_VENV}")  # the venv activated
    assert commands.script("seal-export", "--help") == "seal-export --help"


def test_paths_outside_the_working_directory_are_absolute_and_quoted(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", WITHOUT_VENV)
    monkeypatch.chdir(tmp_path)
    run_dir = REPO / "outputs" / "a run"
    hint = commands.resume(run_dir)
    assert hint == (f"{shlex.quote(sys.executable)} {REPO / 'launcher.py'} --resume '{run_dir}'"), (
        hint
    )
    assert shlex.split(hint)[-1] == str(run_dir)
    monkeypatch.chdir(REPO)
    assert commands.resume(run_dir).endswith("launcher.py --resume 'outputs/a run'")
