"""``host:port`` strings as NSQ spells them (``127.0.0.1:4150``, ``[::1]:4150``, ``:4150``), and NSQ's rule for a
unix socket's path."""

from __future__ import annotations


def split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r}: missing port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def is_unix_socket(address: str) -> bool:
    """NSQ's rule for a listen or connect address: one that is not ``host:port`` is a unix socket's path."""
    try:
        split_host_port(address)
    except ValueError:
        return True
    return False


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
