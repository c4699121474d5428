"""Taking over a lost origin's messages: when an origin's node key goes from etcd (its lease ended: killed, paused,
cut off), one of its in-sync mirrors puts what the origin still had outstanding into its own topics and channels,
where the consumers connected to it receive them.

Every mirror of the origin, once etcd confirms the key is gone (its view of the nodes may lag), stops
acknowledging the origin's records (``MirrorStore.fenced``). Then each mirror
that ``/nsq/mirrors/<origin>`` names in sync, under the epoch of the copy it holds, tries to claim the origin:
a transaction on that key's revision that writes ``adopted_by``, so exactly one succeeds, and the origin, whose
own writes to the key compare its last revision, is fenced by it. The claimant puts the messages into its
queues (new IDs, their original timestamps, deferrals kept; recorded for its own mirrors as any publish is and
waited for), then writes ``adopted: true``. The others keep their copy until then, checking every ``CHECK``
seconds, and claim in the claimant's place if it is gone from the cluster before it is done.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from shared.etcd.messages import EtcdError, mod_revision_is, put

from ..topic import TopicError
from .in_sync import MIRRORS
from .mirror_store import MirrorStore
from .membership import NODES

if TYPE_CHECKING:
    from shared.etcd.client import Etcd

log = logging.getLogger("nsqd")

CHECK = 1.0


async def taken_over(etcd: Etcd, node: str) -> None:
    """Returns once what ``node`` acknowledged under its last epoch has been taken over, or once no mirror that
    could take it over is left: before ``node`` registers again, which would end its mirrors' copies of that epoch.

    A mirror could if the origin's record names it in sync and it has been registered since before the record was
    last written (a mirror registered since has started afresh, its copies gone with its process)."""
    waited = False
    while True:
        current = await etcd.get(MIRRORS + node)
        record: dict[str, Any] = json.loads(current.value) if current is not None else {}
        if current is None or record.get("adopted") or not record.get("in_sync"):
            return
        registered, _ = await etcd.get_prefix(NODES)
        able = [kv.key[len(NODES):] for kv in registered
                if kv.key[len(NODES):] in record["in_sync"] and kv.mod_revision < current.mod_revision]
        if not able:
            if waited:
                log.warning("REPLICATION: no mirror of %s is left to take over epoch %d", node, record["epoch"])
            return
        if not waited:
            log.info("REPLICATION: waiting for %s to take over epoch %d of this nsqd", " or ".join(able),
                     record.get("epoch", 0))
            waited = True
        await asyncio.sleep(CHECK / 4)


class Adoption:
    def __init__(self, etcd: Etcd, node: str, stores: dict[str, MirrorStore],
                 adopt: Callable[[MirrorStore], Awaitable[int]]) -> None:
        self.etcd = etcd
        self.node = node
        self._stores = stores
        self._adopt = adopt
        self._lost: dict[str, asyncio.Task[None]] = {}
        self.adopted = 0  # origins taken over
        self.adopted_messages = 0

    def nodes_changed(self, nodes: dict[str, Any]) -> None:
        for origin, store in list(self._stores.items()):
            if origin not in nodes and origin not in self._lost:
                self._lost[origin] = asyncio.create_task(self._take_over(origin, store), name=f"adopt-{origin}")

    async def stop(self) -> None:
        for task in list(self._lost.values()):
            task.cancel()
            await asyncio.wait({task})

    async def _take_over(self, origin: str, store: MirrorStore) -> None:
        try:
            await self._take_over_once_gone(origin, store)
        finally:
            del self._lost[origin]

    async def _take_over_once_gone(self, origin: str, store: MirrorStore) -> None:
        try:
            if await self.etcd.get(NODES + origin) is not None:  # a view of the nodes that was behind
                return
        except EtcdError as error:
            log.warning("REPLICATION: is %s gone? %s", origin, error)
        store.fenced = True
        log.warning("REPLICATION: %s is gone (epoch %d): no more of its records are taken", origin, store.epoch)
        key = MIRRORS + origin
        while self._stores.get(origin) is store:
            try:
                if await self._settled(key, store):
                    break
            except (EtcdError, TopicError) as error:  # tried again, the copy kept meanwhile
                log.warning("REPLICATION: taking over %s: %s", origin, error)
            await asyncio.sleep(CHECK)
        if self._stores.get(origin) is store:
            del self._stores[origin]
        store.close()  # fenced, so this is its last user

    async def _settled(self, key: str, store: MirrorStore) -> bool:
        """One look at the origin's record: True once this mirror's copy is no longer needed."""
        current = await self.etcd.get(key)
        record: dict[str, Any] = json.loads(current.value) if current is not None else {}
        if current is None or record.get("epoch") != store.epoch:
            return True  # never recorded, or the origin registered again: this copy was not promised anything
        if record.get("adopted"):
            return True
        claimant = record.get("adopted_by")
        claimed = {**record, "adopted_by": self.node}
        if claimant == self.node:  # an earlier attempt of this nsqd's failed half-way: again (duplicates, no loss)
            revision = current.mod_revision
        elif claimant and await self.etcd.get(NODES + claimant) is not None:
            return False  # someone alive is at it
        elif self.node not in record.get("in_sync", []):
            return False  # not a copy that may take over: wait for one that may
        else:
            won, responses = await self.etcd.transaction([mod_revision_is(key, current.mod_revision)],
                                                         [put(key, json.dumps(claimed).encode())])
            if not won:
                return False
            revision = int(responses[0]["response_put"]["header"]["revision"])
        count = await self._adopt(store)
        self.adopted += 1
        self.adopted_messages += count
        log.info("REPLICATION: adopted %d messages of %s (epoch %d)", count, store.origin, store.epoch)
        await self.etcd.transaction([mod_revision_is(key, revision)],
                                    [put(key, json.dumps({**claimed, "adopted": True}).encode())])
        return True
