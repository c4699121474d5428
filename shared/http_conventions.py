"""NSQ's HTTP conventions, independent of any server: the ``{"message": CODE}`` error body, the
``X-NSQ-Content-Type`` header, the V1 ``Accept`` header its clients send, parseBool for query flags, and where
julienschmidt/httprouter (NSQ's router) redirects a path that matches no route. Both HTTP stacks build on these:
aiohttp (the admin, the tools) through ``shared.http_api``, and the server of nsqd and lookupd
(``shared.http_server``).
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

NSQ_CONTENT_TYPE = {"X-NSQ-Content-Type": "nsq; version=1.0"}
# what NSQ's HTTP clients accept: the V1 answer, bare JSON, even from nsqd and lookupd older than 1.0
ACCEPT_V1 = "application/vnd.nsq; version=1.0"
JSON_CONTENT_TYPE = "application/json; charset=utf-8"
# JSON as NSQ's APIs write it, without spaces; built once (json.dumps with arguments builds an encoder each call)
COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


class HTTPError(Exception):
    """An API error answered as ``{"message": code}`` with ``status``."""

    def __init__(self, status: int, code: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.extra = extra or {}


def error_body(code: str, extra: dict[str, Any] | None = None) -> str:
    return COMPACT_JSON.encode({"message": code, **(extra or {})})


def parse_bool(value: str | None) -> bool | None:
    """NSQ's parseBool for query flags: true/1, false/0, anything else None."""
    return {"true": True, "1": True, "false": False, "0": False}.get(value or "")


def fixed_path_candidates(path: str) -> list[str]:
    """httprouter's RedirectTrailingSlash and RedirectFixedPath (without its case folding): the paths to try, in
    order, for a path that matches no route; the first that matches a route for the same method is the redirect."""
    toggled = path[:-1] if path.endswith("/") else path + "/"
    cleaned = posixpath.normpath("/" + path.lstrip("/"))
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"  # httprouter's CleanPath keeps a trailing slash
    candidates = [toggled]
    if cleaned != path:
        candidates += [cleaned, cleaned[:-1] if cleaned.endswith("/") else cleaned + "/"]
    return [candidate for candidate in candidates if candidate]


def redirect_status(method: str) -> int:
    """httprouter: 301 for GET, 307 (method and body kept) otherwise."""
    return 301 if method == "GET" else 307


def redirect_body(location: str) -> str:
    """Go's http.Redirect: a short HTML body, for GET only."""
    import html  # rare: not worth loading at start

    return f'<a href="{html.escape(location)}">Moved Permanently</a>.\n\n'
