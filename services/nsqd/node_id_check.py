"""Beyond NSQ: a warning in the log when another nsqd registered with this one's lookupds uses its ``--node-id``.

A message ID is a time, the node ID and a sequence (``guid``), so it is unique per topic on one nsqd only. NSQ's
default node ID comes from the host name: every nsqd on one host has the same one unless told otherwise, and two of
them publishing at once hand out equal IDs for distinct messages. A consumer that tells messages apart by ID alone
(a deduplicating archive, say) then takes them for one.

lookupd's registration carries no node ID (NSQ's protocol has none), but nsqd, NSQ's own included, answers
``GET /config/id`` with it. So, as soon as a lookupd has identified this nsqd and about every ``INTERVAL`` after
that (for an nsqd that starts later), ``NodeIdCheck`` lists the nodes the lookupds know (``/nodes``, on the HTTP
address each gave in IDENTIFY), asks each other nsqd for its node ID, and warns of each one that shares this one's
(once while it goes on sharing it).

A node is asked once per registration (lookupd's ``remote_address`` for it changes when it reconnects), so a cluster
that does not change costs one ``/nodes`` per lookupd per interval; the interval is jittered so that nsqd started
together do not all ask at once. A lookupd that does not answer changes nothing: what it listed is kept until it
answers again. A node that does not answer is asked again at the next check; one that refuses (a 4xx: plain HTTP on
an nsqd with ``--tls-required``, an nsqd without ``/config``) is left unchecked, said once in the log.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from contextlib import suppress

from shared.cluster_info import ClusterInfo, ClusterInfoError, Json, gather_answers, http_address, tcp_address

log = logging.getLogger("nsqd")

INTERVAL = 60.0
JITTER = 0.3  # each wait is the interval plus up to this much of it

# a node as one lookupd lists it: (the lookupd, the node's HTTP address, the address its registration came from)
NodeKey = tuple[str, str, str]
UNKNOWN = object()  # the node ID of a node that refused to say


class NodeIdCheck:
    def __init__(self, node_id: int, own_tcp_address: Callable[[], str], lookupds: Callable[[], list[str]],
                 cluster: ClusterInfo, interval: float = INTERVAL) -> None:
        """``own_tcp_address``: this nsqd as lookupd lists it (broadcast address and TCP port); ``lookupds``: the
        HTTP addresses of the lookupds that identified it; ``cluster``: their and the nodes' HTTP APIs, closed by
        ``stop()``."""
        self.node_id = node_id
        self._own_tcp_address = own_tcp_address
        self._lookupds = lookupds
        self._cluster = cluster
        self._interval = interval
        self._due = asyncio.Event()
        self._node_ids: dict[NodeKey, object] = {}  # each node listed -> the ID it answered, or UNKNOWN
        self._sharing: set[str] = set()  # the HTTP addresses of those that answered this node ID
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="node-id-check")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
        await self._cluster.close()

    def due(self) -> None:
        """Check at once: a lookupd has just identified this nsqd."""
        self._due.set()

    async def _run(self) -> None:
        while True:
            with suppress(TimeoutError):
                async with asyncio.timeout(self._interval * (1 + JITTER * random.random())):
                    await self._due.wait()
            self._due.clear()
            try:
                sharing = await self.check()
            except Exception:  # a fault here must neither end the checks for good nor go unseen
                log.exception("NODE_ID: the check failed")
                continue
            for address in sharing:
                log.warning("NODE_ID: the nsqd at %s (HTTP) also uses node ID %d, so the two hand out equal message "
                            "IDs, which a consumer telling messages apart by ID alone takes for one; give each nsqd "
                            "its own --node-id", address, self.node_id)

    async def check(self) -> list[str]:
        """The HTTP addresses of the nodes that use this node ID, less those the last check found already."""
        listings = await self._listings()
        listed = {(lookupd, *node) for lookupd, nodes in listings.items() for node in nodes}
        # forget what a lookupd that answered no longer lists; keep what one that did not answer listed
        self._node_ids = {key: node_id for key, node_id in self._node_ids.items()
                          if key in listed or key[0] not in listings}
        answers = await self._ask(sorted({key[1] for key in listed if key not in self._node_ids}))
        for key in listed - self._node_ids.keys():
            if answers[key[1]] is not None:
                self._node_ids[key] = answers[key[1]]
        sharing = {key[1] for key, node_id in self._node_ids.items() if node_id == self.node_id}
        new, self._sharing = sorted(sharing - self._sharing), sharing
        return new

    async def _ask(self, nodes: list[str]) -> dict[str, object]:
        """Each node's ID; UNKNOWN for one that refused to say, None for one to ask again later."""
        answers: dict[str, object] = {}
        for node, answer in zip(nodes, await gather_answers(self._cluster.config(node, "id") for node in nodes)):
            if not isinstance(answer, ClusterInfoError):
                answers[node] = answer
            elif answer.status is not None and 400 <= answer.status < 500:
                log.info("NODE_ID: cannot learn the node ID of the nsqd at %s - %s", node, answer)
                answers[node] = UNKNOWN
            else:
                log.debug("NODE_ID: cannot ask %s now - %s", node, answer)
                answers[node] = None
        return answers

    async def _listings(self) -> dict[str, set[tuple[str, str]]]:
        """Each lookupd that answered -> the other nsqd it lists, as (HTTP address, registration address)."""
        own, lookupds = self._own_tcp_address(), self._lookupds()
        answers = await gather_answers(self._cluster.nodes(lookupd) for lookupd in lookupds)
        return {lookupd: {_node(producer) for producer in answer if tcp_address(producer) != own}
                for lookupd, answer in zip(lookupds, answers) if not isinstance(answer, ClusterInfoError)}


def _node(producer: Json) -> tuple[str, str]:
    return http_address(producer), str(producer.get("remote_address", ""))
