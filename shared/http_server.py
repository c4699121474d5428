"""The HTTP/1.1 server of nsqd and lookupd: httptools (llhttp, the parser aiohttp itself is built on) driven by an
``asyncio.Protocol``, answering through ``http_router``'s router as julienschmidt/httprouter does in NSQ.

It exists because both services' hot routes are tiny requests — nsqd's ``POST /pub`` with one message, lookupd's
``GET /lookup`` — where a general framework's per-request objects, middleware chain and task cost several times the
work itself. What it does:

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
  ``DefaultMaxHeaderBytes``), answered with 431;
- beyond NSQ, unless the service allows it (``--http-allow-cross-site``): a state-changing request a browser sent
  for another site's page is refused with 403 ``CROSS_SITE_REQUEST`` before its handler runs
  (``shared.cross_site`` decides; lookupd, which may sit behind a proxy, also counts ``X-Forwarded-Host`` among its
  own names), and answers to GET forbid framing. The headers that say so are noted in the one
  pass over the headers that reads ``Content-Length``, which keeps the check's cost on ``POST /pub`` from any other
  client to a comparison or two;
- with the service's ``auth`` (``--http-auth-required``), each routed request answers to the auth server after those
  checks and before its handler (``shared.http_auth``); the ``Authorization`` header is noted in the same pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import cast

import httptools

from nsqclient.protocol.names import go_quote
from shared.allowed_hosts import HOST_REFUSED_CODE, host_allowed, refusal_text
from shared.cross_site import CROSS_SITE_CODE, FRAME_DENY_HEADERS, cross_site_source, forwarded_hosts
from shared.http_conventions import HTTPError

from .auth_reply import certificate_common_name
from .http_auth import ConnectionGate, HTTPAuth, Peer
from .http_router import Request, Response, Router, error_response

MAX_HEADER_BYTES = 1 << 20

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
                 guard: Callable[[Request], Response | None] | None = None, allow_cross_site: bool = False,
                 observe: Callable[[Request, Response], None] | None = None,
                 trust_forwarded_host: bool = False, allowed_hosts: frozenset[str] | None = None,
                 auth: HTTPAuth | None = None) -> None:
        self.router = router
        self.log = log
        # answers every request itself when it returns a response (--tls-required on plain HTTP)
        self.guard = guard
        # NSQ's behaviour: other sites' pages may send requests and frame the answers
        self.allow_cross_site = allow_cross_site
        # sees every request the router or a refusal answered, with its answer (lookupd's counts for /metrics)
        self.observe = observe
        # the names a proxy put in X-Forwarded-Host are the server's own too, for the cross-site check
        self.trust_forwarded_host = trust_forwarded_host
        # the names a request's Host may give (allowed_hosts.py); None: any
        self.allowed_hosts = allowed_hosts
        # asks the auth server about each request's secret (--http-auth-required); None: NSQ's open API
        self.auth = auth
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
        self._checks_cross_site = not service.allow_cross_site
        self._allowed_hosts = service.allowed_hosts
        self._host_checked = b""  # the last Host found allowed: a keep-alive connection sends the same one
        self._observe = service.observe
        self._auth = service.auth
        self._gate: ConnectionGate | None = None  # this connection's side of the service's auth
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
        continues = self._read_headers(request)
        route = request.route
        if route is None or route.body_limit is None or self._guard is not None:
            return
        self._body, self._body_room = [], route.body_limit()
        if request.content_length is not None and request.content_length > self._body_room:
            self._answer_early()
        elif continues and self._parser.get_http_version() == "1.1":
            assert self._transport is not None
            self._transport.write(_CONTINUE)

    def _read_headers(self, request: Request) -> bool:
        """Notes the headers the server acts on, in one pass (this is on every request's path, so names are
        compared only when their length matches); returns whether the client expects ``100 Continue``."""
        continues = False
        for name, value in self._headers:
            if len(name) == 14:  # content-length, sec-fetch-site
                lowered = name.lower()
                if lowered == b"content-length":
                    request.content_length = int(value)  # the parser has checked it is a number
                elif lowered == b"sec-fetch-site":
                    request.from_browser = True
            elif len(name) == 4:
                if name.lower() == b"host":
                    request.host = value
            elif len(name) == 13:  # authorization, cache-control
                if name.lower() == b"authorization":
                    request.authorization = value
            elif len(name) == 6:  # expect, origin
                lowered = name.lower()
                if lowered == b"expect":
                    continues = value.lower() == b"100-continue"
                elif lowered == b"origin":
                    request.from_browser = True
        return continues

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
            if self._allowed_hosts is not None and request.host != self._host_checked:
                host = request.host.decode("latin-1")
                if not host_allowed(host, self._allowed_hosts):
                    self._log.warning("HTTP: %s %s: %s", request.method, go_quote(request.path), refusal_text(host))
                    return error_response(403, HOST_REFUSED_CODE)
                self._host_checked = request.host
            if request.from_browser and self._checks_cross_site:
                refused = _refuse_cross_site(request, self._log, self._service.trust_forwarded_host)
                if refused is not None:
                    return refused
            if self._auth is not None and request.route is not None:
                admitted = (self._gate or self._open_gate(self._auth)).admit(request)
                if admitted is not None:
                    return admitted if isinstance(admitted, Response) else self._resolve_once(request, admitted)
            return self._router.resolve(request)
        except HTTPError as error:
            return error_response(error.status, error.code, error.extra)
        except Exception:
            self._log.exception("panic in HTTP handler - %s %s", request.method, request.path)
            return error_response(500, "INTERNAL_ERROR")

    async def _resolve_once(self, request: Request, admitted: Awaitable[Response | None]) -> Response:
        refused = await admitted
        if refused is not None:
            return refused
        result = self._router.resolve(request)
        return result if isinstance(result, Response) else await result

    def _open_gate(self, auth: HTTPAuth) -> ConnectionGate:
        assert self._transport is not None
        peer = self._transport.get_extra_info("peername")
        tls = self._transport.get_extra_info("ssl_object")
        self._gate = auth.connection(Peer(peer[0] if isinstance(peer, tuple) else "", tls is not None,
                                          certificate_common_name(tls)))
        return self._gate

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
        if self._observe is not None:
            self._observe(request, response)
        if request.method == "GET" and self._checks_cross_site:
            # a new response: the handler's may be shared and its bytes cached
            response = Response(response.body, response.status, response.headers + FRAME_DENY_HEADERS)
        wire = response.wire(close=not request.keep_alive)
        if request.method == "HEAD" and response.body:
            wire = wire[:-len(response.body)]  # the headers say what a GET would get; no body follows them
        transport.write(wire)
        if not request.keep_alive:
            self._close_after_answers()

    def _close_after_answers(self) -> None:
        if self._busy is None and not self._waiting and self._transport is not None:
            self._linger_and_close()


def _refuse_cross_site(request: Request, log: logging.Logger, trust_forwarded_host: bool) -> Response | None:
    """NSQ's 403 for a state-changing request a browser sent for another site's page, None for any other."""
    headers = request.headers
    host = _header(headers, b"host")
    # nsqd is reached directly: no proxy names it otherwise
    hosts = (forwarded_hosts(host, _header(headers, b"x-forwarded-host")) if trust_forwarded_host
             else [host] if host else [])
    source = cross_site_source(request.method, _header(headers, b"sec-fetch-site"), _header(headers, b"origin"),
                               hosts)
    if source is None:
        return None
    log.warning("HTTP: refused %s %s from %s: a cross-site request (--http-allow-cross-site serves it)",
                request.method, go_quote(request.path), go_quote(source))
    return error_response(403, CROSS_SITE_CODE)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case)."""
    return next((value.decode("latin-1") for key, value in headers if key.lower() == name), None)
