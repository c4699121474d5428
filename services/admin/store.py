"""The admin's SQLite file, shared by the history samples and the audit log.

One connection serves both: aiosqlite runs every statement on the connection's own thread, so the two never write
at the same time. WAL lets a chart query read while a sample is being written. ``PRAGMA user_version`` records the
schema version; a file from a newer admin is refused rather than guessed at.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading

import aiosqlite

SCHEMA_VERSION = 2  # 2: the audit log's identity

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    ts REAL NOT NULL,
    topic TEXT NOT NULL,
    channel TEXT NOT NULL,
    depth INTEGER NOT NULL,
    message_count INTEGER NOT NULL,
    in_flight INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_topic_channel_ts ON samples (topic, channel, ts);
CREATE INDEX IF NOT EXISTS samples_ts ON samples (ts);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    user TEXT NOT NULL,
    remote_ip TEXT NOT NULL,
    user_agent TEXT NOT NULL,
    action TEXT NOT NULL,
    topic TEXT NOT NULL,
    channel TEXT NOT NULL,
    node TEXT NOT NULL,
    result TEXT NOT NULL,
    identity TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_ts ON audit (ts);
"""


class StoreError(Exception):
    """The store file cannot be used: not an SQLite database, unreadable, in a directory that cannot be made, or
    written by a newer schema."""


async def open_store(path: str) -> aiosqlite.Connection:
    """Opens (creating it, and the directories above it, if missing) the store at ``path`` with its schema in
    place. The caller closes it."""
    directory = os.path.dirname(path) or "."
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise StoreError(f"cannot open {path}: {directory} is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {directory} for {path}: {exc.strerror or exc}") from exc
    connection = aiosqlite.connect(path)
    try:
        await connection
    except sqlite3.Error as exc:
        await _join_worker(connection)
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        await _prepare(connection, path)
    except BaseException as exc:
        await connection.close()
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot open {path}: {exc}") from exc
        raise
    return connection


async def _join_worker(connection: aiosqlite.Connection) -> None:
    # when connecting fails, aiosqlite stops its worker thread without waiting for it (omnilib/aiosqlite#241); if the
    # loop closed first, the thread would die reporting "Event loop is closed"
    thread = getattr(connection, "_thread", None)
    if isinstance(thread, threading.Thread):
        await asyncio.to_thread(thread.join, 5.0)


async def _prepare(connection: aiosqlite.Connection, path: str) -> None:
    # a garbage file is only noticed on the first statement, so this is where DatabaseError shows up
    await connection.execute("PRAGMA journal_mode=WAL")
    await connection.execute("PRAGMA synchronous=NORMAL")
    async with connection.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise StoreError(f"cannot open {path}: schema version {version} is newer than {SCHEMA_VERSION}")
    await connection.executescript(_SCHEMA)
    if version == 1:
        await connection.execute("ALTER TABLE audit ADD COLUMN identity TEXT NOT NULL DEFAULT ''")
    await connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    await connection.commit()
