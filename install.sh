#!/usr/bin/env bash
# Install SEAL-repro into a virtual environment in this repository (.venv).
#
#   bash install.sh           the CPU default: service, core, data tools (no CUDA packages)
#   bash install.sh --test    + test tools and verl[verl-core] 0.9.1 (the verl-equality tests)
#   bash install.sh --gpu     GPU nodes: verl[vllm,fsdp] 0.9.1 with the CUDA torch it pins
#
# Needs only python3 (>= 3.10) with venv; no conda. Re-running is safe. PYTHON=python3.11
# picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")"

mode=cpu
for arg in "$@"; do
  case "$arg" in
    --test) mode=test ;;
    --gpu) mode=gpu ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip

if [ "$mode" = gpu ]; then
  # vLLM pins its own CUDA torch build; let it choose.
  "${pip[@]}" "verl[vllm,fsdp]==0.9.1"
else
  # The CPU build first: any other torch request would pull gigabytes of CUDA packages.
  "${pip[@]}" torch==2.13.0
fi

# bfcl-eval without its dependencies: its pins (numpy==1.26.4, dozens of API clients)
# conflict with this stack and are not used by the multi-turn backends and checker;
# pyproject.toml lists what they do need (mpmath, filelock).
"${pip[@]}" --no-deps bfcl-eval==2026.3.23

case "$mode" in
  cpu) "${pip[@]}" -e . ;;
  test) "${pip[@]}" -e ".[test]" ;;
  gpu) "${pip[@]}" -e ".[test,tracking]" ;;
esac
if [ "$mode" = test ]; then
  # verl-core (not the [cpu] extra, which pins a torch that pulls CUDA): the equality
  # tests import verl's own functions.
  "${pip[@]}" "verl[verl-core]==0.9.1"
fi
echo "install.sh: installed ($mode) into $(pwd)/.venv"
