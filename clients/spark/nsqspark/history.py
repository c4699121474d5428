"""Option ``since``: a channel the query creates starts from the topic's history (an nsqd that retains what it
published, ``--retention-time``), as a new Kafka consumer group starts from ``auto.offset.reset``.

Before the query's consumers subscribe, every nsqd with the topic (the producers lookupd lists, at their broadcast
address and HTTP port, and each ``nsqd_http_address``) is asked ``POST /channel/create?since=...``: a channel that
does not exist yet is made already holding what the nsqd retains since then; one that exists (the query ran before,
or another consumer made it) is left as it is. An nsqd that does not retain (or NSQ's own, which ignores ``since``)
makes the channel empty. An nsqd found later, while the query runs, gets the channel from the first SUB, without
history. The option ``auth_secret`` goes along as ``Authorization: Bearer``, for nsqds and lookupds that ask for one
(``--http-auth-required``: creating a channel from history needs ``subscribe`` on it, as a SUB does).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from nsqclient.addresses import join_host_port

from .options import NSQOptions, OptionError

log = logging.getLogger("nsq.spark")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def create_from_history(options: NSQOptions) -> int:
    """Makes the channel from history on every nsqd with the topic; how many messages were put back in all."""
    rewound = 0
    for address in sorted(_nsqd_http_addresses(options)):
        answer = _ask("POST", address, "/channel/create", options,
                      {"topic": options.topic, "channel": options.channel, "since": options.since})
        if isinstance(answer, dict) and type(answer.get("rewound")) is int:
            rewound += answer["rewound"]
            log.info("channel %s of %s on %s: %d messages from history", options.channel, options.topic, address,
                     answer["rewound"])
    return rewound


def _nsqd_http_addresses(options: NSQOptions) -> set[str]:
    addresses = set(options.nsqd_http_addresses)
    for lookupd in options.lookupd_http_addresses:
        try:
            answer = _ask("GET", lookupd, "/lookup", options, {"topic": options.topic})
        except OSError as error:  # the consumers report an unreachable lookupd; its nsqd get no history
            log.error("lookupd %s: %s", lookupd, error)
            continue
        for producer in (answer or {}).get("producers") or []:
            addresses.add(join_host_port(producer["broadcast_address"], producer["http_port"]))
    return addresses


def _ask(method: str, address: str, path: str, options: NSQOptions, query: dict[str, str]) -> Any:
    base = address if address.startswith(("http://", "https://")) else f"http://{address}"
    headers = {"Accept": "application/vnd.nsq; version=1.0"}
    if options.auth_secret:
        headers["Authorization"] = f"Bearer {options.auth_secret}"
    request = urllib.request.Request(f"{base.rstrip('/')}{path}?{urlencode(query)}", method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=options.connect_timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None  # a lookupd or nsqd that does not have the topic
        message = error.read().decode("utf-8", "replace")
        if error.code == 400 and path == "/channel/create":
            raise OptionError(f"option since: {address} refused {options.since!r}: {message}") from None
        raise OSError(f"{method} {path} on {address}: {error.code} {message}") from None
    return json.loads(body) if body else None
