"""A V2 client's heartbeats and read deadline: every ``heartbeat_interval`` nsqd sends ``_heartbeat_``, and a client
that sent nothing for two intervals is gone, so its connection is closed (NSQ's heartbeat ticker and read deadline).
An interval of 0 (IDENTIFY's -1) turns both off.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from nsqclient.protocol.frames import HEARTBEAT

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("nsqd")


class Heartbeats:
    """The timers of one client. Its connection stamps ``last_read`` whenever bytes arrive, starts the timers once
    connected, restarts them after an IDENTIFY (the interval may have changed) and stops them when it is lost."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Client) -> None:
        self._loop = loop
        self.last_read = loop.time()
        self._client = client
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        interval = self._client.heartbeat_interval
        if interval > 0:
            self._heartbeat_timer = self._loop.call_later(interval, self._heartbeat)
            self._deadline_timer = self._loop.call_at(self.last_read + 2 * interval, self._check_deadline)

    def stop(self) -> None:
        for timer in (self._heartbeat_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        self._heartbeat_timer = self._deadline_timer = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def _heartbeat(self) -> None:
        self._client.queue_response(HEARTBEAT)
        self._client.flush()
        self._heartbeat_timer = self._loop.call_later(self._client.heartbeat_interval, self._heartbeat)

    def _check_deadline(self) -> None:
        client = self._client
        deadline = self.last_read + 2 * client.heartbeat_interval
        if self._loop.time() >= deadline:
            log.error("[%s] - read timeout after %.1fs without a command", client, 2 * client.heartbeat_interval)
            self.stop()
            client.close()
        else:
            self._deadline_timer = self._loop.call_at(deadline, self._check_deadline)
