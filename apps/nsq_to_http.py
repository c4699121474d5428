"""``nsq_to_http``: consumes a topic's channel and makes an HTTP request of each message (NSQ's
``apps/nsq_to_http``): a POST with the message as its body to each ``--post`` URL, or a GET of each ``--get`` URL
with its ``%s`` replaced by the URL-escaped message.

``--n`` requests are under way at most; ``--mode`` picks the URL(s) of each message (see ``destinations``). A
message is FIN'd once its request(s) were answered 2xx, and requeued with backoff otherwise (see ``relay``), so
stopping or killing the program loses nothing. ``--sample`` below 1 passes that share of the messages and FINs the
others unsent.

Where this differs from NSQ, on purpose: NSQ runs any ``--mode`` it does not know as an undocumented "send to every
URL" mode; here that mode is ``multicast``, sends to the URLs at once rather than one after the other, and any
other name is a flag error (so is ``epsilon-greedy``, which this program does not have). A GET counts as taken
with any 2xx, as a POST does (NSQ wants 200 for a GET). URLs are checked at start, not at the first message.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from urllib.parse import quote_plus, urlsplit

import aiohttp
from yarl import URL

from nsqclient import Message, user_agent
from nsqclient.protocol.names import is_valid_topic_name
from shared.flags import FlagError, option, require_positive
from shared.program import run_tool
from shared.version import VERSION, version_line

from .client_options import run_consumers
from .destinations import Destinations
from .relay import Relay, RelayOptions

log = logging.getLogger("nsq_to_http")

USER_AGENT = user_agent("nsq_to_http")
HTTP_USER_AGENT = f"nsq_to_http v{VERSION}"
DEFAULT_CONTENT_TYPE = "application/octet-stream"


@dataclass
class Options(RelayOptions):
    topic: str = option("", "nsq topic")
    channel: str = option("nsq_to_http", "nsq channel")
    n: int = option(100, "number of concurrent publishers")
    sample: float = option(1.0, "% of messages to publish (float b/w 0 -> 1)")
    http_client_connect_timeout: float = option(2.0, "timeout for HTTP connect", kind="duration")
    http_client_request_timeout: float = option(20.0, "timeout for HTTP request", kind="duration")
    content_type: str = option(DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests")
    get: list[str] = option([], "HTTP address to make a GET request to. '%s' will be printf replaced with data "
                                "(may be given multiple times)")
    post: list[str] = option([], "HTTP address to make a POST request to.  data will be in the body "
                                 "(may be given multiple times)")
    header: list[str] = option([], "Custom header for HTTP requests, as 'Key: Value' (may be given multiple times)")

    def validate(self) -> None:
        """NSQ's checks in NSQ's order and words, then the ones NSQ leaves to the first message."""
        super().validate()
        parse_headers(self.header)
        if not self.topic or not self.channel:
            raise FlagError("--topic and --channel are required")
        if self.content_type != DEFAULT_CONTENT_TYPE:
            if not self.post:
                raise FlagError("--content-type only used with --post")
            if not self.content_type:
                raise FlagError("--content-type requires a value when used")
        self.validate_relay()
        if not self.get and not self.post:
            raise FlagError("--get or --post required")
        if self.get and self.post:
            raise FlagError("use --get or --post not both")
        if any(url.count("%s") != 1 for url in self.get):
            raise FlagError("invalid GET address - must be a printf string")
        if not 0.0 <= self.sample <= 1.0:
            raise FlagError("--sample must be between 0.0 and 1.0")
        self._validate_more()

    def _validate_more(self) -> None:
        if not is_valid_topic_name(self.topic):
            raise FlagError("--topic is invalid")
        for flag, urls in (("get", self.get), ("post", self.post)):
            for url in urls:
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.hostname:
                    raise FlagError(f"--{flag} {url!r}: not an http:// or https:// URL")
        if self.n < 1:
            raise FlagError("--n must be at least 1")
        require_positive(self, "http_client_connect_timeout", "http_client_request_timeout")


def parse_headers(items: list[str]) -> dict[str, str]:
    """``--header`` values, ``Key: Value`` each (neither part empty)."""
    headers = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon or not key.strip() or not value.strip():
            raise FlagError(f"--header {item!r}: the format is 'Key: Value'")
        headers[key.strip()] = value.strip()
    return headers


def get_url(template: str, body: bytes) -> URL:
    """A ``--get`` URL with its ``%s`` replaced by the body, escaped as Go's ``url.QueryEscape`` does."""
    return URL(template.replace("%s", quote_plus(body, safe="")), encoded=True)


class HttpSender:
    """Sends message bodies over one pool of at most ``--n`` HTTP connections; a request that was not
    answered 2xx within the timeouts raises."""

    def __init__(self, opts: Options) -> None:
        timeout = aiohttp.ClientTimeout(total=opts.http_client_request_timeout,
                                        sock_connect=opts.http_client_connect_timeout)
        headers = {"User-Agent": HTTP_USER_AGENT}
        if opts.post:
            headers["Content-Type"] = opts.content_type
        self._method = "POST" if opts.post else "GET"
        self._session = aiohttp.ClientSession(
            timeout=timeout, headers={**headers, **parse_headers(opts.header)},
            connector=aiohttp.TCPConnector(limit=opts.n))

    async def send(self, address: str, body: bytes) -> None:
        if self._method == "POST":
            request = self._session.post(address, data=body)
        else:
            request = self._session.get(get_url(address, body))
        async with request as response:
            await response.read()  # so that the connection can be used again
            if not 200 <= response.status < 300:
                raise DeliveryRefused(f"got status code {response.status}")

    async def close(self) -> None:
        await self._session.close()


class DeliveryRefused(Exception):
    """The destination answered, but not with a 2xx."""


async def run(opts: Options, stopping: asyncio.Event) -> None:
    sender = HttpSender(opts)
    relay = Relay(Destinations(opts.post or opts.get, opts.mode), opts.status_every, log)

    async def handle(message: Message) -> None:
        if opts.sample < 1.0 and random.random() >= opts.sample:
            return  # not in the sample: FIN'd unsent
        await relay.deliver(message, lambda address: sender.send(address, message.body))

    try:
        await run_consumers([opts.consumer(opts.topic, handle, opts.n, USER_AGENT)], stopping)
    finally:
        await sender.close()


def main(argv: list[str] | None = None) -> None:
    run_tool("nsq_to_http", Options, version_line("nsq_to_http"), run, argv)


if __name__ == "__main__":
    main()
