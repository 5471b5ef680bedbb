"""Request bodies are parsed so that no JSON can make a 500: a route class for both APIs.

FastAPI parses a body with `json.loads` and turns only `JSONDecodeError` into a 422;
an integer of more than 4,300 digits (ValueError), nesting the parser cannot follow
(RecursionError) or bytes that are not text fell through to a bare 400 or a 500. Here
each of them is a `JSONDecodeError` saying what is wrong, which FastAPI answers 422 (the
wire protocol in its envelope: app.py). A body nested deeper than `MAX_BODY_DEPTH` is
refused the same way before any model sees it: the native API's bodies are 3 levels
deep plus a call's arguments, which may not pass seal.bfcl.calls.MAX_ARGUMENT_DEPTH.
"""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.routing import APIRoute

from seal.bfcl.calls import MAX_ARGUMENT_DEPTH, ArgumentsTooDeep, argument_size, json_failure

MAX_BODY_DEPTH = 2 * MAX_ARGUMENT_DEPTH


def parse_body(body: bytes) -> object:
    """The JSON value of a request body; raises json.JSONDecodeError with the reason."""
    doc = body.decode("utf-8", "replace")
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as e:
        raise json.JSONDecodeError(json_failure(e), doc, 0) from None
    try:
        argument_size(value, MAX_BODY_DEPTH)
    except ArgumentsTooDeep as e:
        raise json.JSONDecodeError(f"the body is {e}", doc, 0) from None
    return value


class _SafeJsonRequest(Request):
    async def json(self) -> object:
        if not hasattr(self, "_json"):
            self._json = parse_body(await self.body())
        return self._json


class SafeJsonRoute(APIRoute):
    """An APIRoute whose JSON bodies go through `parse_body`."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def safe_handler(request: Request):
            return await handler(_SafeJsonRequest(request.scope, request.receive))

        return safe_handler
