"""``host:port`` strings as NSQ's flags spell them (``0.0.0.0:4150``, ``[::1]:4150``, ``:4150``)."""

from __future__ import annotations

import socket


def split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r}: missing port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listening_socket(address: str, backlog: int = 1024) -> socket.socket:
    """A non-blocking socket listening on ``host:port``. Binding it here, from a numeric address, keeps the
    event loop from resolving the address on a thread pool (uvloop starts four threads for that)."""
    host, port = split_host_port(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
