"""Where a queue's messages go once its memory is full (NSQ's ``BackendQueue``): the name's ``DiskQueue``, or
``NullBackend`` for an ephemeral name, which keeps nothing: what memory cannot hold is dropped and counted, as
NSQ's ephemeral topics and channels do. A queue never asks which it has.
"""

from __future__ import annotations

from typing import Callable, Protocol


class Backend(Protocol):
    name: str
    dropped_count: int
    # told of the payloads a cap with drop-oldest dropped (for the mirrors); None: nobody asked
    on_drop: Callable[[list[bytes]], None] | None

    @property
    def depth(self) -> int: ...

    def put(self, payloads: list[bytes], capped: bool = True) -> None: ...

    def check_room(self, size: int) -> None: ...

    def put_records(self, records: list[bytes]) -> None: ...

    def read(self, max_count: int, framed: bool = False) -> list[bytes]: ...

    def peek_job(self, max_count: int) -> Callable[[], list[bytes]]: ...

    def release(self, key: bytes) -> None: ...

    def release_all(self) -> None: ...

    def empty(self) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


class NullBackend:
    """An ephemeral name's backend: holds nothing, counts what it was given as dropped."""

    depth = 0

    def __init__(self, name: str) -> None:
        self.name = name
        self.dropped_count = 0
        self.on_drop: Callable[[list[bytes]], None] | None = None  # never told: what it drops was never kept

    def put(self, payloads: list[bytes], capped: bool = True) -> None:
        self.dropped_count += len(payloads)

    def check_room(self, size: int) -> None:
        pass

    def put_records(self, records: list[bytes]) -> None:
        self.dropped_count += len(records)

    def read(self, max_count: int, framed: bool = False) -> list[bytes]:
        return []

    def peek_job(self, max_count: int) -> Callable[[], list[bytes]]:
        return list

    def release(self, key: bytes) -> None:
        pass

    def release_all(self) -> None:
        pass

    def empty(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete(self) -> None:
        pass
