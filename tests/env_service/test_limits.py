"""No client can stall or crash the service.

- MessageAPI's ids run out (`_generate_id` then loops forever): the service still
  answers, /healthz too, and SIGTERM stops it; a call that never returns ends its
  episode as a tagged failure and the service goes on.
- Tool calls cost the event loop nothing: a message of 2,945 `grep` calls on an
  80k-line file does not block other episodes, nor does its evaluation; a small request
  cannot make a huge reply; what an episode keeps and what verification holds are
  bounded; an oversized body is refused before it is read.

Tests that could hang on a broken service run it in its own process (`service_process`).
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import tracemalloc

import httpx
import pytest
from conftest import Episodes, gt_turns, results

from seal.bfcl.backends import ERROR_PREFIX, Backends
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import diagnose
from seal.bfcl.ground_truth import tool_call_text
from seal.bfcl.tasks import load_task

FS_TASK = "multi_turn_base_1"  # GorillaFileSystem, starting in /alex
MESSAGE_TASK = "multi_turn_base_14"  # MessageAPI + GorillaFileSystem
LIMIT = 262_144  # the service's default max_message_chars


def calls_text(name: str, arguments: dict, n: int) -> str:
    return tool_call_text([ToolCall(name, arguments)] * n)


def compact_calls(name: str, arguments: dict, n: int) -> str:
    """`n` calls as tightly as a model may write them (no spaces, no newlines)."""
    one = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))
    return f"<tool_call>{one}</tool_call>" * n


def most_calls_that_fit(name: str, arguments: dict) -> str:
    return compact_calls(name, arguments, LIMIT // len(compact_calls(name, arguments, 1)))


def episodes(url: str) -> Episodes:
    """The native API over a real socket."""
    return Episodes(httpx.Client(base_url=url, timeout=30.0))


def validate(max_steps: int | None = None) -> dict:
    """The settings of a validation episode, with at most `max_steps` assistant messages."""
    limits = {} if max_steps is None else {"limits": {"max_generations": max_steps}}
    return {"mode": "validate", **limits}


# --- MessageAPI's ids, and calls that never return -------------------------------------------


def _alarm(seconds: int):
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)


def test_message_ids_running_out_is_an_error_not_a_hang():
    backends = Backends(load_task(MESSAGE_TASK))
    assert "USR001" in backends.call(ToolCall("message_login", {"user_id": "USR001"}))
    api = backends.instances["MessageAPI"]
    api.generated_ids.update(range(10_000, 100_000))  # all 90,000 ids BFCL draws from
    send = ToolCall("send_message", {"receiver_id": "USR002", "message": "hi"})
    _alarm(10)
    try:
        result = backends.call(send)
    finally:
        signal.alarm(0)
    assert result.startswith(ERROR_PREFIX) and "message ids" in result


def test_exhausting_message_ids_never_hangs_the_service(service_process):
    svc = service_process()
    client = episodes(svc.url)
    client.create(MESSAGE_TASK, "flood", **validate(max_steps=1024))
    client.step("flood", calls_text("message_login", {"user_id": "USR001"}, 1))
    flood = compact_calls("send_message", {"receiver_id": "USR002", "message": "hi"}, 2570)
    assert len(flood) <= LIMIT
    for _ in range(36):  # ~34 of these exhausted BFCL's 90,000 ids
        answered = results(client.step("flood", flood))
        assert len(answered) == 2570
        assert httpx.get(f"{svc.url}/healthz", timeout=10).status_code == 200  # (room for load)
    report = client.evaluate("flood")
    assert report["tool_calls"] <= 1024 and report["invalid_by_kind"]["episode_limit"] > 0
    assert svc.terminate(timeout_s=15) in (0, -15)  # uvicorn re-raises SIGTERM once stopped


SPIN = """
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import gorilla_file_system
def spin(self):
    while True:
        pass
gorilla_file_system.GorillaFileSystem.pwd = spin
"""


def test_a_call_that_never_returns_ends_its_episode_not_the_service(service_process):
    svc = service_process("--workers", "1", "--max-step-seconds", "1", patch=SPIN)
    client = episodes(svc.url)
    client.create(FS_TASK, "stuck", **validate())
    client.create(FS_TASK, "bystander", **validate())
    client.step("bystander", calls_text("mkdir", {"dir_name": "before"}, 1))
    answer = {}
    stuck = threading.Thread(
        target=lambda: answer.update(client.step("stuck", calls_text("pwd", {}, 1)))
    )
    stuck.start()
    time.sleep(0.3)  # the stuck call is running now
    health = httpx.get(f"{svc.url}/healthz", timeout=10)  # a stuck call holds no request
    assert health.status_code == 200
    stuck.join(timeout=20)
    assert not stuck.is_alive()
    assert answer["terminated"] is True and "time budget" in results(answer)[0]
    # The step that ended the episode carries its evaluation.
    report = answer["evaluation"]
    assert report["aborted"] == "step_time_budget" and report["accuracy"] == 0
    # The worker that ran it was replaced; the bystander on it lost nothing.
    listing = results(client.step("bystander", calls_text("ls", {}, 1)))[0]
    assert json.loads(listing)["current_directory_content"] == ["workspace", "before"]
    stats = httpx.get(f"{svc.url}/healthz").json()
    assert stats["workers_replaced"] == 1
    assert svc.terminate(timeout_s=15) in (0, -15)  # uvicorn re-raises SIGTERM once stopped


# --- cost per call and per step, reply size, what is kept, body size ---------------------------

EIGHTY_K_LINES = "a\n" * 80_000


FIFO = """
from env_service import worker
worker._attained = lambda job: job.request  # first come, first served: the flood's calls in a row
"""


@pytest.mark.parametrize("scheduler", ["least_run_first", "fifo"])
def test_a_grep_flood_does_not_block_other_episodes(service_process, scheduler):
    """One worker holds the flood's episode and the others' (they share it): their steps
    wait for the one `grep` running when they arrive, not for the flood's message. Load
    slows both alike, so the bound is the flood's own time: with the calls run first
    come, first served (`fifo`, the check's own control) another episode waits behind
    the whole message, and the same bound fails."""
    # Its share of the CPU lifted: what is shown is the order of calls, which its control
    # (`fifo`) needs the flood's to run in a row for.
    svc = service_process(
        "--workers", "1", "--episode-cpu-share", "1", patch=FIFO if scheduler == "fifo" else ""
    )
    client = episodes(svc.url)
    client.create(FS_TASK, "flood", **validate(max_steps=1024))
    client.step("flood", calls_text("touch", {"file_name": "big.txt"}, 1))
    client.step("flood", calls_text("echo", {"content": EIGHTY_K_LINES, "file_name": "big.txt"}, 1))
    flood = most_calls_that_fit("grep", {"file_name": "big.txt", "pattern": "b"})
    assert flood.count("<tool_call>") >= 2945

    def latencies(stop: threading.Event, out: list[float], name: str):
        quiet = episodes(svc.url)
        quiet.create(FS_TASK, name, **validate(max_steps=1024))
        while not stop.is_set() and len(out) < 1000:
            started = time.perf_counter()
            quiet.step(name, calls_text("pwd", {}, 1))
            out.append(time.perf_counter() - started)

    blocked = []
    for action in ("step", "evaluate"):
        stop, seen = threading.Event(), []
        quiet = threading.Thread(target=latencies, args=(stop, seen, f"quiet_{action}"))
        quiet.start()
        while not seen:  # the other episode is stepping
            time.sleep(0.01)
        flood_s = []
        for _ in range(2):  # linear in steps, before: 5.1 s each
            started = time.perf_counter()
            if action == "step":
                answered = results(client.step("flood", flood))
            else:
                report = client.evaluate("flood")
            flood_s.append(time.perf_counter() - started)
        stop.set()
        quiet.join(timeout=60)
        # Least run first, the other episode waits for one grep (~0.01 s of 128 in a step);
        # first come, first served, for all of a message's or an evaluation's, once per
        # message: so its second-slowest request (one stall of the loaded machine is not
        # two) against the quicker message.
        second = sorted(seen)[-2]
        print(f"{scheduler} {action}: flood {[round(s, 3) for s in flood_s]} s; other "
              f"episode's requests: {len(seen)}, 2nd slowest {second:.3f} s")  # fmt: skip
        blocked.append(second > min(flood_s) / 3)
    assert blocked == ([True, True] if scheduler == "fifo" else [False, False]), blocked
    # What ran is capped per message; the rest is answered, not run.
    assert sum(r.startswith("Error: not run:") for r in answered) > 2000
    assert report["tool_calls"] <= 2 + 2 * 128


def test_a_small_request_cannot_make_a_huge_reply(service):
    svc = service()
    episode_id, _ = svc.create(FS_TASK, **validate())
    svc.step(episode_id, calls_text("touch", {"file_name": "f.txt"}, 1))
    svc.step(episode_id, calls_text("echo", {"content": "x" * 190_000, "file_name": "f.txt"}, 1))
    calls = [{"name": "cat", "arguments": {"file_name": "f.txt"}}] * 210
    request = json.dumps({"content": "", "tool_calls": calls})
    assert len(request) < 15_000  # before: a 40 MB reply
    reply = svc.http.post(
        f"/v1/episodes/{episode_id}/steps",
        content=request,
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 200
    assert len(reply.content) < 2_000_000
    answered = results(reply.json())
    assert len(answered) == 210
    ran = [r for r in answered if not r.startswith("Error: not run:")]
    assert 1 <= len(ran) < 20  # 64 KiB each (clipped) until the reply reached 1 MiB
    over_reply = [r for r in answered if "reply to this message reached" in r]
    assert len(over_reply) == 128 - len(ran)  # the rest: over the 128 calls of a message
    assert svc.evaluate(episode_id)["invalid_by_kind"] == {
        "reply_limit": 128 - len(ran),
        "call_limit": 210 - 128,
    }


def test_long_tool_results_are_clipped_with_a_marker(service):
    svc = service(max_result_chars=1000)
    episode_id, _ = svc.create(FS_TASK, **validate())
    svc.step(episode_id, calls_text("touch", {"file_name": "f.txt"}, 1))
    svc.step(episode_id, calls_text("echo", {"content": "y" * 5000, "file_name": "f.txt"}, 1))
    [cat] = results(svc.step(episode_id, calls_text("cat", {"file_name": "f.txt"}, 1)))
    assert cat.startswith('{"file_content": "yyy') and len(cat) < 1200
    assert "clipped" in cat and "1000" in cat


def test_calls_per_step_and_per_episode_are_capped(service):
    svc = service(max_calls_per_step=3, max_calls_per_episode=5)
    episode_id, _ = svc.create(FS_TASK, **validate(max_steps=50))
    first = results(svc.step(episode_id, calls_text("pwd", {}, 4)))
    assert [r.startswith("Error: not run:") for r in first] == [False, False, False, True]
    assert "3 tool calls" in first[3]
    second = results(svc.step(episode_id, calls_text("pwd", {}, 3)))
    assert [r.startswith("Error: not run:") for r in second] == [False, False, True]
    assert "5 tool calls" in second[2]
    report = svc.evaluate(episode_id)
    assert report["tool_calls"] == 5
    assert report["invalid_by_kind"] == {"call_limit": 1, "episode_limit": 1}


def test_arguments_an_episode_keeps_are_capped(service):
    svc = service(max_episode_call_chars=10_000)
    episode_id, _ = svc.create(FS_TASK, **validate(max_steps=50))
    svc.step(episode_id, calls_text("touch", {"file_name": "f.txt"}, 1))
    echo = calls_text("echo", {"content": "z" * 4000, "file_name": "f.txt"}, 1)
    assert not results(svc.step(episode_id, echo))[0].startswith("Error")
    assert not results(svc.step(episode_id, echo))[0].startswith("Error")
    refused = results(svc.step(episode_id, echo))[0]
    assert refused.startswith("Error: not run:") and "10000" in refused
    assert svc.evaluate(episode_id)["invalid_by_kind"] == {"episode_limit": 1}


@pytest.mark.parametrize("workers", [2, 0])  # worker processes, or the service's own
def test_a_step_over_its_time_budget_ends_the_episode_as_a_tagged_failure(service, workers):
    svc = service(
        workers=workers,
        max_step_seconds=0.2,
        max_calls_per_step=100_000,
        max_calls_per_episode=100_000,
    )
    flood, _ = svc.create(FS_TASK, **validate())
    svc.step(flood, calls_text("touch", {"file_name": "big.txt"}, 1))
    svc.step(flood, calls_text("echo", {"content": EIGHTY_K_LINES, "file_name": "big.txt"}, 1))
    data = svc.step(flood, most_calls_that_fit("grep", {"file_name": "big.txt", "pattern": "b"}))
    assert data["terminated"] is True and data["reward"] == 0.0
    answered = results(data)
    assert answered[-1].startswith("Error: not run:") and "time budget" in answered[-1]
    report = data["evaluation"]
    assert report["aborted"] == "step_time_budget" and report["accuracy"] == 0
    assert report["reward"] == 0.0 and report["terminated"] is True
    assert "has ended" in svc.step(flood, calls_text("pwd", {}, 1), expect=409)["detail"]
    other, _ = svc.create(FS_TASK, **validate())
    assert "workspace" in results(svc.step(other, calls_text("ls", {}, 1)))[0]


@pytest.mark.parametrize("workers", [2, 0])  # worker processes, or the service's own
def test_a_verification_over_its_time_budget_is_a_tagged_failure(service, workers):
    svc = service(workers=workers, max_evaluation_seconds=1e-6)
    episode_id, _ = svc.create(FS_TASK, **validate())
    last = svc.play(episode_id, gt_turns(FS_TASK))[-1]
    assert last["terminated"] is True
    report = last["evaluation"]
    assert report["aborted"] == "evaluation_time_budget" and report["accuracy"] == 0
    assert set(report["failure_tags"]) == {"checker_error"}
    assert "time budget" in report["tag_notes"][0]
    # The ground truth passes with the default budget.
    svc = service(workers=workers)
    episode_id, _ = svc.create(FS_TASK, **validate())
    assert svc.play(episode_id, gt_turns(FS_TASK))[-1]["evaluation"]["accuracy"] == 1


def test_verification_holds_no_large_results():
    task = load_task(FS_TASK)
    setup = [
        ToolCall("touch", {"file_name": "f.txt"}),
        ToolCall("echo", {"content": "c" * 150_000, "file_name": "f.txt"}),
    ]
    cats = [ToolCall("cat", {"file_name": "f.txt"})] * 1000  # before: 150 MB held at once
    tracemalloc.start()
    try:
        diagnosis = diagnose(task, [[setup, cats]])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert diagnosis.accuracy == 0
    assert peak < 30 * 2**20, f"verification held {peak / 2**20:.0f} MB"


def _send_raw(url: str, head: str, chunks, read_timeout_s: float) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=read_timeout_s) as sock:
        sock.sendall(head.encode())
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # the service answered and closed: what we want to read
        sock.settimeout(read_timeout_s)
        answer = b""
        while b"\r\n\r\n" not in answer or not _complete(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def _complete(answer: bytes) -> bool:
    head, body = answer.split(b"\r\n\r\n", 1)
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return len(body) >= int(value)
    return False


def test_an_oversized_body_is_refused_before_it_is_read(service_process):
    svc = service_process()
    path = "/v1/episodes/x/steps"
    # 300 MB announced, 1 MB sent: the answer must come without the rest.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {300 * 2**20}\r\n\r\n"
    )
    answer = _send_raw(svc.url, head, [b" " * 2**20], read_timeout_s=5)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert "limit" in json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
    # Chunked, no length: counted while it streams, refused once over the limit.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b" " * 2**20
    framed = (b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(8))
    answer = _send_raw(svc.url, head, framed, read_timeout_s=5)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert httpx.get(f"{svc.url}/healthz").status_code == 200
