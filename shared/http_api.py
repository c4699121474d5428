"""NSQ's HTTP conventions for aiohttp services: ``{"message": CODE}`` errors, the ``X-NSQ-Content-Type`` header,
httprouter's 404/405 answers and trailing-slash redirects.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from aiohttp import web

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
    """A V1 response with a plain-text body (``OK``, or nothing for actions)."""
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers=NSQ_CONTENT_TYPE)


@web.middleware
async def nsq_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HTTPError as error:
        return error_response(error.status, error.code, error.extra)
    except web.HTTPMethodNotAllowed as error:
        allow = ", ".join(sorted({*error.allowed_methods, "OPTIONS"}))
        return error_response(405, "METHOD_NOT_ALLOWED", headers={"Allow": allow})
    except web.HTTPNotFound:
        return error_response(404, "NOT_FOUND")


def parse_bool(value: str | None) -> bool | None:
    """NSQ's parseBool for query flags: true/1, false/0, anything else None."""
    return {"true": True, "1": True, "false": False, "0": False}.get(value or "")
