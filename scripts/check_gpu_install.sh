#!/usr/bin/env bash
# Resolve what `install.sh --gpu` installs, without installing it: pip's resolver picks the
# versions of the GPU set (install.sh's GPU_REQUIREMENTS, then this project with its test and
# tracking extras) in a scratch venv with `pip install --dry-run`, and this prints them, with
# the flash-attn wheels install.sh would try for the resolved torch. Not run in CI: it fetches
# package metadata (and the project's build backend) from PyPI.
#
#   bash scripts/check_gpu_install.sh [--check-urls]
#
# --check-urls also asks GitHub whether each flash-attn wheel exists (HEAD request).
# The scratch run reads no pip configuration (PIP_CONFIG_FILE=/dev/null, no PIP_FIND_LINKS,
# no PIP_CONSTRAINT): a machine's own pins, local wheel folders or indexes would otherwise
# decide versions a GPU node would not get.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../install.sh
source install.sh  # GPU_REQUIREMENTS and flash_attn_wheel_urls; sourcing installs nothing

check_urls=0
for arg in "$@"; do
  case "$arg" in
    --check-urls) check_urls=1 ;;
    *) echo "check_gpu_install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python=${PYTHON:-python3}
clean_pip=(env -u PIP_FIND_LINKS -u PIP_CONSTRAINT -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null)
"$python" -m venv "$scratch/venv"
"${clean_pip[@]}" "$scratch/venv/bin/python" -m pip install -q --upgrade pip
start=$(date +%s)
"${clean_pip[@]}" "$scratch/venv/bin/python" -m pip install --dry-run --ignore-installed \
  --quiet --report "$scratch/report.json" "${GPU_REQUIREMENTS[@]}" ".[test,tracking]"
echo "check_gpu_install.sh: pip resolved the --gpu set in $(($(date +%s) - start)) s" \
  "(pip $("$scratch/venv/bin/python" -m pip --version | cut -d' ' -f2)," \
  "$("$scratch/venv/bin/python" --version))"

"$scratch/venv/bin/python" - "$scratch/report.json" <<'PY'
import json, sys

report = json.load(open(sys.argv[1]))
versions = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in report["install"]}
key = ["verl", "torch", "torchvision", "torchaudio", "vllm", "transformers", "ray",
       "tensordict", "transferqueue", "cupy-cuda13x", "liger-kernel", "trl",
       "flash-linear-attention", "wandb", "triton", "flashinfer-python"]
print(f"{len(versions)} packages; the ones that matter:")
for name in key:
    print(f"  {name:24} {versions.get(name, '(not in the set)')}")
cuda = sorted(f"{n} {v}" for n, v in versions.items() if n.startswith("nvidia-cuda-runtime"))
print("  CUDA runtime:", ", ".join(cuda) or "(none)")
print("  flash-attn:", versions.get("flash-attn", "not in the set (install.sh adds it after torch)"))
PY

py_tag=$("$scratch/venv/bin/python" -c "import sys; print(f'cp{sys.version_info.major}{sys.version_info.minor}')")
torch_version=$("$scratch/venv/bin/python" -c "import json,sys; r=json.load(open(sys.argv[1])); print(next(i['metadata']['version'] for i in r['install'] if i['metadata']['name'].lower()=='torch'))" "$scratch/report.json")
echo "flash-attn $FLASH_ATTN_VERSION wheels install.sh would try for torch $torch_version (CUDA 13.0, cxx11 ABI, $(uname -m), $py_tag):"
for url in $(flash_attn_wheel_urls "$py_tag" "$torch_version" 13.0 TRUE "$(uname -m)"); do
  if [ "$check_urls" = 1 ]; then
    status=$("$scratch/venv/bin/python" -c "import sys, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], method='HEAD'), timeout=15)
    print('exists')
except Exception as error:
    print(f'not reachable from here ({type(error).__name__}: {error})')" "$url")
    echo "  $url: $status"
  else
    echo "  $url"
  fi
done
