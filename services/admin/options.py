"""nsqadmin's options: NSQ's flags and defaults (durations in seconds), and this admin's additions (history, data
path). With ``--graphite-url`` the pages draw nsqadmin's graphs from Graphite (``graphite``), named by the statsd
flags; without it, charts from the admin's own history."""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from nsqclient.addresses import split_host_port
from shared.cross_site import normalize_origin
from shared.flags import FlagError, check_secret_file, option
from shared.program import ProgramOptions


@dataclass
class Options(ProgramOptions):
    log_prefix: str = option("[nsqadmin] ", "log message prefix")
    http_address: str = option("0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients")
    base_path: str = option("/", "URL base path")
    nsqlookupd_http_addresses: list[str] = option(
        [], "lookupd HTTP address (may be given multiple times)", flag="lookupd-http-address")
    nsqd_http_addresses: list[str] = option(
        [], "nsqd HTTP address (may be given multiple times)", flag="nsqd-http-address")
    http_client_connect_timeout: float = option(2.0, "timeout for HTTP connect", kind="duration")
    http_client_request_timeout: float = option(5.0, "timeout for HTTP request", kind="duration")
    http_client_auth_secret_file: str = option("", "file whose first line is the secret sent (Authorization: "
                                                   "Bearer) to nsqds and lookupds that ask for one "
                                                   "(--http-auth-required)")
    allow_config_from_cidr: str = option("127.0.0.1/8", "A CIDR from which to allow HTTP requests to the /config "
                                                        "endpoint")
    notification_http_endpoint: str = option("", "HTTP endpoint (fully qualified) to which POST notifications of "
                                                 "admin actions will be sent")
    acl_http_header: str = option("X-Forwarded-User", "HTTP header to check for authenticated admin users")
    admin_users: list[str] = option([], "admin user (may be given multiple times; if specified, only these users "
                                        "will be able to perform privileged actions)", flag="admin-user")
    allowed_origins: list[str] = option([], "origin (scheme://host[:port]) trusted to change state through the admin "
                                            "from a browser, beyond the admin's own (may be given multiple times)",
                                        flag="allowed-origin")
    http_allowed_host: list[str] = option([], "a name requests may give as their Host, beyond localhost, the "
                                              "hostname and the listen address (IP addresses always may): "
                                              "against DNS rebinding (may be given multiple times; * allows any, "
                                              "as NSQ does)")
    htpasswd_file: str = option("", "htpasswd file of bcrypt entries (htpasswd -B): every request but /ping then "
                                    "needs one of its users (HTTP Basic)")
    data_path: str = option("", "path to store the history and audit database, created if missing (default: current directory)")
    history_interval: float = option(10.0, "how often to sample topic and channel counters for the charts "
                                           "(0 to disable)", kind="duration")
    history_retention: float = option(7 * 24 * 3600.0, "how long to keep samples and audit entries",
                                      kind="duration")
    graphite_url: str = option("", "graphite HTTP address (the pages' graphs come from it instead of the "
                                   "history; http[s]://[user:password@]host[:port][/path])")
    proxy_graphite: bool = option(False, "proxy HTTP requests to graphite")
    statsd_counter_format: str = option("stats.counters.%s.count", "how statsd names the series of a counter "
                                                                   "nsqd sends (%s: nsqd's name; empty: that name "
                                                                   "as is)")
    statsd_gauge_format: str = option("stats.gauges.%s", "how statsd names the series of a gauge nsqd sends (%s: "
                                                         "nsqd's name; empty: that name as is)")
    statsd_prefix: str = option("nsq.%s", "prefix used for keys sent to statsd (%s for host replacement, must "
                                          "match nsqd)")
    statsd_interval: float = option(60.0, "time interval nsqd is configured to push to statsd (must match nsqd)",
                                    kind="duration")

    def validate(self) -> None:
        super().validate()
        if self.nsqlookupd_http_addresses and self.nsqd_http_addresses:
            raise FlagError("use --nsqd-http-address or --lookupd-http-address not both")
        if not self.nsqlookupd_http_addresses and not self.nsqd_http_addresses:
            raise FlagError("--nsqd-http-address or --lookupd-http-address required")
        for address in (*self.nsqlookupd_http_addresses, *self.nsqd_http_addresses, self.http_address):
            try:
                split_host_port(address)
            except ValueError as error:
                raise FlagError(f"invalid address {address!r}: {error}") from None
        if self.allow_config_from_cidr:
            try:
                ipaddress.ip_network(self.allow_config_from_cidr, strict=False)
            except ValueError:
                raise FlagError(f"--allow-config-from-cidr: invalid CIDR {self.allow_config_from_cidr!r}") from None
        self._validate_graphite()
        if self.history_interval < 0 or self.history_retention <= 0:
            raise FlagError("--history-interval must be >= 0 and --history-retention > 0")
        self.base_path = normalize_base_path(self.base_path)
        try:
            self.allowed_origins = [normalize_origin(origin) for origin in self.allowed_origins]
        except ValueError as error:
            raise FlagError(f"--allowed-origin: {error}") from None
        check_secret_file(self.http_client_auth_secret_file)


    def _validate_graphite(self) -> None:
        if not self.graphite_url:
            if self.proxy_graphite:
                raise FlagError("--proxy-graphite needs --graphite-url")
            return  # the statsd flags are not used then, and NSQ's nsqadmin accepts them as given
        parts = urlsplit(self.graphite_url)
        try:
            parts.port
        except ValueError:
            parts = parts._replace(netloc="")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FlagError(f"--graphite-url {redact_url(self.graphite_url)!r} must be "
                            "http[s]://[user:password@]host[:port][/path]")
        if parts.username is not None and not self.proxy_graphite:
            raise FlagError("--graphite-url with credentials needs --proxy-graphite: browsers fetch the graphs "
                            "themselves otherwise, and do not send credentials in an image's URL")
        self.graphite_url = self.graphite_url.rstrip("/")
        if self.statsd_interval < 1 or not float(self.statsd_interval).is_integer():
            raise FlagError("--statsd-interval must be a whole number of seconds, at least 1s")


def redact_url(url: str) -> str:
    """``url`` without the password it may carry (``http://user:***@host``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))

def normalize_base_path(path: str) -> str:
    """As nsqadmin: a leading ``/`` and Go's ``path.Clean`` (``//a/./b/`` -> ``/a/b``)."""
    cleaned = posixpath.normpath("/" + path)
    return "/" if cleaned in ("/", "//") else cleaned.replace("//", "/")
