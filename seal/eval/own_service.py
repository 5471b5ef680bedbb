"""`seal-eval --start-env`: the evaluation's own environment service, on a free local port
unless `--env-url` names one (refused at once, naming that flag, when anything listens
there), with a fresh token in the environment for the evaluator's client; stopped on leaving.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from seal.launch.service import (
    PortInUse,
    check_port_free,
    new_token,
    service_url,
    start_service,
    token_in_environment,
)
from seal.rollout.env_client import TOKEN_ENV, is_healthy

DEFAULT_ENV_URL = "http://127.0.0.1:8082"
"""Where `python -m env_service` listens by default: the service --env-url means unless
given (with --start-env, the evaluation's own service takes a free port instead)."""


def host_and_port(env_url: str | None) -> tuple[str, int]:
    """Where the own service listens: --env-url's host and port, else a free local port
    (0); refused when something already listens at the given port."""
    if not env_url:
        return "127.0.0.1", 0
    env = urlsplit(env_url)
    host, port = env.hostname or "127.0.0.1", env.port or 0
    if port and is_healthy(service_url(host, port)):
        raise RuntimeError(
            f"--env-url {env_url}: an environment service already answers there; leave "
            f"--env-url out for a free port, or drop --start-env to use that one (its token "
            f"in ${TOKEN_ENV})"
        )
    if port:
        try:
            check_port_free(host, port)
        except PortInUse:
            raise RuntimeError(
                f"--env-url {env_url}: port {port} is in use by another program; leave "
                "--env-url out for a free port, or give another"
            ) from None
    return host, port


@contextlib.contextmanager
def own_service(env_url: str | None, log: Path, extra_args: tuple[str, ...]) -> Iterator[str]:
    """The started service's URL, its token in $SEAL_ENV_TOKEN for the block."""
    host, port = host_and_port(env_url)
    with (
        start_service(host, port, log, new_token(), extra_args=extra_args, who="seal-eval") as s,
        token_in_environment(s.token),
    ):
        yield s.url
