"""An origin's in-sync set as etcd holds it: ``/nsq/mirrors/<origin>`` = ``{"epoch": ..., "in_sync": [...]}``, the
mirrors that hold everything the origin acknowledged under that epoch. Only they may adopt its messages, so a
mirror leaves the set here before the origin acknowledges anything without it.

Each write is a transaction on the revision of the origin's own last write: if anyone else wrote the key since
(a mirror that adopted the origin's messages records that there), the write fails with ``Fenced`` and the origin
must acknowledge nothing more under that epoch.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from shared.etcd.messages import mod_revision_is, put

if TYPE_CHECKING:
    from shared.etcd.client import Etcd  # aiohttp's: loaded only once replication starts

MIRRORS = "/nsq/mirrors/"


class Fenced(Exception):
    """The key was written by someone else: this origin's epoch is over."""


class InSyncRecord:
    def __init__(self, etcd: Etcd, origin: str) -> None:
        self.etcd = etcd
        self.key = MIRRORS + origin
        self.epoch = 0
        self.in_sync: frozenset[str] = frozenset()
        self._revision = -1  # of this origin's last write; -1: not read yet
        self._lock = asyncio.Lock()

    async def write(self, epoch: int, in_sync: frozenset[str]) -> None:
        """Records ``in_sync`` under ``epoch``; raises Fenced, or EtcdError when etcd does not take it."""
        async with self._lock:
            if (epoch, in_sync) == (self.epoch, self.in_sync) and self._revision >= 0:
                return
            if self._revision < 0 or epoch != self.epoch:
                current = await self.etcd.get(self.key)
                if current is not None and json.loads(current.value).get("epoch", 0) > epoch:
                    raise Fenced(f"{self.key} is at a newer epoch than {epoch}")
                self._revision = current.mod_revision if current is not None else 0
            value = json.dumps({"epoch": epoch, "in_sync": sorted(in_sync)}).encode()
            succeeded, responses = await self.etcd.transaction([mod_revision_is(self.key, self._revision)],
                                                               [put(self.key, value)])
            if not succeeded:
                raise Fenced(f"{self.key} was written by another nsqd")
            self._revision = int(responses[0]["response_put"]["header"]["revision"])
            self.epoch, self.in_sync = epoch, in_sync
