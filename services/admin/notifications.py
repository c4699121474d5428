"""nsqadmin's admin-action notifications: with ``--notification-http-endpoint`` set, each action is POSTed there as
JSON, in NSQ's shape::

    {"action":"delete_channel","topic":"t","channel":"c","timestamp":1700000000,"user":"ops",
     "remote_ip":"10.0.0.1:51234","user_agent":"Mozilla/5.0","url":"http://admin:4171/api/...","via":"adminhost"}

``channel``, ``node`` and ``user`` are left out when empty, as NSQ's ``omitempty`` does. Delivery is best effort: the
action has already happened, so a slow or dead endpoint is logged and never holds up or fails the admin.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from .audit import AuditEntry

log = logging.getLogger("nsqadmin")

NotificationBody = dict[str, str | int]


def notification_body(entry: AuditEntry, url: str, via: str) -> NotificationBody:
    """The JSON object NSQ sends for ``entry``; ``url`` is the request's full URL, ``via`` the admin's hostname."""
    body: NotificationBody = {"action": entry.action, "topic": entry.topic}
    if entry.channel:
        body["channel"] = entry.channel
    if entry.node:
        body["node"] = entry.node
    body["timestamp"] = int(entry.ts)
    if entry.user:
        body["user"] = entry.user
    body.update(remote_ip=entry.remote_ip, user_agent=entry.user_agent, url=url, via=via)
    return body


class Notifier:
    """POSTs notifications to one endpoint. Each POST is a task this object owns until it finishes; ``close()``
    lets pending ones finish for a moment and cancels the rest."""

    def __init__(self, session: aiohttp.ClientSession, endpoint: str, timeout: aiohttp.ClientTimeout) -> None:
        self._session = session
        self._endpoint = endpoint
        self._timeout = timeout
        self._pending: set[asyncio.Task[None]] = set()
        self._closed = False

    def send(self, body: NotificationBody) -> None:
        """Starts POSTing ``body`` and returns at once; must be called on the running loop."""
        if self._closed:
            log.warning("notification %s dropped: notifier closed", body.get("action"))
            return
        task = asyncio.create_task(self._post(body))
        self._pending.add(task)
        task.add_done_callback(self._finished)

    async def close(self, grace: float = 3.0) -> None:
        """Waits up to ``grace`` seconds for pending POSTs, then cancels those still running."""
        self._closed = True
        if not self._pending:
            return
        _, unfinished = await asyncio.wait(set(self._pending), timeout=grace)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)

    async def _post(self, body: NotificationBody) -> None:
        try:
            async with self._session.post(self._endpoint, json=body, timeout=self._timeout) as response:
                if not 200 <= response.status < 300:
                    log.warning("notification POST to %s answered %d %s", self._endpoint, response.status,
                                response.reason)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("failed to POST notification to %s - %s", self._endpoint, str(exc) or type(exc).__name__)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        # anything _post did not expect still ends up in the log instead of "Task exception was never retrieved"
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("failed to POST notification to %s - %r", self._endpoint, exc)
