"""nsqd's HTTP/1.1 server: httptools (llhttp, the parser aiohttp itself is built on) driven by an
``asyncio.Protocol``, with a router that answers as julienschmidt/httprouter does in NSQ.

It exists because nsqd's hot routes are tiny requests — ``POST /pub`` with one message — where a general framework's
per-request objects, middleware chain and task cost several times the work itself. What it does:

- keep-alive (HTTP/1.1 by default, ``Connection: keep-alive`` on 1.0) and pipelining: requests are answered in
  the order they arrived, an async handler holding the ones behind it (reading pauses meanwhile);
- bodies, chunked or not, buffered only for routes that read them and only up to the route's limit: a
  ``Content-Length`` over it, or a body that grows past it, is answered at once (the handler sees ``body=None``
  and gives NSQ's 413) and the connection closes, since the rest of the body is never read;
- ``Expect: 100-continue`` answered when the body is wanted;
- 404, 405 with ``Allow``, ``OPTIONS``, and httprouter's redirects to the path with its trailing slash toggled or
  cleaned; NSQ's ``{"message": CODE}`` errors; a handler that fails unexpectedly is a logged 500 ``INTERNAL_ERROR``;
- Go's response headers: the handler's in sorted order, then ``Date`` and ``Content-Length``; a body without a
  declared type is sniffed as Go does for text (``text/plain; charset=utf-8``, written last);
- malformed requests get Go's ``400 Bad Request`` and a close; request headers are held to 1 MiB (Go's
  ``DefaultMaxHeaderBytes``), answered with 431.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import NamedTuple, cast
from urllib.parse import parse_qsl, unquote

import httptools

from shared.http_conventions import (
    JSON_CONTENT_TYPE,
    HTTPError,
    error_body,
    fixed_path_candidates,
    redirect_body,
    redirect_status,
)

MAX_HEADER_BYTES = 1 << 20

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


def error_response(status: int, code: str, extra: dict[str, object] | None = None,
                   headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return json_response(error_body(code, extra), status, headers)


class Request:
    """A complete request. ``body`` is None when it passed its route's limit (and was not read)."""

    __slots__ = ("method", "path", "raw_query", "headers", "body", "content_length", "keep_alive", "route",
                 "route_params", "_query")

    def __init__(self, method: str, url: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.method = method
        path, _, query = url.partition(b"?")
        # routes match the decoded path, as Go's req.URL.Path
        self.path = unquote(path.decode("latin-1")) if b"%" in path else path.decode("latin-1")
        self.raw_query = query.partition(b"#")[0].decode("latin-1")
        self.headers = headers
        self.body: bytes | None = b""
        self.content_length: int | None = None
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


class Router:
    """Exact paths, plus paths with one trailing ``:name`` parameter (``/config/:opt``), as NSQ registers them."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Route]] = {}
        self._prefixed: dict[str, tuple[str, dict[str, Route]]] = {}

    def add(self, method: str, path: str, handler: Handler, body_limit: Callable[[], int] | None = None) -> None:
        prefix, colon, name = path.rpartition("/:")
        if colon:
            self._prefixed.setdefault(prefix + "/", (name, {}))[1][method] = Route(handler, body_limit)
        else:
            self._exact.setdefault(path, {})[method] = Route(handler, body_limit)

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
    parts = [_STATUS_LINES.get(response.status) or f"HTTP/1.1 {response.status} status code\r\n".encode()]
    sniff = bool(response.body)
    for name, value in sorted(response.headers):
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
        if name == "Content-Type":
            sniff = False
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"Date: %s\r\nContent-Length: %d\r\n" % (date, len(response.body)))
    if sniff:
        parts.append(_TEXT_SNIFFED)
    parts.append(b"\r\n")
    parts.append(response.body)
    return b"".join(parts)


_BAD_REQUEST = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
                b"400 Bad Request")
_HEADERS_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
                      b"Connection: close\r\n\r\n431 Request Header Fields Too Large")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# how long a closing connection drops what its client still sends (Go's rstAvoidanceDelay)
_LINGER = 0.5


class HTTPService:
    """What one listener serves: its router, and its open connections, so that stopping can close them (a
    keep-alive connection would otherwise outlive the server)."""

    def __init__(self, router: Router, log: logging.Logger,
                 guard: Callable[[Request], Response | None] | None = None) -> None:
        self.router = router
        self.log = log
        # answers every request itself when it returns a response (--tls-required on plain HTTP)
        self.guard = guard
        self.connections: set[HTTPConnection] = set()

    def __call__(self) -> HTTPConnection:
        """A protocol for ``loop.create_server``."""
        return HTTPConnection(self)

    def close_connections(self) -> None:
        for connection in list(self.connections):
            connection.close()


class HTTPConnection(asyncio.Protocol):
    """One client connection: parses requests, runs them through the router in order, writes the answers."""

    def __init__(self, service: HTTPService) -> None:
        self._service = service
        self._router = service.router
        self._log = service.log
        self._guard = service.guard
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._closing = False
        # requests complete but not yet answered because an async handler holds the line
        self._waiting: deque[Request] = deque()
        self._busy: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._next_request()

    # -- connection ------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._service.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._service.connections.discard(self)
        if self._busy is not None:
            self._busy.cancel()

    def close(self) -> None:
        if self._transport is not None:
            self._closing = True
            self._transport.close()

    def pause_writing(self) -> None:
        """A client that pipelines requests without reading the answers is not read from until it does."""
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        paused = self._writing_paused or self._busy is not None
        if paused != self._reading_paused and self._transport is not None and not self._closing:
            self._reading_paused = paused
            if paused:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._close_after_answers()  # the request itself was answered; nothing else is spoken here
        except httptools.HttpParserError:
            if not self._closing:
                self._abort_with(_HEADERS_TOO_LARGE if self._header_bytes > MAX_HEADER_BYTES else _BAD_REQUEST)

    def _abort_with(self, answer: bytes) -> None:
        assert self._transport is not None
        self._transport.write(answer)
        self._linger_and_close()

    def _linger_and_close(self) -> None:
        """Closes after the last answer. A client may still be sending (a body over the limit, or requests past
        a bad one): closing with its bytes unread would reset the connection and could destroy the answer before
        it is read, so, as Go's server does, the sending side is shut and what arrives is dropped for a moment
        first."""
        transport = self._transport
        assert transport is not None
        self._closing = True
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(_LINGER, transport.close)

    # -- parser callbacks (httptools calls them while feed_data runs) ------------------------------------------

    def _next_request(self) -> None:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._request: Request | None = None
        # the body's parts while a route reads it; None when it is parsed and dropped
        self._body: list[bytes] | None = None
        self._body_room = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise httptools.HttpParserError("request headers too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise httptools.HttpParserError("request headers too large")

    def on_headers_complete(self) -> None:
        request = self._request = Request(self._parser.get_method().decode("latin-1"), self._url, self._headers)
        self._router.match(request)
        route = request.route
        if route is None or route.body_limit is None or self._guard is not None:
            return
        continues = False
        for name, value in self._headers:
            if len(name) == 14 and name.lower() == b"content-length":
                request.content_length = int(value)  # the parser has checked it is a number
            elif len(name) == 6 and name.lower() == b"expect":
                continues = value.lower() == b"100-continue" and self._parser.get_http_version() == "1.1"
        self._body, self._body_room = [], route.body_limit()
        if request.content_length is not None and request.content_length > self._body_room:
            self._answer_early()
        elif continues:
            assert self._transport is not None
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self._body is not None:
            self._body_room -= len(body)
            if self._body_room < 0:
                self._answer_early()
            else:
                self._body.append(body)

    def on_message_complete(self) -> None:
        request = self._request
        if request is not None and not self._closing:
            if self._body:
                request.body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._dispatch(request, self._parser.should_keep_alive())
        self._next_request()

    def _answer_early(self) -> None:
        """The body passed the route's limit: answered now, without reading the rest, and the connection closes."""
        request = self._request
        assert request is not None
        request.body = None
        self._body = None
        self._request = None
        self._dispatch(request, keep_alive=False)

    # -- answering, in order ------------------------------------------------------------------------------

    def _dispatch(self, request: Request, keep_alive: bool) -> None:
        request.keep_alive = keep_alive
        if self._busy is not None or self._waiting:
            self._waiting.append(request)
        else:
            self._answer(request)

    def _answer(self, request: Request) -> None:
        result = self._run(request)
        if isinstance(result, Response):
            self._write(request, result)
        else:
            self._busy = asyncio.get_running_loop().create_task(self._answer_later(request, result))
            self._update_reading()

    def _run(self, request: Request) -> Response | Awaitable[Response]:
        try:
            if self._guard is not None:
                refused = self._guard(request)
                if refused is not None:
                    return refused
            return self._router.resolve(request)
        except HTTPError as error:
            return error_response(error.status, error.code, error.extra)
        except Exception:
            self._log.exception("panic in HTTP handler - %s %s", request.method, request.path)
            return error_response(500, "INTERNAL_ERROR")

    async def _answer_later(self, request: Request, pending: Awaitable[Response]) -> None:
        try:
            response = await pending
        except HTTPError as error:
            response = error_response(error.status, error.code, error.extra)
        except Exception:
            self._log.exception("panic in HTTP handler - %s %s", request.method, request.path)
            response = error_response(500, "INTERNAL_ERROR")
        self._busy = None
        self._write(request, response)
        while self._waiting and self._busy is None and not self._closing:
            self._answer(self._waiting.popleft())
        self._update_reading()

    def _write(self, request: Request, response: Response) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        wire = response.wire(close=not request.keep_alive)
        if request.method == "HEAD" and response.body:
            wire = wire[:-len(response.body)]  # the headers say what a GET would get; no body follows them
        transport.write(wire)
        if not request.keep_alive:
            self._close_after_answers()

    def _close_after_answers(self) -> None:
        if self._busy is None and not self._waiting and self._transport is not None:
            self._linger_and_close()
