"""Ids a client names (episodes, instances, tasks): short printable text that every HTTP
client puts in a URL's path as it is."""

from __future__ import annotations

from env_service.errors import InvalidRequestError

MAX_ID_CHARS = 256
"""The longest episode, instance or task id a client may send (BFCL's are under 40
characters, a UUID is 36). An id is kept for the episode's life, in the service and in
its worker, so an unbounded one would cost memory a client chooses (docs/benchmarks.md)."""


URL_SYNTAX = "/%?#\\"
"""Characters an id may not hold: in a URL's path they are syntax (a separator, a
percent-encoding, the query, the fragment; some clients read a backslash as '/'), so an
id with one is sent as another path than its own by some HTTP client."""


def check_id(value: str, what: str) -> str:
    """`value` if it can be an id; else InvalidRequestError (422) saying why, without
    echoing a long value back. Ids are logged, compared and sent back in replies and
    paths, so they are short, printable text that every HTTP client puts in a path as it
    is: no URL syntax (URL_SYNTAX), and not '.' or '..', which clients remove from a path
    (the project's own aiohttp client sends `/v1/episodes/..` as `/v1/`)."""
    if not value:
        raise InvalidRequestError(f"{what} is empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidRequestError(
            f"{what} is {len(value)} characters; ids have at most {MAX_ID_CHARS} characters"
        )
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        raise InvalidRequestError(
            f"{what} {value!r} holds U+{ord(bad):04X}, a control character or another code "
            "point that is not printable text"
        )
    if bad := next((ch for ch in value if ch in URL_SYNTAX), None):
        raise InvalidRequestError(
            f"{what} {value!r} holds {bad!r}, which no id may hold (it is URL syntax: "
            "HTTP clients would not send it as part of the id)"
        )
    if value in (".", ".."):
        raise InvalidRequestError(
            f"{what} {value!r} is a path segment HTTP clients remove from a URL: no id may be "
            "'.' or '..'"
        )
    return value
