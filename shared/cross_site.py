"""Which state-changing HTTP requests a browser sent on behalf of another site, independent of any server.

Browsers say where a request comes from: ``Sec-Fetch-Site`` (every current browser) and ``Origin`` (on every
cross-origin request, a plain form and ``fetch(..., {mode: "no-cors"})`` included). A page on any site can make an
operator's browser send a POST to a broker or admin on the operator's network; such a request carries those marks,
and is refused unless its origin is trusted. A request without them did not come from a web page (NSQ's clients,
curl, the admin's own fan-out) or came from an older browser on the same origin, and is let through, so nothing
NSQ's clients and tools send changes.

The same check is made, with the same rules, by nsqd (its own HTTP server), lookupd and the admin (aiohttp).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from urllib.parse import urlsplit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# on the pages of the services that have none worth framing (nsqd, lookupd): a frame of them shows nothing
FRAME_DENY_HEADERS = (("Content-Security-Policy", "frame-ancestors 'none'"), ("X-Frame-Options", "DENY"))

CROSS_SITE_CODE = "CROSS_SITE_REQUEST"

# the help of nsqd's and lookupd's --http-allow-cross-site
ALLOW_CROSS_SITE_HELP = ("serve the state-changing HTTP requests (POST, PUT) a browser sends for another site's page, "
                         "and let other sites frame these pages, as NSQ does (otherwise: 403 CROSS_SITE_REQUEST, no "
                         "framing)")


def cross_site_source(method: str, fetch_site: str | None, origin: str | None, hosts: Iterable[str],
                      trusted_origins: Collection[str] = ()) -> str | None:
    """None when the request may be served; otherwise where it came from (its ``Origin``, or the browser's
    ``Sec-Fetch-Site`` when it sent no origin) for the refusal to name.

    ``hosts`` are the names the server is reached by (the ``Host`` header, and ``X-Forwarded-Host`` behind a
    proxy); ``trusted_origins`` (normalized with ``normalize_origin``) are let in from anywhere.
    """
    if method in SAFE_METHODS:
        return None
    if origin is not None and normalize_origin(origin, strict=False) in trusted_origins:
        return None
    if fetch_site is not None:
        # "none": typed or bookmarked by the user, never a page's doing
        return None if fetch_site in ("same-origin", "none") else origin or fetch_site
    if origin is None:
        return None
    netloc = urlsplit(origin).netloc.lower() if "://" in origin else ""
    return None if netloc and netloc in (host.strip().lower() for host in hosts) else origin


def normalize_origin(text: str, strict: bool = True) -> str:
    """``HTTPS://Admin.Example.com/`` -> ``https://admin.example.com``, as browsers send an ``Origin``. With
    ``strict``, anything but ``scheme://host[:port]`` is a ValueError (a flag's value)."""
    parts = urlsplit(text.strip().rstrip("/"))
    if strict and (parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query
                   or "@" in parts.netloc):
        raise ValueError(f"{text!r} is not an origin (scheme://host[:port])")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}" if parts.netloc else text


def forwarded_hosts(host: str | None, forwarded_host: str | None) -> list[str]:
    """The names a request reached the server by: its ``Host``, and each ``X-Forwarded-Host`` a proxy added (a
    browser cannot add that header to a request for another site)."""
    hosts = [host] if host else []
    if forwarded_host:
        hosts += [name.strip() for name in forwarded_host.split(",")]
    return hosts
