"""Tool-call JSON never makes a 500: integers over 4,300 digits (Python's limit on
converting them) and nesting of any depth are answered, in either prompt's words, as a
malformed call in the text or a 422 on the native API's body; the episode goes on."""

from __future__ import annotations

import json

import pytest
from conftest import results
from test_limits import FS_TASK, calls_text, validate

from seal.bfcl.backends import ERROR_PREFIX

BIG = "1" * 4400


@pytest.mark.parametrize("prompt", ["paper", "rich"])
def test_huge_integers_are_answered_not_500(service, prompt):
    svc = service()
    episode_id, _ = svc.create("multi_turn_base_15", prompt=prompt, **validate())  # MathAPI
    text = f'<tool_call>\n{{"name": "add", "arguments": {{"a": {BIG}, "b": 1}}}}\n</tool_call>'
    [answer] = [m["content"] for m in svc.step(episode_id, text)["messages"]]
    assert answer.startswith(PARSE_ERROR[prompt]) and "digits" in answer
    # A product too long to print is an error too, not a 500.
    square = calls_text("multiply", {"a": int("9" * 4000), "b": int("9" * 4000)}, 1)
    [answer] = results(svc.step(episode_id, square))
    assert answer.startswith(ERROR_PREFIX)
    assert svc.evaluate(episode_id)["invalid_by_kind"] == {"parse": 1}
    http = svc.http
    http.post("/v1/episodes", json={"task_id": "multi_turn_base_15", "episode_id": "n"})
    body = (
        '{"content": "x", "tool_calls": [{"name": "add", "arguments": '
        f'{{"a": {BIG}, "b": 1}}}}], "seq": 1}}'
    )
    reply = http.post(
        "/v1/episodes/n/steps", content=body, headers={"content-type": "application/json"}
    )
    assert reply.status_code == 422 and "digits" in json.dumps(reply.json()["detail"])
    assert http.get("/v1/episodes/n/evaluation").status_code == 200


PARSE_ERROR = {
    "paper": "[ERROR] Invalid tool call format: ",
    "rich": "Error: could not parse tool call:",
}
"""How each prompt's rules begin the answer to a call whose JSON Python will not read."""


@pytest.mark.parametrize("prompt", ["paper", "rich"])
@pytest.mark.parametrize("depth", [40, 300, 470, 477, 480, 483, 490, 600, 1000, 5000, 100_000])
def test_deeply_nested_arguments_are_answered_not_500(service, depth, prompt):
    svc = service()
    nested = "[" * depth + "]" * depth
    episode_id, _ = svc.create(FS_TASK, prompt=prompt, **validate())
    text = f'<tool_call>\n{{"name": "cd", "arguments": {{"folder": {nested}}}}}\n</tool_call>'
    [answer] = [m["content"] for m in svc.step(episode_id, text)["messages"]]
    assert answer.startswith(PARSE_ERROR[prompt]) and "nested" in answer
    for _ in range(2):
        assert svc.evaluate(episode_id)["invalid_by_kind"] == {"parse": 1}
    http = svc.http
    settings = {"prompt": prompt}
    http.post("/v1/episodes", json={"task_id": FS_TASK, "episode_id": "n", "settings": settings})
    body = (
        '{"content": "x", "tool_calls": [{"name": "cd", "arguments": '
        f'{{"folder": {nested}}}}}], "seq": 1}}'
    )
    reply = http.post(
        "/v1/episodes/n/steps", content=body, headers={"content-type": "application/json"}
    )
    if depth < 60:  # arguments deeper than the service's limit: a malformed call
        [message] = reply.json()["messages"]
        assert message["content"].startswith(PARSE_ERROR[prompt])
        assert "nested" in message["content"]
    else:  # a body too deep to take at all
        assert reply.status_code == 422, reply.text
        assert "nested" in json.dumps(reply.json()["detail"])
    assert http.get("/v1/episodes/n/evaluation").status_code == 200
