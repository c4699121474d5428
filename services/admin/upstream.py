"""Talking to the cluster's lookupds and nsqds over HTTP, the way nsqadmin does: requests to many hosts at once, and
their failures collected rather than raised, so one dead node degrades a page instead of breaking it.

A call over several hosts fails outright (``UpstreamError``, nsqadmin's 502 ``UPSTREAM_ERROR``) only when every host
failed; otherwise the failures are added to ``Warnings`` and end up in the answer's ``message``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Iterable, TypeVar
from urllib.parse import urlencode

import aiohttp

T = TypeVar("T")

# NSQ's V1 negotiation: lookupds and nsqds answer bare JSON to it, whatever their version
_HEADERS = {"Accept": "application/vnd.nsq; version=1.0"}


class UpstreamError(Exception):
    """Every host asked failed; the text lists why."""


class Warnings(list[str]):
    """Failures that did not stop an answer; nsqadmin shows them as ``WARNING: ...``."""

    def message(self) -> str:
        return "WARNING: " + "; ".join(self) if self else ""


def url(address: str, path: str, **query: str) -> str:
    base = address if address.startswith(("http://", "https://")) else f"http://{address}"
    return base.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")


class Upstream:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def get_json(self, address: str, path: str, **query: str) -> Any:
        """The decoded answer; any failure (refused, timeout, non-200, not JSON) is an UpstreamError."""
        target = url(address, path, **query)
        try:
            async with self._session.get(target, headers=_HEADERS) as response:
                body = await response.text()
                if response.status != 200:
                    raise UpstreamError(f"GET {target}: {response.status} {body.strip()[:200]}")
                return json.loads(body)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            raise UpstreamError(f"GET {target}: {_reason(error)}") from None

    async def post(self, address: str, path: str, **query: str) -> None:
        target = url(address, path, **query)
        try:
            async with self._session.post(target, headers=_HEADERS) as response:
                body = await response.text()
                if response.status != 200:
                    raise UpstreamError(f"POST {target}: {response.status} {body.strip()[:200]}")
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise UpstreamError(f"POST {target}: {_reason(error)}") from None

    async def each(self, calls: Iterable[Awaitable[T]], warnings: Warnings) -> list[T]:
        """The results of the calls that succeeded, in order; the failures go to ``warnings``. Raises
        UpstreamError when there were calls and all of them failed."""
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        results = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
        failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        for failure in failures:
            if not isinstance(failure, UpstreamError):
                raise failure
        if failures and not results:
            raise UpstreamError("; ".join(str(failure) for failure in failures))
        warnings.extend(str(failure) for failure in failures)
        return results


def _reason(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return str(error) or type(error).__name__
