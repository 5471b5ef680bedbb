"""`python -m env_service --host 127.0.0.1 --port 8082`: run the BFCL environment service."""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn

from env_service.app import create_app
from env_service.engine import ServiceConfig


def main(argv: list[str] | None = None) -> None:
    defaults = ServiceConfig()
    p = argparse.ArgumentParser(prog="python -m env_service", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8082, help="port to listen on (default 8082)")
    p.add_argument(
        "--max-live-episodes",
        type=int,
        default=defaults.max_live_episodes,
        help="live episodes before 'busy' (503) answers (default %(default)s)",
    )
    p.add_argument(
        "--episode-ttl",
        type=float,
        default=defaults.episode_ttl_s,
        help="seconds an idle episode lives (default %(default)s)",
    )
    p.add_argument(
        "--max-message-chars",
        type=int,
        default=defaults.max_message_chars,
        help="largest assistant message accepted (default %(default)s)",
    )
    p.add_argument(
        "--capability-state",
        type=Path,
        default=None,
        help="capability-state JSON to read the failure profile from when no "
        "trainer pushes one (default: none)",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    args = p.parse_args(argv)
    config = ServiceConfig(
        max_live_episodes=args.max_live_episodes,
        episode_ttl_s=args.episode_ttl,
        max_message_chars=args.max_message_chars,
        capability_state_path=args.capability_state,
    )
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
