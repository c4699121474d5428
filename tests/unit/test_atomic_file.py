"""Files replaced whole, and the leftovers of a replacement a crash interrupted."""

from __future__ import annotations

from pathlib import Path

from services.nsqd import atomic_file


def test_replace_leaves_only_the_new_content(tmp_path: Path) -> None:
    target = tmp_path / "nsqd.dat"
    target.write_bytes(b"old")
    atomic_file.replace(target, b"new", sync_directory=True)
    assert target.read_bytes() == b"new" and [path.name for path in tmp_path.iterdir()] == ["nsqd.dat"]


def test_only_the_leftovers_of_nsqds_files_are_removed(tmp_path: Path) -> None:
    leftovers = ["nsqd.dat.0a1b2c3d.tmp", "t.diskqueue.meta.dat.deadbeef.tmp", "t:c.diskqueue.deferred.dat.01234567.tmp"]
    others = ["nsqd.dat", "t.diskqueue.000000.dat", "notes.tmp", "nsqd.dat.tmp", "report.dat.0a1b2c3d.tmp"]
    for name in leftovers + others:
        (tmp_path / name).write_bytes(b"x")
    atomic_file.remove_leftovers(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(others)
