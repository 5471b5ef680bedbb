"""install.sh's pip output: bfcl-eval's expected pin warnings are set aside, everything else
(another package's conflict, a real error) is shown, and a failing pip fails the script.

The functions are exercised by sourcing install.sh, which then defines them and stops."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

INSTALL_SH = Path(__file__).resolve().parents[1] / "install.sh"

HEADER = (
    "ERROR: pip's dependency resolver does not currently take into account all the packages "
    "that are installed. This behaviour is the source of the following dependency conflicts."
)
BFCL_PINS = [
    "bfcl-eval 2026.3.23 requires anthropic>=0.75.0, which is not installed.",
    "bfcl-eval 2026.3.23 requires numpy==1.26.4, but you have numpy 2.4.6 which is incompatible.",
]
OTHER = "torch 2.13.0 requires sympy>=1.13.3, but you have sympy 1.12 which is incompatible."


def source_and_run(script: str, tmp_path: Path, stdin: str = "") -> subprocess.CompletedProcess:
    pins_log = tmp_path / "pins.log"
    command = f'source "{INSTALL_SH}"; bfcl_pins_log="{pins_log}"; {script}'
    # In a scratch directory with an interpreter that fails at once: were the guard that
    # stops a sourced install.sh ever broken, it would stop at `python -m venv`, here.
    return subprocess.run(
        ["bash", "-c", command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={**os.environ, "PYTHON": "false"},
    )


def test_sourcing_defines_the_functions_and_installs_nothing(tmp_path):
    done = source_and_run("type hide_bfcl_pins pip_install >/dev/null && echo defined", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "defined\n"  # and nothing else: the install part did not run
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_only_bfcl_eval_pin_lines_are_set_aside(tmp_path):
    warnings_only = "\n".join(["Collecting x", HEADER, *BFCL_PINS, "Successfully installed x"])
    done = source_and_run("hide_bfcl_pins", tmp_path, warnings_only + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Collecting x", "Successfully installed x"]
    assert (tmp_path / "pins.log").read_text().splitlines() == BFCL_PINS

    # Another package's conflict is real news: shown with its header.
    mixed = "\n".join([HEADER, BFCL_PINS[0], OTHER, BFCL_PINS[1]])
    done = source_and_run("hide_bfcl_pins", tmp_path, mixed + "\n")
    assert done.stdout.splitlines() == [HEADER, OTHER]


def test_a_failing_pip_fails_and_shows_its_error(tmp_path):
    fake_pip = (
        "pip=(sh -c 'echo to-stdout; echo \"ERROR: No matching distribution\" >&2; exit 3' --)"
    )
    done = source_and_run(f"{fake_pip}; pip_install bfcl-eval==0; echo not-reached", tmp_path)
    assert done.returncode == 3
    assert done.stdout == "to-stdout\n"
    assert "ERROR: No matching distribution" in done.stderr


def test_unknown_option_is_refused_before_installing(tmp_path):
    done = subprocess.run(
        ["bash", str(INSTALL_SH), "--cuda"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHON": "false"},
    )
    assert done.returncode == 2
    assert "unknown option --cuda" in done.stderr
