"""Discovery for the client: the TCP addresses of the nsqd that have a topic (lookupd's ``/lookup``) or that exist
(``/nodes``), asked with the standard library's HTTP client on threads of its own.

A lookupd that fails is logged and answers None, so a caller asking several goes on with the others; a topic a
lookupd does not know yet is no nsqd, not a failure. An nsqd is known by ``broadcast_address:tcp_port``, as every
NSQ client keys it. A lookupd's address is ``host:port`` or a URL (``http://`` or ``https://``); NSQ's V1 answers
are asked for, and the ``{"status_code", "data"}`` envelope of lookupds older than NSQ 1.0 is unwrapped. The
environment's proxy settings are not used (lookupds are the cluster's own), and ``timeout`` bounds a whole
request, the name's resolution included. A ``secret`` (the client's ``auth_secret``) goes with each request as
``Authorization: Bearer``, for a lookupd that asks for one (``--http-auth-required``: ``/nodes`` then needs it,
``/lookup`` never does).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

from .addresses import join_host_port
from .config import user_agent
from .errors import describe
from .protocol.names import go_quote

log = logging.getLogger("nsq.client")

_MAX_ANSWER = 64 * 1024 * 1024
_BODY_IN_ERRORS = 200
# urllib blocks: requests run here, not on the loop's default executor (which resolves names for connects too), so
# that lookupds that hang cannot hold up connecting to nsqd
_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nsq-lookupd")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


async def lookup_topic(address: str, topic: str, timeout: float, secret: str | None = None) -> list[str] | None:
    """TCP addresses of the nsqd that have ``topic``; [] when lookupd does not know it yet, None on failure."""
    url = http_url(address, "/lookup", {"topic": topic})
    try:
        return producer_addresses(await _ask(url, timeout, secret), url)
    except _NotFound:
        return []  # TOPIC_NOT_FOUND: nothing published yet, keep polling
    except _Failed as error:
        log.error("lookupd %s", error)
        return None


async def lookup_nodes(address: str, timeout: float, secret: str | None = None) -> list[str] | None:
    """TCP addresses of every nsqd registered with the lookupd; None on failure."""
    url = http_url(address, "/nodes")
    try:
        return producer_addresses(await _ask(url, timeout, secret), url)
    except _Failed as error:
        log.error("lookupd %s", error)
        return None


def http_url(address: str, path: str, query: dict[str, str] | None = None) -> str:
    """``path`` at ``address`` (``host:port``, or a URL as the tools accept for lookupds), with ``query``."""
    base = address if address.startswith(("http://", "https://")) else f"http://{address}"
    return base.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")


def producer_addresses(body: bytes, url: str) -> list[str]:
    """``broadcast_address:tcp_port`` of each producer a ``/lookup`` or ``/nodes`` answer lists."""
    try:
        document: Any = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise _Failed(f"GET {url}: invalid JSON - {describe(error)}") from None
    if isinstance(document, dict) and "status_code" in document and isinstance(document.get("data"), dict):
        document = document["data"]  # the envelope of NSQ before 1.0
    producers = document.get("producers") or [] if isinstance(document, dict) else None
    if not isinstance(producers, list) or not all(_is_producer(producer) for producer in producers):
        raise _Failed(f"GET {url}: producers are not objects with broadcast_address and tcp_port")
    return [join_host_port(producer["broadcast_address"], producer["tcp_port"]) for producer in producers]


def _is_producer(producer: Any) -> bool:
    return (isinstance(producer, dict) and isinstance(producer.get("broadcast_address"), str)
            and type(producer.get("tcp_port")) is int)


async def _ask(url: str, timeout: float, secret: str | None) -> bytes:
    try:
        return await asyncio.wait_for(
            asyncio.get_running_loop().run_in_executor(_THREADS, _get, url, timeout, secret), timeout)
    except TimeoutError:
        raise _Failed(f"GET {url}: timed out") from None


def _get(url: str, timeout: float, secret: str | None = None) -> bytes:
    headers = {"Accept": "application/vnd.nsq; version=1.0", "User-Agent": user_agent()}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            body = bytes(response.read(_MAX_ANSWER + 1))
    except urllib.error.HTTPError as error:
        with error:
            raise _refusal(url, error) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
        reason = "timed out" if isinstance(error, TimeoutError) else describe(error)
        raise _Failed(f"GET {url}: {reason}") from None
    if len(body) > _MAX_ANSWER:
        raise _Failed(f"GET {url}: an answer over {_MAX_ANSWER} bytes")
    return body


def _refusal(url: str, error: urllib.error.HTTPError) -> _Failed:
    try:
        text = error.read(_BODY_IN_ERRORS).decode("utf-8", "surrogateescape").strip()
    except (http.client.HTTPException, OSError):
        text = ""
    answer = f"GET {url}: got response {error.code} {error.reason} {go_quote(text)}"
    return _NotFound(answer) if error.code == 404 else _Failed(answer)


class _Failed(Exception):
    """A lookupd that did not answer as one does."""


class _NotFound(_Failed):
    """lookupd's 404: a topic it does not know."""
