"""`seal-eval-bfcl`: score a served model with bfcl-eval's own multi-turn harness, the
original release's second evaluation (seal/eval/bfcl_harness.py), on the paper's 400
held-out tasks; records and the per-category table as `seal-eval`'s.

    seal-eval-bfcl --model-dir outputs/export/SEAL --bfcl-model Qwen/Qwen3-4B-Instruct-2507-FC
    seal-eval-bfcl --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct \
        --tokenizer-dir /models/Qwen2.5-7B-Instruct --bfcl-model Qwen/Qwen3-4B-Instruct-2507-FC

bfcl-eval, transformers and openai load when a run begins, so `--help` answers at once.
docs/evaluation.md, "bfcl-eval's own harness", says how its rules differ from seal-eval's.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPLIT_FILE = REPO / "data" / "seal_split.json"
EXAMPLE = """example (a checkpoint exported by seal-export, served by transformers serve):
  seal-eval-bfcl --model-dir outputs/export/SEAL --bfcl-model Qwen/Qwen3-4B-Instruct-2507-FC

example (a model already served by vLLM; its config and tokenizer in --tokenizer-dir):
  seal-eval-bfcl --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct \\
      --tokenizer-dir /models/Qwen2.5-7B-Instruct --bfcl-model Qwen/Qwen3-4B-Instruct-2507-FC
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="seal-eval-bfcl",
        description="Score a served model on BFCL multi-turn with bfcl-eval's own harness "
        "(its handler, multi-turn loop and checker; the release's temperature 0.001): the "
        "original release's second evaluation, beside seal-eval's.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--base-url", help="an OpenAI-compatible API root, up to /v1 (BASE_URL/completions)"
    )
    target.add_argument(
        "--model-dir",
        type=Path,
        help="a Hugging Face model directory, served by `transformers serve` on a free "
        "local port for the run (its log: OUT_DIR/model_server.log)",
    )
    parser.add_argument(
        "--model", help="the served model's name (required with --base-url; default: the directory)"
    )
    parser.add_argument(
        "--tokenizer-dir",
        type=Path,
        help="with --base-url: a directory with the model's config.json and tokenizer (bfcl's "
        "handler takes the context length and counts prompt tokens there; default with "
        "--model-dir: the directory)",
    )
    parser.add_argument(
        "--bfcl-model",
        required=True,
        help="the bfcl-eval 2026.3.23 local-inference handler (a key of its model map, e.g. "
        "Qwen/Qwen3-4B-Instruct-2507-FC, Team-ACE/ToolACE-2-8B): its prompt and decoder. The "
        "release's Qwen/Qwen2.5-7B-Instruct-FC is not in this version (docs/evaluation.md)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.001,
        help="sampling temperature (default: %(default)s, the release's harness)",
    )
    parser.add_argument(
        "--split", choices=("eval", "train", "all"), default="eval",
        help="the paper's 400 held-out tasks (eval), its 400 training tasks, or all 800 "
        "(default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--split-file",
        type=Path,
        default=DEFAULT_SPLIT_FILE,
        help="JSON file with the train and eval task ids (default: %(default)s)",
    )
    parser.add_argument(
        "--limit", type=int, help="only the first N tasks of each category (a smoke test)"
    )
    parser.add_argument("--step", type=int, default=0, help="the records' step (default: 0)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="tasks in flight, each in its own process (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="cap each reply below bfcl's own min(4096, context - prompt - 2) (smoke tests; "
        "the release's harness had none)",
    )
    parser.add_argument("--api-key-env", metavar="VAR", help="variable holding the API key")
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=600.0,
        help="seconds one request may take (default: %(default)s; bfcl's own: 72000)",
    )
    parser.add_argument(
        "--attempts", type=int, default=3, help="tries per request (default: %(default)s)"
    )
    parser.add_argument("--server-device", default="auto", help="with --model-dir (default: auto)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="where validation/step_N.jsonl goes (default: outputs/eval_bfcl/<model>)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.base_url and not (args.model and args.tokenizer_dir):
        parser.error("--base-url needs --model and --tokenizer-dir")
    if args.model_dir:
        args.model = args.model or str(args.model_dir.resolve())
        args.tokenizer_dir = args.tokenizer_dir or args.model_dir
    for flag in ("limit", "workers", "max_tokens", "attempts"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = args.out_dir or REPO / "outputs" / "eval_bfcl" / re.sub(r"[^\w.-]", "_", args.model)
    from seal.eval.harness_run import run  # bfcl-eval, transformers, openai: only now

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"error: --api-key-env {args.api_key_env}: not set", file=sys.stderr)
            return 1
    try:
        return run(args, out_dir, api_key)
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again to finish", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
