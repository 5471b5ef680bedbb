"""`python -m env_service.bench_network NETWORK_JSON SERPAPI_URL [SERVICE FLAGS...]`: the
service, with its web-search fetches on a test network and SerpAPI at a given URL, for a
bench whose outside web is local (scripts/bench_env_adversarial.py; benchfixtures/web.py).

NETWORK_JSON is `{"names": {name: address}, "servers": [[address, port], ...]}`
(seal.bfcl.agentic.web_fetch.LocalNetwork: those names resolve, only those servers are reached).
A command of its own, not a flag or setting of the service: `python -m env_service` has
no way to let a fetch reach its own network.
"""

from __future__ import annotations

import json
import sys

from env_service.__main__ import main as service_main
from seal.bfcl.agentic import web_fetch


def main(argv: list[str] | None = None) -> None:
    from serpapi.serp_api_client import SerpApiClient

    argv = sys.argv[1:] if argv is None else argv
    spec, serpapi, flags = json.loads(argv[0]), argv[1], argv[2:]
    servers = frozenset((host, int(port)) for host, port in spec["servers"])
    web_fetch.use_network(web_fetch.LocalNetwork(spec["names"], servers))
    SerpApiClient.BACKEND = serpapi
    service_main(flags)


if __name__ == "__main__":
    main()
