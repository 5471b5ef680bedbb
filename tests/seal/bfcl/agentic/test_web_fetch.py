"""The web-fetch guard, as a model meets it: every spelling of a host that issue #31's red
team tried (and more), fetched by bfcl-eval's own `fetch_url_content` through the service,
with its expected outcome (docs/web_search.md has the same table).

The "outside" web is a server on 127.0.0.1 that the test network (seal.bfcl.agentic.web_fetch's
LocalNetwork) names `outside.test` and allows; the bystanders the guard must protect are
two other servers, on 127.0.0.1 and ::1, that nothing allows, and link-local addresses
(a cloud's metadata server) that nothing answers at. A refused spelling must reach no
bystander (each row has its own path, so a hit is attributable) and must answer
bfcl-eval's fetch error with the guard's refusal; a fetched one must answer the page and reach it exactly once. A
refusal's text never says what a name resolves to.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import threading
import time

import httpx
import pytest
from agentic_scripts import agentic_service, call
from conftest import Episodes, results
from test_web_search import MISSING, RecordedSearch

from benchfixtures.web import network, web_server
from seal.bfcl.agentic import web_fetch, web_search
from seal.bfcl.backends import ERROR_PREFIX

needs_web = pytest.mark.skipif(bool(MISSING), reason="needs the ood extra (bfcl web search)")

REFUSED, FETCHED = "refused", "fetched"
# {L4}: the IPv4 bystander's port, {L6}: the IPv6 bystander's, {O}: the outside server's.
# A backslash in a redirect target is sent as %5C in the query (the server decodes it), so
# the first hop is an ordinary URL and the odd spelling reaches the client as a Location.
SPELLINGS = [
    # (row, url, expected)
    ("loopback_ip", "http://127.0.0.1:{L4}/page/loopback_ip", REFUSED),
    ("loopback_name", "http://localhost:{L4}/page/loopback_name", REFUSED),
    ("loopback_v6", "http://[::1]:{L6}/page/loopback_v6", REFUSED),
    ("backslash_ip", "http://127.0.0.1:{L4}\\@outside.test:{O}/page/backslash_ip", REFUSED),
    ("backslash_v6", "http://[::1]:{L6}\\@outside.test:{O}/page/backslash_v6", REFUSED),
    ("backslash_name", "http://localhost:{L4}\\@outside.test:{O}/page/backslash_name", REFUSED),
    ("backslash_after", "http://outside.test:{O}\\@127.0.0.1:{L4}/page/backslash_after", REFUSED),
    ("redirect_backslash",
     "http://outside.test:{O}/redirect?to=http://127.0.0.1:{L4}%5C@outside.test:{O}"
     "/page/redirect_backslash", REFUSED),
    ("redirect_name", "http://outside.test:{O}/redirect?to=http://localhost:{L4}/page/redirect_name",
     REFUSED),
    ("redirect_v6", "http://outside.test:{O}/redirect?to=http://[::1]:{L6}/page/redirect_v6",
     REFUSED),
    ("redirect_v6_backslash",
     "http://outside.test:{O}/redirect?to=http://[::1]:{L6}%5C@outside.test:{O}"
     "/page/redirect_v6_backslash", REFUSED),
    ("userinfo", "http://outside.test:{O}@127.0.0.1:{L4}/page/userinfo", REFUSED),
    ("userinfo_outside", "http://127.0.0.1:{L4}@outside.test:{O}/page/userinfo_outside", REFUSED),
    ("mapped_v6", "http://[::ffff:127.0.0.1]:{L4}/page/mapped_v6", REFUSED),
    ("short_ipv4", "http://127.1:{L4}/page/short_ipv4", REFUSED),
    ("decimal_ipv4", "http://2130706433:{L4}/page/decimal_ipv4", REFUSED),
    ("hex_ipv4", "http://0x7f.0.0.1:{L4}/page/hex_ipv4", REFUSED),
    ("octal_ipv4", "http://0177.0.0.1:{L4}/page/octal_ipv4", REFUSED),
    ("unspecified", "http://0.0.0.0:{L4}/page/unspecified", REFUSED),
    ("unspecified_v6", "http://[::]:{L6}/page/unspecified_v6", REFUSED),
    ("trailing_dot", "http://localhost.:{L4}/page/trailing_dot", REFUSED),
    ("upper_case", "http://LOCALHOST:{L4}/page/upper_case", REFUSED),
    ("tab", "http://outside.test:{O}\t@127.0.0.1:{L4}/page/tab", REFUSED),
    ("space", "http://outside.test:{O} @127.0.0.1:{L4}/page/space", REFUSED),
    ("newline", "http://127.0.0.1:{L4}\n/page/newline", REFUSED),
    ("fragment", "http://127.0.0.1:{L4}#@outside.test:{O}/page/fragment", REFUSED),
    ("query", "http://127.0.0.1:{L4}?@outside.test:{O}/page/query", REFUSED),
    ("idna", "http://\u24dbocalhost:{L4}/page/idna", REFUSED),
    ("percent_host", "http://%31%32%37.0.0.1:{L4}/page/percent_host", REFUSED),
    ("two_ports", "http://outside.test:{O}:{L4}/page/two_ports", REFUSED),
    ("nat64", "http://[64:ff9b::7f00:1]:{L4}/page/nat64", REFUSED),
    ("six_to_four", "http://[2002:7f00:1::]:{L4}/page/six_to_four", REFUSED),
    ("private_name", "http://intranet.test:{L4}/page/private_name", REFUSED),
    ("link_local_name", "http://metadata.test:{L4}/page/link_local_name", REFUSED),
    ("link_local_v6_name", "http://metadata6.test:{L6}/page/link_local_v6_name", REFUSED),
    ("link_local_ip", "http://169.254.169.254:{L4}/page/link_local_ip", REFUSED),
    ("link_local_v6", "http://[fe80::1]:{L6}/page/link_local_v6", REFUSED),
    ("unknown_name", "http://nowhere.test:{L4}/page/unknown_name", REFUSED),
    ("outside_other_port", "http://outside.test:{L4}/page/outside_other_port", REFUSED),
    ("https_loopback", "https://127.0.0.1:{L4}/page/https_loopback", REFUSED),
    ("no_host", "http:///127.0.0.1:{L4}/page/no_host", REFUSED),
    ("file", "file:///etc/passwd", REFUSED),
    ("plain", "http://outside.test:{O}/page/plain", FETCHED),
    ("host_case", "http://OUTSIDE.test:{O}/page/host_case", FETCHED),
    ("redirect_ok", "http://outside.test:{O}/redirect?to=http://outside.test:{O}/page/redirect_ok",
     FETCHED),
    ("redirect_relative", "http://outside.test:{O}/redirect?to=/page/redirect_relative", FETCHED),
    ("with_query", "http://outside.test:{O}/page/with_query?q=a%20b", FETCHED),
]  # fmt: skip


# Names of the test network that no server answers at: a cloud's metadata address.
NAMES = {"metadata.test": "169.254.169.254", "metadata6.test": "fe80::1"}
REFUSAL = str(web_fetch.RefusedUrlError())


@pytest.fixture
def the_web():
    """(outside, IPv4 bystander, IPv6 bystander), the test network naming them."""
    with web_server() as outside, web_server() as v4, web_server("::1") as v6:
        web_fetch.use_network(network(NAMES | {"intranet.test": v4.host}, outside=outside))
        web_search.use_transport(RecordedSearch)
        try:
            yield outside, v4, v6
        finally:
            web_fetch.use_network(web_fetch.PublicInternet())
            web_search.use_transport(web_search.SerpApiSearch)


def _fetch_all(tmp_path, urls: list[str]) -> list[str]:
    """One web-search episode fetching every URL in one message; the results, in order."""
    calls = "".join(call("fetch_url_content", url=url) for url in urls)
    with agentic_service(tmp_path, workers=1) as (url, _):
        episodes = Episodes(httpx.Client(base_url=url, timeout=120))
        episode_id, _ = episodes.create("web_search_base_0", mode="validate")
        return results(episodes.step(episode_id, calls))


@needs_web
def test_every_spelling_of_a_host_gets_its_expected_outcome(tmp_path, the_web):
    outside, v4, v6 = the_web
    ports = {"L4": v4.port, "L6": v6.port, "O": outside.port}
    urls = [url.format(**ports) for _, url, _ in SPELLINGS]
    results = _fetch_all(tmp_path, urls)
    wrong = []
    for (row, _, expected), result in zip(SPELLINGS, results, strict=True):
        reached = v4.pages[row] + v6.pages[row]
        if expected == REFUSED:
            # The guard's refusal (bfcl-eval refuses a file:// URL itself), not a failed
            # connection: the test network fails a fetch the guard let through.
            error = result.startswith(ERROR_PREFIX) or REFUSAL in json.loads(result)["error"]
            ok = reached == 0 and outside.pages[row] == 0 and error
        else:
            body = json.loads(result).get("content", "")
            ok = reached == 0 and outside.pages[row] == 1 and f"<h1>{row}</h1>" in body
        print(f"{row:<24} {expected:<8} {'ok' if ok else 'WRONG'}  {result[:150]!r}")
        if not ok:
            wrong.append(f"{row}: expected {expected}, bystanders hit {reached}x: {result[:300]}")
    assert not wrong, "\n".join(wrong)


@needs_web
def test_a_refusal_does_not_say_what_a_name_resolves_to(tmp_path, the_web):
    """A model may not learn the service's internal names from the error texts: a name
    that resolves to a private address and one that does not resolve are refused alike."""
    _, v4, _ = the_web
    names = ["intranet.test", "nowhere.test", "localhost"]
    urls = [f"http://{name}:{v4.port}/page/x" for name in names]
    results = _fetch_all(tmp_path, urls)
    texts = {r.replace(u, "URL") for r, u in zip(results, urls, strict=True)}
    assert len(texts) == 1, texts
    assert "127.0.0.1" not in results[0] and "resolve" not in results[0], results[0]


# --- the same rules, one function at a time -------------------------------------------------

NOT_PUBLIC = [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.0.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "255.255.255.255", "192.0.0.1", "198.18.0.1", "240.0.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fec0::1", "ff02::1", "::ffff:10.0.0.1",
    "::ffff:127.0.0.1", "64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b:1::1", "2002:a00:1::",
    "2002:7f00:1::", "::10.0.0.1", "2001::1", "100::1", "2001:db8::1",
]  # fmt: skip
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_special_ranges_are_not_public(address):
    assert not web_fetch.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are(address):
    assert web_fetch.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "url, host, port, path",
    [
        ("http://example.org", "example.org", 80, "/"),
        ("https://Example.ORG:8443/a?b=c#frag", "example.org", 8443, "/a?b=c"),
        ("http://example.org/a b/\u00fc?q=x y", "example.org", 80, "/a%20b/%C3%BC?q=x%20y"),
        ("http://example.org/\\@evil", "example.org", 80, "/%5C@evil"),
        ("http://[2606:4700::1111]:81/", "2606:4700::1111", 81, "/"),
        ("http://8.8.8.8/", "8.8.8.8", 80, "/"),
        ("http://b\u00fccher.example/", "xn--bcher-kva.example", 80, "/"),
    ],
)
def test_a_url_is_read_as_the_request_goes_out(url, host, port, path):
    target = web_fetch.parse_url(url)
    assert (target.host, target.port, target.path) == (host, port, path)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8\\@1.1.1.1/", "http://1.1.1.1\\@127.0.0.1/", "http://u@example.org/",
        "http://example.org\t/", "http://exa\nmple.org/", "http://127.1/", "http://2130706433/",
        "http://0x7f.0.0.1/", "http://0177.0.0.1/", "http://[fe80::1%25lo]/", "http://%31.1.1.1/",
        "http://example.org:80:81/", "http://example.org:0/", "http://example.org:99999/",
        "http://example.org:+80/", "http:///x", "http://exa mple.org/", "http://-x.org/",
        "ftp://example.org/", "javascript:alert(1)", "http://[::1/", "http://[::1]x/",
    ],
)  # fmt: skip
def test_spellings_another_parser_could_read_otherwise_are_refused(url):
    with pytest.raises(web_fetch.RefusedUrlError):
        web_fetch.parse_url(url)


def test_a_name_is_refused_alike_whether_it_resolves_to_a_private_address_or_not_at_all():
    web_fetch.use_network(web_fetch.LocalNetwork({"intranet.test": "10.0.0.1"}))
    try:
        texts = set()
        for name in ("intranet.test", "nowhere.test"):
            with pytest.raises(web_fetch.RefusedUrlError) as refused:
                web_fetch.addresses(web_fetch.parse_url(f"http://{name}/"))
            texts.add(str(refused.value))
    finally:
        web_fetch.use_network(web_fetch.PublicInternet())
    assert len(texts) == 1 and "10.0.0.1" not in texts.pop()


@contextlib.contextmanager
def _trickling_server(at_once: bytes, trickled: bytes, every_s: float):
    """A server that answers `at_once`, then `trickled` one byte every `every_s` seconds."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(at_once)
                for byte in trickled:
                    if stop.wait(every_s):
                        return
                    conn.sendall(bytes([byte]))

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_the_deadline_covers_the_whole_exchange(where):
    """A byte every 0.1 s never meets a per-read timeout; the deadline is for it all."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Pad: " + b"x" * 50 + b"\r\n\r\n"
    at_once, trickled = (b"", head + b"y" * 100) if where == "headers" else (head, b"y" * 100)
    with _trickling_server(at_once, trickled, 0.1) as port:
        web_fetch.use_network(network(slow=port))
        started = time.monotonic()
        try:
            with pytest.raises(web_fetch.FetchError, match="did not arrive within 1.0 s"):
                web_fetch.get(f"http://slow.test:{port}/", {}, 1.0, 2**20)
        finally:
            web_fetch.use_network(web_fetch.PublicInternet())
    # Its 1 s, not the trickle's 15 s (150 bytes at 0.1 s each); the rest is room for load.
    assert time.monotonic() - started < 6.0


def test_the_byte_caps_hold_before_and_after_decompression():
    with web_server() as web:
        web_fetch.use_network(network(outside=web))
        try:
            for path in ("/huge?mb=64", "/bomb?mb=64"):
                with pytest.raises(web_fetch.FetchError, match="larger than the service's limit"):
                    web_fetch.get(f"http://outside.test:{web.port}{path}", {}, 30.0, 2**20)
            page = web_fetch.get(f"http://outside.test:{web.port}/bomb?mb=1", {}, 30.0, 2**21)
        finally:
            web_fetch.use_network(web_fetch.PublicInternet())
    assert page.body == b" " * 2**20  # within the cap: decompressed whole
    assert web.sent_bytes < 16 * 2**20


def test_the_test_network_reaches_no_public_address():
    """What the guard lets through on the test network fails naming it, unlike a refusal:
    the table above tells the two apart and no test reaches the internet."""
    web_fetch.use_network(web_fetch.LocalNetwork({"public.test": "8.8.8.8"}))
    try:
        for url in ("http://public.test/", "http://8.8.8.8/"):
            with pytest.raises(web_fetch.FetchError, match="reaches no public address"):
                web_fetch.addresses(web_fetch.parse_url(url))
    finally:
        web_fetch.use_network(web_fetch.PublicInternet())
