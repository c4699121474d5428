"""``nsq_to_nsq``: consumes topics' channels and publishes each message to a topic on other nsqd (NSQ's
``apps/nsq_to_nsq``): to the same topic name, or to ``--destination-topic`` for all of them.

Each ``--destination-nsqd-tcp-address`` has one producer connection, on which up to ``--max-in-flight`` PUBs are
under way at once; ``--mode`` picks the nsqd of each message (see ``destinations``). A message is FIN'd once its
destination nsqd answered OK, and requeued with backoff otherwise (see ``relay``), so stopping or killing the
program loses nothing.

With ``--require-json-field`` (and ``--require-json-value``) only the JSON objects with that field (of that value,
as a string, or as a number when it reads as one) pass; with ``--whitelist-json-field`` only those fields are
passed on. With either, a message that is not a JSON object is dropped (FIN'd, logged).

Where this differs from NSQ, on purpose: a message without the required field is dropped like any other that does
not pass (NSQ requeues it with backoff until go-nsq gives up on it, after 5 attempts, and drops it then); ``--mode``
also has ``multicast`` (every destination, each message), and ``epsilon-greedy`` or a name it does not know is a
flag error (NSQ runs round-robin for those).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from nsqclient import Message, Producer, user_agent
from nsqclient.consumer import Handler
from nsqclient.protocol.names import is_valid_topic_name
from shared.flags import FlagError, option
from shared.program import run_tool
from shared.version import version_line

from .client_options import check_tcp_addresses, producer_settings, run_consumers
from .destinations import Destinations
from .relay import Relay, RelayOptions

log = logging.getLogger("nsq_to_nsq")

USER_AGENT = user_agent("nsq_to_nsq")


@dataclass
class Options(RelayOptions):
    topic: list[str] = option([], "nsq topic (may be given multiple times)")
    channel: str = option("nsq_to_nsq", "nsq channel")
    destination_topic: str = option("", "use this destination topic for all consumed topics "
                                         "(default is consumed topic name)")
    destination_nsqd_tcp_address: list[str] = option([], "destination nsqd TCP address (may be given multiple "
                                                         "times)")
    require_json_field: str = option("", "for JSON messages: only pass messages that contain this field")
    require_json_value: str = option("", "for JSON messages: only pass messages in which the required field has "
                                         "this value")
    whitelist_json_field: list[str] = option([], "for JSON messages: pass this field (may be given multiple times)")
    producer_opt: list[str] = option([], "option to passthrough to nsq.Producer (may be given multiple times, "
                                         "see http://godoc.org/github.com/nsqio/go-nsq#Config)")

    def validate(self) -> None:
        """NSQ's checks in NSQ's order and words, then the ones NSQ leaves to the first message."""
        super().validate()
        if not self.topic or not self.channel:
            raise FlagError("--topic and --channel are required")
        if not all(is_valid_topic_name(topic) for topic in self.topic):
            raise FlagError("--topic is invalid")
        if self.destination_topic and not is_valid_topic_name(self.destination_topic):
            raise FlagError("--destination-topic is invalid")
        self.validate_relay()
        if not self.destination_nsqd_tcp_address:
            raise FlagError("--destination-nsqd-tcp-address required")
        check_tcp_addresses("destination-nsqd-tcp-address", self.destination_nsqd_tcp_address)
        if self.require_json_value and not self.require_json_field:
            raise FlagError("--require-json-value needs --require-json-field")
        producer_settings(self.producer_opt)


class JsonFilter:
    """``--require-json-*`` and ``--whitelist-json-field`` (sans-I/O): ``apply`` gives the body to pass on, or
    None for a message that does not pass."""

    def __init__(self, require_field: str, require_value: str, whitelist: list[str]) -> None:
        self._field, self._value, self._whitelist = require_field, require_value, whitelist
        self._number: float | None = None
        try:
            self._number = float(require_value)
        except ValueError:
            pass  # the value matches strings only

    @property
    def active(self) -> bool:
        return bool(self._field or self._whitelist)

    def apply(self, body: bytes) -> bytes | None:
        if not self.active:
            return body
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        if not isinstance(document, dict):
            log.error("Unable to decode json: %r", body[:200])
            return None
        if self._field and not self._passes(document):
            return None
        if not self._whitelist:
            return body
        kept = {key: _go_number(document[key]) for key in self._whitelist if key in document}
        return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def _passes(self, document: dict[str, Any]) -> bool:
        if self._field not in document:
            return False
        if not self._value:
            return True
        value = document[self._field]
        if isinstance(value, str):
            return value == self._value
        if self._number is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) == self._number  # as Go compares JSON numbers, as float64
        return False


def _go_number(value: Any) -> Any:
    """A whole float as an integer, as NSQ writes the fields it passes on (``2``, not ``2.0``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


async def run(opts: Options, stopping: asyncio.Event) -> None:
    settings = {**producer_settings(opts.producer_opt), "user_agent": USER_AGENT}
    producers = {address: Producer(address, **settings) for address in opts.destination_nsqd_tcp_address}
    relay = Relay(Destinations(opts.destination_nsqd_tcp_address, opts.mode), opts.status_every, log)
    json_filter = JsonFilter(opts.require_json_field, opts.require_json_value, opts.whitelist_json_field)

    def handler(destination_topic: str) -> Handler:
        async def handle(message: Message) -> None:
            body = json_filter.apply(message.body)
            if body is not None:
                await relay.deliver(message, lambda address: producers[address].publish(destination_topic, body))

        return handle

    # every message in flight may have its PUB under way: producers pipeline them
    consumers = [opts.consumer(topic, handler(opts.destination_topic or topic), opts.max_in_flight, USER_AGENT)
                 for topic in opts.topic]
    try:
        await run_consumers(consumers, stopping)
    finally:
        await asyncio.gather(*(producer.close() for producer in producers.values()))


def main(argv: list[str] | None = None) -> None:
    run_tool("nsq_to_nsq", Options, version_line("nsq_to_nsq"), run, argv)


if __name__ == "__main__":
    main()
