"""nsqlookupd's options: NSQ's flags and defaults (durations in seconds)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from shared.flags import option
from shared.program import ProgramOptions


@dataclass
class Options(ProgramOptions):
    log_prefix: str = option("[nsqlookupd] ", "log message prefix")
    tcp_address: str = option("0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients")
    http_address: str = option("0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients")
    external_http_address: str = option("", "<addr>:<port> to listen on for HTTP clients outside the nsqd's "
                                            "network: /lookup and /nodes there give each nsqd's "
                                            "--external-broadcast-address (default: off)")
    broadcast_address: str = option(socket.gethostname(), "address of this lookupd node, (default to the OS "
                                                          "hostname)")
    inactive_producer_timeout: float = option(300.0, "duration of time a producer will remain in the active list "
                                                     "since its last ping", kind="duration")
    tombstone_lifetime: float = option(45.0, "duration of time a producer will remain tombstoned if registration "
                                             "remains", kind="duration")
