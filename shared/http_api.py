"""NSQ's HTTP conventions for aiohttp services: ``{"message": CODE}`` errors, the ``X-NSQ-Content-Type`` header,
and what julienschmidt/httprouter (NSQ's router) answers on its own: 404, 405 with ``Allow``, ``OPTIONS``, and
redirects to the path with or without its trailing slash (or cleaned of ``//``, ``.``, ``..``).

Register routes with ``allow_head=False``: httprouter has no implicit HEAD, so ``HEAD /ping`` is a 405 in NSQ.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from .cross_site import cross_site_source, forwarded_hosts
from .http_conventions import (
    NSQ_CONTENT_TYPE,
    HTTPError,
    error_body,
    fixed_path_candidates,
    parse_bool,
    redirect_body,
    redirect_status,
)

__all__ = ["NSQ_CONTENT_TYPE", "HTTPError", "Handler", "cross_site_source_of", "empty_response", "error_response", "json_response",
           "nsq_errors", "parse_bool", "redirect_fixed_paths", "text_response"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, code: str, extra: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=error_body(code, extra), content_type="application/json",
                        charset="utf-8", headers={**NSQ_CONTENT_TYPE, **(headers or {})})


def json_response(data: Any) -> web.Response:
    return web.Response(text=json.dumps(data, separators=(",", ":")), content_type="application/json",
                        charset="utf-8", headers=NSQ_CONTENT_TYPE)


def text_response(text: str) -> web.Response:
    """A V1 response with a plain-text body (``OK``)."""
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers=NSQ_CONTENT_TYPE)


def empty_response() -> web.Response:
    """A V1 200 without a body, as NSQ's actions answer: Go sets no Content-Type on an empty body."""
    return web.Response(headers=NSQ_CONTENT_TYPE)


def cross_site_source_of(request: web.Request, trusted_origins: Collection[str] = ()) -> str | None:
    """``shared.cross_site``'s verdict on an aiohttp request: None, or where a browser sent it from for another
    site. The server's own names are its ``Host`` and what a proxy put in ``X-Forwarded-Host``."""
    headers = request.headers
    return cross_site_source(request.method, headers.get("Sec-Fetch-Site"), headers.get("Origin"),
                             forwarded_hosts(headers.get("Host"), headers.get("X-Forwarded-Host")),
                             trusted_origins)


def nsq_errors(log: logging.Logger) -> Middleware:
    """Renders HTTPError and the router's 404/405 as NSQ does; anything unexpected is a logged 500
    ``INTERNAL_ERROR`` (httprouter's PanicHandler in NSQ)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except HTTPError as error:
            return error_response(error.status, error.code, error.extra)
        except web.HTTPMethodNotAllowed as error:
            allow = ", ".join(sorted({*error.allowed_methods, "OPTIONS"}))
            if request.method == "OPTIONS":
                return web.Response(headers={"Allow": allow})
            return error_response(405, "METHOD_NOT_ALLOWED", headers={"Allow": allow})
        except web.HTTPNotFound:
            return error_response(404, "NOT_FOUND")
        except web.HTTPException:
            raise
        except Exception:
            log.exception("panic in HTTP handler - %s %s", request.method, request.path_qs)
            return error_response(500, "INTERNAL_ERROR")

    return middleware


@web.middleware
async def redirect_fixed_paths(request: web.Request, handler: Handler) -> web.StreamResponse:
    """httprouter's RedirectTrailingSlash and RedirectFixedPath (without its case folding): a path that matches
    no route but would with its trailing slash toggled, or once cleaned, is redirected there, 301 for GET and
    307 otherwise, keeping the query. The candidate must match a route for the same method."""
    path = request.rel_url.path
    if request.match_info.http_exception is None or request.method == "CONNECT" or path == "/":
        return await handler(request)
    query = request.rel_url.raw_query_string
    for candidate in fixed_path_candidates(path):
        target = request.rel_url.with_path(candidate)  # with_path drops the query
        match = await request.app.router.resolve(request.clone(rel_url=target))
        if match.http_exception is None:
            return _redirect(request.method, f"{target}?{query}" if query else str(target))
    return await handler(request)


def _redirect(method: str, location: str) -> web.Response:
    if method == "GET":
        return web.Response(status=301, headers={"Location": location}, content_type="text/html", charset="utf-8",
                            text=redirect_body(location))
    return web.Response(status=redirect_status(method), headers={"Location": location})
