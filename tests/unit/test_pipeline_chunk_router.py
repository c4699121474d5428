"""The sink's chunks and the order it tries nodes in, without Spark: bodies to MPUB chunks, the node ring."""

from __future__ import annotations

from nsqspark.chunk_router import Chunk, Chunker, NodeRing


def test_chunks_are_cut_at_the_message_count_and_kept_per_topic() -> None:
    chunker = Chunker(3)
    chunks = list(chunker.add("a", [b"1", b"2", b"3", b"4"])) + list(chunker.add("b", [b"x"]))
    chunks += list(chunker.add("a", [b"5", b"6", b"7"])) + list(chunker.rest())
    assert chunks == [Chunk("a", [b"1", b"2", b"3"]), Chunk("a", [b"4", b"5", b"6"]), Chunk("a", [b"7"]),
                      Chunk("b", [b"x"])]
    assert list(chunker.rest()) == []


def test_chunks_are_cut_before_the_body_size_limit() -> None:
    # MPUB body: 4 bytes of count, then 4 bytes of size before each message
    chunker = Chunker(100, max_bytes=4 + 2 * (4 + 10))
    chunks = list(chunker.add("a", [b"x" * 10, b"y" * 10, b"z" * 10, b"w" * 30])) + list(chunker.rest())
    assert [len(chunk.bodies) for chunk in chunks] == [2, 1, 1]  # a body larger than the limit goes alone


def test_the_ring_starts_where_told_and_tries_failed_nodes_last() -> None:
    ring = NodeRing(["a", "b", "c"], start=4, down_for=5)
    assert [ring.order(0)[0] for _ in range(4)] == ["b", "c", "a", "b"]
    ring.failed("c", now=10)
    assert ring.order(11) == ["a", "b", "c"]  # c's turn, but it failed lately
    assert ring.order(12) == ["a", "b", "c"]
    assert ring.order(16) == ["b", "c", "a"]
    assert ring.order(16) == ["c", "a", "b"]  # down_for is over: c has its turn again
    ring.failed("a", now=20)
    ring.succeeded("a")
    assert ring.order(21)[0] == "a"
