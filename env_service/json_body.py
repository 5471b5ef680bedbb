"""Request bodies are parsed so that no JSON can make a 500: a route class for both APIs.

Every body Python's JSON parser chokes on (a huge integer, deep nesting, bytes that are not
text), or takes but that is not JSON (NaN, Infinity, 1e400, a lone UTF-16 surrogate), and
any body nested deeper than `MAX_BODY_DEPTH`, becomes a `JSONDecodeError` saying what is
wrong, which FastAPI answers 422, in every field of both protocols. Which failures made
500s before: docs/service.md, "Request bodies".
"""

from __future__ import annotations

import json
import math
import re

from fastapi import Request
from fastapi.routing import APIRoute

from seal.bfcl.calls import MAX_ARGUMENT_DEPTH, ArgumentsTooDeep, argument_size, json_failure

MAX_BODY_DEPTH = 2 * MAX_ARGUMENT_DEPTH


# A high-surrogate escape not followed by a low one, a low one not preceded by a high one,
# or the UTF-8-style bytes of a surrogate (Python's parser passes all three). Pairs, as
# json.dumps writes every emoji, do not match: they are one valid character.
_HIGH, _LOW = rb"\\u[dD][89abAB][0-9a-fA-F]{2}", rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_SURROGATE = re.compile(
    _HIGH + rb"(?!" + _LOW + rb")|(?<!" + _HIGH + rb")" + _LOW + rb"|\xed[\xa0-\xbf]"
)


class _NotJson(ValueError):
    pass


def _no_constant(name: str) -> float:
    raise _NotJson(f"{name} is not a number JSON allows: numbers must be finite")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"{text[:40]} is out of range: numbers must be finite")
    return value


def parse_body(body: bytes) -> object:
    """The JSON value of a request body; raises json.JSONDecodeError with the reason."""
    doc = body.decode("utf-8", "replace")
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as e:
        raise json.JSONDecodeError(json_failure(e), doc, 0) from None
    try:
        argument_size(value, MAX_BODY_DEPTH)
    except ArgumentsTooDeep as e:
        raise json.JSONDecodeError(f"the body is {e}", doc, 0) from None
    # The search is a fast byte scan; the exact check (an escaped backslash before "u"
    # can look like an escape) runs on the rare body it matches.
    if (b"\\u" in body or b"\xed" in body) and _SURROGATE.search(body):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            message = "a string holds a lone UTF-16 surrogate, which is not text"
            raise json.JSONDecodeError(message, doc, 0) from None
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
