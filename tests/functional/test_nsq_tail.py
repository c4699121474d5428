"""nsq_tail as a real program against real nsqd and nsqlookupd processes: what it prints, what it leaves on the
channel, how it stops, and NSQ's flag errors."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import FAST_SCAN, ROOT, NSQDProcess, nsqd_tcp_flag, start_lookupd, start_nsqd, wait_for

TIMEOUT = 30


def nsq_tail(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "apps.nsq_tail", *args], cwd=ROOT, capture_output=True,
                          timeout=timeout)


def start_tail(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "apps.nsq_tail", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def finish(process: subprocess.Popen[bytes], timeout: float = TIMEOUT) -> tuple[int, bytes, bytes]:
    """Waits for the program to end by itself (killed after ``timeout``); its exit status and output."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"nsq_tail did not exit: {stderr.decode(errors='replace')}") from None
    return process.returncode, stdout, stderr


def to_nsq(nsqd: NSQDProcess, topic: str, data: bytes) -> None:
    result = subprocess.run([sys.executable, "-m", "apps.to_nsq", f"--topic={topic}", nsqd_tcp_flag(nsqd)], cwd=ROOT,
                            input=data, capture_output=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr


def channels(nsqd: NSQDProcess, topic: str) -> dict[str, dict[str, Any]]:
    topics = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])["topics"] or []
    return {channel["channel_name"]: channel for stats in topics for channel in stats["channels"] or []}




def lines(stdout: bytes) -> list[bytes]:
    assert stdout.endswith(b"\n") or not stdout
    return stdout.split(b"\n")[:-1]


def test_a_round_trip_from_to_nsq(nsqd: NSQDProcess) -> None:
    records = [b"first", b"second line", b"\x00\xff\xfe binary \r", "caf\u00e9".encode(), b"last"]
    to_nsq(nsqd, "trip", b"\n".join(records) + b"\n")
    result = nsq_tail("--topic=trip", nsqd_tcp_flag(nsqd), f"-n={len(records)}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"".join(record + b"\n" for record in records)
    assert b"Adding consumer for topic: trip" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_default_channel_is_ephemeral_and_a_signal_stops_it(nsqd: NSQDProcess, signum: int) -> None:
    process = start_tail("--topic=live", nsqd_tcp_flag(nsqd))
    try:
        name = wait_for(lambda: next(iter(channels(nsqd, "live")), None))
        assert re.fullmatch(r"tail\d{6}#ephemeral", name)
        nsqd.publish("live", b"while", b"running")
        wait_for(lambda: channels(nsqd, "live")[name]["message_count"] == 2
                 and channels(nsqd, "live")[name]["in_flight_count"] == 0)  # both FIN'd
        clients = channels(nsqd, "live")[name]["clients"]
        assert [client["user_agent"] for client in clients] == ["nsq_tail/1.3.0 nsqclient/1.3.0"]
        process.send_signal(signum)
        status, stdout, _ = finish(process, 10)
        assert status == 0
        assert stdout == b"while\nrunning\n"
        wait_for(lambda: channels(nsqd, "live") == {})  # nsqd deleted it with its last client
    finally:
        process.kill()
        process.communicate()


def test_n_smaller_than_what_is_there_prints_exactly_n_and_leaves_the_rest(nsqd: NSQDProcess) -> None:
    bodies = [b"m%02d" % i for i in range(20)]
    nsqd.publish("one", *bodies[:10])
    nsqd.publish("two", *bodies[10:])
    # several topics, and more in flight than -n: the messages past n must go back, not be FIN'd
    args = ("--topic=one", "--topic=two", "--channel=kept", nsqd_tcp_flag(nsqd), "--max-in-flight=50")
    first = nsq_tail(*args, "-n=3")
    assert first.returncode == 0, first.stderr
    shown = lines(first.stdout)
    assert len(shown) == 3
    wait_for(lambda: sum(channels(nsqd, topic)["kept"]["depth"] for topic in ("one", "two")) == 17)
    second = nsq_tail(*args, "-n=17")
    assert second.returncode == 0, second.stderr
    assert sorted(shown + lines(second.stdout)) == bodies  # each exactly once over the two runs


def test_print_topic_with_two_topics(nsqd: NSQDProcess) -> None:
    nsqd.publish("apples", b"red", b"green")
    nsqd.publish("pears", b"yellow")
    result = nsq_tail("--topic=apples", "--topic=pears", "--print-topic", nsqd_tcp_flag(nsqd), "-n", "3")
    assert result.returncode == 0, result.stderr
    shown = lines(result.stdout)
    assert sorted(shown) == [b"apples | green", b"apples | red", b"pears | yellow"]
    assert [line for line in shown if line.startswith(b"apples")] == [b"apples | red", b"apples | green"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NSQDProcess, list[NSQDProcess]]]:
    """A lookupd and two nsqd registered with it."""
    lookupd = start_lookupd()
    started = [lookupd]
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            started.append(start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                      data_path=tmp_path / name))
        yield lookupd, started[1:]
    finally:
        for process in started:
            process.stop()


def test_via_lookupd_every_nsqd_feeds_the_tail(cluster: tuple[NSQDProcess, list[NSQDProcess]]) -> None:
    lookupd, nsqds = cluster
    # started before the topic exists anywhere: lookupd answers 404 until a later poll finds both nsqd
    process = start_tail("--topic=spread", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
                         "--consumer-opt=lookupd_poll_interval,200ms", "-n=4")
    try:
        for nsqd, bodies in zip(nsqds, ([b"a1", b"a2"], [b"b1", b"b2"])):
            nsqd.publish("spread", *bodies)
        status, stdout, stderr = finish(process)
        assert status == 0, stderr
        assert sorted(lines(stdout)) == [b"a1", b"a2", b"b1", b"b2"]
    finally:
        process.kill()
        process.communicate()


@pytest.mark.parametrize(("args", "message"), [
    (("--topic=t",), b"nsq_tail: --nsqd-tcp-address or --lookupd-http-address required"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--lookupd-http-address=127.0.0.1:4161"),
     b"nsq_tail: use --nsqd-tcp-address or --lookupd-http-address not both"),
    (("--nsqd-tcp-address=127.0.0.1:4150",), b"nsq_tail: --topic required"),
    (("--topic=no spaces", "--nsqd-tcp-address=127.0.0.1:4150"), b"nsq_tail: invalid topic name"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "-n=all"),
     b'nsq_tail: invalid value "all" for flag -n: parse error'),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--consumer-opt=snappy,true"),
     b'nsq_tail: invalid value "snappy,true" for flag -consumer-opt: invalid option snappy'),
    (("--topic=t", "--lines=3"), b"nsq_tail: flag provided but not defined: -lines"),
])
def test_bad_flags_exit_2_with_the_message(args: tuple[str, ...], message: bytes) -> None:
    result = nsq_tail(*args)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.strip().startswith(message)


def test_version() -> None:
    result = nsq_tail("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(b"nsq_tail v1.3.0 (built w/python")


def test_a_closed_stdout_exits_1_and_requeues(nsqd: NSQDProcess) -> None:
    nsqd.publish("closed", b"x" * 100_000, b"y")  # bigger than the pipe: the write fails, not only the flush
    process = subprocess.Popen([sys.executable, "-m", "apps.nsq_tail", "--topic=closed", "--channel=c",
                                nsqd_tcp_flag(nsqd)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        process.stdout.close()  # as `nsq_tail ... | head -0` would
        _, stderr = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 1
        assert b"ERROR: failed to write to os.Stdout - [Errno 32] Broken pipe" in stderr
        assert b"Traceback" not in stderr and b"Exception ignored" not in stderr
        wait_for(lambda: channels(nsqd, "closed")["c"]["depth"] == 2)  # nothing FIN'd
    finally:
        process.kill()
        process.communicate()
