"""The one HTTP GET of the web-search tasks' outside calls (page fetches and SerpAPI
searches): public addresses only, a deadline for the whole exchange, capped bytes.

One strict URL parser refuses any spelling another parser could read as another host; the
host is resolved once and the connection goes to the checked address; every redirect hop
is checked alike; the body is capped on the wire and decompressed. `PublicInternet` is the
default network; tests swap in a `LocalNetwork` (`use_network`), a Python call, never a
setting. The steps and the spellings: docs/web_search.md, "The fetch".
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import re
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urljoin

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges ipaddress calls global that still reach a private or local host: 6to4 embeds any
# IPv4 address (127.0.0.1 as 2002:7f00:1::), NAT64 (also reserved, refused by that rule)
# translates to any IPv4 address; site-local is deprecated, never public.
_EMBEDDING = (ipaddress.ip_network("2002::/16"),)


def is_public(address: Address) -> bool:
    """A globally routable unicast address: not loopback, private, link-local, shared
    (100.64/10), reserved (NAT64 64:ff9b::/96 and IPv4-compatible ::/96 among them),
    multicast, unspecified, site-local or 6to4; an IPv4-mapped IPv6 address is judged by
    its IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public(address.ipv4_mapped)
        if address.is_site_local or any(address in net for net in _EMBEDDING):
            return False
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_unspecified
    )


class PublicInternet:
    """The system's resolver; public addresses only."""

    def resolve(self, host: str, port: int) -> list[Address]:
        """Every address `host` resolves to (OSError when it does not)."""
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]

    def allows(self, address: Address, port: int) -> bool:
        return is_public(address)


@dataclass(frozen=True)
class LocalNetwork:
    """A test's network: `names` (lower case) resolve to the given addresses, nothing
    else resolves, and only the (address, port) pairs in `servers` may be connected to
    (the test's "outside" servers; its loopback bystanders stay refused). Every other
    address is judged by `is_public`, as on the public internet: one it refuses is
    refused, one it would let through fails the fetch naming it (a test network reaches
    no public address), so a test tells the guard's refusal from a rule let through."""

    names: dict[str, str] = field(default_factory=dict)
    servers: frozenset[tuple[str, int]] = frozenset()

    def resolve(self, host: str, port: int) -> list[Address]:
        if host.lower() in self.names:
            return [ipaddress.ip_address(self.names[host.lower()])]
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            raise OSError(f"{host}: no such name on this test network") from None

    def allows(self, address: Address, port: int) -> bool:
        if (str(address), port) in self.servers:
            return True
        if is_public(address):
            raise FetchError(f"the test network reaches no public address ({address})")
        return False


_NETWORK: PublicInternet | LocalNetwork = PublicInternet()


def use_network(network: PublicInternet | LocalNetwork) -> None:
    """Fetch through `network` in this process and those it forks later (tests)."""
    global _NETWORK
    _NETWORK = network


def network() -> PublicInternet | LocalNetwork:
    return _NETWORK


class RefusedUrlError(ValueError):
    """A URL the service will not fetch. Its text never says what the host resolves to."""

    def __init__(self, why: str = ""):
        super().__init__(
            "the environment service fetches public web pages only, and this URL is not "
            f"one it may fetch{f' ({why})' if why else ''}"
        )


class FetchError(OSError):
    """A fetch that failed after its URL was accepted (too large, too slow, unreachable)."""


@dataclass(frozen=True)
class Target:
    """A URL as `parse_url` read it."""

    scheme: str
    host: str
    """Lower case ASCII: a DNS name (IDNA-encoded), an IPv4 address or an IPv6 one."""
    port: int
    path: str
    """The request target: path and query, percent-encoded."""

    @property
    def address(self) -> Address | None:
        """The host when it is an address literal."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


# scheme://authority then the rest; the authority ends at the first '/', '?' or '#'.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)")
_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_IPV4 = re.compile(
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    r"(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"
)
# What a request target may hold as it is (RFC 3986's pchar, '/' and '?'); anything else
# is percent-encoded, as requests does.
_SAFE_TARGET = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?%"
)


def parse_url(url: str) -> Target:
    """`url` as the fetch reads it, or RefusedUrlError saying which part is not accepted.
    Only http(s), no control character anywhere; the authority must be exactly
    `host[:port]`: no userinfo, no backslash, a DNS name (IDNA, as requests encodes one),
    a canonical dotted-quad IPv4 address or a bracketed IPv6 address without a zone, and
    a decimal port. The path and query are sent percent-encoded, as requests sends them."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise RefusedUrlError("it holds a control character (a tab, a line break...)")
    match = _URL.fullmatch(url)
    if match is None or match["scheme"].lower() not in ("http", "https"):
        raise RefusedUrlError("not an http:// or https:// URL with a host")
    scheme, authority = match["scheme"].lower(), match["authority"]
    if "\\" in authority or "@" in authority or "%" in authority:
        raise RefusedUrlError("its host part holds '\\', '@' or '%'")
    host, port = _split_port(authority, 443 if scheme == "https" else 80)
    rest = match["rest"].split("#", 1)[0]
    path = rest if rest.startswith("/") else "/" + rest
    path = "".join(ch if ch in _SAFE_TARGET else _quote(ch) for ch in path)
    return Target(scheme, _host(host), port, path)


def _split_port(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, bracket, after = authority[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise RefusedUrlError("a malformed [IPv6] host")
        port = after[1:] if after else None
        host = "[" + host + "]"
    else:
        host, colon, port = authority.partition(":")
        port = port if colon else None
    if port is None or port == "":
        return host, default
    if not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
        raise RefusedUrlError("its port is not one decimal number from 1 to 65535")
    return host, int(port)


def _host(host: str) -> str:
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise RefusedUrlError("a malformed [IPv6] host") from None
        if address.scope_id:
            raise RefusedUrlError("an IPv6 address with a zone")
        return str(address)
    if _IPV4.fullmatch(host):
        return host
    try:
        import idna  # requests' own dependency: the host as requests would send it

        name = idna.encode(host, uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError):
        raise RefusedUrlError("its host is not a valid name") from None
    labels = name.removesuffix(".").split(".")
    if not all(_LABEL.fullmatch(label) for label in labels) or len(name) > 253:
        raise RefusedUrlError("its host is not a valid name")
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        # 127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1: resolvers read them as IPv4 addresses
        raise RefusedUrlError("its host is an IPv4 address in a form other than a.b.c.d")
    return name


def _quote(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def addresses(target: Target) -> list[Address]:
    """The addresses to connect to for `target`, every one allowed (RefusedUrlError
    otherwise, whether the name resolves to a private address or not at all)."""
    found = [target.address] if target.address is not None else None
    if found is None:
        try:
            found = _NETWORK.resolve(target.host, target.port)
        except (OSError, UnicodeError):
            found = []
    if not found or not all(_NETWORK.allows(a, target.port) for a in found):
        raise RefusedUrlError()
    return found


@dataclass(frozen=True)
class Page:
    """What a GET answered: the final URL, its status, headers and decoded body."""

    url: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 30
"""requests' own limit (bfcl-eval fetches with allow_redirects=True)."""


def get(url: str, headers: dict[str, str], timeout_s: float, max_bytes: int) -> Page:
    """GET `url`, following redirects, each hop checked (module docstring). Raises
    RefusedUrlError, or FetchError for a fetch that failed, ran past `timeout_s` in all
    or past `max_bytes` (on the wire, or decompressed)."""
    deadline = time.monotonic() + timeout_s
    for _ in range(MAX_REDIRECTS + 1):
        target = parse_url(url)
        page = _exchange(target, addresses(target), headers, deadline, timeout_s, max_bytes)
        location = dict((k.lower(), v) for k, v in page.headers).get("location")
        if page.status not in REDIRECTS or location is None:
            return Page(url, page.status, page.reason, page.headers, page.body)
        url = urljoin(url, location)
    raise FetchError(f"more than {MAX_REDIRECTS} redirects")


def _exchange(
    target: Target,
    found: list[Address],
    headers: dict[str, str],
    deadline: float,
    timeout_s: float,
    max_bytes: int,
) -> Page:
    """One request to the first of `found` that accepts a connection; the whole exchange
    is cut at `deadline` (a timer shuts the socket down: a read that waits on a page
    trickling in a byte at a time returns then)."""
    sock, errors = None, []
    for address in found:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            sock = socket.create_connection((str(address), target.port), timeout=left)
            break
        except OSError as e:
            errors.append(e.strerror or type(e).__name__)
    if sock is None:
        if time.monotonic() >= deadline:
            raise FetchError(f"the page did not arrive within {timeout_s} s") from None
        raise FetchError(f"could not connect to {target.host_header}: {'; '.join(errors)}")
    held = [sock]  # what the timer shuts down: the TLS socket, once it wraps this one
    expired = threading.Event()
    cut = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (held, expired))
    cut.start()
    try:
        if target.scheme == "https":  # (the handshake after the timer holds the TLS socket)
            held[0] = _tls_context().wrap_socket(
                sock, server_hostname=target.host, do_handshake_on_connect=False
            )
            held[0].do_handshake()
        connection = http.client.HTTPConnection(target.host, target.port)
        connection.sock = held[0]
        sent = {"Host": target.host_header, **headers, "Accept-Encoding": "gzip, deflate"}
        connection.request("GET", target.path, headers=sent)
        response = connection.getresponse()
        if response.length is not None and response.length > max_bytes:  # said up front
            raise FetchError(f"the page is larger than the service's limit of {max_bytes} bytes")
        wire = response.read(max_bytes + 1)
        if expired.is_set():  # cut short: what was read is not the page
            raise FetchError(f"the page did not arrive within {timeout_s} s")
        if len(wire) > max_bytes:
            raise FetchError(f"the page is larger than the service's limit of {max_bytes} bytes")
        if response.length:  # (http.client's count of the Content-Length still to come)
            raise FetchError(f"the connection closed {response.length} bytes before the page's end")
        body = _decoded(wire, response.getheader("Content-Encoding", ""), max_bytes)
        return Page("", response.status, response.reason, response.getheaders(), body)
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        if expired.is_set() or time.monotonic() >= deadline:
            raise FetchError(f"the page did not arrive within {timeout_s} s") from None
        if isinstance(e, FetchError):
            raise
        raise FetchError(f"{type(e).__name__}: {e}") from None
    finally:
        cut.cancel()
        held[0].close()


def _shut(held: list[socket.socket], expired: threading.Event) -> None:
    expired.set()
    with contextlib.suppress(OSError):  # closed already
        socket.socket.shutdown(held[0], socket.SHUT_RDWR)


_TLS: ssl.SSLContext | None = None


def _tls_context() -> ssl.SSLContext:
    global _TLS
    if _TLS is None:
        import certifi  # requests' CA bundle: what bfcl-eval's fetch verified against

        _TLS = ssl.create_default_context(cafile=certifi.where())
    return _TLS


def _decoded(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """`body` decompressed as its Content-Encoding says (gzip, deflate, in the order
    applied), each step capped at `max_bytes`; other encodings are left as they are, as
    requests leaves them."""
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding in ("gzip", "x-gzip"):
            body = _inflate(body, zlib.MAX_WBITS | 16, max_bytes)
        elif coding == "deflate":
            try:
                body = _inflate(body, zlib.MAX_WBITS, max_bytes)
            except zlib.error:  # deflate sent raw, without its zlib header (as urllib3 allows)
                body = _inflate(body, -zlib.MAX_WBITS, max_bytes)
        else:
            break
    return body


def _inflate(data: bytes, wbits: int, max_bytes: int) -> bytes:
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, max_bytes + 1 - len(out))
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise FetchError(
                f"the page is larger than the service's limit of {max_bytes} bytes "
                "once decompressed"
            )
        data = inflater.unused_data  # a next gzip member
    return bytes(out)
