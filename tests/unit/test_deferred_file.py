"""The file of deferred messages on real files: saved whole, appended to, taken back, a damaged end cut off."""

from __future__ import annotations

from pathlib import Path

from services.nsqd.deferred_file import DeferredFile


def payload(n: int, size: int = 40) -> bytes:
    return (b"%010d" % n).ljust(size, b"x")


def make(path: Path) -> DeferredFile:
    return DeferredFile("t", path / "t.diskqueue.deferred.dat", min_record=26, max_record=1026)


def test_deferred_messages_are_saved_with_their_due_times_and_taken_once(tmp_path: Path) -> None:
    make(tmp_path).save([(123, payload(1)), (456, payload(2))])
    again = make(tmp_path)
    assert again.take(keep=False) == [(123, payload(1)), (456, payload(2))]
    assert again.take(keep=False) == []


def test_a_damaged_deferred_file_gives_what_it_can(tmp_path: Path) -> None:
    file = make(tmp_path)
    file.save([(1, payload(1)), (2, payload(2))])
    file.path.write_bytes(file.path.read_bytes()[:-5])
    assert make(tmp_path).take(keep=False) == [(1, payload(1))]


def test_deferred_messages_appended_one_by_one_are_taken_and_kept(tmp_path: Path) -> None:
    file = make(tmp_path)
    file.append([(1, payload(1))])
    file.append([(2, payload(2)), (3, payload(3))])
    file.close()
    file.path.write_bytes(file.path.read_bytes() + b"\0\0\0")  # a torn end
    again = make(tmp_path)
    assert again.take(keep=True) == [(1, payload(1)), (2, payload(2)), (3, payload(3))]
    assert again.records == 3
    again.append([(4, payload(4))])  # after the last whole record: the torn end was cut off
    again.close()
    assert make(tmp_path).take(keep=False) == [(n, payload(n)) for n in range(1, 5)]
    assert not file.path.exists()


def test_deleting_drops_the_messages(tmp_path: Path) -> None:
    file = make(tmp_path)
    file.append([(1, payload(1))])
    file.delete()
    assert not file.path.exists() and file.records == 0
