"""What each error status means, for the OpenAPI schema of both protocols.

Routes list the statuses they answer with `responses=errors(...)` (native API) or
`release_errors(...)` (release protocol): 401 on every route but `GET /healthz` (when the
service runs with a token), 413 on every route that takes a body, 422 wherever FastAPI
validates something, and the route's own. tests/env_service/test_access.py provokes each status
on each route and checks the schema lists it.
"""

from __future__ import annotations

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    """The native API's error body."""

    detail: str | list


class ReleaseError(BaseModel):
    """The release protocol's error envelope."""

    success: bool = False
    data: None = None
    error: str


MEANINGS = {
    400: "Bad request (the release protocol: an env_type this service does not serve)",
    401: "No valid bearer token (only when the service runs with one)",
    403: "Not allowed: the service runs without a token",
    404: "Unknown task, episode or split",
    409: "Episode id in use, or a step after the end or out of sequence",
    413: "Body over the service's limit (max_body_bytes, max_profile_bytes) or message "
    "over max_message_chars",
    422: "Malformed body or parameters",
    500: "The service's own data cannot be read (a broken install)",
    503: "Busy: max_live_episodes are live; retry after the Retry-After header's seconds",
    507: "A memory snapshot could not be written (a full disk, a read-only folder): the "
    "prerequisite conversation has not finished",
}


def errors(*statuses: int) -> dict[int, dict]:
    """OpenAPI `responses` for the native API: 401 and `statuses`."""
    return {s: {"model": ErrorDetail, "description": MEANINGS[s]} for s in (401, *statuses)}


def release_errors(*statuses: int) -> dict[int, dict]:
    """OpenAPI `responses` for the release protocol: 401 and `statuses`, in its envelope."""
    return {s: {"model": ReleaseError, "description": MEANINGS[s]} for s in (401, *statuses)}
