"""Asks the ``--auth-http-address`` servers about a client's secret, as NSQ's ``internal/auth`` does (the reply is
read by ``shared.auth_reply``):

- each address is ``host:port`` (asked at ``http://host:port/auth``) or a full URL containing ``://``, used as is;
- the servers are tried from a random one on, in turn, until one gives a valid answer; if none does, one
  ``AuthError`` names every address with its failure;
- GET sends ``?common_name=&remote_ip=&secret=&tls=`` (sorted, as Go's ``url.Values.Encode``); POST sends the same
  ``url.Values`` as JSON, so every value is a one-element list; a question about the HTTP APIs (nsqd's and
  lookupd's ``--http-auth-required``) adds ``interface=http``, which NSQ's Go nsqd never sends, and its answer may
  grant ``admin``;
- a 401 or 403 from every server asked is ``AuthRefused``: the secret is bad, not the servers;
- a 403 whose JSON names an ``https_port`` is asked again over https on that port (NSQ's V1 HTTP client).

Error messages name the auth server's address, never the request URL, so a secret sent in a GET query does not end
up in the log. Imported only by a service that has auth servers: it brings aiohttp's client.
"""

from __future__ import annotations

import json
import random
import ssl
import time
from collections.abc import Sequence
from urllib.parse import quote_plus

import aiohttp
from yarl import URL

from nsqclient.protocol.names import go_quote
from shared import go_json
from shared.auth_reply import HTTP_PERMISSIONS, PERMISSIONS, AuthError, AuthRefused, AuthState, parse_auth_reply
from shared.http_conventions import ACCEPT_V1

METHODS = ("get", "post")


def endpoint(address: str) -> str:
    """The URL an ``--auth-http-address`` is asked at."""
    return address if "://" in address else f"http://{address}/auth"


def query_values(remote_ip: str, tls: bool, secret: str, common_name: str, interface: str = "") -> dict[str, str]:
    """The request's parameters (``interface`` only when given), sorted as Go's ``url.Values.Encode`` sorts them."""
    values = {"common_name": common_name, "remote_ip": remote_ip, "secret": secret, "tls": "true" if tls else "false"}
    if interface:
        values["interface"] = interface
    return dict(sorted(values.items()))


def _query_string(values: dict[str, str]) -> str:
    # Go's QueryEscape; a secret byte that was not UTF-8 (decoded with surrogateescape) goes out as that byte
    return "&".join(f"{quote_plus(key)}={quote_plus(value, errors='surrogateescape')}"
                    for key, value in sorted(values.items()))


class AuthClient:
    """Asks the auth servers about a secret. Owns an aiohttp session, opened on the first query (inside the
    running loop) unless one is given; ``close()`` closes it if it is ours. The timeouts (NSQ's
    ``--http-client-connect-timeout`` and ``--http-client-request-timeout``) and ``ssl_context`` (for https
    servers, as NSQ uses ``--tls-root-ca-file``; the system's CAs without one) apply to each request, also on a
    given session."""

    def __init__(self, addresses: Sequence[str], method: str = "get", *, connect_timeout: float = 2.0,
                 request_timeout: float = 5.0, session: aiohttp.ClientSession | None = None,
                 ssl_context: ssl.SSLContext | None = None, rng: random.Random | None = None) -> None:
        if not addresses:
            raise ValueError("no auth server address")
        if method not in METHODS:
            raise ValueError(f"auth HTTP request method must be get or post, not {method!r}")
        self.addresses = list(addresses)
        self.method = method
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        self._session = session
        self._owns_session = session is None
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._rng = rng or random.Random()
        self._closed = False

    async def query(self, remote_ip: str, tls: bool, secret: str, common_name: str = "",
                    now: float | None = None, interface: str = "") -> AuthState:
        """The state the first server to answer validly grants; its expiry counts from ``now`` (default: the
        ``time.time()`` of the answer). AuthError naming each server's failure when none does (AuthRefused when
        each refused the secret). ``interface="http"``: a question about the HTTP APIs."""
        values = query_values(remote_ip, tls, secret, common_name, interface)
        permissions = HTTP_PERMISSIONS if interface == "http" else PERMISSIONS
        start = self._rng.randrange(len(self.addresses))
        failures, refused = [], True
        for step in range(len(self.addresses)):
            address = self.addresses[(start + step) % len(self.addresses)]
            try:
                return await self._query_one(endpoint(address), values, now, permissions)
            except AuthError as error:
                refused = refused and isinstance(error, AuthRefused)
                failures.append(f"failed to auth against {address} - {error}")
        raise (AuthRefused if refused else AuthError)("; ".join(failures))

    async def close(self) -> None:
        self._closed = True
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    async def _query_one(self, url: str, values: dict[str, str], now: float | None,
                         permissions: frozenset[str]) -> AuthState:
        if self.method == "get":
            url, data = f"{url}?{_query_string(values)}", None
        else:
            data = go_json.encode({key: [value] for key, value in values.items()})
        status, reason, body = await self._request(url, data)
        if status == 403 and not url.startswith("https"):
            # NSQ's V1 client: a 403 naming an https_port means "ask me over https"; Go would also follow a
            # missing or zero port to port 0, which can only fail, so that is reported as the 403 it was
            port = _https_port(body)
            if port:
                url = str(URL(url, encoded=True).with_scheme("https").with_port(port))
                status, reason, body = await self._request(url, data)
        if status != 200:
            text = body.decode("utf-8", errors="surrogateescape")
            failure = AuthRefused if status in (401, 403) else AuthError
            raise failure(f"got response {status} {reason} {go_quote(text)}")
        return parse_auth_reply(body, time.time() if now is None else now, permissions)

    async def _request(self, url: str, data: bytes | None) -> tuple[int, str, bytes]:
        headers = {"Accept": ACCEPT_V1}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self._open_session().request(self.method.upper(), URL(url, encoded=True), data=data,
                                                    headers=headers, timeout=self._timeout,
                                                    ssl=self._ssl) as response:
                return response.status, response.reason or "", await response.read()
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise AuthError(str(error) or type(error).__name__) from error

    def _open_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("AuthClient is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session


def _https_port(body: bytes) -> int:
    try:
        document = json.loads(body)
    except ValueError:
        return 0
    port = document.get("https_port") if isinstance(document, dict) else None
    return port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else 0
