"""The snappy and deflate codecs of V2 connections: round trips split anywhere, bounded output pieces, and random or
corrupt input that only ever raises CompressionError."""

from __future__ import annotations

import zlib

import pytest
import snappy
from hypothesis import given, settings, strategies as st

from nsqclient.protocol.compression import MAX_CHUNK, CompressionError, DeflateCodec, SnappyCodec

CODECS = [lambda: SnappyCodec(), lambda: DeflateCodec(6)]


@pytest.mark.parametrize("make", CODECS, ids=["snappy", "deflate"])
@settings(max_examples=100, deadline=None)
@given(writes=st.lists(st.binary(max_size=3000), max_size=8), cut=st.integers(min_value=1, max_value=64))
def test_round_trip_whatever_the_reads(make: object, writes: list[bytes], cut: int) -> None:
    sender, receiver = make(), make()  # type: ignore[operator]
    wire = b"".join(sender.compress(data) for data in writes)
    received = b"".join(chunk for start in range(0, len(wire), cut)
                        for chunk in receiver.decompress(wire[start:start + cut]))
    assert received == b"".join(writes)


@pytest.mark.parametrize("make", CODECS, ids=["snappy", "deflate"])
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2000))
def test_random_bytes_raise_only_compression_errors(make: object, data: bytes) -> None:
    codec = make()  # type: ignore[operator]
    try:
        for chunk in codec.decompress(data):
            assert len(chunk) <= MAX_CHUNK
    except CompressionError:
        pass


def test_a_deflate_bomb_comes_out_in_bounded_pieces() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    bomb = compressor.compress(bytes(64 * 1024 * 1024)) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < 128 * 1024
    pieces = DeflateCodec(6).decompress(bomb)
    first = next(pieces)
    assert len(first) == MAX_CHUNK  # the rest is only expanded if the reader asks for it


def test_snappy_speaks_the_framing_format_of_other_clients() -> None:
    """python-snappy's stream (what pynsq sends) decodes, and ours decodes there."""
    theirs = snappy.StreamCompressor()
    wire = theirs.add_chunk(b"from pynsq" * 100)
    assert b"".join(SnappyCodec().decompress(wire)) == b"from pynsq" * 100
    ours = SnappyCodec().compress(b"to pynsq" * 100)
    assert snappy.StreamDecompressor().decompress(ours) == b"to pynsq" * 100
