"""to_nsq's pure parts: record splitting, the throttle, flag checks; and the stdin reader on real descriptors."""

from __future__ import annotations

import asyncio
import os
from functools import partial
from pathlib import Path

import pytest

from apps.client_options import producer_settings
from apps.to_nsq import Options, RecordSplitter, StdinReader, Throttle
from shared.flags import FlagError
from tests.unit.tool_flags import parsed, refused

# -- record splitting --------------------------------------------------------------------------------------

SPLITS = [
    # (input, delimiter, records)
    (b"a\nb\nc\n", b"\n", [b"a", b"b", b"c"]),
    (b"a\nb\nc", b"\n", [b"a", b"b", b"c"]),  # the last record needs no delimiter
    (b"\n\na\n\n\nb\n\n", b"\n", [b"a", b"b"]),  # empty records are skipped
    (b"", b"\n", []),
    (b"\n", b"\n", []),
    (b"one record", b"\n", [b"one record"]),
    (b"a,b,,c", b",", [b"a", b"b", b"c"]),
    (b"x\ny,z\n", b",", [b"x\ny", b"z\n"]),  # only the delimiter splits
    (b"a\x00b\x00", b"\x00", [b"a", b"b"]),
    (b"\r\na\r\n", b"\n", [b"\r", b"a\r"]),  # one byte: a CR stays in the record, as in NSQ
]


def split(chunks: list[bytes], delimiter: bytes) -> list[bytes]:
    splitter = RecordSplitter(delimiter)
    records = [record for chunk in chunks for record in splitter.feed(chunk)]
    last = splitter.finish()
    return records + ([last] if last is not None else [])


@pytest.mark.parametrize(("data", "delimiter", "records"), SPLITS)
def test_split_whole(data: bytes, delimiter: bytes, records: list[bytes]) -> None:
    assert split([data], delimiter) == records


@pytest.mark.parametrize(("data", "delimiter", "records"), SPLITS)
def test_split_one_byte_at_a_time(data: bytes, delimiter: bytes, records: list[bytes]) -> None:
    assert split([data[i:i + 1] for i in range(len(data))], delimiter) == records


@pytest.mark.parametrize(("data", "delimiter", "records"), SPLITS)
def test_split_in_uneven_chunks_with_empty_ones(data: bytes, delimiter: bytes, records: list[bytes]) -> None:
    chunks = [b"", data[:3], b"", data[3:4], data[4:], b""]
    assert split(chunks, delimiter) == records


def test_feed_returns_records_as_soon_as_they_end() -> None:
    splitter = RecordSplitter(b"\n")
    assert splitter.feed(b"ab") == []
    assert splitter.feed(b"c\nd") == [b"abc"]
    assert splitter.feed(b"e\n") == [b"de"]
    assert splitter.finish() is None


def test_a_long_record_over_many_chunks() -> None:
    splitter = RecordSplitter(b"\n")
    for _ in range(1000):
        assert splitter.feed(b"x" * 100) == []
    assert splitter.feed(b"\n") == [b"x" * 100_000]


# -- throttle ----------------------------------------------------------------------------------------------

def test_throttle_spaces_records_at_the_rate() -> None:
    throttle = Throttle(40, now=100.0)
    assert throttle.reserve(100.0) == 0.0  # the one starting token
    assert throttle.reserve(100.0) == pytest.approx(0.025)
    assert throttle.reserve(100.025) == pytest.approx(0.025)  # the caller waited as told
    assert throttle.reserve(100.05) == pytest.approx(0.025)


def test_throttle_sends_at_the_rate_when_waits_are_kept() -> None:
    throttle, now = Throttle(10, now=0.0), 0.0
    for _ in range(21):
        now += throttle.reserve(now)
    assert now == pytest.approx(2.0)


def test_throttle_saves_up_at_most_one_second() -> None:
    throttle = Throttle(5, now=0.0)
    waits = [throttle.reserve(60.0) for _ in range(6)]  # a minute idle: 5 tokens, not 300
    assert waits[:5] == [0.0] * 5
    assert waits[5] == pytest.approx(0.2)


def test_throttle_refills_between_records() -> None:
    throttle = Throttle(2, now=0.0)
    assert throttle.reserve(0.0) == 0.0
    assert throttle.reserve(0.5) == 0.0
    assert throttle.reserve(0.75) == pytest.approx(0.25)


# -- flags -------------------------------------------------------------------------------------------------

options = partial(parsed, Options)
flag_error = partial(refused, Options)


def test_flags_as_nsq_names_them() -> None:
    opts = options("--topic=events", "--nsqd-tcp-address=127.0.0.1:4150", "-nsqd-tcp-address", "[::1]:4150",
                   "--delimiter=,", "--rate=100")
    assert opts.topic == "events"
    assert opts.nsqd_tcp_address == ["127.0.0.1:4150", "[::1]:4150"]
    assert (opts.delimiter, opts.rate) == (",", 100)


def test_defaults() -> None:
    opts = options("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150")
    assert (opts.delimiter, opts.rate, opts.producer_opt) == ("\n", 0, [])


@pytest.mark.parametrize(("argv", "message"), [
    ((), "--topic required"),
    (("--nsqd-tcp-address=127.0.0.1:4150",), "--topic required"),
    (("--topic=bad/name", "--nsqd-tcp-address=127.0.0.1:4150"), "--topic is invalid"),
    (("--topic=" + "t" * 65, "--nsqd-tcp-address=127.0.0.1:4150"), "--topic is invalid"),
    (("--topic=t", "--delimiter=ab", "--nsqd-tcp-address=127.0.0.1:4150"), "--delimiter must be a single byte"),
    (("--topic=t", "--delimiter=", "--nsqd-tcp-address=127.0.0.1:4150"), "--delimiter must be a single byte"),
    (("--topic=t", "--delimiter=\u00e9", "--nsqd-tcp-address=127.0.0.1:4150"), "--delimiter must be a single byte"),
    (("--topic=t",), "--nsqd-tcp-address required"),
    (("--topic=t", "--nsqd-tcp-address=localhost"), "--nsqd-tcp-address: address 'localhost': missing port"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--producer-opt=tls_v1,true"),
     'invalid value "tls_v1,true" for flag -producer-opt: invalid option tls_v1'),
])
def test_bad_flags_name_the_flag(argv: tuple[str, ...], message: str) -> None:
    assert flag_error(*argv).startswith(message)


def test_ephemeral_topics_are_valid() -> None:
    assert options("--topic=t#ephemeral", "--nsqd-tcp-address=127.0.0.1:4150").topic == "t#ephemeral"


def test_producer_opts_become_identify_fields() -> None:
    assert producer_settings(["client_id,me", "heartbeat_interval,5s", "msg_timeout,90s", "dial_timeout,250ms",
                              "user_agent,x/1 y,z"]) == {
        "client_id": "me", "heartbeat_interval": 5000, "msg_timeout": 90000, "connect_timeout": 0.25,
        "user_agent": "x/1 y,z"}


def test_producer_opt_with_a_bad_value() -> None:
    with pytest.raises(FlagError, match=r'-producer-opt: failed to coerce option heartbeat_interval \(soon\)'):
        producer_settings(["heartbeat_interval,soon"])


# -- stdin reader ------------------------------------------------------------------------------------------

async def read_all(reader: StdinReader) -> bytes:
    chunks = []
    while chunk := await reader.read():
        chunks.append(chunk)
    return b"".join(chunks)


async def test_reads_a_regular_file_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(bytes(range(256)) * 1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert await read_all(StdinReader(fd, chunk_size=1000, read_ahead=2)) == bytes(range(256)) * 1000
    finally:
        os.close(fd)


async def test_reads_a_pipe_as_data_comes_and_stays_at_the_end() -> None:
    read_fd, write_fd = os.pipe()
    try:
        reader = StdinReader(read_fd)
        os.write(write_fd, b"first")
        assert await asyncio.wait_for(reader.read(), 5) == b"first"
        os.write(write_fd, b"second")
        os.close(write_fd)
        assert await asyncio.wait_for(read_all(reader), 5) == b"second"
        assert await reader.read() == b""
    finally:
        os.close(read_fd)


async def test_stop_ends_the_input_while_a_read_waits() -> None:
    read_fd, write_fd = os.pipe()
    try:
        reader = StdinReader(read_fd)
        waiting = asyncio.ensure_future(reader.read())
        await asyncio.sleep(0.01)
        reader.stop()
        assert await asyncio.wait_for(waiting, 5) == b""
        os.write(write_fd, b"too late")
        assert await reader.read() == b""
    finally:
        os.close(write_fd)
        # the end of the pipe ends the thread; it must not outlive the descriptor it reads
        await asyncio.to_thread(reader._thread.join, 5)
        os.close(read_fd)


async def test_a_read_error_is_raised(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: read() fails with EISDIR
    try:
        with pytest.raises(IsADirectoryError):
            await asyncio.wait_for(StdinReader(fd).read(), 5)
    finally:
        os.close(fd)
