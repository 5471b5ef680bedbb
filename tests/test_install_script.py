"""install.sh's pip output: bfcl-eval's expected pin warnings are set aside, everything else
(another package's conflict, a real error) is shown, and a failing pip fails the script.

The functions are exercised by sourcing install.sh, which then defines them and stops."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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


# --- --gpu: the driver check and the flash-attn decision, with the machine's facts injected


def fake_commands(tmp_path: Path, **scripts: str) -> dict:
    """An environment whose PATH starts with a folder of fake commands (name -> shell body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": "false"}


def run_sourced(script: str, tmp_path: Path, env: dict) -> subprocess.CompletedProcess:
    pins_log = tmp_path / "pins.log"
    command = f'source "{INSTALL_SH}"; bfcl_pins_log="{pins_log}"; {script}'
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env
    )


NVIDIA_SMI = """case "$*" in
  *driver_version*) echo "{driver}" ;;
  *compute_cap*) echo "9.0"; echo "9.0" ;;
  -L) echo "GPU 0: NVIDIA H100"; echo "GPU 1: NVIDIA H100" ;;
esac"""
BROKEN_NVIDIA_SMI = 'echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18'
"""What nvidia-smi does after a driver update until the next reboot."""


def test_the_driver_check_passes_a_cuda_13_driver(tmp_path):
    env = fake_commands(tmp_path, **{"nvidia-smi": NVIDIA_SMI.format(driver="580.65.06")})
    done = run_sourced("check_driver", tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert "NVIDIA driver 580.65.06 (>= 580, CUDA 13), 2 GPU(s)" in done.stdout


def test_an_old_driver_stops_the_gpu_install_before_any_download(tmp_path):
    """The whole script with --gpu: an old driver ends it before the venv or pip runs."""
    env = fake_commands(
        tmp_path,
        **{"nvidia-smi": NVIDIA_SMI.format(driver="535.104.05"), "python3": "exit 99"},
    )
    work = tmp_path / "repo"
    work.mkdir()
    (work / "install.sh").write_text(INSTALL_SH.read_text())
    env.pop("PYTHON")
    done = subprocess.run(
        ["bash", str(work / "install.sh"), "--gpu"], capture_output=True, text=True, timeout=30,
        cwd=work, env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert "NVIDIA driver 535.104.05 is too old" in done.stderr
    assert "needs driver >= 580" in done.stderr and "nothing was downloaded" in done.stderr
    assert not (work / ".venv").exists()  # python3 (exit 99) was never reached
    no_driver = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHON": "false"}  # no nvidia-smi
    done = run_sourced("check_driver", tmp_path, no_driver)
    assert done.returncode == 1 and "nvidia-smi found none" in done.stderr


def test_flash_attn_wheels_match_torch_cuda_and_python():
    done = subprocess.run(
        ["bash", "-c", f'source "{INSTALL_SH}"; flash_attn_wheel_urls cp311 2.11.0+cu130 13.0 TRUE x86_64'],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHON": "false"},
    )  # fmt: skip
    official, community = done.stdout.split()
    assert official.endswith(
        "/v2.8.3/flash_attn-2.8.3+cu13torch2.11cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    )
    assert community.endswith(
        "/v0.9.4/flash_attn-2.8.3+cu130torch2.11-cp311-cp311-linux_x86_64.whl"
    )
    done = subprocess.run(
        ["bash", "-c", f'source "{INSTALL_SH}"; flash_attn_wheel_urls cp312 2.11.0 13.0 TRUE aarch64'],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHON": "false"},
    )  # fmt: skip
    assert done.stdout.split() == [
        "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/"
        "v0.9.22/flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_aarch64.whl"
    ]


# pip that records its arguments and fails for the URLs/packages listed in $FAIL_FOR.
FAKE_PIP = (
    'pip=(sh -c \'echo "$* archs=${FLASH_ATTN_CUDA_ARCHS:-}" >> calls.log; for f in $FAIL_FOR; '
    'do case "$*" in *$f*) echo "ERROR: no $f" >&2; exit 1;; esac; done\' --)'
)
FACTS = "torch_facts() { echo cp311 2.11.0+cu130 13.0 TRUE x86_64; }"


def decide(tmp_path: Path, fail_for: str, nvcc: str | None, mode: str = "auto", **env_vars: str):
    scripts = {"nvidia-smi": NVIDIA_SMI.format(driver="580.65.06")}
    if nvcc is not None:
        scripts["nvcc"] = f'echo "Cuda compilation tools, release {nvcc}, V{nvcc}.88"'
    env = fake_commands(tmp_path, **scripts)
    if nvcc is None:
        env["PATH"] = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    env |= {"FAIL_FOR": fail_for, "SEAL_FLASH_ATTN": mode, **env_vars}
    (tmp_path / "calls.log").unlink(missing_ok=True)
    done = run_sourced(f"{FAKE_PIP}; {FACTS}; install_flash_attn", tmp_path, env)
    calls = (
        (tmp_path / "calls.log").read_text().splitlines()
        if (tmp_path / "calls.log").exists()
        else []
    )
    return done, calls


def test_flash_attn_from_a_prebuilt_wheel_when_one_installs(tmp_path):
    done, calls = decide(tmp_path, fail_for="Dao-AILab", nvcc="13.0")
    assert done.returncode == 0, done.stderr
    assert "installed from https://github.com/mjun0812" in done.stdout
    assert not any("--no-build-isolation" in c for c in calls)  # no build attempted


def test_flash_attn_built_without_isolation_when_no_wheel_fits(tmp_path):
    done, calls = decide(tmp_path, fail_for="Dao-AILab mjun0812", nvcc="13.0")
    assert done.returncode == 0, done.stderr
    build = [c for c in calls if "--no-build-isolation" in c]
    assert build and "flash-attn==2.8.3" in build[0] and "--no-deps" in build[0]
    assert "about 15-45 minutes" in done.stdout and "built and installed" in done.stdout


def test_flash_attn_left_out_when_neither_works(tmp_path):
    # nvcc of another CUDA major than torch's: no build is tried.
    done, calls = decide(tmp_path, fail_for="Dao-AILab mjun0812", nvcc="12.4")
    assert done.returncode == 0, done.stderr
    assert not any("--no-build-isolation" in c for c in calls)
    assert "needs nvcc of torch's CUDA 13.0 (found: 12.4)" in done.stdout
    assert "verl will use sdpa attention" in done.stdout
    # a build that fails ends the same way
    done, calls = decide(tmp_path, fail_for="Dao-AILab mjun0812 flash-attn==", nvcc="13.0")
    assert done.returncode == 0 and "the source build failed" in done.stdout
    assert "verl will use sdpa attention" in done.stdout
    # asked for a wheel explicitly: no wheel is an error, not a quiet fallback
    done, _ = decide(tmp_path, fail_for="Dao-AILab mjun0812", nvcc=None, mode="wheel")
    assert done.returncode == 1 and "could not be installed" in done.stderr
    done, calls = decide(tmp_path, fail_for="", nvcc="13.0", mode="none")
    assert done.returncode == 0 and calls == [] and "skipped" in done.stdout


def test_a_failing_nvidia_smi_is_said_not_a_silent_exit(tmp_path):
    """nvidia-smi exits 18 when the driver and its library do not match: the whole script
    with --gpu stops with a message naming it (it exited 18 with no word before)."""
    env = fake_commands(tmp_path, **{"nvidia-smi": BROKEN_NVIDIA_SMI, "python3": "exit 99"})
    work = tmp_path / "repo"
    work.mkdir()
    (work / "install.sh").write_text(INSTALL_SH.read_text())
    env.pop("PYTHON")
    done = subprocess.run(
        ["bash", str(work / "install.sh"), "--gpu"], capture_output=True, text=True, timeout=30,
        cwd=work, env=env,
    )  # fmt: skip
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "`nvidia-smi --query-gpu=driver_version --format=csv,noheader` failed (exit 18)" in (
        done.stderr
    )
    assert "Driver/library version mismatch" in done.stderr and "reboot" in done.stderr
    assert not (work / ".venv").exists()
    # The GPU count and the architectures go through the same probe.
    lists_no_gpus = 'case "$*" in *driver_version*) echo 580.65.06 ;; *) exit 9 ;; esac'
    env = fake_commands(tmp_path, **{"nvidia-smi": lists_no_gpus})
    done = run_sourced("check_driver", tmp_path, env)
    assert done.returncode == 1 and "`nvidia-smi -L` failed (exit 9)" in done.stderr
    done = run_sourced("flash_attn_archs", tmp_path, env)
    assert done.returncode == 1 and "compute_cap" in done.stderr


def test_a_source_build_compiles_this_machines_architectures_only(tmp_path):
    done, calls = decide(tmp_path, fail_for="Dao-AILab mjun0812", nvcc="13.0")
    build = [c for c in calls if "--no-build-isolation" in c]
    assert build and build[0].endswith("archs=90"), calls  # two H100s: one architecture
    assert "FLASH_ATTN_CUDA_ARCHS=90" in done.stdout
    mixed = 'case "$*" in *compute_cap*) echo 8.9; echo 9.0; echo 8.0 ;; esac'
    env = fake_commands(tmp_path, **{"nvidia-smi": mixed})
    assert run_sourced("flash_attn_archs", tmp_path, env).stdout == "80;90\n"
    old = 'case "$*" in *compute_cap*) echo 7.0 ;; esac'
    done = run_sourced("flash_attn_archs", tmp_path, fake_commands(tmp_path, **{"nvidia-smi": old}))
    assert done.returncode == 1 and "8.0 and newer, not 7.0" in done.stderr
    env["FLASH_ATTN_CUDA_ARCHS"] = "100"  # the user's choice stays
    assert run_sourced("flash_attn_archs", tmp_path, env).stdout == "100\n"


def test_a_wheel_carried_in_by_hand_is_the_only_one_tried(tmp_path):
    wheel = tmp_path / "flash_attn-2.8.3+cu130torch2.11-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"")
    done, calls = decide(tmp_path, fail_for="", nvcc="13.0", SEAL_FLASH_ATTN_WHEEL=str(wheel))
    assert done.returncode == 0, done.stderr
    assert calls[0].startswith(f"--no-deps {wheel}") and not any("github" in c for c in calls)
    assert f"installed from {wheel}" in done.stdout
    done, calls = decide(
        tmp_path, fail_for="", nvcc="13.0", SEAL_FLASH_ATTN_WHEEL=str(tmp_path / "none.whl")
    )
    assert done.returncode == 1 and calls == [] and "none.whl: no such file" in done.stderr
    done, calls = decide(tmp_path, fail_for="flash_attn-", nvcc="13.0",
                         SEAL_FLASH_ATTN_WHEEL=str(wheel))  # fmt: skip
    assert done.returncode == 1 and len(calls) == 1 and "did not install" in done.stderr


def test_a_python_without_venv_is_told_which_package_to_install(tmp_path):
    """A stock Ubuntu Python: `python3 -m venv` fails until python3.X-venv is installed."""
    no_venv = (
        'case "$*" in *"-m venv"*) echo "The virtual environment was not created successfully '
        'because ensurepip is not available." >&2; exit 1 ;; -c*) echo 3.12 ;; esac'
    )
    env = fake_commands(tmp_path, python3=no_venv)
    env.pop("PYTHON")
    work = tmp_path / "repo"
    work.mkdir()
    (work / "install.sh").write_text(INSTALL_SH.read_text())
    done = subprocess.run(
        ["bash", str(work / "install.sh")], capture_output=True, text=True, timeout=30,
        cwd=work, env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert "ensurepip is not available" in done.stderr  # Python's own words, then ours
    assert "sudo apt install python3.12-venv" in done.stderr
    assert not (work / ".venv").exists()


@pytest.mark.parametrize(
    ("mode", "fail_for", "said", "pip_calls"),
    [
        ("auto", "", "causal-conv1d: installed", 2),
        ("auto", "causal-conv1d==", "not installed (pip's error is above); Qwen3.5's", 2),
        ("none", "", "skipped (SEAL_CAUSAL_CONV1D=none)", 0),
    ],
)
def test_causal_conv1d_is_built_against_torch_or_its_fallback_named(
    tmp_path, mode, fail_for, said, pip_calls
):
    env = fake_commands(tmp_path) | {"FAIL_FOR": fail_for, "SEAL_CAUSAL_CONV1D": mode}
    done = run_sourced(f"{FAKE_PIP}; install_causal_conv1d", tmp_path, env)
    assert done.returncode == 0, done.stderr  # a missing kernel is not a failed install
    assert said in done.stdout
    calls = (tmp_path / "calls.log").read_text().splitlines() if pip_calls else []
    assert len(calls) == pip_calls
    if pip_calls:
        assert "--no-build-isolation --no-deps causal-conv1d==1.7.0" in calls[1]
