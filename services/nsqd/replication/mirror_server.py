"""The mirror's side of replication links: origins connect to ``--replication-address`` and stream their records,
which are applied to the origin's ``MirrorStore`` and acknowledged.

One store per origin, kept across links, so that an origin whose link broke carries on where its mirror got to
(the mirror's first ``Ack`` says where). An origin that comes with a newer epoch starts a new store: it was
counted out and registered again, and whatever it had outstanding before is its own to send again. An older epoch
than the store's is refused: that origin has been replaced and may no longer have anything acknowledged.

A store keeps its messages in files under ``directory``, one directory per origin and epoch. A record the mirror
cannot write (a full disk) is not applied: the link is refused, and the origin links again later.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import cast

from .mirror_files import MirrorFiles
from .mirror_store import MirrorStore, OutOfOrder
from .wire import MAGIC, Ack, FrameReader, Hello, Refuse, Snapshot, SnapshotEnd, WireError, encode

log = logging.getLogger("nsqd")


class MirrorLinkServer(asyncio.Protocol):
    """One origin's link, on the mirror."""

    def __init__(self, stores: dict[str, MirrorStore], links: set[MirrorLinkServer], directory: Path) -> None:
        self._stores = stores
        self._directory = directory
        self._links = links  # every open link, closed when nsqd stops
        self._store: MirrorStore | None = None
        self._reader = FrameReader()
        self._magic = b""
        self._remote = ""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._remote = str(transport.get_extra_info("peername"))
        self._links.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._links.discard(self)

    def data_received(self, data: bytes) -> None:
        if len(self._magic) < len(MAGIC):
            missing = len(MAGIC) - len(self._magic)
            self._magic += data[:missing]
            data = data[missing:]
            if self._magic != MAGIC[:len(self._magic)]:
                return self._refuse(f"E_BAD_PROTOCOL not a replication link ({self._magic!r})")
        try:
            frames = self._reader.feed(data)
            for frame in frames:
                if isinstance(frame, Hello):
                    self._write(Ack(self._hello(frame)))
                elif isinstance(frame, (Ack, Refuse)) or self._store is None:
                    return self._refuse(f"E_INVALID {type(frame).__name__} where a record belongs")
                elif isinstance(frame, (Snapshot, SnapshotEnd)):
                    self._store.take_snapshot(frame)
                else:
                    self._store.apply(frame)
        except (WireError, OutOfOrder) as error:
            return self._refuse(f"E_INVALID {error}")
        except OSError as error:
            return self._refuse(f"E_INVALID cannot keep the records: {error}")
        store = self._store
        if frames and not isinstance(frames[-1], Hello) and store is not None and not store.receiving_snapshot:
            self._write(Ack(store.applied))

    def _write(self, frame: Ack | Refuse) -> None:
        if self.transport is not None:
            self.transport.write(encode(frame))

    def _hello(self, hello: Hello) -> int:
        """The origin's store from now on; the answer is the last record it holds, 0 for a new store: it has
        nothing before the records that follow, whatever their numbers."""
        store = self._stores.get(hello.origin)
        if store is not None and hello.epoch < store.epoch:
            raise WireError(f"epoch {hello.epoch} of {hello.origin} is older than {store.epoch}")
        if store is not None and hello.epoch == store.epoch and store.fenced:
            raise WireError(f"{hello.origin} (epoch {hello.epoch}) is gone from the cluster: its records are refused")
        if store is None or hello.epoch > store.epoch:
            # records before ``hello.sequence`` went to other mirrors, or are gone: the origin knows which
            files = MirrorFiles(self._directory / f"{_file_name(hello.origin)}-{hello.epoch}")
            if store is not None and not store.fenced:  # a fenced copy is its adoption's to close
                store.close()
            store = self._stores[hello.origin] = MirrorStore(hello.origin, hello.epoch, files, hello.sequence - 1)
            log.info("REPLICATION: mirroring %s (epoch %d)", hello.origin, hello.epoch)
            self._store = store
            return 0
        self._store = store
        store.new_link()
        return store.applied if store.complete else 0  # a snapshot it did not finish: it holds nothing usable

    def _refuse(self, reason: str) -> None:
        log.error("REPLICATION: link from %s refused: %s", self._remote, reason)
        self._write(Refuse(reason))
        if self.transport is not None:
            self.transport.close()


def _file_name(origin: str) -> str:
    """An origin's address as a file name: ``host_port``."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", origin)
