"""``nsq_to_file``: archives topics to newline-delimited files (NSQ's ``apps/nsq_to_file``).

Each topic gets a ``TopicArchiver``: a consumer on ``--channel`` whose handler hands every message, with its
automatic response disabled, to the topic's ``FileLogger`` (``apps/file_logger.py``: names, rotation, gzip, the
move from the work directory). Messages are finished in batches, after their lines are fsync'd: when a batch
reaches ``--max-in-flight``, when the consumer is starved (nsqd will send no more until some are finished), every
``--sync-interval``, when a file rotates, on SIGHUP (which also closes the files; the next message opens new
ones) and while stopping. So a message nsqd counts as finished is on disk; a crash only ever repeats lines.

Topics are the ``--topic`` ones, or, without any, every topic ``--lookupd-http-address`` knows (``/topics``,
polled every ``--topic-refresh``); ``--topic-pattern`` (a regular expression searched in the name) filters both.

SIGINT/SIGTERM stop gracefully: each consumer sends CLS and waits until nsqd has an answer for every message in
flight, while its archiver keeps syncing and finishing; then the files are closed. A failed file operation ends
the program with status 1 (as NSQ's does) without finishing anything more.

Where this differs from NSQ, on purpose: with ``--topic-pattern`` the lookupds are asked at once, not only after
the first ``--topic-refresh``; a topic the pattern skips is logged once, not at every refresh; flags NSQ only
trips over later (a missing ``<REV>``, a bad pattern or topic name, a non-positive interval) are refused up front
with exit status 2.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nsqclient import Consumer, Message, user_agent
from nsqclient.protocol.names import is_valid_name
from shared.cluster_info import ClusterInfo, ClusterInfoError, gather_answers
from shared.flags import FlagError, option, require_positive
from shared.program import ProgramOptions, run_tool
from shared.version import version_line

from .client_options import check_tcp_addresses, consumer_settings
from .file_logger import (
    REV_REQUIRED,
    ArchiveError,
    FileLogger,
    LoggerSettings,
    Placement,
    filename_format,
    host_identifier,
    rev_required,
)

log = logging.getLogger("nsq_to_file")

USER_AGENT = user_agent("nsq_to_file")
STOP_SYNC_INTERVAL = 0.05  # while stopping, how often what came in is synced and finished


@dataclass
class Options(ProgramOptions):
    log_prefix: str = option("[nsq_to_file] ", "log message prefix")
    channel: str = option("nsq_to_file", "nsq channel")
    max_in_flight: int = option(200, "max number of messages to allow in flight")
    output_dir: str = option("/tmp", "directory to write output files to")
    work_dir: str = option("", "directory for in-progress files before moving to output-dir")
    datetime_format: str = option("%Y-%m-%d_%H", "strftime compatible format for <DATETIME> in filename format")
    filename_format: str = option("<TOPIC>.<HOST><REV>.<DATETIME>.log",
                                  "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
                                  "<REV> is increased when file already exists)")
    host_identifier: str = option("", "value to output in log filename in place of hostname. <SHORT_HOST> and "
                                      "<HOSTNAME> are valid replacement tokens")
    gzip_level: int = option(6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
    gzip: bool = option(False, "gzip output files.")
    skip_empty_files: bool = option(False, "skip writing empty files")
    topic_refresh: float = option(60.0, "how frequently the topic list should be refreshed", kind="duration")
    topic_pattern: str = option("", "only log topics matching the following pattern")
    rotate_size: int = option(0, "rotate the file when it grows bigger than `rotate-size` bytes")
    rotate_interval: float = option(0.0, "rotate the file every duration", kind="duration")
    sync_interval: float = option(30.0, "sync file to disk every duration", kind="duration")
    http_client_connect_timeout: float = option(2.0, "timeout for HTTP connect", kind="duration")
    http_client_request_timeout: float = option(5.0, "timeout for HTTP request", kind="duration")
    nsqd_tcp_address: list[str] = option([], "nsqd TCP address (may be given multiple times)")
    lookupd_http_address: list[str] = option([], "lookupd HTTP address (may be given multiple times)")
    topic: list[str] = option([], "nsq topic (may be given multiple times)")
    consumer_opt: list[str] = option([], "option to passthrough to nsq.Consumer (may be given multiple times, "
                                         "as key,value; go-nsq Config names)")

    @property
    def work_directory(self) -> str:
        return self.work_dir or self.output_dir

    def validate(self) -> None:
        """NSQ's checks in NSQ's order and words, then the ones NSQ only trips over later."""
        super().validate()
        if not self.channel:
            raise FlagError("--channel is required")
        require_positive(self, "http_client_connect_timeout", "http_client_request_timeout")
        if not self.nsqd_tcp_address and not self.lookupd_http_address:
            raise FlagError("--nsqd-tcp-address or --lookupd-http-address required.")
        if self.nsqd_tcp_address and self.lookupd_http_address:
            raise FlagError("use --nsqd-tcp-address or --lookupd-http-address not both")
        if not 1 <= self.gzip_level <= 9:
            raise FlagError(f"invalid --gzip-level value ({self.gzip_level}), should be 1-9")
        if not self.topic and not self.topic_pattern:
            raise FlagError("--topic or --topic-pattern required")
        if not self.topic and not self.lookupd_http_address:
            raise FlagError("--lookupd-http-address must be specified when no --topic specified")
        self._validate_more()

    def _validate_more(self) -> None:
        if not is_valid_name(self.channel):
            raise FlagError("--channel is invalid")
        if any(not is_valid_name(topic) for topic in self.topic):
            raise FlagError("--topic is invalid")
        try:
            re.compile(self.topic_pattern)
        except re.error as error:
            raise FlagError(f"--topic-pattern is invalid - {error}") from None
        require_positive(self, "max_in_flight", "sync_interval", "topic_refresh")
        if "<REV>" not in self.filename_format and rev_required(
                self.gzip, self.rotate_size, self.rotate_interval, self.work_directory, self.output_dir):
            raise FlagError(REV_REQUIRED)
        check_tcp_addresses("nsqd-tcp-address", self.nsqd_tcp_address)
        consumer_settings(self.consumer_opt)


def logger_settings(opts: Options, topic: str) -> LoggerSettings:
    with_rev = rev_required(opts.gzip, opts.rotate_size, opts.rotate_interval, opts.work_directory,
                            opts.output_dir)
    host = host_identifier(opts.host_identifier, socket.gethostname())
    placement = Placement(opts.work_directory, opts.output_dir, opts.gzip or opts.rotate_interval > 0,
                          opts.rotate_size, opts.gzip_level if opts.gzip else None)
    return LoggerSettings(filename_format(opts.filename_format, topic, host, os.getpid(), opts.gzip, with_rev),
                          opts.datetime_format, opts.rotate_interval, opts.rotate_size, opts.skip_empty_files,
                          placement)


def topic_allowed(pattern: str, topic: str) -> bool:
    """NSQ's ``regexp.MatchString``: the pattern may match anywhere in the name; an empty pattern allows all."""
    return not pattern or re.search(pattern, topic) is not None


class TopicArchiver:
    """One topic: its consumer, its file logger, and the ticker that syncs (and rotates) every --sync-interval."""

    def __init__(self, topic: str, opts: Options, settings: dict[str, Any],
                 on_failure: Callable[[ArchiveError], None]) -> None:
        self.consumer = Consumer(topic, opts.channel, self._handle, nsqd_tcp_addresses=opts.nsqd_tcp_address,
                                 lookupd_http_addresses=opts.lookupd_http_address, **settings)
        self.logger = FileLogger(f"[{topic}/{opts.channel}]", logger_settings(opts, topic))
        self._batch = opts.max_in_flight
        self._sync_interval = opts.sync_interval
        self._on_failure = on_failure
        self._ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self._ticker = asyncio.create_task(self._tick())

    async def hup(self) -> None:
        """Syncs and closes the file (the next message opens a new one), as NSQ does on SIGHUP."""
        await self._guarded(self.logger.close())

    async def stop(self) -> None:
        """CLS, and syncing and finishing what is still in flight until nsqd has every answer; then the file is
        closed. The consumer stops without waiting when a file operation fails."""
        await self._stop_ticker()
        stopping = asyncio.ensure_future(self.consumer.stop())
        try:
            while not stopping.done():
                await self.logger.sync()
                await asyncio.wait([stopping], timeout=STOP_SYNC_INTERVAL)
            await self.logger.close()
        except ArchiveError as error:
            self._on_failure(error)
            stopping.cancel()
        await asyncio.wait([stopping])
        if stopping.cancelled():
            await self.consumer.stop(timeout=0)
        self.logger.shutdown()

    async def abort(self) -> None:
        """Ends at once: nothing more is finished, nsqd requeues what was in flight."""
        await self._stop_ticker()
        await self.consumer.stop(timeout=0)
        self.logger.shutdown()

    async def _handle(self, message: Message) -> None:
        message.disable_auto_response()
        try:
            await self.logger.write(message)
            if self.logger.pending >= self._batch or self.consumer.is_starved():
                await self.logger.sync()
        except ArchiveError as error:
            self._on_failure(error)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._sync_interval)
            if not await self._guarded(self.logger.tick()):
                return

    async def _guarded(self, operation: Awaitable[None]) -> bool:
        try:
            await operation
        except ArchiveError as error:
            self._on_failure(error)
            return False
        return True

    async def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.wait([self._ticker])


class TopicDiscoverer:
    """The archivers of every topic to archive (NSQ's ``TopicDiscoverer``); ``failed`` is set when one failed."""

    def __init__(self, opts: Options) -> None:
        self.archivers: dict[str, TopicArchiver] = {}
        self.failed = asyncio.Event()
        self._opts = opts
        self._settings = {**consumer_settings(opts.consumer_opt), "max_in_flight": opts.max_in_flight,
                          "user_agent": USER_AGENT}
        self._skipped: set[str] = set()
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.update_topics(self._opts.topic)
        if not self._opts.topic:
            self._poller = asyncio.create_task(self._poll())

    async def update_topics(self, topics: Iterable[str]) -> None:
        """Starts an archiver for each topic that is new and allowed by ``--topic-pattern``."""
        for topic in topics:
            if topic in self.archivers or topic in self._skipped:
                continue
            if not topic_allowed(self._opts.topic_pattern, topic):
                log.warning("skipping topic %s (doesn't match pattern %s)", topic, self._opts.topic_pattern)
                self._skipped.add(topic)
                continue
            try:
                archiver = TopicArchiver(topic, self._opts, self._settings, self._fail)
            except ValueError as error:  # a name nsqd would refuse
                log.error("couldn't create logger for new topic %s: %s", topic, error)
                self._skipped.add(topic)
                continue
            self.archivers[topic] = archiver
            await archiver.start()

    async def hup(self) -> None:
        await asyncio.gather(*(archiver.hup() for archiver in self.archivers.values()))

    async def stop(self) -> None:
        await self._stop_poller()
        await asyncio.gather(*(archiver.stop() for archiver in self.archivers.values()))

    async def abort(self) -> None:
        await self._stop_poller()
        await asyncio.gather(*(archiver.abort() for archiver in self.archivers.values()))

    def _fail(self, error: ArchiveError) -> None:
        if not self.failed.is_set():
            log.critical("%s", error)
        self.failed.set()

    async def _poll(self) -> None:
        async with ClusterInfo.open(self._opts.http_client_connect_timeout, self._opts.http_client_request_timeout,
                                    USER_AGENT) as cluster:
            while True:
                topics = await self._topics(cluster)
                if topics is not None:
                    await self.update_topics(topics)
                await asyncio.sleep(self._opts.topic_refresh)

    async def _topics(self, cluster: ClusterInfo) -> list[str] | None:
        """Every topic the lookupds know, sorted; None (and logged) when none of them answered."""
        answers = await gather_answers(cluster.topics(address) for address in self._opts.lookupd_http_address)
        found = []
        for answer in answers:
            if isinstance(answer, ClusterInfoError):
                log.error("could not retrieve topic list: %s", answer)
            else:
                found.append(answer)
        return sorted({topic for topics in found for topic in topics}) if found else None

    async def _stop_poller(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.wait([self._poller])


async def _any_set(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.wait(waiters)


async def run(opts: Options, stopping: asyncio.Event) -> int:
    """The program: archives until SIGINT/SIGTERM (0), or until a file operation fails (1)."""
    discoverer = TopicDiscoverer(opts)
    hangup = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, hangup.set)
    try:
        await discoverer.start()
        while True:
            await _any_set(stopping, hangup, discoverer.failed)
            if stopping.is_set() or discoverer.failed.is_set():
                break
            hangup.clear()
            await discoverer.hup()
        if not discoverer.failed.is_set():
            await discoverer.stop()
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
    if discoverer.failed.is_set():
        await discoverer.abort()  # after a failed stop too: harmless for what already stopped
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    run_tool("nsq_to_file", Options, version_line("nsq_to_file"), run, argv)


if __name__ == "__main__":
    main()
