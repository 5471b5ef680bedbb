"""env_service/errors.py: each error's status and shape on each protocol. Every route's
errors are provoked in tests/env_service/test_access.py and
tests/env_service/test_release_*.py; here, that the one serializer writes what FastAPI's own JSONResponse would, byte for byte."""

from __future__ import annotations

import pytest
from fastapi.responses import JSONResponse

from env_service import errors

MESSAGES = [
    "no live episode 'e1'",
    "é ü 中 🎉",
    'quote " backslash \\ tab \t nl \n',
    "\x00\x1f\x7f",
]


@pytest.mark.parametrize("message", MESSAGES)
def test_native_errors_are_what_fastapi_writes(message):
    reply = errors.reply(message, 404, release_protocol=False)
    assert reply.body == JSONResponse({"detail": message}, 404).body
    assert (reply.status_code, reply.media_type) == (404, "application/json")


@pytest.mark.parametrize("message", MESSAGES)
def test_release_protocol_errors_are_the_envelope(message):
    reply = errors.reply(message, 422, release_protocol=True)
    expected = {"success": False, "data": None, "error": message}
    assert reply.body == JSONResponse(expected, 422).body


def test_a_client_error_keeps_its_status_and_headers():
    for release_protocol in (False, True):
        reply = errors.error_reply(errors.BusyError("busy: 2 live episodes"), release_protocol)
        assert reply.status_code == 503 and reply.headers["retry-after"] == "1"
        assert reply.headers["content-length"] == str(len(reply.body))
