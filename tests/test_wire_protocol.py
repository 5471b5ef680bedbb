"""The original release's wire protocol (env_service/release/) as this service serves it:
mounted by `ServiceConfig.release_protocol` (on by default), its envelope on every
answer, the release's text format (Qwen2.5's `<tool_call>` blocks) in and out.
tests/test_wire_contract.py plays the release's trainer against it; the behaviour both
protocols share is tested on the native API (tests/test_env_*.py)."""

from __future__ import annotations

WIRE_PATHS = ["/create", "/step", "/evaluate", "/release", "/get_info", "/get_env_profile"]
TOKEN = "wire-test-token"


def test_the_release_protocol_is_served_by_default(service):
    http = service().http
    schema = http.get("/openapi.json").json()["paths"]
    assert set(WIRE_PATHS) <= set(schema)
    reply = http.post("/get_env_profile", json={"params": {"split": "train"}})
    assert reply.status_code == 200 and reply.json()["success"] is True


def test_without_the_release_protocol_its_paths_are_unknown_paths(service):
    http = service(release_protocol=False).http
    unknown = http.post("/no-such-path", json={})
    assert unknown.status_code == 404
    for path in [*WIRE_PATHS, "//get_env_profile"]:
        reply = http.post(path, json={"env_type": "bfcl", "task_id": "multi_turn_base_0"})
        assert (reply.status_code, reply.content) == (404, unknown.content), path
    assert http.get("/v1/stats").json()["live_episodes"] == 0
    schema = http.get("/openapi.json").json()["paths"]
    assert not set(WIRE_PATHS) & set(schema)
    assert "/v1/episodes" in schema and "/healthz" in schema
    assert http.get("/healthz").json()["status"] == "healthy"


def test_without_the_release_protocol_errors_are_the_native_shape(service):
    # With the protocol, a refused token on its paths is answered in its envelope.
    on = service(token=TOKEN).http.post("/create", json={})
    assert on.status_code == 401 and on.json()["success"] is False
    off = service(token=TOKEN, release_protocol=False).http
    for path in ["/create", "/healthz", "/no-such-path"]:
        reply = off.post(path, json={})
        assert reply.status_code == 401, path
        assert set(reply.json()) == {"detail"}, path
