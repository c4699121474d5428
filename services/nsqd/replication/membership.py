"""This nsqd's membership of the replicated cluster: its key under ``/nsq/nodes/`` in etcd, held by a lease of
``--replication-liveness-timeout``, so that the key goes when the nsqd stops renewing it (killed, paused, cut off)
and the others can tell.

The lease is renewed every third of its time to live. A renewal that finds the lease ended (the nsqd was paused,
or cut off from etcd, for longer than its time to live) means the cluster has counted this nsqd out: it registers
again under a new lease, as a member starting afresh. Each registration is an epoch, the etcd revision of its
write (``on_registered`` is told): it only grows, so mirrors can tell a newer registration from an older one. Until a lease
is granted, or while etcd does not answer, it keeps trying, once a second. ``alive_until`` is how long this nsqd
can be sure its lease still holds, counted from before its last renewal was sent.

A registration first ends the one before it: a key still held by an earlier process's lease (killed, and started
again before the lease ran out) goes with that lease, so that the cluster takes over what the earlier process
acknowledged; then ``before_registering`` waits for that (adoption.taken_over) before the new epoch begins.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import Any, Awaitable, Callable

from shared.etcd.client import Etcd
from shared.etcd.messages import EtcdError

log = logging.getLogger("nsqd")

NODES = "/nsq/nodes/"
RETRY = 1.0  # seconds between attempts while etcd does not answer


class Membership:
    def __init__(self, etcd: Etcd, node: str, info: Callable[[], dict[str, Any]], liveness_timeout: float,
                 on_registered: Callable[[int], None] = lambda epoch: None,
                 before_registering: Callable[[], Awaitable[None]] | None = None) -> None:
        self.etcd = etcd
        self.node = node
        self.key = NODES + node
        self.ttl = max(1, math.ceil(liveness_timeout))
        self.lease = 0
        self.alive_until = 0.0  # time.monotonic()
        self.leases_lost = 0
        self.epoch = 0  # the etcd revision of the latest registration
        self._info = info
        self._on_registered = on_registered
        self._before_registering = before_registering
        self._task: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._hold(), name="etcd-membership")

    async def stop(self) -> None:
        """Leaves the cluster at once: the lease is revoked, rather than left to run out."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
        if self.lease:
            try:
                await self.etcd.revoke(self.lease)
            except EtcdError as error:
                log.warning("ETCD: could not revoke lease %x (it ends in %d s): %s", self.lease, self.ttl, error)
            self.lease = 0

    async def _hold(self) -> None:
        while True:
            try:
                if not self.lease:
                    await self._register()
                await asyncio.sleep(self.ttl / 3)
                await self._renew()
            except EtcdError as error:
                log.warning("ETCD: %s", error)
                await asyncio.sleep(RETRY)

    async def _register(self) -> None:
        earlier = await self.etcd.get(self.key)
        if earlier is not None:
            log.warning("ETCD: %s is held by an earlier process of this node (lease %x): ending it", self.key,
                        earlier.lease)
            if earlier.lease:
                await self.etcd.revoke(earlier.lease)
            else:
                await self.etcd.delete(self.key)
        if self._before_registering is not None:
            await self._before_registering()
        asked_at = time.monotonic()
        lease = await self.etcd.grant(self.ttl)
        self.epoch = await self.etcd.put(self.key, json.dumps(self._info()).encode(), lease)
        self.lease, self.alive_until = lease, asked_at + self.ttl
        self.registered.set()
        log.info("ETCD: registered %s (lease %x, %d s, epoch %d)", self.key, lease, self.ttl, self.epoch)
        self._on_registered(self.epoch)

    async def _renew(self) -> None:
        asked_at = time.monotonic()
        if await self.etcd.keep_alive(self.lease):
            self.alive_until = asked_at + self.ttl
            return
        log.error("ETCD: lease %x of %s ended (more than %d s without renewal): registering again",
                  self.lease, self.key, self.ttl)
        self.lease = 0
        self.leases_lost += 1
        self.registered.clear()
