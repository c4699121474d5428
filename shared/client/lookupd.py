"""Discovery through nsqlookupd's HTTP API: which nsqd have a topic (``/lookup``), which nsqd exist (``/nodes``).

Addresses are given as NSQ's tools take them, ``host:port`` (``http://`` or ``https://`` in front is accepted
too). Both answer shapes are read: NSQ 1.x's bare object and the ``{"status_code", "data"}`` envelope of older
lookupds. An nsqd is known by ``broadcast_address:tcp_port``, as every NSQ client keys it.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from aiohttp import ClientError, ClientSession

from shared.addresses import join_host_port
from shared.log_format import describe

log = logging.getLogger("nsq.client")

# asks an old lookupd for the same bare JSON NSQ 1.x always answers with
_ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}


def lookupd_url(address: str, path: str) -> str:
    base = address if address.startswith(("http://", "https://")) else f"http://{address}"
    return base.rstrip("/") + path


def producer_addresses(answer: dict[str, Any], port_key: str = "tcp_port") -> list[str]:
    """``broadcast_address:<port>`` of every producer in a ``/lookup`` or ``/nodes`` answer."""
    data = answer.get("data", answer) if "status_code" in answer else answer
    return [join_host_port(producer["broadcast_address"], int(producer[port_key]))
            for producer in data.get("producers") or []]


async def lookup_topic(session: ClientSession, address: str, topic: str) -> list[str] | None:
    """TCP addresses of the nsqd that have ``topic``; [] when lookupd does not know it yet, None on failure."""
    return await _producers(session, lookupd_url(address, f"/lookup?topic={quote(topic)}"), "tcp_port")


async def lookup_nodes(session: ClientSession, address: str, port_key: str = "tcp_port") -> list[str] | None:
    """Addresses (``tcp_port`` or ``http_port``) of every nsqd registered with the lookupd; None on failure."""
    return await _producers(session, lookupd_url(address, "/nodes"), port_key)


async def _producers(session: ClientSession, url: str, port_key: str) -> list[str] | None:
    try:
        async with session.get(url, headers=_ACCEPT) as response:
            text = await response.text()
            if response.status == 404:  # TOPIC_NOT_FOUND: nothing published yet, keep polling
                return []
            if response.status != 200:
                log.error("lookupd %s answered %d %s", url, response.status, text.strip())
                return None
            return producer_addresses(json.loads(text), port_key)
    except (ClientError, OSError, TimeoutError, ValueError, KeyError, TypeError) as error:
        log.error("lookupd %s: %s", url, describe(error))
        return None
