"""Which ``Host`` a request may name, against DNS rebinding, independent of any server.

A page on a hostile name that the attacker's DNS later resolves to 127.0.0.1 (or to a host on the operator's
network) is same-origin with the service it then reaches, so the browser sends it ``Sec-Fetch-Site:
same-origin`` and lets the page read the answers: the cross-site check (cross_site.py) cannot see it. What gives
it away is the ``Host`` header, which names the hostile name. A service answers only requests naming it by an IP
address (no DNS is involved), or by a name in its allow-list: ``localhost``, its hostname, its broadcast address,
the names it listens on, and those its operator adds (``--http-allowed-host``; ``*`` allows any, as NSQ does).
A request without a ``Host`` (HTTP/1.0) did not come from a browser, and is served.

The same rules are used by nsqd and lookupd (their own HTTP server) and the admin (aiohttp).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from nsqclient.addresses import split_host_port

# the help of nsqd's and lookupd's --http-allowed-host
ALLOWED_HOST_HELP = ("a name requests may give as their Host, beyond localhost, the hostname, the broadcast address "
                     "and the listen addresses (IP addresses always may): against DNS rebinding (may be given "
                     "multiple times; * allows any, as NSQ does)")

HOST_REFUSED_CODE = "HOST_NOT_ALLOWED"
ANY = "*"


def name_of(host: str) -> str:
    """The name a ``Host`` header gives, without its port, lower case: ``[::1]:4151`` -> ``::1``."""
    host = host.strip()
    try:
        name, _ = split_host_port(host)
    except ValueError:
        name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return name.lower().rstrip(".")


def allowed_names(added: Iterable[str], *own: str) -> frozenset[str]:
    """The allow-list: ``localhost``, the service's ``own`` names (hostname, broadcast address, listen hosts: IP
    addresses and empty ones are skipped, an IP needs no listing) and the ``added`` ones."""
    return frozenset(name_of(name) for name in ("localhost", *own, *added) if name)


def host_allowed(host: str | None, names: frozenset[str]) -> bool:
    if not host or ANY in names:
        return True
    name = name_of(host)
    if name in names:
        return True
    try:
        ipaddress.ip_address(name.partition("%")[0])  # an IP address (an IPv6 one with its zone)
    except ValueError:
        return False
    return True


def refusal_text(host: str, flag: str = "--http-allowed-host") -> str:
    """What the log and the answer say about a refused ``Host``."""
    return (f"refused a request for Host {host!r}, a name this service does not know as its own (a page on a name "
            f"that resolves here would be same-origin with it); {flag}={name_of(host)} serves it")
