"""Which nsqd mirror which: the live nodes, as etcd lists them under ``/nsq/nodes/``, and each origin's mirrors
chosen from them.

Every nsqd sees the same list, so the choice needs no agreement: an origin's mirrors are the ``count`` nodes that
follow it in the ring of live nodes ordered by name (with three nodes a, b and c at factor 3: a on b and c, b on c
and a, c on a and b), so the mirroring load spreads evenly and a node that goes moves each origin's choice as
little as possible.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from shared.etcd.client import Etcd
from shared.etcd.messages import EtcdError

from .membership import NODES, RETRY

log = logging.getLogger("nsqd")

Nodes = dict[str, dict[str, Any]]  # node name: what it registered


def choose_mirrors(origin: str, nodes: Nodes, count: int) -> dict[str, str]:
    """``count`` mirrors for ``origin`` (fewer when fewer nodes are live): node name -> replication address."""
    others = sorted(node for node, info in nodes.items() if node != origin and info.get("replication_address"))
    ring = [node for node in others if node > origin] + [node for node in others if node < origin]
    return {node: str(nodes[node]["replication_address"]) for node in ring[:count]}


class ClusterNodes:
    """The live nodes, kept current by a watch on ``/nsq/nodes/``; ``on_change(nodes)`` after every change."""

    def __init__(self, etcd: Etcd, on_change: Callable[[Nodes], None]) -> None:
        self.etcd = etcd
        self.nodes: Nodes = {}
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="etcd-nodes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})

    async def _follow(self) -> None:
        while True:
            try:
                found, revision = await self.etcd.get_prefix(NODES)
                self._changed({kv.key[len(NODES):]: _info(kv.value) for kv in found})
                async for _, events in self.etcd.watch(NODES, prefix=True, start_revision=revision + 1):
                    nodes = dict(self.nodes)
                    for event in events:
                        name = event.kv.key[len(NODES):]
                        if event.deleted:
                            nodes.pop(name, None)
                        else:
                            nodes[name] = _info(event.kv.value)
                    if events:
                        self._changed(nodes)
            except EtcdError as error:
                log.warning("ETCD: following %s: %s", NODES, error)
                await asyncio.sleep(RETRY)

    def _changed(self, nodes: Nodes) -> None:
        if nodes != self.nodes:
            self.nodes = nodes
            self._on_change(nodes)


def _info(value: bytes) -> dict[str, Any]:
    try:
        info = json.loads(value)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}
