"""Where the web-search tasks' page fetches may go: how a host name resolves, and which
addresses may be connected to (docs/web_search.md).

`PublicInternet` (the default) resolves with the system's resolver and allows globally
routable unicast addresses only. Tests swap in a `LocalNetwork` with `use_network`: names
of their own that resolve to local test servers, and only those servers' (address, port)
allowed. It is a Python call made before the service forks its processes, not a setting:
no flag or config key lets a service fetch from its own network.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

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
    (the test's "outside" servers; its loopback bystanders stay refused)."""

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
        return (str(address), port) in self.servers


_NETWORK: PublicInternet | LocalNetwork = PublicInternet()


def use_network(network: PublicInternet | LocalNetwork) -> None:
    """Fetch through `network` in this process and those it forks later (tests)."""
    global _NETWORK
    _NETWORK = network


def network() -> PublicInternet | LocalNetwork:
    return _NETWORK
