"""What ``nsq_to_http`` and ``nsq_to_nsq`` share: consuming topics, handing each message to its destinations,
and answering nsqd only once they took it.

A message is FIN'd when every destination ``Destinations`` chose for it took it (a 2xx, nsqd's ``OK``); if any did
not, it is requeued with backoff (the consumer's delay for its attempt, its RDY paused as go-nsq does), and its
next delivery goes where ``Destinations`` then says. Nothing is answered before the destinations did, so stopping
or killing the relay at any moment loses nothing: what was not FIN'd, nsqd delivers again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from nsqclient import Consumer, Message
from nsqclient.consumer import Handler
from nsqclient.errors import describe
from nsqclient.protocol.names import is_valid_channel_name
from shared.flags import FlagError, option
from shared.program import ProgramOptions

from .client_options import check_sources, consumer_settings
from .destinations import MODES, Destinations
from .latency_log import LatencyLog

Send = Callable[[str], Awaitable[Any]]  # sends the message at hand to an address; raises when it was not taken


@dataclass
class RelayOptions(ProgramOptions):
    """The flags both relays have (each sets its own ``--channel`` default)."""

    channel: str = option("", "nsq channel")
    max_in_flight: int = option(200, "max number of messages to allow in flight")
    mode: str = option("hostpool", "the upstream request mode options: hostpool, round-robin, multicast")
    status_every: int = option(250, "the # of requests between logging status (per destination), 0 disables")
    nsqd_tcp_address: list[str] = option([], "nsqd TCP address (may be given multiple times)")
    lookupd_http_address: list[str] = option([], "lookupd HTTP address (may be given multiple times)")
    consumer_opt: list[str] = option([], "option to passthrough to nsq.Consumer (may be given multiple times, "
                                         "http://godoc.org/github.com/nsqio/go-nsq#Config)")

    def validate_relay(self) -> None:
        """The checks both relays make after their own first ones, in NSQ's words."""
        if not is_valid_channel_name(self.channel):
            raise FlagError("--channel is invalid")
        check_sources(self.nsqd_tcp_address, self.lookupd_http_address)
        if self.mode not in MODES:
            raise FlagError(f"--mode must be one of {', '.join(MODES)} (not {self.mode!r})")
        if self.max_in_flight < 1:
            raise FlagError("--max-in-flight must be at least 1")
        if self.status_every < 0:
            raise FlagError("--status-every cannot be negative")
        consumer_settings(self.consumer_opt)

    def consumer(self, topic: str, handler: Handler, concurrency: int, user_agent: str) -> Consumer:
        # a relay never gives up on a message its destination did not take (go-nsq drops it after 5 attempts;
        # --consumer-opt=max_attempts,5 says so); as in NSQ, the flags win over the same --consumer-opt
        settings: dict[str, Any] = {"max_attempts": 0, **consumer_settings(self.consumer_opt),
                                    "max_in_flight": self.max_in_flight, "user_agent": user_agent,
                                    "concurrency": concurrency}
        return Consumer(topic, self.channel, handler, nsqd_tcp_addresses=self.nsqd_tcp_address,
                        lookupd_http_addresses=self.lookupd_http_address, **settings)


class Relay:
    def __init__(self, destinations: Destinations, status_every: int, log: logging.Logger) -> None:
        self.destinations = destinations
        self._log = log
        self._aggregate = LatencyLog("[aggregate]:", status_every, log)
        # with one destination its line would repeat the aggregate one
        per_address = status_every if len(destinations.names) > 1 else 0
        self._per_address = {name: LatencyLog(f"[{name}]:", per_address, log) for name in destinations.names}

    async def deliver(self, message: Message, send: Send) -> None:
        """Sends the message where it goes; FIN once all took it, else REQ with backoff."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        names = self.destinations.choose(started)
        if len(names) == 1:  # the usual case, without gather's task per destination
            taken = [await self._send(names[0], send, started)]
        else:
            taken = await asyncio.gather(*(self._send(name, send, started) for name in names))
        if all(taken):
            self._aggregate.record(loop.time() - started)
            message.finish()
        else:
            message.requeue()

    async def _send(self, name: str, send: Send, started: float) -> bool:
        loop = asyncio.get_running_loop()
        try:
            await send(name)
        except Exception as error:  # whatever went wrong, the message was not delivered: it goes back to nsqd
            self._log.error("%s: %s", name, describe(error))
            self.destinations.mark(name, False, loop.time())
            return False
        self.destinations.mark(name, True, loop.time())
        self._per_address[name].record(loop.time() - started)
        return True
