"""Start, adopt and stop the environment service of a run.

A run talks only to the service meant for it: its own (`start_service`, on a free port
with a fresh token passed through the environment, never the command line; stopped on
every exit path, kill -9 of the launcher included, and in a process group of its own so a
Ctrl-C reaches the launcher alone), or an adopted one (`adopt_service`) that proves it is
the run's with /v1/whoami. The rules and why: docs/runs.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from seal.http import HttpError, Reply, RetryPolicy, request_once
from seal.rollout.env_client import TOKEN_ENV, is_healthy

WHOAMI = "/v1/whoami"


class ServiceIdentityError(RuntimeError):
    """The service at the run's URL is not one the run may use."""


@dataclass(frozen=True)
class RunningService:
    url: str
    token: str
    pid: int | None
    """The process the run started; None for an adopted service."""
    settings: dict | None = None
    """The settings the service reports (`GET /v1/whoami`; None from a version that
    reports none): what its episodes may do, which a resume compares."""


def new_token() -> str:
    """A fresh bearer token (256 random bits)."""
    return secrets.token_urlsafe(32)


@contextlib.contextmanager
def token_in_environment(token: str) -> Iterator[None]:
    """Set $SEAL_ENV_TOKEN to `token` for the clients made inside the block (and the
    processes they start), then put back what was there: a caller in the same process (a
    test, a notebook) must not go on holding a stopped service's token."""
    previous = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = token
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = previous


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now. Another process may take it before the service
    binds it; the service then fails to start, or another service answers there and
    fails the identity check, so the run never uses it unknowingly."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class PortInUse(RuntimeError):
    """The port the service was to listen on is held by another program."""


def check_port_free(host: str, port: int) -> None:
    """Raise `PortInUse` when nothing could listen on `host`:`port` now (the service would
    fail to bind it)."""
    with socket.socket() as s:
        # As uvicorn binds: a port whose last connections linger in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            raise PortInUse(
                f"port {port} on {host} is in use by another program (not an environment "
                "service of this project: it does not answer /healthz): choose another "
                "service.port, or 0 for a free one"
            ) from None


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n  ".join(text[-lines:])


def service_url(host: str, port: int) -> str:
    # A wildcard bind is reached through the loopback interface on this machine.
    connect = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, host)
    return f"http://{connect}:{port}"


def _whoami(url: str, token: str | None) -> Reply:
    """The reply to `GET /v1/whoami` with `token` (None: no header)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    policy = RetryPolicy(attempts=2, timeout_s=10.0, stall_warning_s=0)
    try:
        reply = request_once(
            url, "GET", WHOAMI, "the identity check", policy=policy, headers=headers
        )
    except HttpError as error:
        raise ServiceIdentityError(
            f"the identity check of the service at {url} failed: {error}"
        ) from None
    return reply


def check_identity(url: str, token: str) -> dict | None:
    """Raise `ServiceIdentityError` unless the service at `url` accepts `token` and
    refuses requests without one; return the settings it reports (None: none)."""
    reply = _whoami(url, token)
    status, text = reply.status, reply.text()
    if status == 403:  # the service's answer when it has no token to compare with
        raise ServiceIdentityError(
            f"the service at {url} was started without a token ({WHOAMI}: HTTP 403 {text}): "
            "it cannot prove it is this run's, and anyone who reaches it can steer the run; "
            f"start it with --token or ${TOKEN_ENV}"
        )
    if status == 401:
        raise ServiceIdentityError(
            f"the service at {url} does not accept this run's token ({WHOAMI}: HTTP 401): "
            "it is another run's service, or was started with another token"
        )
    if status == 404:
        raise ServiceIdentityError(
            f"the service at {url} has no {WHOAMI}: it predates authentication and anyone "
            "who reaches it can steer the run; restart it from this version with a token"
        )
    if status != 200:
        raise ServiceIdentityError(f"{WHOAMI} at {url} answered HTTP {status}, not 200: {text}")
    anonymous = _whoami(url, None).status
    if anonymous not in (401, 403):
        raise ServiceIdentityError(
            f"the service at {url} answers without a token (HTTP {anonymous} from {WHOAMI}): "
            f"anyone who reaches it can steer the run; start it with --token or ${TOKEN_ENV}"
        )
    try:
        identity = reply.json()
    except HttpError:
        identity = None
    settings = identity.get("settings") if isinstance(identity, dict) else None
    return settings if isinstance(settings, dict) else None


def adopt_service(url: str, token: str | None) -> RunningService:
    """A running service the run may use (checked; see the module docstring)."""
    if not token:
        raise ServiceIdentityError(
            f"adopting the service at {url} needs the token it was started with, to check "
            f"that it is the one meant: set ${TOKEN_ENV} (or service.token)"
        )
    if not is_healthy(url):
        raise ServiceIdentityError(
            f"no environment service at {url}; start one or set service.start=true"
        )
    settings = check_identity(url, token)
    print(f"[launcher] adopting the environment service at {url} (it answers to the run's token)")
    return RunningService(url, token, None, settings)


@contextlib.contextmanager
def start_service(
    host: str,
    port: int,
    log_path: Path,
    token: str,
    startup_timeout_s: float = 60.0,
    extra_args: tuple[str, ...] = (),
    module: tuple[str, ...] = ("env_service",),
    meanwhile: Callable[[], None] | None = None,
    who: str = "launcher",
) -> Iterator[RunningService]:
    """Start `python -m env_service` (port 0: a free one) and stop it on leaving;
    `module`: another module (and its own first arguments) that runs the service's
    command line (env_service.bench_network, for a bench); `meanwhile`: work for this
    process while the service starts up (the launcher imports the job: seconds that
    would otherwise wait in series), before the service is checked; an error in it stops
    the service; `who`: the command whose line says it started."""
    if not token:
        raise ValueError("the launcher's own service always gets a token")
    port = port or free_port(host)
    url = service_url(host, port)
    if is_healthy(url):
        raise ServiceIdentityError(
            f"a service already answers at {url}: choose another port (0: a free one)"
        )
    check_port_free(host, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "seal.launch.watch_parent",
        *module, "--host", host, "--port", str(port), *extra_args,
    ]  # fmt: skip
    env = {**os.environ, TOKEN_ENV: token}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
            process_group=0,
        )  # fmt: skip
    try:
        if meanwhile is not None:
            meanwhile()
        # Counted from here: a slow import on a busy machine is not the service's start-up.
        deadline = time.monotonic() + startup_timeout_s
        while not is_healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the environment service exited with code {proc.returncode} during "
                    f"start-up; its log ({log_path}) ends:\n  {_log_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the environment service was not healthy after {startup_timeout_s:.0f} s; "
                    f"see {log_path}"
                )
            time.sleep(0.2)
        settings = check_identity(url, token)
        print(f"[{who}] environment service started at {url} (pid {proc.pid}, log {log_path})")
        yield RunningService(url, token, proc.pid, settings)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdin.close()


@contextlib.contextmanager
def service_for_run(
    settings, start: bool, log_path: Path, meanwhile: Callable[[], None] = lambda: None
) -> Iterator[RunningService]:
    """The run's service per its `service` settings (seal/launch/run_config.py): its own,
    or an adopted one that proves it is the one meant; refusals come before anything is
    started or written. `meanwhile` runs once before the block: while the run's own
    service starts up (`start_service`), after an adopted one's check."""
    token = settings.token or os.environ.get(TOKEN_ENV) or ""
    adopted = None
    if not start:
        if not settings.port:
            raise ValueError("service.start=false needs service.port: the service to adopt")
        adopted = adopt_service(service_url(settings.host, settings.port), token)
    elif settings.port and is_healthy(service_url(settings.host, settings.port)):
        url = service_url(settings.host, settings.port)
        if not token:
            raise ServiceIdentityError(
                f"a service already answers at {url}, and the run has no token to check that "
                f"it is the one meant: choose another service.port (0: a free one), or adopt "
                f"it with the token it was started with in ${TOKEN_ENV}"
            )
        adopted = adopt_service(url, token)
    if adopted is not None:
        meanwhile()
        yield adopted
        return
    extra_args = ("--max-live-episodes", str(settings.max_live_episodes))
    with start_service(
        settings.host, settings.port, log_path, token or new_token(),
        settings.startup_timeout_s, extra_args, meanwhile=meanwhile,
    ) as service:  # fmt: skip
        yield service
