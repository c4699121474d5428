"""A disk queue's metadata, ``<name>.diskqueue.meta.dat``: "depth\\nreadFile,readPos\\nwriteFile,writePos\\n", as NSQ
writes it, replaced atomically. Unreadable metadata is logged, and reading starts from the oldest file found.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from . import atomic_file

log = logging.getLogger("nsqd")


@dataclass
class Positions:
    depth: int = 0
    read_file: int = 0
    read_pos: int = 0
    write_file: int = 0
    write_pos: int = 0


def load(name: str, data_path: Path) -> Positions:
    path = meta_path(name, data_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Positions()
    try:
        depth_line, read_line, write_line = text.split("\n")[:3]
        read_file, read_pos = (int(part) for part in read_line.split(","))
        write_file, write_pos = (int(part) for part in write_line.split(","))
        return Positions(int(depth_line), read_file, read_pos, write_file, write_pos)
    except ValueError:
        log.error("DISKQUEUE(%s): unreadable metadata %s; starting from the oldest file", name, path.name)
        return _from_files(name, data_path)


def _from_files(name: str, data_path: Path) -> Positions:
    numbers = sorted(int(path.name.rsplit(".", 2)[1]) for path in data_path.glob(f"{name}.diskqueue.[0-9]*.dat"))
    if not numbers:
        return Positions()
    return Positions(0, numbers[0], 0, numbers[0], 0)


def meta_path(name: str, data_path: Path) -> Path:
    return data_path / f"{name}.diskqueue.meta.dat"


def write(path: Path, positions: Positions) -> None:
    atomic_file.replace(path, (f"{positions.depth}\n{positions.read_file},{positions.read_pos}\n"
                               f"{positions.write_file},{positions.write_pos}\n").encode())
