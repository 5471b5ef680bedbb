"""A local OpenAI-compatible server for a model directory, started and stopped by `seal-eval`.

`seal-eval --model-dir DIR` starts `transformers serve DIR` (transformers[serving]) on a
free local port and scores through it exactly as through any URL: the records come from the
one evaluation path, and the model is scored as a server serves it (why, and vLLM for speed:
docs/evaluation.md). It is stopped on every way seal-eval ends: `finally`, Ctrl-C, SIGTERM
(seal/launch/terminate.py) and kill -9 (a pipe it watches: seal/launch/watch_parent.py).
Its log is OUT_DIR/model_server.log; a request it fails with a 5xx (a bare "Internal Server
Error") is reported with the exception the log ends with (`server_error`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seal.launch.service import check_port_free, free_port

SERVER_MODULE = ("transformers.cli.transformers", "serve")
"""The module (and its first arguments) that serves the model: `transformers serve`."""
STARTUP_TIMEOUT_S = 300.0
"""Model loading on a busy CPU, or a large model on a GPU."""
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b.*")


class ModelServerError(RuntimeError):
    """The local server could not be started, or the directory is not a model."""


@dataclass(frozen=True)
class LocalServer:
    base_url: str
    """Up to /v1, as --base-url takes it."""
    model: str
    """The name requests carry (the server serves the one model it was started with)."""
    log: Path
    pid: int


def check_model_dir(model_dir: Path) -> None:
    """Refuse a directory that is not a Hugging Face model with its tokenizer and chat
    template (a checkpoint of this project's trainers, or `seal-export`'s output)."""
    if not (model_dir / "config.json").is_file():
        raise ModelServerError(f"{model_dir}: not a Hugging Face model directory (no config.json)")
    if not (model_dir / "tokenizer_config.json").is_file():
        raise ModelServerError(
            f"{model_dir}: no tokenizer (tokenizer_config.json): a checkpoint from before "
            "checkpoints held one; `seal-export RUN_DIR OUT --tokenizer NAME` adds it"
        )


def server_error(log: Path) -> str | None:
    """The last exception line of the server's log (None when it holds none)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return found[-1] if found else None


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def serve_model(
    model_dir: Path,
    log: Path,
    device: str = "auto",
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> Iterator[LocalServer]:
    """`transformers serve model_dir` on `host`:`port` (0: a free one) until the block ends."""
    model_dir = Path(model_dir).resolve()
    check_model_dir(model_dir)
    port = port or free_port(host)
    check_port_free(host, port)
    # Under seal/launch/watch_parent.py: the server ends when seal-eval does, however it
    # ends (kill -9 included, where no `finally` of seal-eval runs).
    command = [sys.executable, "-m", "seal.launch.watch_parent", *SERVER_MODULE, str(model_dir)]
    command += ["--host", host, "--port", str(port), "--device", device]
    # A local directory: nothing to download. An empty cache of its own, because `GET
    # /v1/models` lists the hub cache and fails (500) where there is none.
    cache = log.parent / "model_server_cache"
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    with log.open("ab") as out:
        # Its own process group: a Ctrl-C reaches seal-eval, which stops it after its work.
        server = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env,
            process_group=0,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not _healthy(f"http://{host}:{port}/health"):
            if server.poll() is not None:
                raise ModelServerError(
                    f"transformers serve {model_dir} exited with code {server.returncode} "
                    f"during start-up: {server_error(log) or f'see {log}'}"
                )
            if time.monotonic() > deadline:
                raise ModelServerError(
                    f"transformers serve {model_dir} did not answer /health within "
                    f"{startup_timeout_s:.0f} s; see {log}"
                )
            time.sleep(0.5)
        print(f"[seal-eval] serving {model_dir} with transformers serve at {host}:{port} "
              f"(pid {server.pid}, log {log})")  # fmt: skip
        yield LocalServer(f"http://{host}:{port}/v1", str(model_dir), log, server.pid)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdin.close()
