"""An asyncio etcd v3 client over etcd's JSON gateway, on aiohttp (already the project's HTTP client): keys, leases,
transactions and watches, what nsqd needs of etcd and no more.

Requests go to one endpoint until it stops answering, then to the next (``EtcdUnavailable`` once none answers):
every member of an etcd cluster serves the whole API, forwarding writes to its leader, and a member cut off from
the quorum refuses them rather than answering from a stale copy (linearizable reads are the default).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp

from . import messages
from .messages import Compare, EtcdError, Event, Json, KeyValue


class EtcdUnavailable(EtcdError):
    """No endpoint answered."""


def endpoint_url(address: str) -> str:
    """``host:port`` (or a URL) as the base URL of the gateway."""
    return (address if "://" in address else f"http://{address}").rstrip("/")


class Etcd:
    def __init__(self, endpoints: list[str], *, timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = [endpoint_url(address) for address in endpoints]
        self._current = 0
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # made inside the running loop
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, path: str, body: Json) -> Json:
        """``POST /v3/<path>`` on the current endpoint, or the next ones in turn while they do not answer."""
        failures = []
        for attempt in range(len(self.endpoints)):
            index = (self._current + attempt) % len(self.endpoints)
            url = f"{self.endpoints[index]}/v3/{path}"
            try:
                async with self._client().post(url, json=body) as response:
                    answer = await response.json(content_type=None)
            except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as error:
                failures.append(f"{url}: {error or type(error).__name__}")
                continue
            self._current = index
            return messages.check(answer)
        raise EtcdUnavailable("; ".join(failures))

    # -- keys ----------------------------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        found = messages.key_values(await self.call("kv/range", messages.range_request(key)))
        return found[0] if found else None

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix``, and the revision they are current to (where a watch takes over)."""
        answer = await self.call("kv/range", messages.range_request(prefix, prefix=True))
        return messages.key_values(answer), messages.revision(answer)

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """The revision of the write."""
        return messages.revision(await self.call("kv/put", messages.put_request(key, value, lease)))

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        answer = await self.call("kv/deleterange", messages.delete_request(key, prefix=prefix))
        return int(answer.get("deleted", 0))

    async def transaction(self, compare: list[Compare], success: list[Json],
                          failure: list[Json] | None = None) -> tuple[bool, list[Json]]:
        """All of ``success`` if every comparison holds, else all of ``failure``, atomically."""
        answer = await self.call("kv/txn", messages.txn_request(compare, success, failure))
        return messages.txn_outcome(answer)

    # -- leases --------------------------------------------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        """A lease of ``ttl`` seconds; keys put with it go when it ends."""
        return messages.lease_id(await self.call("lease/grant", {"TTL": str(ttl)}))

    async def keep_alive(self, lease: int) -> int:
        """Renews the lease: the seconds it now has, 0 when it had already ended."""
        try:
            answer = await self.call("lease/keepalive", {"ID": str(lease)})
        except EtcdUnavailable:
            raise
        except EtcdError as error:
            if error.code == messages.NOT_FOUND:
                return 0
            raise
        return messages.keep_alive_ttl(answer)

    async def revoke(self, lease: int) -> None:
        """Ends the lease now, and with it its keys (an unknown lease is no error)."""
        try:
            await self.call("lease/revoke", {"ID": str(lease)})
        except EtcdUnavailable:
            raise
        except EtcdError as error:
            if error.code != messages.NOT_FOUND:
                raise

    # -- watches -------------------------------------------------------------------------------------------------

    async def watch(self, key: str, *, prefix: bool = False,
                    start_revision: int = 0) -> AsyncIterator[tuple[int, list[Event]]]:
        """Changes to ``key`` (or every key under it) from ``start_revision`` on, as they happen: (revision,
        events) per frame, the first frame (the watch's creation) with none. Ends with EtcdUnavailable when the
        stream breaks, EtcdError when etcd ends the watch (its start was compacted away): a caller carries on
        from the last revision plus one, or reads the keys again."""
        body = messages.watch_request(key, prefix=prefix, start_revision=start_revision)
        url = f"{self.endpoints[self._current]}/v3/watch"
        pending = b""
        try:
            async with self._client().post(url, json=body, timeout=aiohttp.ClientTimeout(
                    total=None, connect=self._timeout)) as response:
                async for chunk in response.content.iter_any():
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in filter(None, lines):
                        revision, events, ended = messages.watch_frame(line)
                        if ended:
                            raise EtcdError(f"watch of {key!r} ended by etcd at revision {revision}")
                        yield revision, events
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            self._current = (self._current + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"{url}: {error or type(error).__name__}") from None
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"{url}: the watch stream ended")
