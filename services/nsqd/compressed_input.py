"""A connection's input once it switched to snappy or deflate: inflated a piece at a time, each piece run before
the next is inflated, so a small input that inflates enormously stops at a wait or when the connection closes (the
rest stays compressed meanwhile)."""

from __future__ import annotations

import itertools
from typing import Iterator

from nsqclient.protocol.compression import Codec


class CompressedInput:
    def __init__(self, codec: Codec, held: bytes) -> None:
        """``held``: what arrived, compressed, before the switch took effect."""
        self._codec = codec
        self._pending: Iterator[bytes] | None = codec.decompress(held) if held else None

    def feed(self, data: bytes) -> None:
        inflated = self._codec.decompress(data)
        self._pending = inflated if self._pending is None else itertools.chain(self._pending, inflated)

    def next_piece(self) -> bytes | None:
        """The next piece inflated, None once everything fed is; CompressionError for input that is not the
        codec's."""
        if self._pending is None:
            return None
        piece = next(self._pending, None)
        if piece is None:
            self._pending = None
        return piece
