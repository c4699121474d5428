"""Beyond NSQ: a warning in the log when another nsqd registered with this one's lookupds uses its ``--node-id``.

A message ID is a time, the node ID and a sequence (``guid``), so it is unique per topic on one nsqd only. NSQ's
default node ID comes from the host name: every nsqd on one host has the same one unless told otherwise, and two of
them publishing at once hand out equal IDs for distinct messages. A consumer that tells messages apart by ID alone
(a deduplicating archive, say) then takes them for one.

lookupd's registration carries no node ID (NSQ's protocol has none), but every nsqd, NSQ's own included, answers
``GET /config/id`` with it. So, as soon as a lookupd has identified this nsqd and every ``INTERVAL`` after that (for
an nsqd that starts later), ``NodeIdCheck`` lists the nodes the lookupds know (``/nodes``, on the HTTP address each
gave in IDENTIFY), asks each other nsqd for its node ID, and warns of each one that shares this one's (once while
it goes on sharing it). A node is asked once per registration (lookupd's ``remote_address`` for it changes when it
reconnects), so a cluster that does not change costs one ``/nodes`` per lookupd per interval. A node that does not
answer (its HTTP port unreachable from here) is asked again at the next check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from shared.cluster_info import ClusterInfo, ClusterInfoError, Json, gather_answers, http_address, tcp_address

log = logging.getLogger("nsqd")

INTERVAL = 60.0

# a node as the lookupds list it: its HTTP address and the address its lookupd connection came from
NodeKey = tuple[str, str]


class NodeIdCheck:
    def __init__(self, node_id: int, own_tcp_address: Callable[[], str], lookupds: Callable[[], list[str]],
                 cluster: ClusterInfo, interval: float = INTERVAL) -> None:
        """``own_tcp_address``: this nsqd as lookupd lists it (broadcast address and TCP port); ``lookupds``: the
        HTTP addresses of the lookupds that identified it; ``cluster``: their and the nodes' HTTP APIs."""
        self.node_id = node_id
        self._own_tcp_address = own_tcp_address
        self._lookupds = lookupds
        self._cluster = cluster
        self._interval = interval
        self._due = asyncio.Event()
        self._node_ids: dict[NodeKey, object] = {}  # each node listed by the last check -> the ID it answered
        self._sharing: set[str] = set()  # the HTTP addresses of those that answered this node ID
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="node-id-check")

    async def stop(self) -> None:
        """Ends the checks and closes ``cluster``."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
        await self._cluster.close()

    def due(self) -> None:
        """Check at once: a lookupd has just identified this nsqd."""
        self._due.set()

    async def _run(self) -> None:
        """Checks when due and every interval, warning of each node newly found to share the node ID."""
        while True:
            try:
                await asyncio.wait_for(self._due.wait(), self._interval)
            except TimeoutError:
                pass
            self._due.clear()
            for address in await self.check():
                log.warning("NODE_ID: the nsqd at %s (HTTP) also uses node ID %d, so the two hand out equal message "
                            "IDs, which a consumer telling messages apart by ID alone takes for one; give each nsqd "
                            "its own --node-id", address, self.node_id)

    async def check(self) -> list[str]:
        """The HTTP addresses of the nodes that use this node ID, less those the last check found already."""
        nodes = await self._listed_nodes()
        unasked = [key for key in nodes if key not in self._node_ids]
        answers = await gather_answers(self._cluster.config(key[0], "id") for key in unasked)
        self._node_ids = {key: node_id for key, node_id in self._node_ids.items() if key in nodes}
        for key, answer in zip(unasked, answers):
            if isinstance(answer, ClusterInfoError):
                log.debug("NODE_ID: cannot ask %s - %s", key[0], answer)
            else:
                self._node_ids[key] = answer
        sharing = {key[0] for key, node_id in self._node_ids.items() if node_id == self.node_id}
        new, self._sharing = sorted(sharing - self._sharing), sharing
        return new

    async def _listed_nodes(self) -> set[NodeKey]:
        """Every other nsqd the lookupds that answered list."""
        own = self._own_tcp_address()
        listings = await gather_answers(self._cluster.nodes(lookupd) for lookupd in self._lookupds())
        return {_key(producer) for listing in listings if not isinstance(listing, ClusterInfoError)
                for producer in listing if tcp_address(producer) != own}


def _key(producer: Json) -> NodeKey:
    return http_address(producer), str(producer.get("remote_address", ""))
