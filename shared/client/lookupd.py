"""Discovery for the client library: the TCP addresses of the nsqd that have a topic (``/lookup``) or that exist
(``/nodes``), read through ``shared.cluster_info`` on the caller's session.

A lookupd that fails is logged and answers None, so a caller asking several goes on with the others; a topic a
lookupd does not know yet is no nsqd, not a failure. An nsqd is known by ``broadcast_address:tcp_port``, as every
NSQ client keys it.
"""

from __future__ import annotations

import logging

from aiohttp import ClientSession

from shared.cluster_info import ClusterInfo, ClusterInfoError, tcp_address

log = logging.getLogger("nsq.client")


async def lookup_topic(session: ClientSession, address: str, topic: str) -> list[str] | None:
    """TCP addresses of the nsqd that have ``topic``; [] when lookupd does not know it yet, None on failure."""
    try:
        producers = await ClusterInfo(session).producers(address, topic)
    except ClusterInfoError as error:
        if error.status == 404:  # TOPIC_NOT_FOUND: nothing published yet, keep polling
            return []
        log.error("lookupd %s", error)
        return None
    return [tcp_address(producer) for producer in producers]


async def lookup_nodes(session: ClientSession, address: str) -> list[str] | None:
    """TCP addresses of every nsqd registered with the lookupd; None on failure."""
    try:
        producers = await ClusterInfo(session).nodes(address)
    except ClusterInfoError as error:
        log.error("lookupd %s", error)
        return None
    return [tcp_address(producer) for producer in producers]
