"""Unix socket addresses: NSQ's rule for what is one, what a listener does with a file already there, and what
removing a closed listener's file leaves alone."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nsqclient.addresses import is_unix_socket
from shared.addresses import listening_unix_socket, remove_unix_socket


def test_what_is_not_host_port_is_a_path() -> None:
    assert is_unix_socket("/run/nsqd.sock") and is_unix_socket("nsqd.sock") and is_unix_socket("localhost")
    assert not is_unix_socket("127.0.0.1:4150") and not is_unix_socket(":4150") and not is_unix_socket("[::1]:4150")


def test_a_stale_socket_file_is_replaced_a_live_one_and_any_other_file_are_not(tmp_path: Path) -> None:
    path = str(tmp_path / "nsqd.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # bound, never listening: what a killed nsqd leaves
    stale.close()
    live = listening_unix_socket(path)
    try:
        with pytest.raises(OSError):
            listening_unix_socket(path)  # something listens there
    finally:
        live.close()
    data = tmp_path / "nsqd.dat"
    data.write_text("metadata")
    with pytest.raises(OSError):
        listening_unix_socket(str(data))
    assert data.read_text() == "metadata"


def test_only_a_socket_file_nothing_listens_on_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "nsqd.sock"
    live = listening_unix_socket(str(path))
    try:
        remove_unix_socket(str(path))
        assert path.exists()  # another listener's, still listening
    finally:
        live.close()
    remove_unix_socket(str(path))
    assert not path.exists()
    remove_unix_socket(str(path))  # nothing there: nothing to do
    data = tmp_path / "nsqd.dat"
    data.write_text("metadata")
    remove_unix_socket(str(data))
    assert data.read_text() == "metadata"
