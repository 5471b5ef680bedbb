"""The end of `install.sh --gpu`: what a GPU run imports must import, and torch must see GPUs.

    python -m seal.trainer.verl.gpu_check

Prints one line per item and exits 1 naming what failed: torch with its CUDA and the GPUs it
sees, vLLM, flash-attn or the sdpa fallback the launcher will choose (attention.py), and the
SEAL plugin's registrations with verl (plugin.py), and how transformers will run Qwen3.5's
Gated DeltaNet layers (seal/trainer/preflight_rows.py: its fast path, or the slow torch fallback).
"""

from __future__ import annotations

import sys


def main() -> int:
    failures = []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(count))
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}): {count} GPU(s) {names}")
    if count == 0:
        failures.append("torch sees no GPU (driver, CUDA_VISIBLE_DEVICES?)")
    try:
        import vllm

        print(f"vllm {vllm.__version__}")
    except Exception as error:  # noqa: BLE001 - any import failure is the finding
        failures.append(f"vllm does not import: {type(error).__name__}: {error}")
    from seal.trainer.verl.attention import choose_attention, flash_attn_version

    print(f"attention: {choose_attention('cuda', flash_attn_version()).reason}")
    from seal.trainer.preflight_rows import linear_attention_path

    # Not a failure: models without Gated DeltaNet layers never use these kernels.
    print(f"Gated DeltaNet layers (Qwen3.5, Qwen3-Next): {linear_attention_path()[1]}")
    from seal.trainer.verl.plugin import check_registrations

    try:
        check_registrations()
        print("SEAL verl plugin: agent loop and trainer registered")
    except RuntimeError as error:
        failures.append(str(error))
    for failure in failures:
        print(f"gpu_check: FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
