"""nsqlookupd's options: NSQ's flags and defaults (durations in seconds), the TLS flags of registrations and of
``--https-address`` (beyond NSQ, which registers in plain only: with none of them set, lookupd is NSQ's), the auth
server flags of ``--http-auth-required`` (nsqd's names), and ``--http-allow-cross-site``, which gives back NSQ's HTTP
API to pages of other sites."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from nsqclient.addresses import split_host_port
from shared.allowed_hosts import ALLOWED_HOST_HELP
from shared.cross_site import ALLOW_CROSS_SITE_HELP
from shared.flags import FlagError, option
from shared.program import ProgramOptions


@dataclass
class Options(ProgramOptions):
    log_prefix: str = option("[nsqlookupd] ", "log message prefix")
    tcp_address: str = option("0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients")
    http_address: str = option("0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients")
    https_address: str = option("", "<addr>:<port> to listen on for HTTPS clients, with --tls-cert and --tls-key "
                                    "(default: off)")
    external_http_address: str = option("", "<addr>:<port> to listen on for HTTP clients outside the nsqd's "
                                            "network: /lookup and /nodes there give each nsqd's "
                                            "--external-broadcast-address (default: off)")
    broadcast_address: str = option(socket.gethostname(), "address of this lookupd node, (default to the OS "
                                                          "hostname)")
    inactive_producer_timeout: float = option(300.0, "duration of time a producer will remain in the active list "
                                                     "since its last ping", kind="duration")
    tombstone_lifetime: float = option(45.0, "duration of time a producer will remain tombstoned if registration "
                                             "remains", kind="duration")

    tls_cert: str = option("", "path to certificate file: nsqds that ask for TLS (nsqd's "
                               "--lookupd-tls-root-ca-file) register over TLS")
    tls_key: str = option("", "path to key file")
    tls_root_ca_file: str = option("", "path to certificate authority file: nsqds must present a certificate it "
                                       "signed (implies --tls-required)")
    tls_required: bool = option(False, "refuse registrations that are not over TLS")
    auth_http_addresses: list[str] = option(
        [], "<addr>:<port> or a full url to query auth server (may be given multiple times)",
        flag="auth-http-address")
    auth_http_request_method: str = option("get", "HTTP method to use for auth server requests (get or post)")
    http_auth_required: bool = option(False, "the HTTP API (but /ping, /info and /lookup) asks the auth server "
                                             "about each request's secret (Authorization: Bearer, or Basic's "
                                             "password); needs --auth-http-address")
    http_client_connect_timeout: float = option(2.0, "timeout for HTTP connect", kind="duration")
    http_client_request_timeout: float = option(5.0, "timeout for HTTP request", kind="duration")
    http_allow_cross_site: bool = option(False, ALLOW_CROSS_SITE_HELP)
    http_allowed_host: list[str] = option([], ALLOWED_HOST_HELP)

    def validate(self) -> None:
        """Raises FlagError naming the flag at fault."""
        super().validate()
        for flag, address in (("--tcp-address", self.tcp_address), ("--http-address", self.http_address),
                              ("--https-address", self.https_address),
                              ("--external-http-address", self.external_http_address)):
            if address:
                try:
                    split_host_port(address)
                except ValueError:  # a unix socket's path among them: lookupd listens on TCP alone, as NSQ's does
                    raise FlagError(f"{flag} {address!r} must be <addr>:<port>") from None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise FlagError("--tls-cert and --tls-key must be given together")
        if self.tls_root_ca_file and not self.tls_cert:
            raise FlagError("--tls-root-ca-file needs --tls-cert and --tls-key")
        if self.tls_root_ca_file:
            self.tls_required = True  # as nsqd's --tls-client-auth-policy: checking certificates means TLS only
        if self.tls_required and not self.tls_cert:
            raise FlagError("cannot require TLS client connections without TLS key and cert")
        if self.https_address and not self.tls_cert:
            raise FlagError("--https-address needs --tls-cert and --tls-key")
        if self.http_auth_required and not self.auth_http_addresses:
            raise FlagError("--http-auth-required needs --auth-http-address")
        if self.auth_http_request_method not in ("get", "post"):
            raise FlagError("--auth-http-request-method must be 'get' or 'post'")
