"""NSQ's HTTP conventions for aiohttp services: ``{"message": CODE}`` errors, the ``X-NSQ-Content-Type`` header,
and what julienschmidt/httprouter (NSQ's router) answers on its own: 404, 405 with ``Allow``, ``OPTIONS``, and
redirects to the path with or without its trailing slash (or cleaned of ``//``, ``.``, ``..``).

Register routes with ``allow_head=False``: httprouter has no implicit HEAD, so ``HEAD /ping`` is a 405 in NSQ.
"""

from __future__ import annotations

import html
import json
import logging
import posixpath
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

NSQ_CONTENT_TYPE = {"X-NSQ-Content-Type": "nsq; version=1.0"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HTTPError(Exception):
    """An API error answered as ``{"message": code}`` with ``status``."""

    def __init__(self, status: int, code: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.extra = extra or {}


def error_response(status: int, code: str, extra: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps({"message": code, **(extra or {})}, separators=(",", ":"))
    return web.Response(status=status, text=body, content_type="application/json", charset="utf-8",
                        headers={**NSQ_CONTENT_TYPE, **(headers or {})})


def json_response(data: Any) -> web.Response:
    return web.Response(text=json.dumps(data, separators=(",", ":")), content_type="application/json",
                        charset="utf-8", headers=NSQ_CONTENT_TYPE)


def text_response(text: str) -> web.Response:
    """A V1 response with a plain-text body (``OK``)."""
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers=NSQ_CONTENT_TYPE)


def empty_response() -> web.Response:
    """A V1 200 without a body, as NSQ's actions answer: Go sets no Content-Type on an empty body."""
    return web.Response(headers=NSQ_CONTENT_TYPE)


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
    for candidate in _fixed_path_candidates(path):
        target = request.rel_url.with_path(candidate)  # with_path drops the query
        match = await request.app.router.resolve(request.clone(rel_url=target))
        if match.http_exception is None:
            return _redirect(request.method, f"{target}?{query}" if query else str(target))
    return await handler(request)


def _fixed_path_candidates(path: str) -> list[str]:
    toggled = path[:-1] if path.endswith("/") else path + "/"
    cleaned = posixpath.normpath("/" + path.lstrip("/"))
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"  # httprouter's CleanPath keeps a trailing slash
    candidates = [toggled]
    if cleaned != path:
        candidates += [cleaned, cleaned[:-1] if cleaned.endswith("/") else cleaned + "/"]
    return [candidate for candidate in candidates if candidate]


def _redirect(method: str, location: str) -> web.Response:
    # Go's http.Redirect: a short HTML body for GET only
    if method == "GET":
        return web.Response(status=301, headers={"Location": location}, content_type="text/html", charset="utf-8",
                            text=f'<a href="{html.escape(location)}">Moved Permanently</a>.\n\n')
    return web.Response(status=307, headers={"Location": location})


def parse_bool(value: str | None) -> bool | None:
    """NSQ's parseBool for query flags: true/1, false/0, anything else None."""
    return {"true": True, "1": True, "false": False, "0": False}.get(value or "")
