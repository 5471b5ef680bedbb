"""`python -m env_service --host 127.0.0.1 --port 8082`: run the BFCL environment service.

Every setting of env_service/service_config.py has a flag, made from its name and docstring
(`--help` lists them with their defaults; NO_FLAG names the one left out, and why). A
bind to anything but a loopback interface needs a token (`--token`, or $SEAL_ENV_TOKEN,
which other users cannot read in the process list): without one, anyone who reaches the
port could steer training.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import resource
import sys
import typing

import uvicorn
from pydantic import ValidationError

from env_service.app import create_app
from env_service.connections import guarded_protocol
from env_service.errors import ServiceStartError
from env_service.service_config import ServiceConfig
from seal.service_contract import TOKEN_ENV

LOOPBACK_NAMES = {"localhost"}

FLAG_NAMES = {
    "capability_state_path": "--capability-state",
    "embedding_model_dir": "--embedding-model",
}
"""Flags named otherwise than their settings (README and users' commands use these)."""
NO_FLAG: dict[str, str] = {}
"""Settings left off the command line, and why."""


def flag_of(name: str) -> str:
    """`--max-step-seconds` for `max_step_seconds`; a unit suffix `_s` is dropped
    (`episode_ttl_s`: `--episode-ttl`)."""
    return FLAG_NAMES.get(name) or "--" + name.removesuffix("_s").replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for every ServiceConfig setting but NO_FLAG's, its help the setting's
    docstring. A flag not given is left out of the parsed arguments (SUPPRESS), so the
    config class's own default applies."""
    # By hand over argparse: pydantic-settings' command line would be one more dependency,
    # reads an environment variable for every field (BaseSettings), and names each flag
    # after its field, so keeping --episode-ttl and --capability-state would take aliases
    # that rename the config's keywords for every caller.
    for name, field in ServiceConfig.model_fields.items():
        if name in NO_FLAG:
            continue
        kinds = [t for t in typing.get_args(field.annotation) if t is not type(None)]
        kind = kinds[0] if kinds else field.annotation  # `Path | None` -> Path
        default = "none" if field.default is None else field.default
        if name == "token":
            default = f"${TOKEN_ENV}"
        text = " ".join(field.description.split()).replace("%", "%%")
        parser.add_argument(
            flag_of(name),
            dest=name,
            default=argparse.SUPPRESS,
            help=f"{text} (default: {default})",
            **(
                {"action": argparse.BooleanOptionalAction}
                if kind is bool
                else {"type": kind, "metavar": kind.__name__.upper()}
            ),
        )


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m env_service", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8082, help="port to listen on (default 8082)")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    add_config_flags(p)
    args = p.parse_args(argv)
    settings = vars(args)
    host, port, log_level = settings.pop("host"), settings.pop("port"), settings.pop("log_level")
    token = settings.pop("token", None) or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(host):
        p.error(
            f"--host {host} is not a loopback interface: anyone who reaches the port "
            f"could steer training. Give a token with --token or ${TOKEN_ENV} (clients send "
            f"it as 'Authorization: Bearer <token>'), or bind 127.0.0.1"
        )
    try:
        config = ServiceConfig(**settings, token=token)
        app = create_app(config)
    except ValidationError as e:
        p.error(f"invalid setting: {e}")
    except ServiceStartError as e:
        p.error(str(e))
    print(
        f"env_service: {host}:{port}, {config.workers} worker process(es), "
        f"token {'required' if token else 'not set (loopback only)'}",
        file=sys.stderr,
    )
    raise_open_files_limit()
    protocol = guarded_protocol(
        config.header_timeout_s, config.body_timeout_s, config.max_unauthenticated_connections
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol,
        timeout_keep_alive=config.keep_alive_s,
    )


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
