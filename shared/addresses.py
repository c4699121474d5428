"""Listening sockets on ``host:port`` addresses (``nsqclient.addresses`` parses them) and unix socket paths."""

from __future__ import annotations

import os
import socket
import stat

from nsqclient.addresses import split_host_port

# TCP keep-alive of the connections a listener accepts, as Go's listeners (NSQ's) set it: a probe after 15 s of
# silence, then every 15 s. A peer gone without a word (a partition, a host that died) is found out even on a
# connection nothing is written to: lookupd answers nsqd and never writes unasked, so without probes the
# connection of an nsqd that reconnected after a partition stayed open, with its registrations, for ever.
KEEPALIVE = 15


def listening_socket(address: str, backlog: int = 1024) -> socket.socket:
    """A non-blocking socket listening on ``host:port``; the connections it accepts inherit its TCP keep-alive
    (``KEEPALIVE``). Binding it here, from a numeric address, keeps the event loop from resolving the address on a
    thread pool (uvloop starts four threads for that)."""
    host, port = split_host_port(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _keep_alive(sock)
    except OSError:
        sock.close()
        raise
    return _listening(sock, (host, port), backlog)


def listening_unix_socket(path: str, backlog: int = 1024) -> socket.socket:
    """A non-blocking socket listening at ``path``. A socket file left by a process that is gone (nothing accepts
    on it) is replaced; one something still listens on is an error, as binding a used port is, and so is any
    other file there."""
    remove_unix_socket(path)
    return _listening(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), path, backlog)


def remove_unix_socket(path: str) -> None:
    """Removes the socket file at ``path`` if nothing listens on it: a listener's once it is closed (asyncio leaves
    it behind, where NSQ's nsqd removes its own), or one left by a process that is gone. Anything else stays."""
    if _is_socket_file(path) and not _listened_on(path):
        os.unlink(path)


def _listening(sock: socket.socket, address: str | tuple[str, int], backlog: int) -> socket.socket:
    """``sock`` bound to ``address``, listening and non-blocking; closed if any of that fails."""
    try:
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _is_socket_file(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _listened_on(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _keep_alive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # Linux names the first delay TCP_KEEPIDLE, macOS TCP_KEEPALIVE
    for name in ("TCP_KEEPIDLE", "TCP_KEEPALIVE", "TCP_KEEPINTVL"):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), KEEPALIVE)
