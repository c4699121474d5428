"""``nsq_tail``: consumes topics and writes each message body and a newline to stdout (NSQ's ``apps/nsq_tail``).

One consumer per ``--topic``, all on the same channel (by default ``tail<6 digits>#ephemeral``, which nsqd deletes
when the program leaves), from the ``--nsqd-tcp-address`` ones or the nsqd the ``--lookupd-http-address`` ones
know. Each message shown is FIN'd. With ``-n``, the program shows that many messages over all topics and exits 0;
SIGINT or SIGTERM stop it cleanly, exit 0 too. A failed write to stdout ends it with exit status 1.

Invariants:

- bodies are bytes and leave as they came (``sys.stdout.buffer``), flushed once per turn of the event loop: a
  burst of messages costs one write, and nothing waits in the buffer while the program waits for more;
- a message is FIN'd only once written: past ``-n``, or after a failed write, it is requeued at once (REQ 0,
  without backoff), so a named channel keeps it for the next run.

Where this differs from NSQ, on purpose: ``-n`` counts messages over all topics (NSQ counts per topic and exits
when one topic reaches n, so with several topics it can print more than n); an nsqd that cannot be reached at
start is retried in the background (NSQ exits 1); a topic or channel name that is not valid, or a
``--max-in-flight`` below 1, is a flag error (exit 2) rather than go-nsq's exit 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO

from nsqclient import Consumer, Message, user_agent
from nsqclient.consumer import Handler
from nsqclient.protocol.names import is_valid_channel_name, is_valid_topic_name
from shared.flags import FlagError, option
from shared.program import ProgramOptions, run_tool
from shared.version import version_line

from .client_options import check_sources, consumer_settings, run_consumers

log = logging.getLogger("nsq_tail")

USER_AGENT = user_agent("nsq_tail")


@dataclass
class Options(ProgramOptions):
    topic: list[str] = option([], "NSQ topic (may be given multiple times)")
    channel: str = option("", "NSQ channel")
    max_in_flight: int = option(200, "max number of messages to allow in flight")
    n: int = option(0, "total messages to show (will wait if starved)")
    print_topic: bool = option(False, "print topic name where message was received")
    nsqd_tcp_address: list[str] = option([], "nsqd TCP address (may be given multiple times)")
    lookupd_http_address: list[str] = option([], "lookupd HTTP address (may be given multiple times)")
    consumer_opt: list[str] = option([], "option to passthrough to nsq.Consumer (may be given multiple times, "
                                         "http://godoc.org/github.com/nsqio/go-nsq#Config)")

    def validate(self) -> None:
        """NSQ's checks in NSQ's order and words (``--consumer-opt`` first: Go's flag parsing reads it)."""
        super().validate()
        consumer_settings(self.consumer_opt)
        check_sources(self.nsqd_tcp_address, self.lookupd_http_address)
        if not self.topic:
            raise FlagError("--topic required")
        if not all(is_valid_topic_name(topic) for topic in self.topic):
            raise FlagError("invalid topic name")  # go-nsq's NewConsumer error
        if self.channel and not is_valid_channel_name(self.channel):
            raise FlagError("invalid channel name")
        if self.max_in_flight < 1:
            raise FlagError("--max-in-flight must be at least 1")

    def consumer_max_in_flight(self) -> int:
        """``--max-in-flight``, lowered to ``-n`` when that is smaller: no point asking for more than we show."""
        return self.n if 0 < self.n < self.max_in_flight else self.max_in_flight


def default_channel(rng: random.Random | None = None) -> str:
    """``tail<6 digits>#ephemeral``, from NSQ's ``rand.Int() % 999999``."""
    return f"tail{(rng or random.Random()).randrange(999999):06d}#ephemeral"


class Tail:
    """Shows messages on ``out``: each body and a newline, after ``topic | `` with ``print_topic``; sets
    ``finished`` once ``total`` were shown over all topics (0: no limit) or a write failed."""

    def __init__(self, out: BinaryIO, total: int, print_topic: bool, finished: asyncio.Event) -> None:
        self.shown = 0
        self.error: OSError | None = None
        self._out = out
        self._total = total
        self._print_topic = print_topic
        self._finished = finished
        self._flush_pending: asyncio.Handle | None = None

    def handler(self, topic: str) -> Handler:
        """The handler of ``topic``'s consumer."""
        prefix = f"{topic} | ".encode() if self._print_topic else b""

        async def handle(message: Message) -> None:
            self.show(prefix, message)

        return handle

    def show(self, prefix: bytes, message: Message) -> None:
        """Writes the message and leaves it to be FIN'd, or requeues it when no more may be shown."""
        if self.error is not None or (self._total and self.shown >= self._total):
            message.requeue(0, backoff=False)
            return
        try:
            self._out.writelines((prefix, message.body, b"\n"))
        except OSError as error:
            message.requeue(0, backoff=False)
            self._fail(error)
            return
        self.shown += 1
        if self._total and self.shown >= self._total:
            self._finished.set()
        if self._flush_pending is None:  # one flush for all the messages handled in this turn of the loop
            self._flush_pending = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        if self._flush_pending is not None:
            self._flush_pending.cancel()
            self._flush_pending = None
        if self.error is None:
            try:
                self._out.flush()
            except OSError as error:
                self._fail(error)

    def _fail(self, error: OSError) -> None:
        log.error("failed to write to os.Stdout - %s", error)
        self.error = error
        self._finished.set()


async def run(opts: Options, stopping: asyncio.Event) -> int:
    """The program: 0 after ``-n`` messages or a signal, 1 when stdout could not be written."""
    tail = Tail(sys.stdout.buffer, opts.n, opts.print_topic, stopping)
    consumers = _consumers(opts, tail)
    try:
        await run_consumers(consumers, stopping)
    finally:
        tail.flush()
    if tail.error is not None:
        _discard_stdout()
        return 1
    return 0


def _consumers(opts: Options, tail: Tail) -> list[Consumer]:
    channel = opts.channel or default_channel()
    # as in NSQ, the flags win over the same options given as --consumer-opt
    settings: dict[str, Any] = {**consumer_settings(opts.consumer_opt),
                                "max_in_flight": opts.consumer_max_in_flight(), "user_agent": USER_AGENT}
    consumers = []
    for topic in opts.topic:
        log.info("Adding consumer for topic: %s", topic)
        consumers.append(Consumer(topic, channel, tail.handler(topic), nsqd_tcp_addresses=opts.nsqd_tcp_address,
                                  lookupd_http_addresses=opts.lookupd_http_address, **settings))
    return consumers


def _discard_stdout() -> None:
    """Points stdout at /dev/null, so that the interpreter's last flush of what the failed write left in the
    buffer does not fail again (and print a traceback) at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def main(argv: list[str] | None = None) -> None:
    run_tool("nsq_tail", Options, version_line("nsq_tail"), run, argv)


if __name__ == "__main__":
    main()
