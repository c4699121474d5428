"""to_nsq as a real program: stdin in, messages on real nsqd processes out, exit codes and messages as NSQ's."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.processes import ROOT, NSQDProcess, nsqd_tcp_flag, wait_for
from harness.wire import WireClient
from nsqclient.protocol.frames import Message


def to_nsq(*args: str, stdin: bytes | Path = b"", timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "apps.to_nsq", *args]
    if isinstance(stdin, Path):
        with stdin.open("rb") as source:
            return subprocess.run(command, cwd=ROOT, stdin=source, capture_output=True, timeout=timeout)
    return subprocess.run(command, cwd=ROOT, input=stdin, capture_output=True, timeout=timeout)


def topic_stats(nsqd: NSQDProcess, topic: str) -> dict[str, Any]:
    topics = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])["topics"] or []
    return topics[0] if topics else {}


async def consume(nsqd: NSQDProcess, topic: str, count: int) -> list[Message]:
    client = await WireClient.connect(nsqd.tcp_address)
    try:
        await client.subscribe(topic, "test", rdy=count)
        messages = await client.read_messages(count)
        await client.expect_nothing(0.1)
        return messages
    finally:
        client.writer.close()
        await client.writer.wait_closed()


async def bodies(nsqd: NSQDProcess, topic: str, count: int) -> list[bytes]:
    return [message.body for message in await consume(nsqd, topic, count)]


async def test_lines_are_published_skipping_empty_ones(nsqd: NSQDProcess) -> None:
    result = to_nsq("--topic=lines", nsqd_tcp_flag(nsqd), stdin=b"first\n\nsecond\n\n\nthird \n last")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""  # NSQ's to_nsq does not echo records
    assert await bodies(nsqd, "lines", 4) == [b"first", b"second", b"third ", b" last"]


async def test_a_custom_delimiter(nsqd: NSQDProcess) -> None:
    result = to_nsq("--topic=fields", nsqd_tcp_flag(nsqd), "--delimiter=,", stdin=b"a,b\nc,,d,")
    assert result.returncode == 0, result.stderr
    assert await bodies(nsqd, "fields", 3) == [b"a", b"b\nc", b"d"]


async def test_every_nsqd_gets_every_record(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    first, second = nsqd_factory(), nsqd_factory()
    result = to_nsq("--topic=fanout", nsqd_tcp_flag(first), nsqd_tcp_flag(second), stdin=b"one\ntwo\nthree\n")
    assert result.returncode == 0, result.stderr
    for nsqd in (first, second):
        assert await bodies(nsqd, "fanout", 3) == [b"one", b"two", b"three"]


async def test_stdin_as_a_regular_file_and_as_dev_null(nsqd: NSQDProcess, tmp_path: Path) -> None:
    # a pipe transport refuses regular files, and uvloop's aborts on /dev/null: both must simply be read
    path = tmp_path / "records"
    path.write_bytes(b"from\na file\n")
    assert to_nsq("--topic=files", nsqd_tcp_flag(nsqd), stdin=path).returncode == 0
    assert to_nsq("--topic=files", nsqd_tcp_flag(nsqd), stdin=Path("/dev/null")).returncode == 0
    assert await bodies(nsqd, "files", 2) == [b"from", b"a file"]


@pytest.mark.slow
async def test_100k_records_are_all_published(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--mem-queue-size=200000")
    data = b"".join(b"record %06d\n" % i for i in range(100_000))
    started = time.monotonic()
    result = to_nsq("--topic=bulk", nsqd_tcp_flag(nsqd), stdin=data)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    stats = topic_stats(nsqd, "bulk")
    assert (stats["message_count"], stats["depth"]) == (100_000, 100_000)
    print(f"to_nsq: 100000 records in {elapsed:.2f} s ({100_000 / elapsed:.0f} records/s, with startup)")


async def test_rate_throttles_publishing(nsqd: NSQDProcess) -> None:
    data = b"".join(b"%d\n" % i for i in range(20))
    result = to_nsq("--topic=slow", nsqd_tcp_flag(nsqd), "--rate=40", stdin=data)
    assert result.returncode == 0, result.stderr
    assert b"Throttling messages rate to max:40/second" in result.stderr
    messages = await consume(nsqd, "slow", 20)
    assert [message.body for message in messages] == [b"%d" % i for i in range(20)]
    # nsqd stamps each message as it takes it: 19 gaps of 25 ms, whatever the program's startup took
    spread = (messages[-1].timestamp - messages[0].timestamp) / 1e9
    assert spread >= 0.4


@pytest.mark.parametrize(("args", "message"), [
    (("--nsqd-tcp-address=127.0.0.1:4150",), b"to_nsq: --topic required"),
    (("--topic=t", "--delimiter=ab", "--nsqd-tcp-address=127.0.0.1:4150"),
     b"to_nsq: --delimiter must be a single byte"),
    (("--topic=no spaces", "--nsqd-tcp-address=127.0.0.1:4150"), b"to_nsq: --topic is invalid"),
    (("--topic=t",), b"to_nsq: --nsqd-tcp-address required"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--rate=fast"),
     b'to_nsq: invalid value "fast" for flag -rate: parse error'),
])
def test_bad_flags_exit_2_with_the_message(args: tuple[str, ...], message: bytes) -> None:
    result = to_nsq(*args, stdin=b"never read\n")
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_version() -> None:
    result = to_nsq("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(b"to_nsq v1.3.0 (built w/python")


def test_an_unreachable_nsqd_exits_1_naming_it() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = to_nsq("--topic=t", f"--nsqd-tcp-address=127.0.0.1:{port}", stdin=b"lost\n")
    assert result.returncode == 1
    assert f"ERROR: failed to connect to nsqd 127.0.0.1:{port} - ".encode() in result.stderr


def test_a_refused_publish_exits_1_with_nsqs_error(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--max-msg-size=10")
    result = to_nsq("--topic=small", nsqd_tcp_flag(nsqd), stdin=b"fits\n" + b"x" * 11 + b"\nnever\n")
    assert result.returncode == 1
    assert f"ERROR: failed to publish to nsqd 127.0.0.1:{nsqd.tcp_port} - E_BAD_MESSAGE".encode() in result.stderr
    assert topic_stats(nsqd, "small")["message_count"] == 1


def test_sigint_and_sigterm_stop_reading_and_exit_0(nsqd: NSQDProcess) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        topic = f"open{sig}"
        process = subprocess.Popen([sys.executable, "-m", "apps.to_nsq", f"--topic={topic}", nsqd_tcp_flag(nsqd)],
                                   cwd=ROOT, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert process.stdin is not None
            process.stdin.write(b"before\n")
            process.stdin.flush()
            wait_for(lambda: topic_stats(nsqd, topic).get("message_count") == 1)
            producer = json.loads(nsqd.http("GET", "/stats?format=json")[2])["producers"][0]
            assert producer["user_agent"].startswith("to_nsq/1.3.0 ")
            process.send_signal(sig)  # stdin still open: the program waits in a read
            assert process.wait(10) == 0
        finally:
            process.kill()
            process.communicate()
