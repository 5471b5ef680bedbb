"""`seal-eval --model-dir` stops its model server on every way it ends: SIGTERM (also
what `timeout` sends), kill -9 and Ctrl-C. SIGTERM and kill -9 left `transformers serve`
running.

seal-eval runs as a process of its own (a driver calling its `main`), with a stand-in for
`transformers serve` (seal/eval/model_server.py's SERVER_MODULE: a module that answers
`/health` and serves nothing else, with the command line transformers serve gets) and the
evaluation replaced by a wait, so the test sees the server's process and nothing slow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]

STANDIN = """
import argparse, http.server
parser = argparse.ArgumentParser()
parser.add_argument("command"), parser.add_argument("model_dir")
parser.add_argument("--host"), parser.add_argument("--port", type=int)
parser.add_argument("--device")
args = parser.parse_args()

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

http.server.HTTPServer((args.host, args.port), Health).serve_forever()
"""

DRIVER = """
import sys, time
sys.path.insert(0, {repo!r})
from seal.eval import model_server, score_endpoint

model_server.SERVER_MODULE = ("standin_model_server", "serve")

def hold(args, out_dir, settings, tokenizer):
    print("HOLDING", args.base_url, flush=True)
    time.sleep(600)

score_endpoint.load_tokenizer = lambda name, model: None
score_endpoint.evaluate = hold
sys.exit(score_endpoint.main(sys.argv[1:]))
"""


def as_a_foreground_job() -> None:
    """Ctrl-C's signal at its default, as in a shell's foreground job (a suite run in the
    background inherits SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """Running (neither gone nor a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def seal_eval(tmp_path):
    """Starts seal-eval --model-dir (stand-ins above); yields (process, server pid)."""
    (tmp_path / "standin_model_server.py").write_text(STANDIN)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(repo=str(REPO_ROOT)))
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer_config.json"):
        (model / name).write_text("{}")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"}
    args = ["--model-dir", str(model), "--model", "qwen-standin", "--out-dir",
            str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-u", str(driver), *args], cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_a_foreground_job,
    )  # fmt: skip
    server_pid = None
    for line in proc.stdout:
        if "transformers serve at" in line:
            server_pid = int(line.split("(pid ")[1].split(",")[0])
        if line.startswith("HOLDING"):
            break
    assert server_pid is not None and alive(server_pid), "no stand-in server started"
    yield proc, server_pid
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if alive(server_pid):
        os.kill(server_pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "sig, status",
    [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL), (signal.SIGINT, 130)],
    ids=["SIGTERM", "kill -9", "Ctrl-C"],
)
def test_the_model_server_stops_however_seal_eval_ends(seal_eval, sig, status):
    proc, server_pid = seal_eval
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == status, proc.stdout.read()
    # kill -9 leaves the server to notice its parent's pipe close: SIGTERM, then a hard
    # exit 5 s later at most (seal/launch/watch_parent.py).
    deadline = time.monotonic() + 30
    while alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(server_pid), f"the model server outlived seal-eval ({sig.name})"
