from __future__ import annotations

import socket

import pytest

from shared.addresses import KEEPALIVE, listening_socket


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="Linux's names of the keep-alive options")
def test_accepted_connections_probe_a_silent_peer_every_15_s() -> None:
    with listening_socket("127.0.0.1:0") as listener, socket.create_connection(listener.getsockname()):
        listener.setblocking(True)
        accepted, _ = listener.accept()
        with accepted:
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE == 15
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE
