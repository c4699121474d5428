"""nsq_to_file as a real program against real nsqd and nsqlookupd processes: what lands in the files, how they are
named and rotated, and that nothing nsqd counts as finished is missing from them, however the program ends."""

from __future__ import annotations

import asyncio
import gzip
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import aiohttp
import pytest

from harness import processes
from harness.processes import ROOT, NSQDProcess, ToolProcess, finished, nsqd_tcp_flag, start_lookupd, start_nsqd

CHANNEL = "nsq_to_file"
SHORT_HOST = socket.gethostname().split(".")[0]


@pytest.fixture
def archivers(tools: Callable[..., ToolProcess]) -> Callable[..., ToolProcess]:
    """Starts nsq_to_file processes."""
    return lambda *args: tools("apps.nsq_to_file", *args)


def drained(nsqd: NSQDProcess, topic: str, count: int) -> bool:
    """Whether all ``count`` messages of the topic went into the channel and were finished."""
    stats = nsqd.channel_stats(topic, CHANNEL)
    return bool(stats) and stats["message_count"] == count and finished(stats) == count


wait_for = partial(processes.wait_for, timeout=20.0)  # archiving thousands of messages takes a while here


def files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


def lines(directory: Path) -> list[bytes]:
    """Every line of every file under ``directory`` (gzip files decompressed), file by file in name order."""
    found = []
    for path in files(directory):
        data = path.read_bytes()
        found.extend((gzip.decompress(data) if path.suffix == ".gz" else data).splitlines())
    return found


def bodies(prefix: str, count: int, start: int = 0) -> list[bytes]:
    return [b"%s-%06d" % (prefix.encode(), n) for n in range(start, start + count)]


def test_every_message_of_a_topic_is_written_and_finished(nsqd: NSQDProcess, archivers: Callable[..., ToolProcess],
                                                          tmp_path: Path) -> None:
    sent = bodies("m", 1000)
    nsqd.multi_publish("archive", sent)
    archiver = archivers("--topic=archive", nsqd_tcp_flag(nsqd), f"--output-dir={tmp_path / 'out'}",
                         "--sync-interval=100ms")
    # the last batch is smaller than starvation asks for: the sync ticker finishes it
    wait_for(lambda: drained(nsqd, "archive", 1000))
    assert archiver.stop() == 0
    [path] = files(tmp_path / "out")
    assert re.fullmatch(rf"archive\.{re.escape(SHORT_HOST)}\.\d{{4}}-\d\d-\d\d_\d\d\.log", path.name)
    assert path.read_bytes() == b"".join(body + b"\n" for body in sent)
    assert "nsqd 127.0.0.1" in archiver.log and "syncing" in archiver.log


def test_filename_tokens_and_the_move_from_the_work_dir(nsqd: NSQDProcess, archivers: Callable[..., ToolProcess],
                                                       tmp_path: Path) -> None:
    nsqd.multi_publish("named", bodies("n", 10))
    work, output = tmp_path / "work", tmp_path / "out"
    archiver = archivers("--topic=named", nsqd_tcp_flag(nsqd), f"--output-dir={output}", f"--work-dir={work}",
                         "--filename-format=<TOPIC>/<HOST>-<PID><REV>.<DATETIME>.txt", "--datetime-format=%Y%m%d",
                         "--host-identifier=box-<SHORT_HOST>", "--sync-interval=100ms")
    wait_for(lambda: drained(nsqd, "named", 10))
    assert [path.name for path in files(work)] != []  # in progress in the work dir
    assert archiver.stop() == 0
    assert files(work) == []
    [path] = files(output)
    pid, day = archiver.process.pid, time.strftime("%Y%m%d")
    assert path.relative_to(output) == Path("named") / f"box-{SHORT_HOST}-{pid}-000000.{day}.txt"
    assert path.read_bytes().splitlines() == bodies("n", 10)


def test_rotation_by_size_splits_the_messages_over_files(nsqd: NSQDProcess, archivers: Callable[..., ToolProcess],
                                                         tmp_path: Path) -> None:
    sent = bodies("rotate", 600)  # 14 bytes a line, 8400 in all
    nsqd.multi_publish("sized", sent)
    out = tmp_path / "out"
    archiver = archivers("--topic=sized", nsqd_tcp_flag(nsqd), f"--output-dir={out}",
                         "--filename-format=<TOPIC><REV>.log", "--rotate-size=2000", "--sync-interval=100ms")
    wait_for(lambda: drained(nsqd, "sized", 600))
    assert archiver.stop() == 0
    written = files(out)
    assert [path.name for path in written] == [f"sized-{rev:06d}.log" for rev in range(len(written))]
    assert len(written) == 5  # over 2000 bytes each time a line is to be written: 143 lines a file
    assert all(path.stat().st_size <= 2000 + 14 for path in written)
    assert lines(out) == sent


def test_gzip_files_read_back_whole(nsqd: NSQDProcess, archivers: Callable[..., ToolProcess], tmp_path: Path) -> None:
    out = tmp_path / "out"
    archiver = archivers("--topic=zipped", nsqd_tcp_flag(nsqd), f"--output-dir={out}", "--gzip",
                         "--gzip-level=9", "--sync-interval=100ms")
    nsqd.multi_publish("zipped", bodies("z", 300))
    wait_for(lambda: drained(nsqd, "zipped", 300))
    nsqd.multi_publish("zipped", bodies("z", 300, start=300))  # a second sync: a second gzip member
    wait_for(lambda: drained(nsqd, "zipped", 600))
    assert archiver.stop() == 0
    [path] = files(out)
    assert re.fullmatch(rf"zipped\.{re.escape(SHORT_HOST)}-000000\.\d{{4}}-\d\d-\d\d_\d\d\.log\.gz", path.name)
    assert path.read_bytes().count(b"\x1f\x8b\x08\x00") >= 2
    assert lines(out) == bodies("z", 600)


def test_sighup_closes_the_file_and_the_next_message_opens_the_next_rev(
        nsqd: NSQDProcess, archivers: Callable[..., ToolProcess], tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    archiver = archivers("--topic=hup", nsqd_tcp_flag(nsqd), f"--output-dir={out}", f"--work-dir={work}",
                         "--gzip", "--filename-format=<TOPIC><REV>.log", "--sync-interval=100ms")
    nsqd.multi_publish("hup", bodies("before", 5))
    wait_for(lambda: drained(nsqd, "hup", 5))
    assert files(out) == []
    archiver.process.send_signal(signal.SIGHUP)
    wait_for(lambda: files(out))  # closed, so moved out of the work dir
    nsqd.multi_publish("hup", bodies("after", 5))
    wait_for(lambda: drained(nsqd, "hup", 10))
    assert archiver.stop() == 0
    assert [path.name for path in files(out)] == ["hup-000000.log.gz", "hup-000001.log.gz"]
    assert lines(out) == bodies("before", 5) + bodies("after", 5)
    assert files(work) == []


def test_topics_matching_a_pattern_are_discovered_through_lookupd(archivers: Callable[..., ToolProcess],
                                                                   tmp_path: Path) -> None:
    lookupd = start_lookupd()
    nsqd = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", data_path=tmp_path)
    try:
        nsqd.multi_publish("match-a", bodies("a", 20))
        nsqd.multi_publish("other", bodies("o", 20))
        archiver = archivers(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", "--topic-pattern=^match",
                             "--topic-refresh=200ms", "--consumer-opt=lookupd_poll_interval,200ms",
                             f"--output-dir={tmp_path / 'out'}", "--sync-interval=100ms",
                             "--filename-format=<TOPIC>.log")
        wait_for(lambda: drained(nsqd, "match-a", 20))
        nsqd.multi_publish("match-b", bodies("b", 20))  # a topic that appears later is found at a later refresh
        wait_for(lambda: drained(nsqd, "match-b", 20))
        assert archiver.stop() == 0
        assert [path.name for path in files(tmp_path / "out")] == ["match-a.log", "match-b.log"]
        assert (tmp_path / "out" / "match-b.log").read_bytes().splitlines() == bodies("b", 20)
        assert nsqd.channel_stats("other", CHANNEL) == {}  # never subscribed
        assert archiver.log.count("skipping topic other") == 1
    finally:
        nsqd.stop()
        lookupd.stop()


async def publish_stream(nsqd: NSQDProcess, topic: str, sent: list[bytes], total: int,
                         batch: int = 100) -> None:
    """Publishes ``total`` numbered messages in MPUB batches, a little at a time, recording each batch sent."""
    url = nsqd.http_url(f"/mpub?topic={topic}")
    async with aiohttp.ClientSession() as session:
        for start in range(0, total, batch):
            chunk = bodies("s", min(batch, total - start), start)
            async with session.post(url, data=b"\n".join(chunk)) as response:
                assert response.status == 200
            sent.extend(chunk)
            await asyncio.sleep(0.005)


async def stop_mid_stream(nsqd: NSQDProcess, archiver: ToolProcess, total: int, sig: int) -> list[bytes]:
    """Streams ``total`` messages; ``sig`` goes to the archiver once a third of them are published and it has
    finished some. Returns everything published."""
    sent: list[bytes] = []
    stream = asyncio.create_task(publish_stream(nsqd, "stream", sent, total))

    def a_third_sent_and_some_finished() -> bool:
        assert not stream.done(), "the archiver finished nothing while a third of the stream went by"
        return len(sent) >= total // 3 and finished(nsqd.channel_stats("stream", CHANNEL)) > 0

    await processes.wait_for_async(a_third_sent_and_some_finished, 30, "a third sent and some of it archived",
                                   interval=0.02)
    returncode = await asyncio.to_thread(archiver.stop, sig)
    assert len(sent) < total, "stopped after the stream ended: publish more, or faster"
    await stream
    assert returncode == (0 if sig == signal.SIGTERM else -signal.SIGKILL), archiver.log
    return sent


def check_finished_are_archived(nsqd: NSQDProcess, first_run: list[bytes], sent: list[bytes]) -> None:
    stats = nsqd.channel_stats("stream", CHANNEL)
    assert stats["message_count"] == len(sent)
    assert set(first_run) <= set(sent)
    assert len(set(first_run)) >= finished(stats) > 0


@pytest.mark.slow
async def test_sigterm_mid_stream_finishes_only_what_is_archived(
        nsqd_factory: Callable[..., NSQDProcess], archivers: Callable[..., ToolProcess], tmp_path: Path) -> None:
    nsqd = nsqd_factory("--mem-queue-size=100000")
    total = 30_000
    first = archivers("--topic=stream", nsqd_tcp_flag(nsqd), f"--output-dir={tmp_path / 'first'}")
    sent = await stop_mid_stream(nsqd, first, total, signal.SIGTERM)
    first_run = lines(tmp_path / "first")
    check_finished_are_archived(nsqd, first_run, sent)
    assert nsqd.channel_stats("stream", CHANNEL)["in_flight_count"] == 0  # a graceful stop leaves nothing in flight
    assert len(first_run) == len(set(first_run)) == finished(nsqd.channel_stats("stream", CHANNEL))

    second = archivers("--topic=stream", nsqd_tcp_flag(nsqd), f"--output-dir={tmp_path / 'second'}",
                       "--sync-interval=100ms")
    await asyncio.to_thread(wait_for, lambda: drained(nsqd, "stream", total), timeout=40)
    assert second.stop() == 0
    second_run = lines(tmp_path / "second")
    assert set(first_run) | set(second_run) == set(sent)
    assert not set(first_run) & set(second_run)


@pytest.mark.slow
async def test_sigkill_mid_stream_loses_nothing(nsqd_factory: Callable[..., NSQDProcess],
                                                archivers: Callable[..., ToolProcess], tmp_path: Path) -> None:
    nsqd = nsqd_factory("--mem-queue-size=100000")
    total = 30_000
    # what the killed process had in flight stays in flight until its timeout (as in NSQ): a short one
    first = archivers("--topic=stream", nsqd_tcp_flag(nsqd), f"--output-dir={tmp_path / 'first'}",
                      "--consumer-opt=msg_timeout,2s")
    sent = await stop_mid_stream(nsqd, first, total, signal.SIGKILL)
    published = set(sent)
    first_run = [line for line in lines(tmp_path / "first") if line in published]  # a torn last line aside
    check_finished_are_archived(nsqd, first_run, sent)

    second = archivers("--topic=stream", nsqd_tcp_flag(nsqd), f"--output-dir={tmp_path / 'second'}",
                       "--sync-interval=100ms")
    await asyncio.to_thread(wait_for, lambda: drained(nsqd, "stream", total), timeout=40)
    assert second.stop() == 0
    assert set(first_run) | set(lines(tmp_path / "second")) == published


@pytest.mark.parametrize(("args", "message"), [
    (("--topic=t",), "nsq_to_file: --nsqd-tcp-address or --lookupd-http-address required."),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--lookupd-http-address=127.0.0.1:4161"),
     "nsq_to_file: use --nsqd-tcp-address or --lookupd-http-address not both"),
    (("--nsqd-tcp-address=127.0.0.1:4150",), "nsq_to_file: --topic or --topic-pattern required"),
    (("--topic-pattern=.", "--nsqd-tcp-address=127.0.0.1:4150"),
     "nsq_to_file: --lookupd-http-address must be specified when no --topic specified"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--gzip-level=10"),
     "nsq_to_file: invalid --gzip-level value (10), should be 1-9"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--channel="), "nsq_to_file: --channel is required"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--http-client-request-timeout=0s"),
     "nsq_to_file: --http-client-request-timeout should be positive"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--gzip", "--filename-format=<TOPIC>.log"),
     "nsq_to_file: missing <REV> in --filename-format when gzip, rotation, or work dir enabled"),
    (("--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--rotate-interval=soon"),
     'nsq_to_file: invalid value "soon" for flag -rotate-interval: parse error'),
])
def test_bad_flags_exit_2_with_nsqs_message(args: tuple[str, ...], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "apps.nsq_to_file", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_a_file_that_cannot_be_written_ends_the_program_with_1(nsqd: NSQDProcess,
                                                                archivers: Callable[..., ToolProcess],
                                                                tmp_path: Path) -> None:
    (tmp_path / "blocked").write_bytes(b"a file where the output directory should be")
    nsqd.multi_publish("doomed", bodies("d", 5))
    archiver = archivers("--topic=doomed", nsqd_tcp_flag(nsqd), f"--output-dir={tmp_path / 'blocked'}")
    assert archiver.process.wait(20) == 1
    assert "FATAL: [doomed/nsq_to_file] unable to open file:" in archiver.log
    stats = nsqd.channel_stats("doomed", CHANNEL)
    assert (stats["message_count"], finished(stats)) == (5, 0)  # received, never finished
