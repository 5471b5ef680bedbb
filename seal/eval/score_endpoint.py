"""`seal-eval`: score an OpenAI-compatible chat endpoint, or a local model directory, on BFCL
multi-turn or BFCL V4 agentic tasks (seal/eval/evaluator.py); also `python -m
seal.eval.score_endpoint`.

    python -m env_service --port 8082 &        # or pass --start-env (a token: $SEAL_ENV_TOKEN)
    seal-eval --base-url http://127.0.0.1:8000/v1         --model Qwen/Qwen2.5-7B-Instruct --out-dir outputs/eval/qwen7b

The argument parsing and the printed summary; the scoring is the evaluator's. Model
directories, tool formats, --leaderboard-format, --split agentic, exit status: docs/evaluation.md.
"""

import argparse
import asyncio
import contextlib
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from seal import commands
from seal.bfcl.agentic.tasks import (
    AGENTIC_CATEGORIES,
    MEMORY_CATEGORIES,
    WEB_SEARCH_CATEGORIES,
    agentic_task_ids,
)
from seal.bfcl.tasks import category_of
from seal.eval.chat_endpoint import ChatEndpoint, EndpointSettings
from seal.eval.endpoint_episode import Prompting, load_tokenizer, tokenizer_name
from seal.eval.evaluator import check_endpoint, episode_stats, errors_file, evaluate_endpoint
from seal.eval.model_server import serve_model, server_error
from seal.eval.own_service import DEFAULT_ENV_URL, own_service
from seal.eval.replay import split_task_ids
from seal.formats.bfcl_handlers import ranked_entry
from seal.formats.handler_format import leaderboard
from seal.formats.registry import AUTO, FORMATS, resolve
from seal.launch.terminate import TERMINATED_STATUS, Terminated, sigterm_raises
from seal.report.ood import Scores, bfcl_v4_scores, table2
from seal.report.paper import backbone_of
from seal.report.summary import render_markdown, summarize_step
from seal.service_contract import CONTEXT_STOPS, EpisodeLimits

REPO = Path(__file__).resolve().parents[2]
AGENTIC_SPLITS = ("agentic", "memory", "web_search", *AGENTIC_CATEGORIES)
DEFAULT_SPLIT_FILE = REPO / "data" / "seal_split.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="seal-eval",
        description="Score an OpenAI-compatible chat endpoint on BFCL tasks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=commands.examples(
            "seal-eval",
            (
                "--model-dir outputs/export/seal_tiny --start-env --limit 2 "
                "--out-dir outputs/eval/seal_tiny",
                "a model directory through `transformers serve`, 2 tasks per category",
            ),
            (
                "--base-url http://127.0.0.1:8000/v1 --model outputs/export/SEAL "
                "--tokenizer outputs/export/SEAL --tool-format bfcl_qwen_fc --start-env "
                "--out-dir outputs/eval/SEAL",
                "a model served by `vllm serve outputs/export/SEAL`, in the paper's prompt "
                "(docs/gpu.md)",
            ),
        ),
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--base-url",
        help="the endpoint's API root, up to /v1 (requests go to BASE_URL/chat/completions)",
    )
    target.add_argument(
        "--model-dir",
        type=Path,
        help="a Hugging Face model directory (a checkpoint, seal-export's output) to score "
        "through `transformers serve`, started on a free local port and stopped at the end "
        "(its log: OUT_DIR/model_server.log)",
    )
    parser.add_argument(
        "--model",
        help="model name sent in each request (required with --base-url; default with "
        "--model-dir: the directory)",
    )
    parser.add_argument(
        "--server-device",
        default="auto",
        help="with --model-dir: where transformers serve runs the model (auto, cpu, cuda:0; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--split",
        choices=("eval", "train", "all", *AGENTIC_SPLITS),
        default="eval",
        help="tasks to score: the paper's 400 held-out (eval), its 400 training tasks, "
        "or all 800; out of distribution, BFCL V4's agentic questions: all 665 (agentic), "
        "memory, web_search, or one category (default: %(default)s)",
    )
    parser.add_argument(
        "--split-file",
        type=Path,
        default=DEFAULT_SPLIT_FILE,
        help="JSON file with the train and eval task ids (default: %(default)s)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        help="score only the first N tasks of each category of the split (a smoke test: "
        "not comparable with the paper)",
    )
    parser.add_argument(
        "--step",
        type=int,
        default=0,
        help="step number the records carry, e.g. the checkpoint's training step (default: 0)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="episodes in flight at once, hence concurrent requests (default: %(default)s)",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="run directory for the records (default: outputs/eval/<model, / replaced by _>)",
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key, sent as a Bearer token (default: no key)",
    )
    parser.add_argument(
        "--max-generations",
        type=int,
        help="model replies per episode before it is cut off (default: 20, the paper's); "
        "BFCL V4 agentic: per turn, as bfcl-eval counts (default: 21, its limit)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=4096,
        help="most tokens per reply; under --context-stop fill, each request asks for this "
        "or the room left in the context, whichever is less (default: %(default)s, the "
        "paper's)",
    )
    parser.add_argument(
        "--max-context-tokens",
        type=int,
        default=16384,
        help="tokens of conversation + reply the model may see; where the context ends an "
        "episode, which is then scored (stop reason context_limit): --context-stop. At most "
        "the server's context (default: %(default)s, the paper's)",
    )
    parser.add_argument(
        "--context-stop",
        choices=CONTEXT_STOPS,
        default="release",
        help="release (the paper's): before each reply, the episode ends once the "
        "conversation, counted with every observation unclipped, reaches "
        "--max-context-tokens minus --max-tokens; fill (beyond the paper): a reply gets the "
        "room left, and an observation that leaves none ends the episode (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--max-observation-tokens",
        type=int,
        default=4096,
        help="each tool result or question is clipped to this many tokens "
        "(default: %(default)s, the paper's)",
    )
    parser.add_argument(
        "--tokenizer",
        help="the model's tokenizer (a directory or a Hugging Face name) that counts the "
        "budget, in the tool format's rendering (default: the shipped Qwen2.5 tokenizer, "
        "for Qwen2.5 and Qwen3 models only; required for others, Qwen3.5 included)",
    )
    parser.add_argument(
        "--attempts",
        type=int,
        default=5,
        help="tries per request on connection errors, timeouts, 429 and 5xx before the "
        "task fails (default: %(default)s)",
    )
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=600.0,
        help="seconds one request may take before it counts as a timeout (default: %(default)s)",
    )
    parser.add_argument(
        "--env-url",
        help="the environment service; its token, if it has one, from $SEAL_ENV_TOKEN "
        f"(default: {DEFAULT_ENV_URL}; with --start-env: a free local port)",
    )
    parser.add_argument(
        "--start-env",
        action="store_true",
        help="start the evaluation's own environment service, with a fresh token, on a free "
        "local port (or --env-url's host and port: refused if anything listens there), "
        "before any model server; stopped at exit, log in OUT_DIR/env_service.log",
    )
    parser.add_argument(
        "--embedding-model",
        type=Path,
        help="with --start-env: a local folder of all-MiniLM-L6-v2 for the vector memory "
        "backend (default: bfcl-eval's: the Hugging Face hub or its cache)",
    )
    parser.add_argument(
        "--web-search-interval",
        type=float,
        help="with --start-env: seconds between two SerpAPI searches (default: the "
        "service's, 1.0); set it from your SerpAPI plan's hourly throughput",
    )
    parser.add_argument(
        "--allow-failures",
        action="store_true",
        help="write the step's record file even if tasks failed (they are missing from it, "
        "not scored 0; the summary script warns about them)",
    )
    prompting = parser.add_mutually_exclusive_group()
    prompting.add_argument(
        "--tool-format",
        choices=[AUTO, *FORMATS],
        help="render the prompt in this tool format (seal/formats; auto: by --model) and "
        "send it to BASE_URL/completions (default: chat API, Qwen2.5 format)",
    )
    prompting.add_argument(
        "--leaderboard-format",
        nargs="?",
        const="",
        metavar="BFCL_MODEL",
        help="bfcl-eval's own prompt and decoder for BFCL_MODEL (a name of its model map; "
        "default: --model, or --model-FC when bfcl-eval ranks it in function-calling "
        "mode), sent to BASE_URL/completions",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.base_url and not args.model:
        parser.error("--base-url needs --model: the name the server serves")
    if args.model_dir:
        args.model = args.model or str(args.model_dir.resolve())
        args.tokenizer = args.tokenizer or str(args.model_dir)
    if args.max_generations is None:
        args.max_generations = 21 if args.split in AGENTIC_SPLITS else 20
    if not args.start_env and (args.embedding_model or args.web_search_interval is not None):
        parser.error("--embedding-model and --web-search-interval go with --start-env")
    if args.env_url is None and not args.start_env:
        args.env_url = DEFAULT_ENV_URL
    positive = ("limit", "concurrency", "max_generations", "max_tokens", "attempts")
    positive += ("max_context_tokens", "max_observation_tokens")
    for flag in positive:
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def endpoint_settings(args: argparse.Namespace) -> EndpointSettings:
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ValueError(f"--api-key-env {args.api_key_env}: that variable is not set")
    return EndpointSettings(
        base_url=args.base_url,
        model=args.model,
        api_key=api_key,
        attempts=args.attempts,
        timeout_s=args.request_timeout_s,
    )


def uses_completions(args: argparse.Namespace) -> bool:
    """Whether the endpoint is sent rendered prompts (the completions API), not chat."""
    return bool(args.tool_format) or args.leaderboard_format is not None


def prompting_of(args: argparse.Namespace) -> Prompting:
    if not uses_completions(args):
        return Prompting()
    if args.tool_format:
        return Prompting(resolve(args.tool_format, args.model), completions=True)
    name = args.leaderboard_format
    if not name:
        entry = ranked_entry(args.model)
        if entry is None:
            raise ValueError(f"--leaderboard-format: bfcl-eval does not rank {args.model!r}")
        name = entry.registry_name
    return Prompting(leaderboard(name), completions=True)


def first_per_category(task_ids: list[str], limit: int) -> list[str]:
    """The first `limit` task ids of each category, in the split's order."""
    taken: Counter[str] = Counter()
    kept = []
    for task_id in task_ids:
        category = category_of(task_id)
        if taken[category] < limit:
            taken[category] += 1
            kept.append(task_id)
    return kept


def episode_limits(args: argparse.Namespace) -> EpisodeLimits:
    return EpisodeLimits(
        max_generations=args.max_generations,
        max_context_tokens=args.max_context_tokens,
        max_new_tokens=args.max_tokens,
        max_observation_tokens=args.max_observation_tokens,
        context_stop=args.context_stop,
    )


def render_episode_stats(counts: dict, tasks: int) -> str:
    """One line on how the budget and the endpoint cut the episodes."""
    stops = ", ".join(f"{reason} {n}" for reason, n in counts["stop_reasons"].items())
    return (
        f"episodes ended ({tasks} tasks): {stops}; replies cut at max_tokens: "
        f"{counts['length_cut_replies']} in {counts['length_cut_tasks']} tasks; "
        f"observations clipped: {counts['clipped_observations']}; median time per task: "
        f"{counts['median_seconds']:.1f} s"
    )


def agentic_categories(split: str) -> tuple[str, ...]:
    """The BFCL V4 agentic categories a split names."""
    if split == "agentic":
        return AGENTIC_CATEGORIES
    if split == "memory":
        return MEMORY_CATEGORIES
    if split == "web_search":
        return WEB_SEARCH_CATEGORIES
    return (split,)


def service_args(args: argparse.Namespace, out_dir: Path) -> tuple[str, ...]:
    """The flags of the evaluation's own service (--start-env) for its split."""
    if args.split not in AGENTIC_SPLITS:
        return ()
    categories = agentic_categories(args.split)
    flags = []
    if any(c in MEMORY_CATEGORIES for c in categories):
        flags += ["--memory-snapshot-dir", str(out_dir / "memory_snapshots")]
    if args.embedding_model:
        flags += ["--embedding-model", str(args.embedding_model)]
    # (A web-search step's time budget is the service's own for those tasks.)
    web = any(c in WEB_SEARCH_CATEGORIES for c in categories)
    if web and args.web_search_interval is not None:
        flags += ["--web-search-interval", str(args.web_search_interval)]
    return tuple(flags)


def split_ids(args: argparse.Namespace) -> list[str]:
    if args.split in AGENTIC_SPLITS:
        return [t for c in agentic_categories(args.split) for t in agentic_task_ids(c)]
    return split_task_ids(args.split, args.split_file)


def summary_of(args: argparse.Namespace, records: list) -> str:
    if args.split not in AGENTIC_SPLITS:
        return render_markdown([summarize_step(args.step, records)])
    scores = Scores()
    scores.bfcl_v4, scores.notes = bfcl_v4_scores(records)
    scores.notes.append(
        "tau2-bench: its own command line (docs/evaluation.md), then seal-report --table2"
    )
    return table2({args.model: scores}, [backbone_of(args.model)])


def evaluate(args: argparse.Namespace, out_dir: Path, settings: EndpointSettings, tokenizer) -> int:
    task_ids = split_ids(args)
    if args.limit:
        task_ids = first_per_category(task_ids, args.limit)
    outcome = asyncio.run(
        evaluate_endpoint(
            settings,
            task_ids,
            out_dir,
            env_url=args.env_url,
            tokenizer=tokenizer,
            limits=episode_limits(args),
            step=args.step,
            concurrency=args.concurrency,
            allow_failures=args.allow_failures,
            show_progress=not args.quiet,
            prompting=prompting_of(args),
        )
    )
    print(f"\n{len(task_ids)} tasks, {outcome.skipped} already done in {out_dir}")
    if outcome.records:
        records = list(outcome.records.values())
        print(summary_of(args, records))
        print(render_episode_stats(episode_stats(records), len(records)))
    if outcome.step_file:
        print(f"records: {outcome.step_file}")
    if outcome.failures:
        print(
            f"FAILED, not scored: {len(outcome.failures)} tasks, listed with their errors in "
            f"{errors_file(out_dir, args.step)}; run the same command again to retry them",
            file=sys.stderr,
        )
        for failure in sorted(outcome.failures, key=lambda f: f.task_id)[:5]:
            print(f"  {failure.error}", file=sys.stderr)  # the error names the task
        return 1
    return 0


def check_endpoint_first(args: argparse.Namespace) -> None:
    """The endpoint's preflight before anything slow (loading the tokenizer, starting the
    service, importing the tool format's transformers): a wrong --base-url, model or key
    is answered in about a second. The evaluator checks again before its first episode
    (the endpoint may have changed in between)."""

    async def check() -> None:
        async with ChatEndpoint(endpoint_settings(args), max_connections=1) as chat:
            await check_endpoint(chat, episode_limits(args), uses_completions(args))

    asyncio.run(check())


@contextlib.contextmanager
def environment_service(args: argparse.Namespace, out_dir: Path) -> Iterator[None]:
    """With --start-env, the evaluation's own service (own_service.py), `args.env_url` set
    to it; else nothing."""
    if not args.start_env:
        yield
        return
    log = out_dir / "env_service.log"
    with own_service(args.env_url, log, service_args(args, out_dir)) as url:
        args.env_url = url
        yield


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = args.out_dir or REPO / "outputs" / "eval" / re.sub(r"[^\w.-]", "_", args.model)
    server_log = out_dir / "model_server.log" if args.model_dir else None
    try:
        with sigterm_raises():
            tokenizer_name(args.tokenizer, args.model)  # (a refusal, before anything slow)
            if args.model_dir is None:
                check_endpoint_first(args)
            tokenizer = load_tokenizer(args.tokenizer, args.model)
            # The service first: it starts in seconds, the model server in a minute or more.
            with environment_service(args, out_dir):
                if args.model_dir is None:
                    return evaluate(args, out_dir, endpoint_settings(args), tokenizer)
                with serve_model(args.model_dir, server_log, args.server_device) as server:
                    args.base_url = server.base_url
                    code = evaluate(args, out_dir, endpoint_settings(args), tokenizer)
        if code and (cause := server_error(server_log)):
            print(f"the model server's log ({server_log}) ends with: {cause}", file=sys.stderr)
        return code
    # The servers it started are stopped on the way out of either.
    except (KeyboardInterrupt, Terminated) as stop:
        how = "interrupted" if isinstance(stop, KeyboardInterrupt) else "terminated (SIGTERM)"
        print(f"\n{how}: run the same command again to finish (finished tasks are kept)",
              file=sys.stderr)  # fmt: skip
        return 130 if isinstance(stop, KeyboardInterrupt) else TERMINATED_STATUS
    # EnvServiceError and a service that will not start are RuntimeErrors.
    except (OSError, ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        if server_log is not None and (cause := server_error(server_log)):
            print(f"the model server's log ({server_log}) ends with: {cause}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
