"""segment_files.write_parts: records written whole from their parts, joined when small, as they are (writev) when
large; a short write finished; a refused write leaves the file as it was."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from services.nsqd.segment_files import WRITEV_MIN_AVERAGE, write_parts


def open_at_end(path: Path, content: bytes = b"head") -> int:
    path.write_bytes(content)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    return fd


@pytest.mark.parametrize("parts", [
    [b"one record"],
    [b"\x00\x00\x00\x03", b"abc", b"\x00\x00\x00\x01", b"d"],  # small: joined
    [b"\x00\x01\x00\x00", b"x" * 65536, b"\x00\x01\x00\x00", b"y" * 65536],  # large: writev
])
def test_the_parts_land_in_order(tmp_path: Path, parts: list[bytes]) -> None:
    fd = open_at_end(tmp_path / "f")
    try:
        write_parts(fd, parts, sum(map(len, parts)), 4)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"head" + b"".join(parts)


def test_a_short_write_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.writev

    def short(fd: int, parts: list[bytes]) -> int:
        return real(fd, [parts[0], parts[1][:1000]])  # the kernel took less than all of it

    monkeypatch.setattr(os, "writev", short)
    parts = [b"a" * WRITEV_MIN_AVERAGE, b"b" * WRITEV_MIN_AVERAGE * 2]
    fd = open_at_end(tmp_path / "f")
    try:
        write_parts(fd, parts, len(b"".join(parts)), 4)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"head" + b"".join(parts)


def test_a_refused_write_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.writev

    def half_then_full(fd: int, parts: list[bytes]) -> Any:
        real(fd, parts[:1])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", half_then_full)
    fd = open_at_end(tmp_path / "f")
    try:
        with pytest.raises(OSError):
            write_parts(fd, [b"a" * WRITEV_MIN_AVERAGE, b"b" * WRITEV_MIN_AVERAGE], 2 * WRITEV_MIN_AVERAGE, 4)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 4  # the next write goes where this one started
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"head"
