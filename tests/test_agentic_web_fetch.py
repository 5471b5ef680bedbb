"""The web-fetch guard, as a model meets it: every spelling of a host that issue #31's red
team tried (and more), fetched by bfcl-eval's own `fetch_url_content` through the service,
with its expected outcome (docs/web_search.md has the same table).

The "outside" web is a server on 127.0.0.1 that the test network (seal.bfcl.web_fetch's
LocalNetwork) names `outside.test` and allows; the bystanders the guard must protect are
two other servers, on 127.0.0.1 and ::1, that nothing allows. A refused spelling must
reach no bystander (each row has its own path, so a hit is attributable) and must answer
bfcl-eval's fetch error; a fetched one must answer the page and reach it exactly once. A
refusal's text never says what a name resolves to.
"""

from __future__ import annotations

import json

import httpx
import pytest
from agentic_scripts import agentic_service, call
from conftest import Episodes, results
from test_agentic_web_search import MISSING, RecordedSearch
from web_pages import network, web_server

from seal.bfcl import web_fetch, web_search
from seal.bfcl.backends import ERROR_PREFIX

pytestmark = pytest.mark.skipif(bool(MISSING), reason="needs the ood extra (bfcl web search)")

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


@pytest.fixture
def the_web():
    """(outside, IPv4 bystander, IPv6 bystander), the test network naming them."""
    with web_server() as outside, web_server() as v4, web_server("::1") as v6:
        web_fetch.use_network(network({"intranet.test": v4.host}, outside=outside))
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


def test_every_spelling_of_a_host_gets_its_expected_outcome(tmp_path, the_web):
    outside, v4, v6 = the_web
    ports = {"L4": v4.port, "L6": v6.port, "O": outside.port}
    urls = [url.format(**ports) for _, url, _ in SPELLINGS]
    results = _fetch_all(tmp_path, urls)
    wrong = []
    for (row, url, expected), result in zip(SPELLINGS, results, strict=True):
        reached = v4.pages[row] + v6.pages[row]
        if expected == REFUSED:
            error = result.startswith(ERROR_PREFIX) or "error" in json.loads(result)
            ok = reached == 0 and outside.pages[row] == 0 and error
        else:
            body = json.loads(result).get("content", "")
            ok = reached == 0 and outside.pages[row] == 1 and f"<h1>{row}</h1>" in body
        print(f"{row:<24} {expected:<8} {'ok' if ok else 'WRONG'}  {result[:150]!r}")
        if not ok:
            wrong.append(f"{row}: expected {expected}, bystanders hit {reached}x: {result[:300]}")
    assert not wrong, "\n".join(wrong)


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
