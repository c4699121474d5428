"""What keeps a page on another site from acting through an operator's browser, and the admin's pages from being
framed, and the optional built-in login.

- Every response carries ``security_headers()``: a Content-Security-Policy that allows only the admin's own scripts,
  styles and requests and no framing, ``X-Frame-Options``, ``nosniff`` and a ``Referrer-Policy``.
- A state-changing request (anything but GET, HEAD and OPTIONS) is refused with 403 when the browser marks it as
  sent for another site (``shared.cross_site``; the admin's own names are the ``Host`` and any
  ``X-Forwarded-Host``, and ``--allowed-origin`` adds trusted origins), or when it comes from a browser without the
  page's session token; with 415 when ``/api`` is sent a body that is not ``application/json`` (what no form can
  send). Requests without browser marks, as scripts and tools send them, need neither.
- The session token: each browser gets a random one in an HttpOnly ``SameSite=Strict`` cookie when it loads a page;
  the page carries it too, and its script sends it back in ``X-NSQAdmin-Token``. A page elsewhere can neither read
  it nor send that header here.
- With ``--htpasswd-file`` every request but ``/ping`` needs a user of the file (HTTP Basic, ``login``).
"""

from __future__ import annotations

import hmac
import re
import secrets
from typing import Awaitable, Callable, NamedTuple

from aiohttp import web
from aiohttp.typedefs import Middleware

from shared.allowed_hosts import HOST_REFUSED_CODE, host_allowed, refusal_text
from shared.cross_site import CROSS_SITE_CODE, SAFE_METHODS
from shared.http_api import Handler, cross_site_source_of, error_response

from .app_state import USER_KEY, admin_of
from .login import REALM

SESSION_COOKIE = "nsqadmin_session"
TOKEN_HEADER = "X-NSQAdmin-Token"
_TOKEN_FORMAT = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)


class Refusal(NamedTuple):
    status: int
    message: str  # NSQ's CODE, then what to do about it


OnRefused = Callable[[web.Request, Refusal], Awaitable[None]]


def security_headers(image_origin: str = "") -> dict[str, str]:
    """The headers every response carries; ``image_origin`` (Graphite's, when the browser fetches its graphs
    there) may serve images too."""
    images = f"'self' data: {image_origin}".rstrip()
    return {
        "Content-Security-Policy": f"default-src 'none'; script-src 'self'; style-src 'self'; img-src {images}; "
                                   "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


def refusal_of(request: web.Request) -> Refusal | None:
    """Why a request must not be served (None: it may)."""
    if request.method in SAFE_METHODS:
        return None
    source = cross_site_source_of(request, admin_of(request).opts.allowed_origins)
    if source is not None:
        return Refusal(403, f"{CROSS_SITE_CODE}: refused a request sent from {source}; a page on another site "
                            "cannot act through the admin (--allowed-origin trusts an origin)")
    if _from_browser(request) and not _token_matches(request):
        return Refusal(403, "INVALID_TOKEN: the request lacks this browser's session token; reload the page")
    if request.body_exists and _is_api(request) and request.content_type != "application/json":
        return Refusal(415, "INVALID_CONTENT_TYPE: the admin's API takes application/json bodies")
    return None


def _from_browser(request: web.Request) -> bool:
    headers = request.headers
    return "Origin" in headers or "Sec-Fetch-Site" in headers or SESSION_COOKIE in request.cookies


def _token_matches(request: web.Request) -> bool:
    cookie, sent = request.cookies.get(SESSION_COOKIE, ""), request.headers.get(TOKEN_HEADER, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), sent.encode())


def _is_api(request: web.Request) -> bool:
    return request.path.startswith(admin_of(request).pages.url("/api/"))


def session_token(request: web.Request) -> tuple[str, bool]:
    """The browser's session token for a page, and whether it is new (``set_session_cookie`` then gives it)."""
    token = request.cookies.get(SESSION_COOKIE, "")
    return (token, False) if _TOKEN_FORMAT.fullmatch(token) else (secrets.token_urlsafe(32), True)


def set_session_cookie(request: web.Request, response: web.StreamResponse, token: str) -> None:
    secure = request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
    response.set_cookie(SESSION_COOKIE, token, path=admin_of(request).opts.base_path, httponly=True,
                        samesite="Strict", secure=secure or None)


def guard(on_refused: OnRefused) -> Middleware:
    """The middleware: the Host first, then the login, then the refusals above (``on_refused`` records them)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        admin = admin_of(request)
        host = request.headers.get("Host")
        if not host_allowed(host, admin.allowed_hosts):  # first: a rebound page learns nothing, not even of a login
            foreign = Refusal(403, f"{HOST_REFUSED_CODE}: {refusal_text(host or '')}")
            await on_refused(request, foreign)
            return error_response(foreign.status, foreign.message)
        if admin.login is not None and request.path != admin.pages.url("/ping"):
            user = await admin.login.authenticate(request.headers.get("Authorization"))
            if user is None:
                return error_response(401, "UNAUTHORIZED",
                                      headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})
            request[USER_KEY] = user
        refusal = refusal_of(request)
        if refusal is not None:
            await on_refused(request, refusal)
            return error_response(refusal.status, refusal.message)
        return await handler(request)

    return middleware


def adding_security_headers(headers: dict[str, str]) -> Callable[[web.Request, web.StreamResponse],
                                                                 Awaitable[None]]:
    """``on_response_prepare``: ``headers`` on every response, static files and errors included."""
    async def add(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(headers)
    return add
