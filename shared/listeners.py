"""A service's TCP and HTTP listeners: bound from numeric addresses (port 0 allowed), logged as NSQ logs them
(``TCP: listening on host:port`` with the port actually bound), closed by whoever opened them."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Callable

from nsqclient.addresses import is_unix_socket, join_host_port

from .addresses import listening_socket, listening_unix_socket

if TYPE_CHECKING:
    from aiohttp import web


async def listen_tcp(address: str, protocol_factory: Callable[[], asyncio.BaseProtocol], log: logging.Logger,
                     ssl_context: ssl.SSLContext | None = None, label: str = "TCP",
                     unix: bool = False) -> tuple[asyncio.AbstractServer, tuple[str, int]]:
    """A server of ``protocol_factory``'s connections (over TLS with ``ssl_context``), logged as ``label``. With
    ``unix``, an address that is not ``host:port`` is a unix socket's path (NSQ 1.3's rule for nsqd's TCP and HTTP
    addresses): bound as ``(path, -1)``; without, it is an error."""
    loop = asyncio.get_running_loop()
    if unix and is_unix_socket(address):
        server = await loop.create_unix_server(protocol_factory, sock=listening_unix_socket(address), ssl=ssl_context)
        log.info("%s: listening on %s", label, address)
        return server, (address, -1)
    sock = listening_socket(address)
    bound = sock.getsockname()[:2]
    server = await loop.create_server(protocol_factory, sock=sock, ssl=ssl_context)
    log.info("%s: listening on %s", label, join_host_port(*bound))
    return server, bound


async def listen_http(address: str, app: web.Application, log: logging.Logger,
                      ssl_context: ssl.SSLContext | None = None,
                      label: str = "") -> tuple[web.AppRunner, tuple[str, int]]:
    """An aiohttp app over HTTP, or HTTPS with ``ssl_context`` (logged as ``HTTPS: listening on ...``, or
    ``label: ...``)."""
    from aiohttp import web  # only the services that serve aiohttp apps pay for importing it

    sock = listening_socket(address)
    bound = sock.getsockname()[:2]
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=ssl_context).start()
    log.info("%s: listening on %s", label or ("HTTPS" if ssl_context else "HTTP"), join_host_port(*bound))
    return runner, bound
