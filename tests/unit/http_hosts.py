"""Fake lookupd and nsqd HTTP hosts for unit tests: real aiohttp servers on loopback ports that answer each path
from a table, so clients are tested over real sockets."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Host:
    """Answers each path with what ``answers`` holds for it, ``(status, body)`` (else 404); a path in ``hang``
    never answers. Records the requests and the peer address each came from."""

    answers: dict[str, tuple[int, str]] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)
    requests: list[web.Request] = field(default_factory=list)
    peers: list[Any] = field(default_factory=list)
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request)
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        if request.path in self.hang:
            await asyncio.Event().wait()
        status, body = self.answers.get(request.path, (404, '{"message":"NOT_FOUND"}'))
        return web.Response(status=status, text=body, content_type="application/json")


async def serve_on_loopback(handler: Any, shutdown_timeout: float = 60.0) -> tuple[web.AppRunner, int]:
    """A real aiohttp server on a loopback port whose every request goes to ``handler``; its runner and port."""
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", handler)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


class Hosts:
    """Starts hosts (``await hosts.start(lookup=(200, body), topic_create=(200, ""))``: a keyword is a path with
    ``_`` for ``/``) and stops them all on leaving."""

    def __init__(self) -> None:
        self._runners: list[web.AppRunner] = []

    async def start(self, **answers: tuple[int, str]) -> Host:
        host = Host({"/" + path.replace("_", "/"): answer for path, answer in answers.items()})
        runner, host.port = await serve_on_loopback(host.handle, shutdown_timeout=0.1)
        self._runners.append(runner)
        return host

    async def __aenter__(self) -> Hosts:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for runner in self._runners:
            await runner.cleanup()


def closed_address() -> str:
    """A loopback address nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
