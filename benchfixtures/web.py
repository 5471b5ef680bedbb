"""The web-search tasks' outside web, served locally: for the tests, the benches (scripts/
bench_env_adversarial.py, bench_outside_fairness.py) and a service on a test network.

    with web_server() as web:            # on 127.0.0.1, a free port
        web.url("/page/tea")             # http://127.0.0.1:PORT/page/tea
        web.hits["/page/tea"]            # requests that reached that path; web.order: all

Its paths (a page, a slow page, a huge body held at `web.gate`, a gzip bomb, a redirect,
a search), `silent_server()` and `network(...)`: docs/web_search.md.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import socket
import sys
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

from seal.bfcl.agentic.web_fetch import LocalNetwork

SLOW_BYTE_S = 0.5
MIB = 2**20


@functools.cache
def gzip_bomb(mb: int) -> bytes:
    """A gzip body that inflates to `mb` MiB of spaces (made a MiB at a time: the test
    never holds the inflated body)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = b" " * MIB
    return b"".join(packer.compress(chunk) for _ in range(mb)) + packer.flush()


def page_html(name: str) -> bytes:
    return f"<html><body><h1>{name}</h1><p>Grown in <b>Fujian</b>.</p></body></html>".encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self):  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        self.server.hits[parts.path] += 1
        self.server.order.append(parts.path)
        if "/page/" in parts.path:  # by name, however the client spelt the rest of the path
            self.server.pages[parts.path.rsplit("/page/", 1)[1]] += 1
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        try:
            if parts.path.startswith("/page/"):
                self._send(200, page_html(parts.path.removeprefix("/page/")))
            elif parts.path == "/slow":
                self._slow()
            elif parts.path == "/huge":
                self._huge(int(query.get("mb", "64")), held="hold" in query)
            elif parts.path == "/bomb":
                body = gzip_bomb(int(query.get("mb", "64")))
                self._send(200, body, {"Content-Encoding": "gzip"})
            elif parts.path == "/redirect":
                self._send(302, b"", {"Location": query["to"]})
            elif parts.path == "/search":
                result = {"title": "t", "link": "https://example.org/", "snippet": "s"}
                self._send(200, json.dumps({"organic_results": [result]}).encode(), {}, "json")
            else:
                self._send(404, b"not here")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: what the caps are for

    def _send(self, status: int, body: bytes, headers: dict | None = None, kind="html"):
        self.send_response(status)
        self.send_header("Content-Type", f"text/{kind}" if kind == "html" else "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _slow(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.flush()
        for _ in range(1000):
            if self.server.closing.wait(SLOW_BYTE_S):
                return
            self.wfile.write(b"x")
            self.wfile.flush()

    def _huge(self, mb: int, held: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        if not held:
            self.send_header("Content-Length", str(mb * MIB))
        # Held, the body ends at the connection's close: told its length up front, a
        # fetch refuses it before a byte of it, and it would not be in flight to hold.
        self.end_headers()
        chunk = b"<p>" + b"x" * (MIB - 7) + b"</p>"
        for k in range(mb):
            self.wfile.write(chunk)
            self.server.sent_bytes += len(chunk)
            if held and k == 0:  # the fetch is in flight until the test opens the gate
                self.wfile.flush()
                self.server.holding.set()
                self.server.gate.wait()

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, family):
        self.address_family = family
        super().__init__(address, _Handler)
        self.hits: Counter[str] = Counter()
        self.order: list[str] = []
        """Every request's path, in the order they arrived."""
        self.pages: Counter[str] = Counter()
        """Requests per page name (`/page/<name>`), whatever came before it in the path."""
        self.closing = threading.Event()
        self.sent_bytes = 0
        self.gate = threading.Event()
        """Open (set) unless a test closes it: `/huge?hold=1` waits for it after its first MiB."""
        self.gate.set()
        self.holding = threading.Event()
        """Set once a `/huge?hold=1` reply waits at the gate."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up
            super().handle_error(request, client_address)

    @property
    def host(self) -> str:
        return self.server_address[0]

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"


@contextlib.contextmanager
def web_server(host: str = "127.0.0.1") -> Iterator[_Server]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = _Server((host, 0), family)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.closing.set()
        server.gate.set()
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (an unreachable SerpAPI)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def network(names: dict[str, str] | None = None, **servers: _Server | int) -> LocalNetwork:
    """The test network: each keyword a name (`outside=web` -> `outside.test`) resolving
    to that server's address (a port number: 127.0.0.1's), and only those servers
    reachable; `names` more names that resolve (to addresses nothing allows)."""
    where = {
        name: (s, "127.0.0.1") if isinstance(s, int) else (s.port, s.host)
        for name, s in servers.items()
    }
    return LocalNetwork(
        names={**(names or {}), **{f"{name}.test": host for name, (_, host) in where.items()}},
        servers=frozenset((host, port) for port, host in where.values()),
    )


def service_module(web_port: int, silent_port: int) -> tuple[str, ...]:
    """`python -m env_service.bench_network` and its arguments, for
    benchfixtures.service.bench_service: the test network naming the outside web (a `web_server` on
    127.0.0.1) `outside.test` and SerpAPI (a `silent_server`, or any local port)
    `serpapi.test`."""
    spec = {
        "names": {"outside.test": "127.0.0.1", "serpapi.test": "127.0.0.1"},
        "servers": [["127.0.0.1", web_port], ["127.0.0.1", silent_port]],
    }
    return ("env_service.bench_network", json.dumps(spec), f"http://serpapi.test:{silent_port}")
