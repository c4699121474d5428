"""nsqd's options: one field per NSQ flag, same names and defaults (durations in seconds)."""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass

from nsqclient.addresses import split_host_port
from shared.allowed_hosts import ALLOWED_HOST_HELP
from shared.cross_site import ALLOW_CROSS_SITE_HELP
from shared.flags import FlagError, check_secret_file, format_duration, option
from shared.program import ProgramOptions


def default_node_id() -> int:
    """NSQ's default: crc32 of the md5 of the hostname, modulo 1024."""
    try:
        # CPython's own MD5: hashlib would load every OpenSSL digest (0.7 MB) for this one hash
        from _md5 import md5  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import md5
    return zlib.crc32(md5(socket.gethostname().encode()).digest()) % 1024


@dataclass
class Options(ProgramOptions):
    log_prefix: str = option("[nsqd] ", "log message prefix")

    node_id: int = option(default_node_id(), "unique part for message IDs, (int) in range [0,1024)", cfg="id")
    worker_id: int = option(0, "[deprecated] use --node-id")

    tcp_address: str = option("0.0.0.0:4150", "<addr>:<port> to listen on for TCP clients")
    workers: int = option(1, "processes that hold the TCP clients' connections (and their TLS), relaying them to "
                             "the one that holds the queues; 1: that one holds them too")
    http_address: str = option("0.0.0.0:4151", "<addr>:<port> to listen on for HTTP clients")
    https_address: str = option("0.0.0.0:4152", "<addr>:<port> to listen on for HTTPS clients")
    broadcast_address: str = option(socket.gethostname(), "address that will be registered with lookupd")
    broadcast_tcp_port: int = option(0, "TCP port that will be registered with lookupd (default: listen port)")
    broadcast_http_port: int = option(0, "HTTP port that will be registered with lookupd (default: listen port)")
    external_broadcast_address: str = option("", "address registered with lookupd for clients outside this "
                                                 "node's network (its container's host, say), handed out on "
                                                 "lookupd's --external-http-address (default: none)")
    external_broadcast_tcp_port: int = option(0, "TCP port registered for clients outside this node's network "
                                                 "(default: the broadcast TCP port)")
    external_broadcast_http_port: int = option(0, "HTTP port registered for clients outside this node's network "
                                                  "(default: the broadcast HTTP port)")
    nsqlookupd_tcp_addresses: list[str] = option(
        [], "lookupd TCP address (may be given multiple times)", flag="lookupd-tcp-address")
    auth_http_addresses: list[str] = option(
        [], "<addr>:<port> or a full url to query auth server (may be given multiple times)",
        flag="auth-http-address")
    auth_http_request_method: str = option("get", "HTTP method to use for auth server requests (get or post)")
    http_auth_required: bool = option(False, "the HTTP API asks the auth server about each request's secret "
                                             "(Authorization: Bearer, or Basic's password), as TCP's AUTH; needs "
                                             "--auth-http-address")
    http_client_connect_timeout: float = option(2.0, "timeout for HTTP connect", kind="duration")
    http_client_request_timeout: float = option(5.0, "timeout for HTTP request", kind="duration")
    http_client_auth_secret_file: str = option("", "file whose first line is the secret sent (Authorization: "
                                                   "Bearer) to lookupds and nsqds that ask for one "
                                                   "(--http-auth-required), for the channels lookupd knows of a "
                                                   "new topic and the check of node IDs")
    topology_region: str = option("", "the region this nsqd is in")
    topology_zone: str = option("", "the zone within the region this nsqd is in")

    data_path: str = option("", "path to store disk-backed messages")
    mem_queue_size: int = option(10000, "number of messages to keep in memory (per topic/channel)")
    max_bytes_per_file: int = option(104857600, "number of bytes per diskqueue file before rolling")
    max_attempts: int = option(0, "deliveries of a message to a channel's consumers after which it is parked in "
                                  "the channel's dead-letter queue (0: no limit)")
    msg_ttl: float = option(0.0, "messages older than this are never delivered: dropped when they reach the "
                                 "head of a queue (0: never)", kind="duration")
    retention_time: float = option(0.0, "how long a topic keeps what it published, for channels to be rewound "
                                        "over (0: not at all); per topic with /topic/retention", kind="duration")
    retention_bytes: int = option(0, "bytes a topic keeps of what it published at most, its oldest going first "
                                     "(0: no limit)")
    max_bytes_per_queue: int = option(0, "bytes of messages waiting on disk a topic's or channel's disk queue "
                                         "may hold (0: unbounded)")
    queue_full_policy: str = option("refuse", "when a disk queue is at --max-bytes-per-queue: 'refuse' "
                                              "publishes or 'drop-oldest' messages")
    sync_every: int = option(2500, "number of messages per diskqueue fsync")
    sync_timeout: float = option(2.0, "duration of time per diskqueue fsync", kind="duration")

    queue_scan_interval: float = option(0.1, "how often the queue-scan loop wakes up", kind="duration")
    queue_scan_refresh_interval: float = option(5.0, "how often the queue-scan loop refreshes its channel list",
                                                kind="duration")
    queue_scan_selection_count: int = option(20, "number of channels to check per queue scan loop")
    queue_scan_worker_pool_max: int = option(4, "max concurrency for checking in-flight and deferred timeouts")
    queue_scan_dirty_percent: float = option(0.25, "fraction of dirty channels that makes the scan loop again")

    msg_timeout: float = option(60.0, "default duration to wait before auto-requeing a message", kind="duration")
    max_msg_timeout: float = option(900.0, "maximum duration before a message will timeout", kind="duration")
    max_msg_size: int = option(1048576, "maximum size of a single message in bytes")
    max_req_timeout: float = option(3600.0, "maximum requeuing timeout for a message", kind="duration")
    max_body_size: int = option(5242880, "maximum size of a single command body")

    max_heartbeat_interval: float = option(60.0, "maximum client configurable duration of time between client "
                                                 "heartbeats", kind="duration")
    max_rdy_count: int = option(2500, "maximum RDY count for a client")
    max_output_buffer_size: int = option(65536, "maximum client configurable size (in bytes) for a client "
                                                "output buffer")
    max_output_buffer_timeout: float = option(30.0, "maximum client configurable duration of time between "
                                                    "flushing to a client", kind="duration")
    min_output_buffer_timeout: float = option(0.025, "minimum client configurable duration of time between "
                                                     "flushing to a client", kind="duration")
    output_buffer_timeout: float = option(0.25, "default duration of time between flushing data to clients",
                                          kind="duration")
    max_channel_consumers: int = option(0, "maximum channel consumer connection count per nsqd instance "
                                           "(default 0, i.e., unlimited)")

    statsd_address: str = option("", "UDP <addr>:<port> of a statsd daemon for pushing stats")
    statsd_interval: float = option(60.0, "duration between pushing to statsd", kind="duration")
    statsd_mem_stats: bool = option(True, "toggle sending memory and GC stats to statsd")
    statsd_prefix: str = option("nsq.%s", "prefix used for keys sent to statsd (%s for host replacement)")
    statsd_udp_packet_size: int = option(508, "the size in bytes of statsd UDP packets")
    statsd_exclude_ephemeral: bool = option(False, "skip ephemeral topics and channels when sending stats "
                                                   "to statsd")

    e2e_processing_latency_percentiles: list[float] = option(
        [], "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple "
            "times or comma separated '1.0,0.99,0.95', default none)",
        flag="e2e-processing-latency-percentile", kind="comma_float_list")
    e2e_processing_latency_window_time: float = option(600.0, "calculate end to end latency quantiles for "
                                                              "this duration of time", kind="duration")

    tls_cert: str = option("", "path to certificate file")
    tls_key: str = option("", "path to key file")
    tls_client_auth_policy: str = option("", "client certificate auth policy ('require' or 'require-verify')")
    tls_root_ca_file: str = option("", "path to certificate authority file")
    tls_required: str = option("false", "require TLS for client connections (true, false, tcp-https)")
    tls_min_version: str = option("tls1.0", "minimum SSL/TLS version acceptable ('tls1.0', 'tls1.1', "
                                            "'tls1.2' or 'tls1.3')")
    # between nsqd and its lookupds (beyond NSQ, where that is always plain): TLS when a CA file is given
    lookupd_tls_root_ca_file: str = option("", "path to certificate authority file lookupds' certificates are "
                                               "verified with: nsqd then registers over TLS only")
    lookupd_tls_cert: str = option("", "path to certificate file nsqd presents to lookupds over TLS")
    lookupd_tls_key: str = option("", "path to key file of --lookupd-tls-cert")
    lookupd_tls_server_name: str = option("", "name lookupds' certificates must carry (default: the host of each "
                                              "--lookupd-tcp-address)")
    deflate: bool = option(True, "enable deflate feature negotiation (client compression)")
    max_deflate_level: int = option(6, "max deflate compression level a client can negotiate (> values == > "
                                       "nsqd CPU usage)")
    snappy: bool = option(True, "enable snappy feature negotiation (client compression)")
    enable_experiment: list[str] = option([], "enable experimental feature (may be given multiple times)")
    # replication (beyond NSQ): off unless etcd addresses are given
    etcd_addresses: list[str] = option(
        [], "<addr>:<port> or URL of an etcd member of the cluster replication is coordinated through (may be "
            "given multiple times; default none: replication off)", flag="etcd-address")
    replication_liveness_timeout: float = option(10.0, "how long an nsqd may go without renewing its lease in "
                                                       "etcd before the cluster counts it out", kind="duration")
    replication_address: str = option("0.0.0.0:4153", "<addr>:<port> to listen on for other nsqd mirroring "
                                                      "their queues here (with --etcd-address)")
    replication_factor: int = option(1, "copies of every message this nsqd takes, its own included: it mirrors "
                                        "its queues on factor - 1 other nsqd (1: none)")
    replication_min_in_sync: int = option(0, "copies (its own included) a publish must have before it is "
                                             "acknowledged, else it fails (default: a majority of "
                                             "--replication-factor)")
    replication_timeout: float = option(5.0, "how long a publish waits for a mirror before the mirror is out of "
                                             "sync", kind="duration")
    http_allow_cross_site: bool = option(False, ALLOW_CROSS_SITE_HELP)
    http_allowed_host: list[str] = option([], ALLOWED_HOST_HELP)

    def validate(self) -> None:
        """Raises FlagError naming the flag at fault."""
        super().validate()
        if not 0 <= self.node_id < 1024:
            raise FlagError(f"--node-id {self.node_id} must be >= 0 and < 1024")
        if not 1 <= self.max_deflate_level <= 9:
            raise FlagError("--max-deflate-level must be in [1,9]")
        if self.http_auth_required and not self.auth_http_addresses:
            raise FlagError("--http-auth-required needs --auth-http-address")
        check_secret_file(self.http_client_auth_secret_file)
        if self.auth_http_request_method not in ("get", "post"):
            raise FlagError("--auth-http-request-method must be 'get' or 'post'")
        for quantile in self.e2e_processing_latency_percentiles:
            if not 0 < quantile <= 1:
                raise FlagError(f"--e2e-processing-latency-percentile {quantile} must be in (0,1]")
        if self.tls_required not in ("true", "false", "tcp-https"):
            raise FlagError(f"--tls-required: invalid value {self.tls_required!r}")
        if self.tls_client_auth_policy not in ("", "require", "require-verify"):
            raise FlagError(f"--tls-client-auth-policy: invalid value {self.tls_client_auth_policy!r}")
        if self.tls_min_version not in ("tls1.0", "tls1.1", "tls1.2", "tls1.3"):
            raise FlagError(f"--tls-min-version: unknown version {self.tls_min_version!r}")
        if self.tls_client_auth_policy and self.tls_required == "false":
            self.tls_required = "true"  # as NSQ: asking for client certificates means TLS is required
        if self.tls_required != "false" and not (self.tls_cert and self.tls_key):
            raise FlagError("cannot require TLS client connections without TLS key and cert")
        self._validate_lookupd_tls()
        if self.workers < 1:
            raise FlagError("--workers must be >= 1")
        if self.mem_queue_size < 0:
            raise FlagError("--mem-queue-size must be >= 0")
        if not 0 <= self.max_attempts <= 65535:
            raise FlagError("--max-attempts must be in [0,65535]")
        if self.max_bytes_per_queue < 0:
            raise FlagError("--max-bytes-per-queue must be >= 0")
        if self.retention_time < 0 or self.retention_bytes < 0:
            raise FlagError("--retention-time and --retention-bytes must be >= 0")
        if self.queue_full_policy not in ("refuse", "drop-oldest"):
            raise FlagError(f"--queue-full-policy: invalid value {self.queue_full_policy!r} (refuse or drop-oldest)")
        if (self.external_broadcast_tcp_port or self.external_broadcast_http_port) \
                and not self.external_broadcast_address:
            raise FlagError("--external-broadcast-tcp-port and --external-broadcast-http-port need "
                            "--external-broadcast-address")
        for name in ("max_rdy_count", "max_msg_size", "max_body_size", "queue_scan_selection_count",
                     "queue_scan_worker_pool_max"):
            if getattr(self, name) <= 0:
                raise FlagError(f"--{name.replace('_', '-')} must be > 0")
        self._validate_replication()
        if self.statsd_address:
            try:
                split_host_port(self.statsd_address)
            except ValueError:
                raise FlagError(f"--statsd-address {self.statsd_address!r} must be <addr>:<port>") from None
            # the packets are spread over the interval less a second: NSQ's nsqd panics on one of 1s or less
            if self.statsd_interval <= 1:
                raise FlagError(f"--statsd-interval {format_duration(self.statsd_interval)} must be more than 1s")
            if self.statsd_udp_packet_size <= 0:
                raise FlagError("--statsd-udp-packet-size must be > 0")
        if self.queue_scan_interval <= 0 or self.queue_scan_refresh_interval <= 0:
            raise FlagError("--queue-scan-interval and --queue-scan-refresh-interval must be > 0")

    def _validate_replication(self) -> None:
        if self.replication_liveness_timeout < 1:
            raise FlagError("--replication-liveness-timeout must be >= 1s")
        if self.replication_factor < 1:
            raise FlagError("--replication-factor must be >= 1")
        if self.replication_factor > 1 and not self.etcd_addresses:
            raise FlagError("--replication-factor above 1 needs --etcd-address")
        if not 0 <= self.replication_min_in_sync <= self.replication_factor:
            raise FlagError("--replication-min-in-sync must be in [1, --replication-factor] (0: a majority)")
        if self.replication_timeout <= 0:
            raise FlagError("--replication-timeout must be > 0")

    @property
    def min_in_sync(self) -> int:
        """Copies a publish needs, this nsqd's own included."""
        return self.replication_min_in_sync or self.replication_factor // 2 + 1

    def _validate_lookupd_tls(self) -> None:
        if bool(self.lookupd_tls_cert) != bool(self.lookupd_tls_key):
            raise FlagError("--lookupd-tls-cert and --lookupd-tls-key must be given together")
        if (self.lookupd_tls_cert or self.lookupd_tls_server_name) and not self.lookupd_tls_root_ca_file:
            raise FlagError("--lookupd-tls-cert, --lookupd-tls-key and --lookupd-tls-server-name need "
                            "--lookupd-tls-root-ca-file")

    @property
    def client_timeout(self) -> float:
        """NSQ's internal ClientTimeout; the default heartbeat interval is half of it."""
        return 60.0
