"""ASGI middlewares that make the real service misbehave as a client may meet it: replies
that arrive after the client gave up (`LateReply`), and handlers that crash into a
plain-text 500 (`PlainText500`). Wrap `create_app()` and serve it with `serve_app`."""

from __future__ import annotations

import asyncio


def is_request(scope, method: str, suffix: str) -> bool:
    return scope["type"] == "http" and scope["method"] == method and scope["path"].endswith(suffix)


class LateReply:
    """Runs each matching request in the service, then holds its reply back `delay` s:
    the client times out although the work was done. Only the first copy of a request
    (same method, path and body) is held, up to `times` requests; copies pass."""

    def __init__(self, app, method: str, suffix: str, delay: float, times: int = 1):
        self.app, self.method, self.suffix = app, method, suffix
        self.delay, self.left = delay, times
        self.seen: set[tuple] = set()
        self.held = 0

    async def __call__(self, scope, receive, send):
        if self.left <= 0 or not is_request(scope, self.method, self.suffix):
            return await self.app(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break

        async def replay():
            return {"type": "http.request", "body": body, "more_body": False}

        key = (scope["method"], scope["path"], scope["query_string"], body)
        if key in self.seen:
            return await self.app(scope, replay, send)
        self.seen.add(key)
        self.left -= 1
        self.held += 1
        messages = []

        async def keep(message):
            messages.append(message)

        await self.app(scope, replay, keep)
        await asyncio.sleep(self.delay)
        try:
            for message in messages:
                await send(message)
        except Exception:  # noqa: BLE001 - the client has gone, as intended
            pass


class PlainText500:
    """Answers matching requests as a crashed handler does: 500, text/plain, no JSON."""

    def __init__(self, app, match):
        self.app, self.match = app, match
        self.answered = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not await self.match(scope, receive):
            return await self.app(scope, receive, send)
        self.answered += 1
        body = b"Internal Server Error"
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        await send({"type": "http.response.start", "status": 500, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def steps_of_task(app, task_id: str):
    """A `PlainText500` match: the steps of every episode of `task_id` (the app's engine
    knows each live episode's task)."""

    async def match(scope, receive):
        parts = scope["path"].split("/")  # ["", "v1", "episodes", id, "steps"]
        if len(parts) != 5 or parts[4] != "steps":
            return False
        episode = app.state.engine.episodes.get(parts[3])
        return episode is not None and episode.task.task_id == task_id

    return match
