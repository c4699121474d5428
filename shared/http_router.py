"""What the HTTP handlers of nsqd and lookupd see: the ``Request`` (its query decoded as Go's ``url.Values``), the
``Response`` (and its bytes, with Go's headers), and the ``Router`` that picks a handler as julienschmidt/httprouter
does in NSQ (405 with ``Allow``, ``OPTIONS``, redirects to the path with its trailing slash toggled or cleaned).
``http_server`` carries them over the wire.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from http import HTTPStatus
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import parse_qsl, unquote

from shared.http_conventions import (
    COMPACT_JSON,
    JSON_CONTENT_TYPE,
    error_body,
    fixed_path_candidates,
    redirect_body,
    redirect_status,
)

if TYPE_CHECKING:
    from shared.auth_reply import AuthState
    from shared.http_auth import Need

NSQ_V1 = (("X-Nsq-Content-Type", "nsq; version=1.0"),)


class Response:
    """What a handler answers. ``headers`` are written sorted, as Go writes a handler's headers; a non-empty body
    without a ``Content-Type`` among them gets Go's sniffed ``text/plain; charset=utf-8``."""

    __slots__ = ("status", "body", "headers", "_wire", "_wire_date")

    def __init__(self, body: bytes = b"", status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self._wire = b""
        self._wire_date = b""

    def wire(self, close: bool) -> bytes:
        """The response as bytes; a response answered many times (``OK``) is serialized once a second."""
        date = _date()
        if close:
            return serialize(self, date, close)
        if self._wire_date is not date:
            self._wire, self._wire_date = serialize(self, date, close), date
        return self._wire


def json_response(body: str, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """A V1 JSON document (NSQ's ``RespondV1``)."""
    return Response(body.encode(), status, (("Content-Type", JSON_CONTENT_TYPE), *NSQ_V1, *headers))


def json_document(document: object) -> Response:
    """``document`` as a V1 JSON answer."""
    return json_response(COMPACT_JSON.encode(document))


def error_response(status: int, code: str, extra: dict[str, object] | None = None,
                   headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return json_response(error_body(code, extra), status, headers)


class Request:
    """A complete request. ``body`` is None when it passed its route's limit (and was not read)."""

    __slots__ = ("method", "path", "raw_query", "headers", "body", "content_length", "from_browser", "host",
                 "authorization", "identity", "keep_alive", "route", "route_params", "_query")

    def __init__(self, method: str, url: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.method = method
        path, _, query = url.partition(b"?")
        # routes match the decoded path, as Go's req.URL.Path
        self.path = unquote(path.decode("latin-1")) if b"%" in path else path.decode("latin-1")
        self.raw_query = query.partition(b"#")[0].decode("latin-1")
        self.headers = headers
        self.body: bytes | None = b""
        self.content_length: int | None = None
        # it carries Sec-Fetch-Site or Origin: a browser sent it, maybe for another site's page
        self.from_browser = False
        self.host = b""  # its Host header
        self.authorization = b""  # its Authorization header
        # what the auth server granted its secret, with --http-auth-required (http_auth.py)
        self.identity: AuthState | None = None
        # False for the last request a connection answers
        self.keep_alive = True
        self.route: Route | None = None
        self.route_params: dict[str, str] = {}
        self._query: dict[str, str] | None = None

    @property
    def query(self) -> dict[str, str]:
        """The query string's parameters, the first value of each (as Go's ``url.Values.Get``)."""
        if self._query is None:
            self._query = parse_query(self.raw_query)
        return self._query


def parse_query(raw: str) -> dict[str, str]:
    if "%" in raw or "+" in raw:
        pairs = parse_qsl(raw, keep_blank_values=True)
    elif "&" not in raw:  # the most common case: one parameter (?topic=...)
        key, _, value = raw.partition("=")
        return {key: value} if key else {}
    else:
        pairs = [(key, value) for key, _, value in (pair.partition("=") for pair in raw.split("&") if pair)]
    query: dict[str, str] = {}
    for key, value in pairs:
        query.setdefault(key, value)
    return query


Handler = Callable[[Request], "Response | Awaitable[Response]"]


class Route(NamedTuple):
    handler: Handler
    # for a route that reads its body: the most it reads, asked at each request (options change at run time)
    body_limit: Callable[[], int] | None
    # as registered (``/config/:opt``)
    path: str
    # what a request's identity needs, with --http-auth-required
    need: Need


class Router:
    """Exact paths, plus paths with one trailing ``:name`` parameter (``/config/:opt``), as NSQ registers them."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Route]] = {}
        self._prefixed: dict[str, tuple[str, dict[str, Route]]] = {}

    def add(self, method: str, path: str, handler: Handler, need: Need,
            body_limit: Callable[[], int] | None = None) -> None:
        route = Route(handler, body_limit, path, need)
        prefix, colon, name = path.rpartition("/:")
        if colon:
            self._prefixed.setdefault(prefix + "/", (name, {}))[1][method] = route
        else:
            self._exact.setdefault(path, {})[method] = route

    def routes(self) -> list[tuple[str, str, Need]]:
        """Every route as (method, path, need), sorted: what the README's table of routes lists."""
        found = [(method, path, route.need) for path, routes in self._exact.items() for method, route in routes.items()]
        found += [(method, route.path, route.need) for _, routes in self._prefixed.values()
                  for method, route in routes.items()]
        return sorted(found)

    def methods(self, path: str) -> tuple[dict[str, Route], dict[str, str]]:
        """The routes registered for ``path`` by method, and the path's parameters."""
        routes = self._exact.get(path)
        if routes is not None:
            return routes, {}
        prefix, _, value = path.rpartition("/")
        parameterized = self._prefixed.get(prefix + "/")
        if parameterized is not None and value:
            return parameterized[1], {parameterized[0]: value}
        return {}, {}

    def match(self, request: Request) -> None:
        """Sets the request's route (None when no handler takes it) and its path's parameters."""
        routes, request.route_params = self.methods(request.path)
        request.route = routes.get(request.method)

    def resolve(self, request: Request) -> Response | Awaitable[Response]:
        """Runs the request's handler (``match`` found it), or answers as httprouter does when there is none."""
        if request.route is not None:
            return request.route.handler(request)
        routes = self.methods(request.path)[0]
        if routes:
            allow = ", ".join(sorted({*routes, "OPTIONS"}))
            if request.method == "OPTIONS":
                return Response(headers=(("Allow", allow),))
            return error_response(405, "METHOD_NOT_ALLOWED", headers=(("Allow", allow),))
        return self._redirect(request) or error_response(404, "NOT_FOUND")

    def _redirect(self, request: Request) -> Response | None:
        if request.method == "CONNECT" or request.path == "/":
            return None
        for candidate in fixed_path_candidates(request.path):
            if request.method in self.methods(candidate)[0]:
                location = f"{candidate}?{request.raw_query}" if request.raw_query else candidate
                if request.method == "GET":
                    return Response(redirect_body(location).encode(), 301,
                                    (("Content-Type", "text/html; charset=utf-8"), ("Location", location)))
                return Response(status=redirect_status(request.method), headers=(("Location", location),))
        return None


class _Date:
    """The ``Date`` header, formatted once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._value = b""

    def __call__(self) -> bytes:
        now = time.time()
        if int(now) != self._second:
            self._second = int(now)
            # RFC 7231's IMF-fixdate; Python never sets a locale of its own, so the names are English
            self._value = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)).encode()
        return self._value


_date = _Date()
_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode() for status in HTTPStatus}
_TEXT_SNIFFED = b"Content-Type: text/plain; charset=utf-8\r\n"


def serialize(response: Response, date: bytes, close: bool) -> bytes:
    head, typed = _head(response.status, response.headers)
    parts = [head]
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"Date: %s\r\nContent-Length: %d\r\n" % (date, len(response.body)))
    if response.body and not typed:
        parts.append(_TEXT_SNIFFED)
    parts.append(b"\r\n")
    parts.append(response.body)
    return b"".join(parts)


@lru_cache(maxsize=256)
def _head(status: int, headers: tuple[tuple[str, str], ...]) -> tuple[bytes, bool]:
    """The status line and the handler's headers, sorted, as bytes, and whether they name a Content-Type: made once
    for each shape (a JSON answer's headers are always the same), bounded for the few that carry a value of the
    request's (``Location``)."""
    parts = [_STATUS_LINES.get(status) or f"HTTP/1.1 {status} status code\r\n".encode()]
    typed = False
    for name, value in sorted(headers):
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
        typed = typed or name == "Content-Type"
    return b"".join(parts), typed
