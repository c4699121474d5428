"""The compression a V2 connection can negotiate in IDENTIFY, as byte-stream codecs both sides use: snappy's framing
format (what NSQ's Go and Python clients speak) and raw DEFLATE, flushed at every write.

Sans-I/O: ``compress`` turns what one write sends into the bytes to put on the wire; ``decompress`` takes bytes as
they arrive (any split) and yields what they carry, in pieces of at most ``MAX_CHUNK`` bytes, so a small input that
inflates enormously is never expanded in one go: the protocol parser behind it enforces its limits piece by piece.
"""

from __future__ import annotations

import zlib
from typing import Iterator, Protocol

MAX_CHUNK = 256 * 1024
# a snappy frame's length field has 24 bits; chunks of data are at most 64 KiB once uncompressed
_MAX_SNAPPY_FRAME = 4 + (1 << 24)


class CompressionError(ValueError):
    """The peer's bytes are not a valid stream for the negotiated compression."""


class Codec(Protocol):
    name: str

    def compress(self, data: bytes | bytearray) -> bytes: ...

    def decompress(self, data: bytes) -> Iterator[bytes]: ...


class DeflateCodec:
    name = "deflate"

    def __init__(self, level: int) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)

    def compress(self, data: bytes | bytearray) -> bytes:
        # a sync flush puts everything written so far on the wire, as Go's flate writer does on Flush
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def decompress(self, data: bytes) -> Iterator[bytes]:
        try:
            chunk = self._decompressor.decompress(data, MAX_CHUNK)
            while chunk:
                yield chunk
                chunk = self._decompressor.decompress(self._decompressor.unconsumed_tail, MAX_CHUNK)
        except zlib.error as error:
            raise CompressionError(f"deflate: {error}") from None


class SnappyCodec:
    name = "snappy"

    def __init__(self) -> None:
        import snappy  # on first use: most processes never negotiate snappy

        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()
        self._pending = 0

    def compress(self, data: bytes | bytearray) -> bytes:
        # frames carry at most 64 KiB of data each; add_chunk splits larger writes itself
        return bytes(self._compressor.add_chunk(bytes(data)))

    def decompress(self, data: bytes) -> Iterator[bytes]:
        self._pending += len(data)
        if self._pending > _MAX_SNAPPY_FRAME + len(data):
            raise CompressionError("snappy: frame too long")
        try:
            out = self._decompressor.decompress(data)
        except Exception as error:  # cramjam and snappy raise several types for a corrupt stream
            raise CompressionError(f"snappy: {error}") from None
        self._pending = len(self._decompressor.remains or b"")
        for start in range(0, len(out), MAX_CHUNK):
            yield bytes(out[start:start + MAX_CHUNK])
