"""Files nsqd replaces whole (nsqd.dat, a disk queue's metadata and deferred messages): written to a temporary
file beside the target, fsynced, then renamed over it, so a crash leaves the old file or the new one, never half.

A crash in the middle leaves the temporary file behind; ``remove_leftovers`` deletes those at the next start. It
knows them by their names (the target's name, a random part, ``.tmp``), so nothing else in the directory (the
data path defaults to the working directory) is touched.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger("nsqd")

_LEFTOVER = re.compile(r"^(nsqd\.dat|.+\.diskqueue\.(meta|deferred)\.dat)\.[0-9a-f]{8}\.tmp$")


def replace(path: Path, data: bytes, sync_directory: bool = False) -> None:
    """Makes ``data`` the content of ``path`` at once; ``sync_directory`` makes the rename itself durable too."""
    temporary = path.with_name(f"{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    if sync_directory:
        descriptor = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def remove_leftovers(directory: Path) -> None:
    """Deletes the temporary files a crash left in ``directory`` while it replaced one of nsqd's files."""
    for path in directory.iterdir():
        if _LEFTOVER.match(path.name):
            log.info("removing %s, left by a write a crash interrupted", path.name)
            path.unlink(missing_ok=True)
