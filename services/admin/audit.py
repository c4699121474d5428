"""The audit log: one entry per admin action taken through the admin (who, from where, what, on which node, and
how it went: ``ok``, what failed, or ``refused: ...`` for a request the admin would not run; with
``--http-client-auth-secret-file``, the identity the cluster's auth server named the admin's secret), kept in the
store's ``audit`` table. Action names are nsqadmin's, the ones its notifications carry, and, beyond nsqadmin, a channel's ``replay_dead_letters``, ``empty_dead_letters`` and ``rewind_channel``, and a
topic's ``set_retention``.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import aiosqlite

ACTIONS = frozenset({
    "create_topic", "create_channel", "delete_topic", "delete_channel", "empty_topic", "empty_channel",
    "pause_topic", "pause_channel", "unpause_topic", "unpause_channel", "tombstone_topic_producer",
    "replay_dead_letters", "empty_dead_letters", "rewind_channel", "set_retention",
    "unknown",  # a refused request too malformed to tell which action it asked for
})

_COLUMNS = "ts, user, remote_ip, user_agent, action, topic, channel, node, result, identity, id"


@dataclass
class AuditEntry:
    ts: float
    user: str
    remote_ip: str
    user_agent: str
    action: str
    topic: str
    channel: str = ""
    node: str = ""
    result: str = "ok"
    identity: str = ""  # the auth server's name for the admin's secret (--http-client-auth-secret-file)
    id: int | None = None


class AuditLog:
    """The ``audit`` table of an open store."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection

    async def record(self, entry: AuditEntry) -> int:
        """Stores ``entry`` (its ``id`` is ignored) and returns the id it was given."""
        if entry.action not in ACTIONS:
            raise ValueError(f"unknown admin action {entry.action!r}")
        async with self._connection.execute(
                f"INSERT INTO audit ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                astuple(entry)[:-1]) as cursor:
            entry_id = cursor.lastrowid
        await self._connection.commit()
        assert entry_id is not None
        return entry_id

    async def recent(self, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        """Entries newest first; ``offset`` pages further back."""
        async with self._connection.execute(
                f"SELECT {_COLUMNS} FROM audit ORDER BY ts DESC, id DESC LIMIT ? OFFSET ?",
                (limit, offset)) as cursor:
            return [AuditEntry(*row) async for row in cursor]

    async def prune(self, before: float) -> int:
        """Deletes entries older than ``before``; returns how many."""
        async with self._connection.execute("DELETE FROM audit WHERE ts < ?", (before,)) as cursor:
            deleted = cursor.rowcount
        await self._connection.commit()
        return deleted
