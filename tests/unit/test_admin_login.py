"""The admin's built-in login: the htpasswd file (bcrypt entries only), Basic credentials, and reading the file
again when it changes."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import bcrypt
import pytest

from services.admin.login import HtpasswdError, Login, basic_credentials, parse_htpasswd

real_checkpw = bcrypt.checkpw


def entry(user: str, password: str, prefix: bytes = b"$2y$") -> str:
    """As ``htpasswd -B`` writes it (``$2y$``, cost 4 to keep the tests quick)."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4))
    return f"{user}:{(prefix + hashed[4:]).decode()}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def write(path: Path, *lines: str) -> None:
    path.write_text("\n".join(lines) + "\n")
    # a rewrite within the same clock tick must still look changed
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_entries_comments_and_blank_lines() -> None:
    users = parse_htpasswd(f"# operators\n\n{entry('alice', 'a')}\n  {entry('bob', 'b', b'$2b$')}  \n", "f")
    assert sorted(users) == ["alice", "bob"]


@pytest.mark.parametrize("line, complaint", [
    ("alice:$apr1$salt$hash", "f:1: the entry for 'alice' is not bcrypt (make it with htpasswd -B)"),
    ("alice:{SHA}abcdef", "not bcrypt"),
    ("alice:plaintext", "not bcrypt"),
    ("no colon here", "f:1: not a user:hash entry"),
    (":$2y$05$abc", "not a user:hash entry"),
])
def test_what_is_not_a_bcrypt_entry_is_named(line: str, complaint: str) -> None:
    with pytest.raises(HtpasswdError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        parse_htpasswd(line, "f")


@pytest.mark.parametrize("header, expected", [
    (basic("alice", "s3cret:with colon"), ("alice", "s3cret:with colon")),
    ("basic " + base64.b64encode(b"bob:").decode(), ("bob", "")),
    (None, None), ("", None), ("Bearer abc", None), ("Basic !!!", None),
    ("Basic " + base64.b64encode(b"no-colon").decode(), None),
    ("Basic " + base64.b64encode(b"\xff:\xfe").decode(), None),
])
def test_basic_credentials(header: str | None, expected: tuple[str, str] | None) -> None:
    assert basic_credentials(header) == expected


async def test_only_a_right_password_proves_a_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "htpasswd"
    write(path, entry("alice", "right"))
    login = Login(str(path))
    checks: list[tuple[bytes, bytes]] = []

    def counted_checkpw(password: bytes, hashed: bytes) -> bool:
        checks.append((password, hashed))
        return real_checkpw(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counted_checkpw)
    assert await login.authenticate(basic("alice", "right")) == "alice"
    assert await login.authenticate(basic("alice", "right")) == "alice"
    assert len(checks) == 1  # remembered: bcrypt is slow on purpose
    assert await login.authenticate(basic("alice", "wrong")) is None
    assert await login.authenticate(basic("mallory", "right")) is None
    assert await login.authenticate(None) is None


async def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "htpasswd"
    write(path, entry("alice", "a"))
    login = Login(str(path))
    assert await login.authenticate(basic("alice", "a")) == "alice"
    write(path, entry("bob", "b"))
    assert await login.authenticate(basic("bob", "b")) == "bob"
    assert await login.authenticate(basic("alice", "a")) is None  # removed, though remembered before


async def test_a_bad_edit_or_a_missing_file_keeps_the_users_read_before(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "htpasswd"
    write(path, entry("alice", "a"))
    login = Login(str(path))
    write(path, "alice:$apr1$x$y")
    assert await login.authenticate(basic("alice", "a")) == "alice"
    assert "kept the users read before" in caplog.text
    path.unlink()
    assert await login.authenticate(basic("alice", "a")) == "alice"


def test_a_file_that_cannot_be_used_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(HtpasswdError, match="cannot read"):
        Login(str(tmp_path / "missing"))
    (tmp_path / "md5").write_text("alice:$apr1$x$y\n")
    with pytest.raises(HtpasswdError, match="not bcrypt"):
        Login(str(tmp_path / "md5"))
