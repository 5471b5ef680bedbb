"""`python -m env_service --host 127.0.0.1 --port 8082`: run the BFCL environment service.

Every setting of env_service/config.py has a flag (`--help` lists them with their
defaults). A bind to anything but a loopback interface needs a token (`--token`, or
$SEAL_ENV_TOKEN, which other users cannot read in the process list): without one, anyone
who reaches the port could steer training.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import resource
import sys
from pathlib import Path

import uvicorn
from pydantic import ValidationError

from env_service.app import create_app
from env_service.config import ServiceConfig
from env_service.connections import guarded_protocol
from env_service.engine import ServiceStartError
from seal.rollout.protocol import TOKEN_ENV

LOOPBACK_NAMES = {"localhost"}

# flag -> ServiceConfig field, for the settings that are plain numbers.
_NUMERIC = {
    "--max-live-episodes": "max_live_episodes",
    "--episode-ttl": "episode_ttl_s",
    "--workers": "workers",
    "--worker-niceness": "worker_niceness",
    "--worker-stall-seconds": "worker_stall_seconds",
    "--max-body-bytes": "max_body_bytes",
    "--max-message-chars": "max_message_chars",
    "--max-calls-per-step": "max_calls_per_step",
    "--max-result-chars": "max_result_chars",
    "--max-step-reply-chars": "max_step_reply_chars",
    "--max-step-seconds": "max_step_seconds",
    "--max-evaluation-seconds": "max_evaluation_seconds",
    "--max-calls-per-episode": "max_calls_per_episode",
    "--max-episode-call-chars": "max_episode_call_chars",
    "--max-profile-bytes": "max_profile_bytes",
    "--header-timeout": "header_timeout_s",
    "--body-timeout": "body_timeout_s",
    "--max-unauthenticated-connections": "max_unauthenticated_connections",
    "--web-search-interval": "web_search_interval_s",
    "--web-search-attempts": "web_search_attempts",
    "--web-search-timeout": "web_search_timeout_s",
    "--web-search-backoff": "web_search_backoff_s",
}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n")[0]


def main(argv: list[str] | None = None) -> None:
    fields = ServiceConfig.model_fields
    p = argparse.ArgumentParser(prog="python -m env_service", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8082, help="port to listen on (default 8082)")
    for flag, name in _NUMERIC.items():
        field = fields[name]
        p.add_argument(
            flag,
            dest=name,
            type=field.annotation if field.annotation in (int, float) else float,
            default=field.default,
            help=f"{_first_line(field.description)} (default %(default)s)",
        )
    p.add_argument(
        "--capability-state",
        type=Path,
        default=None,
        help="capability-state JSON (this project's or the original release's) to read "
        "the failure profile from when no trainer pushes one (default: none)",
    )
    p.add_argument(
        "--memory-snapshot-dir",
        type=Path,
        default=None,
        help="folder for the BFCL V4 memory tasks' snapshots, one per evaluation run "
        "(default: none; memory tasks are refused)",
    )
    p.add_argument(
        "--embedding-model",
        type=Path,
        default=None,
        help="local folder of the sentence-transformers model all-MiniLM-L6-v2 for the "
        "vector memory backend (default: bfcl-eval's: the Hugging Face hub or its cache)",
    )
    p.add_argument(
        "--token",
        default=None,
        help=f"bearer token every request but GET /healthz must carry (default: ${TOKEN_ENV}; "
        "required for a non-loopback --host)",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    args = p.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(args.host):
        p.error(
            f"--host {args.host} is not a loopback interface: anyone who reaches the port "
            f"could steer training. Give a token with --token or ${TOKEN_ENV} (clients send "
            f"it as 'Authorization: Bearer <token>'), or bind 127.0.0.1"
        )
    try:
        config = ServiceConfig(
            **{name: getattr(args, name) for name in _NUMERIC.values()},
            capability_state_path=args.capability_state,
            memory_snapshot_dir=args.memory_snapshot_dir,
            embedding_model_dir=args.embedding_model,
            token=token,
        )
        app = create_app(config)
    except ValidationError as e:
        p.error(f"invalid setting: {e}")
    except ServiceStartError as e:
        p.error(str(e))
    print(
        f"env_service: {args.host}:{args.port}, {config.workers} worker process(es), "
        f"token {'required' if token else 'not set (loopback only)'}",
        file=sys.stderr,
    )
    raise_open_files_limit()
    protocol = guarded_protocol(
        config.header_timeout_s, config.body_timeout_s, config.max_unauthenticated_connections
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, http=protocol)


def raise_open_files_limit() -> None:
    """Raise this process's open-files limit to what the system allows it: every client
    connection holds one (a trainer's many episodes, several nodes), and the default of
    1,024 is a limit of the login shell, not of the service."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


if __name__ == "__main__":
    main()
