"""A service's TCP and HTTP listeners: bound from numeric addresses (port 0 allowed), logged as NSQ logs them
(``TCP: listening on host:port`` with the port actually bound), closed by whoever opened them."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Callable

from aiohttp import web

from .addresses import join_host_port, listening_socket


async def listen_tcp(address: str, protocol_factory: Callable[[], asyncio.BaseProtocol],
                     log: logging.Logger) -> tuple[asyncio.AbstractServer, tuple[str, int]]:
    sock = listening_socket(address)
    bound = sock.getsockname()[:2]
    server = await asyncio.get_running_loop().create_server(protocol_factory, sock=sock)
    log.info("TCP: listening on %s", join_host_port(*bound))
    return server, bound


async def listen_http(address: str, app: web.Application, log: logging.Logger,
                      ssl_context: ssl.SSLContext | None = None,
                      label: str = "") -> tuple[web.AppRunner, tuple[str, int]]:
    """HTTP, or HTTPS with ``ssl_context`` (logged as ``HTTPS: listening on ...``, or ``label: ...``)."""
    sock = listening_socket(address)
    bound = sock.getsockname()[:2]
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=ssl_context).start()
    log.info("%s: listening on %s", label or ("HTTPS" if ssl_context else "HTTP"), join_host_port(*bound))
    return runner, bound
