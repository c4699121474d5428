"""nsq_tail's pure parts: flag checks, the default channel, and ``Tail`` (what is shown, FIN'd or requeued)."""

from __future__ import annotations

import asyncio
import io
import random
from functools import partial

import pytest

from apps.nsq_tail import Options, Tail, default_channel
from nsqclient import Message
from nsqclient.protocol.names import is_valid_channel_name
from tests.unit.tool_flags import parsed, refused

# -- flags -------------------------------------------------------------------------------------------------

NSQD = "--nsqd-tcp-address=127.0.0.1:4150"


options = partial(parsed, Options)
flag_error = partial(refused, Options)


def test_flags_as_nsq_names_them() -> None:
    opts = options("--topic=a", "-topic", "b", "--channel=c", NSQD, "--nsqd-tcp-address=[::1]:4150",
                   "--max-in-flight=50", "-n", "7", "--print-topic", "--consumer-opt=max_attempts,3")
    assert opts.topic == ["a", "b"]
    assert opts.nsqd_tcp_address == ["127.0.0.1:4150", "[::1]:4150"]
    assert (opts.channel, opts.max_in_flight, opts.n, opts.print_topic) == ("c", 50, 7, True)
    assert opts.consumer_opt == ["max_attempts,3"]
    assert options("--topic=t", NSQD, "--n=3").n == 3  # Go's flag package takes -n and --n alike


def test_defaults() -> None:
    opts = options("--topic=t", "--lookupd-http-address=127.0.0.1:4161")
    assert (opts.channel, opts.max_in_flight, opts.n, opts.print_topic, opts.consumer_opt) == ("", 200, 0, False, [])


@pytest.mark.parametrize(("n", "max_in_flight", "expected"), [
    (0, 200, 200),  # forever: the flag as given
    (-1, 200, 200),  # NSQ only lowers for n > 0
    (5, 200, 5),
    (200, 200, 200),
    (500, 200, 200),
    (3, 1, 1),
])
def test_max_in_flight_is_lowered_to_n(n: int, max_in_flight: int, expected: int) -> None:
    opts = options("--topic=t", NSQD, f"-n={n}", f"--max-in-flight={max_in_flight}")
    assert opts.consumer_max_in_flight() == expected


@pytest.mark.parametrize(("argv", "message"), [
    (("--topic=t",), "--nsqd-tcp-address or --lookupd-http-address required"),
    (("--topic=t", NSQD, "--lookupd-http-address=127.0.0.1:4161"),
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
    ((NSQD,), "--topic required"),
    ((), "--nsqd-tcp-address or --lookupd-http-address required"),  # NSQ checks the addresses first
    (("--topic=t", "--topic=bad/name", NSQD), "invalid topic name"),
    (("--topic=" + "t" * 65, NSQD), "invalid topic name"),
    (("--topic=t", "--channel=no spaces", NSQD), "invalid channel name"),
    (("--topic=t", NSQD, "--max-in-flight=0"), "--max-in-flight must be at least 1"),
    (("--topic=t", "--nsqd-tcp-address=localhost"), "--nsqd-tcp-address: address 'localhost': missing port"),
    (("--topic=t", "--lookupd-http-address=lookupd"), "--lookupd-http-address: address 'lookupd': missing port"),
    (("--topic=t", NSQD, "--consumer-opt=tls_v1,true"),
     'invalid value "tls_v1,true" for flag -consumer-opt: invalid option tls_v1'),
    (("--topic=t", NSQD, "--consumer-opt=lookupd_poll_interval,soon"),
     'invalid value "lookupd_poll_interval,soon" for flag -consumer-opt: failed to coerce option'),
])
def test_bad_flags_name_the_flag(argv: tuple[str, ...], message: str) -> None:
    assert flag_error(*argv).startswith(message)


def test_ephemeral_names_and_lookupd_urls_are_valid() -> None:
    opts = options("--topic=t#ephemeral", "--channel=c#ephemeral", "--lookupd-http-address=http://lookupd/")
    assert (opts.topic, opts.channel) == (["t#ephemeral"], "c#ephemeral")


def test_the_default_channel_is_ephemeral_with_six_digits() -> None:
    names = {default_channel(random.Random(seed)) for seed in range(50)}
    assert len(names) > 40
    for name in names:
        assert name.startswith("tail") and name.endswith("#ephemeral") and is_valid_channel_name(name)
        assert len(name) == len("tail") + 6 + len("#ephemeral") and name[4:10].isdigit()
    assert default_channel(random.Random(0)) == default_channel(random.Random(0))


# -- Tail --------------------------------------------------------------------------------------------------

class Responses:
    """The connection side of messages: records each response."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bytes, float | None, bool | None]] = []

    def finish(self, message: Message) -> None:
        self.log.append(("FIN", message.body, None, None))

    def requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.log.append(("REQ", message.body, delay, backoff))

    def touch(self, message: Message) -> None:
        self.log.append(("TOUCH", message.body, None, None))


def message(responses: Responses, body: bytes) -> Message:
    return Message(b"0123456789abcdef", body, 0, 1, "127.0.0.1:4150", responses)


class BrokenPipe(io.BytesIO):
    def __init__(self, fail_on: str) -> None:
        super().__init__()
        self.fail_on = fail_on

    def writelines(self, lines: object) -> None:
        if self.fail_on == "write":
            raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        if self.fail_on == "flush":
            raise BrokenPipeError(32, "Broken pipe")


async def deliver(tail: Tail, topic: str, responses: Responses, *bodies: bytes) -> None:
    """As the consumer does: the handler, then FIN unless the handler responded."""
    handle = tail.handler(topic)
    for body in bodies:
        msg = message(responses, body)
        await handle(msg)
        msg.finish()


async def test_bodies_are_written_as_bytes_with_a_newline() -> None:
    out, responses, finished = io.BytesIO(), Responses(), asyncio.Event()
    tail = Tail(out, 0, False, finished)
    await deliver(tail, "t", responses, b"plain", b"", b"\x00\xff binary\r", "caf\u00e9".encode())
    tail.flush()
    assert out.getvalue() == b"plain\n\n\x00\xff binary\r\ncaf\xc3\xa9\n"
    assert [response[0] for response in responses.log] == ["FIN"] * 4
    assert (tail.shown, finished.is_set()) == (4, False)


async def test_print_topic_prefixes_each_line() -> None:
    out, responses = io.BytesIO(), Responses()
    tail = Tail(out, 0, True, asyncio.Event())
    await deliver(tail, "first", responses, b"a")
    await deliver(tail, "second", responses, b"b")
    await deliver(tail, "first", responses, b"c")
    tail.flush()
    assert out.getvalue() == b"first | a\nsecond | b\nfirst | c\n"


async def test_n_counts_over_all_topics_and_requeues_the_rest() -> None:
    out, responses, finished = io.BytesIO(), Responses(), asyncio.Event()
    tail = Tail(out, 3, False, finished)
    await deliver(tail, "a", responses, b"1", b"2")
    assert not finished.is_set()
    await deliver(tail, "b", responses, b"3")
    assert finished.is_set()
    await deliver(tail, "a", responses, b"4")
    await deliver(tail, "b", responses, b"5")
    tail.flush()
    assert out.getvalue() == b"1\n2\n3\n"
    assert tail.shown == 3
    assert responses.log == [("FIN", b"1", None, None), ("FIN", b"2", None, None), ("FIN", b"3", None, None),
                             ("REQ", b"4", 0, False), ("REQ", b"5", 0, False)]


async def test_output_is_flushed_once_per_turn_of_the_loop() -> None:
    flushes: list[bytes] = []

    class Recorder(io.BytesIO):
        def flush(self) -> None:
            flushes.append(self.getvalue())

    out = Recorder()
    tail = Tail(out, 0, False, asyncio.Event())
    await deliver(tail, "t", Responses(), b"a", b"b", b"c")
    assert flushes == []
    await asyncio.sleep(0)
    assert flushes == [b"a\nb\nc\n"]
    await deliver(tail, "t", Responses(), b"d")
    tail.flush()  # at exit: at once, and the scheduled one is cancelled
    await asyncio.sleep(0)
    assert flushes == [b"a\nb\nc\n", b"a\nb\nc\nd\n"]


@pytest.mark.parametrize("fail_on", ["write", "flush"])
async def test_a_failed_write_finishes_and_requeues_what_comes_after(fail_on: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    responses, finished = Responses(), asyncio.Event()
    tail = Tail(BrokenPipe(fail_on), 0, False, finished)
    await deliver(tail, "t", responses, b"first")
    if fail_on == "flush":
        await asyncio.sleep(0)
    await deliver(tail, "t", responses, b"second")
    assert finished.is_set()
    assert isinstance(tail.error, BrokenPipeError)
    assert responses.log[-1] == ("REQ", b"second", 0, False)
    assert responses.log[0][0] == ("REQ" if fail_on == "write" else "FIN")
    assert "failed to write to os.Stdout - [Errno 32] Broken pipe" in caplog.text
    tail.flush()  # no second attempt, no second error
    assert caplog.text.count("failed to write") == 1
